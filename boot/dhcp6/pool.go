package dhcp6

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/bootops/bootops/boot/dhcp"
)

// Leaser hands machines addresses of the site's IPv6 pool: a Solicit gets
// an offer held in memory, a Request (or Rapid Commit) a lease written
// down, a Release gives it back.
type Leaser interface {
	Offer(key string, r dhcp.Range) (netip.Addr, error)
	Confirm(key string, want netip.Addr, r dhcp.Range, d time.Duration) (netip.Addr, error)
	Release(key string, a netip.Addr) error
}

// Pool is a Leaser whose leases survive restarts, in a journal appended to
// outside the pool's lock (dhcp.Journal, the DHCPv4 pool's format). It is
// built for IPv6 ranges, which may be huge: a machine's address is found
// by hashing its key into the range and probing from there, not by
// scanning from the first address, and every lookup is by index, so an
// offer costs the same with 10 or 100,000 machines. Like the DHCPv4 pool,
// an expired or released lease stays in the file, so a machine that comes
// back gets its address again while nobody else needed it (for Retain);
// and when no address is free a new client takes over the oldest pending
// offer.
type Pool struct {
	Path string
	// OfferHold is how long an offer waits for the Request (0:
	// dhcp.DefaultOfferHold).
	OfferHold time.Duration
	// Retain is how long an expired lease is kept before a compaction of
	// the journal prunes it (0: dhcp.DefaultRetain).
	Retain time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	once    sync.Once
	loadErr error
	journal dhcp.Journal

	mu        sync.Mutex
	leases    map[string]held
	leasedBy  map[netip.Addr]string
	offers    map[string]held
	offeredTo map[netip.Addr]string
	swept     time.Time
}

// held is an address and until when.
type held struct {
	ip    netip.Addr
	until time.Time
}

var _ Leaser = (*Pool)(nil)

// probes is how many addresses from a key's hash Offer tries in a range
// too large to scan; ranges up to scanAll addresses are scanned whole.
const (
	probes  = 256
	scanAll = 1 << 16
)

func (p *Pool) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pool) hold() time.Duration {
	if p.OfferHold > 0 {
		return p.OfferHold
	}
	return dhcp.DefaultOfferHold
}

// Offer returns an address for key, held for OfferHold: the one it was
// offered or leased before if still free, else the first free one from its
// hash (never leased before that, then expired longest ago), else the
// address of the oldest offer to another client.
func (p *Pool) Offer(key string, r dhcp.Range) (netip.Addr, error) {
	if err := p.load(); err != nil {
		return netip.Addr{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.sweep(now)
	pick := netip.Addr{}
	if o, ok := p.offers[key]; ok && p.free(key, o.ip, r, now) {
		pick = o.ip
	} else if l, ok := p.leases[key]; ok && p.free(key, l.ip, r, now) {
		pick = l.ip
	}
	if !pick.IsValid() {
		pick = p.search(key, r, now)
	}
	if !pick.IsValid() {
		return netip.Addr{}, dhcp.ErrPoolFull
	}
	p.offer(key, pick, now.Add(p.hold()))
	return pick, nil
}

// free says a is key's to take: in r, not offered to another client, not
// leased to another one (or that lease expired).
func (p *Pool) free(key string, a netip.Addr, r dhcp.Range, now time.Time) bool {
	if !r.Has(a) {
		return false
	}
	if k, ok := p.offeredTo[a]; ok && k != key && now.Before(p.offers[k].until) {
		return false
	}
	if k, ok := p.leasedBy[a]; ok && k != key && now.Before(p.leases[k].until) {
		return false
	}
	return true
}

// search walks r from key's hash: the first address nobody holds, else
// the free one whose lease expired first, else the one whose offer ends
// first.
func (p *Pool) search(key string, r dhcp.Range, now time.Time) netip.Addr {
	size := rangeSize(r)
	if size == 0 {
		return netip.Addr{}
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	start := h.Sum64() % size
	n := uint64(probes)
	if size <= scanAll || size < n {
		n = size
	}
	var expired, stolen netip.Addr
	var expiredAt, stolenAt time.Time
	for i := range n {
		a := addOffset(r.First, (start+i)%size)
		if !r.Has(a) {
			continue
		}
		lk, leased := p.leasedBy[a]
		ok, offered := p.offeredTo[a]
		switch {
		case !leased && !offered:
			return a
		case offered && ok != key && now.Before(p.offers[ok].until):
			if leased && lk != key && now.Before(p.leases[lk].until) {
				continue
			}
			if u := p.offers[ok].until; !stolen.IsValid() || u.Before(stolenAt) {
				stolen, stolenAt = a, u
			}
		case leased && lk != key && now.Before(p.leases[lk].until):
		case leased:
			if u := p.leases[lk].until; !expired.IsValid() || u.Before(expiredAt) {
				expired, expiredAt = a, u
			}
		default:
			return a // offered to key itself, or an offer past its time
		}
	}
	if expired.IsValid() {
		return expired
	}
	return stolen
}

// offer records key's offer of a, dropping another client's offer of it
// and key's previous one.
func (p *Pool) offer(key string, a netip.Addr, until time.Time) {
	if old, ok := p.offers[key]; ok && p.offeredTo[old.ip] == key {
		delete(p.offeredTo, old.ip)
	}
	if k, ok := p.offeredTo[a]; ok && k != key {
		delete(p.offers, k)
	}
	p.offers[key] = held{a, until}
	p.offeredTo[a] = key
}

// Confirm leases want to key for d and writes the lease down. Without
// want it is the address key was offered, or its lease (a renewal). The
// journal is written after the pool's lock is released; Confirm returns
// once the lease is on disk.
func (p *Pool) Confirm(key string, want netip.Addr, r dhcp.Range, d time.Duration) (netip.Addr, error) {
	if err := p.load(); err != nil {
		return netip.Addr{}, err
	}
	seq, err := p.confirm(key, &want, r, d)
	if err != nil {
		return netip.Addr{}, err
	}
	if err := p.journal.Sync(seq, p.snapshot); err != nil {
		return netip.Addr{}, fmt.Errorf("dhcp6: %w", err)
	}
	return want, nil
}

// confirm is Confirm's decision, in memory, under the lock: the journal's
// change number of the lease.
func (p *Pool) confirm(key string, want *netip.Addr, r dhcp.Range, d time.Duration) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if d <= 0 {
		d = defaultLease
	}
	a, err := dhcp.Requested(*want, p.offers[key].ip, p.leases[key].ip)
	if err != nil {
		return 0, err
	}
	if !r.Has(a) {
		return 0, dhcp.ErrUnavailable
	}
	if k, ok := p.leasedBy[a]; ok && k != key && now.Before(p.leases[k].until) {
		return 0, dhcp.ErrUnavailable
	}
	if k, ok := p.leasedBy[a]; ok && k != key {
		p.journal.Add(k, dhcp.LeaseRecord{}) // reclaimed: its lease expired
	}
	p.setLease(key, held{a, now.Add(d)})
	seq := p.journal.Add(key, dhcp.LeaseRecord{IP: a, Expires: now.Add(d)})
	// The offer is taken up; anyone else's offer of the address is void.
	if o, ok := p.offers[key]; ok {
		delete(p.offers, key)
		if p.offeredTo[o.ip] == key {
			delete(p.offeredTo, o.ip)
		}
	}
	if k, ok := p.offeredTo[a]; ok {
		delete(p.offers, k)
		delete(p.offeredTo, a)
	}
	*want = a
	return seq, nil
}

// setLease gives key lease l, taking the address from an expired lease of
// another key.
func (p *Pool) setLease(key string, l held) {
	old, had := p.leases[key]
	if prevKey, taken := p.leasedBy[l.ip]; taken && prevKey != key {
		delete(p.leases, prevKey)
	}
	if had && p.leasedBy[old.ip] == key {
		delete(p.leasedBy, old.ip)
	}
	p.leases[key] = l
	p.leasedBy[l.ip] = key
}

// Release ends key's lease of a now. The lease stays in the journal,
// expired: the address is key's again if nobody needed it meanwhile.
func (p *Pool) Release(key string, a netip.Addr) error {
	if err := p.load(); err != nil {
		return err
	}
	p.mu.Lock()
	l, ok := p.leases[key]
	if !ok || l.ip != a {
		p.mu.Unlock()
		return dhcp.ErrUnavailable
	}
	now := p.now()
	if !now.Before(l.until) {
		p.mu.Unlock()
		return nil
	}
	p.leases[key] = held{a, now}
	seq := p.journal.Add(key, dhcp.LeaseRecord{IP: a, Expires: now})
	p.mu.Unlock()
	return p.journal.Sync(seq, p.snapshot)
}

// MACOf returns the key (a MAC, or "duid:…") whose live lease is ip, ""
// if none: how the HTTP server can key an unknown machine by its address.
func (p *Pool) MACOf(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	if p.load() != nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.leasedBy[a.WithZone("")]; ok && p.now().Before(p.leases[k].until) {
		return k
	}
	return ""
}

// sweep forgets offers past their time, at most once per hold: memory for
// a flood of Solicits is bounded by what arrives in one hold.
func (p *Pool) sweep(now time.Time) {
	if now.Sub(p.swept) < p.hold() {
		return
	}
	p.swept = now
	for k, o := range p.offers {
		if !now.Before(o.until) {
			delete(p.offers, k)
			if p.offeredTo[o.ip] == k {
				delete(p.offeredTo, o.ip)
			}
		}
	}
}

// load reads the journal once, before the pool's first use, outside its
// lock.
func (p *Pool) load() error {
	p.once.Do(func() {
		p.journal.Path = p.Path
		recs, err := p.journal.Load()
		if err != nil {
			p.loadErr = fmt.Errorf("dhcp6: %w", err)
			return
		}
		p.leases, p.leasedBy = make(map[string]held, len(recs)), make(map[netip.Addr]string, len(recs))
		p.offers, p.offeredTo = map[string]held{}, map[netip.Addr]string{}
		for key, r := range recs {
			if k, dup := p.leasedBy[r.IP]; dup {
				p.loadErr = fmt.Errorf("dhcp6: leases %s: %s leased to both %s and %s", p.Path, r.IP, k, key)
				return
			}
			p.leases[key] = held{r.IP, r.Expires}
			p.leasedBy[r.IP] = key
		}
	})
	return p.loadErr
}

// snapshot is the leases for a compaction of the journal, pruned of those
// expired longer than Retain ago (in memory too).
func (p *Pool) snapshot() (map[string]dhcp.LeaseRecord, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	retain := p.Retain
	if retain <= 0 {
		retain = dhcp.DefaultRetain
	}
	cut := p.now().Add(-retain)
	recs := make(map[string]dhcp.LeaseRecord, len(p.leases))
	for key, l := range p.leases {
		if l.until.Before(cut) {
			delete(p.leases, key)
			if p.leasedBy[l.ip] == key {
				delete(p.leasedBy, l.ip)
			}
			continue
		}
		recs[key] = dhcp.LeaseRecord{IP: l.ip, Expires: l.until}
	}
	return recs, p.journal.Seq()
}

// Leases is how many leases the pool keeps (live and expired).
func (p *Pool) Leases() int {
	if p.load() != nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.leases)
}

// rangeSize is how many addresses r has (capped at MaxUint64); 0 for an
// empty or mixed-family range.
func rangeSize(r dhcp.Range) uint64 {
	if !r.First.IsValid() || !r.Last.IsValid() || r.First.Is4() != r.Last.Is4() || r.Last.Less(r.First) {
		return 0
	}
	f, l := r.First.As16(), r.Last.As16()
	fh, fl := binary.BigEndian.Uint64(f[:8]), binary.BigEndian.Uint64(f[8:])
	lh, ll := binary.BigEndian.Uint64(l[:8]), binary.BigEndian.Uint64(l[8:])
	if lh != fh || ll-fl == math.MaxUint64 {
		return math.MaxUint64
	}
	return ll - fl + 1
}

// addOffset is a + n, carrying into the upper half.
func addOffset(a netip.Addr, n uint64) netip.Addr {
	b := a.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	lo2 := lo + n
	if lo2 < lo {
		hi++
	}
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo2)
	out := netip.AddrFrom16(b)
	if a.Is4() {
		return out.Unmap()
	}
	return out
}
