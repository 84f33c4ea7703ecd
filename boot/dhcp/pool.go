package dhcp

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// Leaser hands unknown machines an address from the site's pool
// (reservation mode on an isolated LAN). A DISCOVER only gets an Offer,
// held briefly and never written down; the REQUEST that follows makes it a
// lease with Confirm. A flood of DISCOVERs therefore cannot use up the pool.
type Leaser interface {
	// Offer picks an address for mac and holds it for a little while.
	Offer(mac string, r Range) (netip.Addr, error)
	// Confirm leases want (when valid; otherwise what mac was offered or
	// leased) to mac for d.
	Confirm(mac string, want netip.Addr, r Range, d time.Duration) (netip.Addr, error)
}

// Range is a site's pool: its first and last address, and which of them
// must not be handed out (the server's, reserved ones).
type Range struct {
	First, Last netip.Addr
	Taken       func(netip.Addr) bool
}

// Has says a is one of r's addresses and not taken.
func (r Range) Has(a netip.Addr) bool {
	return a.IsValid() && !a.Less(r.First) && !r.Last.Less(a) && (r.Taken == nil || !r.Taken(a))
}

// DefaultOfferHold is how long an offered address waits for its REQUEST:
// long enough for a client's retransmissions, short enough that a flood of
// DISCOVERs holds nothing for long.
const DefaultOfferHold = 30 * time.Second

// defaultLease is the lease time when the site gives none.
const defaultLease = time.Hour

// Pool is a Leaser whose leases survive restarts: each acknowledged lease
// is appended, with its expiry, to a journal (Journal) written outside the
// pool's lock. Offers live in memory only. An expired lease is kept
// (Retain), so a machine that comes back gets its old address again, until
// the pool needs the address for another machine. A pool with no free
// address gives a new DISCOVER the address of the oldest pending offer: an
// offer binds nobody, the first REQUEST for an address wins it.
type Pool struct {
	Path string
	// OfferHold is how long an offer waits for the client's REQUEST
	// (0: DefaultOfferHold).
	OfferHold time.Duration
	// Retain is how long an expired lease is kept before a compaction of
	// the journal prunes it (0: DefaultRetain).
	Retain time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	once    sync.Once
	loadErr error
	journal Journal

	mu     sync.Mutex
	leases map[string]lease
	offers map[string]offer
}

type lease struct {
	ip      netip.Addr
	expires time.Time // zero: from a file of the days before expiry (expired)
}

type offer struct {
	ip    netip.Addr
	until time.Time
}

var _ Leaser = (*Pool)(nil)

var (
	// ErrPoolFull says every address of the pool is leased.
	ErrPoolFull = errors.New("dhcp: pool exhausted")
	// ErrUnavailable says the address a client asked for is not its to
	// have (outside the pool, reserved, or leased to another machine).
	ErrUnavailable = errors.New("dhcp: address not available")
	// ErrNothingOffered says a REQUEST named no address and the machine
	// has neither an offer nor a lease.
	ErrNothingOffered = errors.New("dhcp: nothing offered")
	// ErrNotOffered says a REQUEST named an address the machine was
	// neither offered (after its own DISCOVER) nor leased: a sender on
	// the link cannot take pool addresses with made-up identities and
	// REQUESTs alone. It is an ErrUnavailable (a NAK).
	ErrNotOffered = fmt.Errorf("%w: neither offered to this client (after its own DISCOVER or Solicit) nor leased to it", ErrUnavailable)
)

// Requested is the address a REQUEST is leased: want, when the client was
// offered it or holds (or held) a lease of it; without want, its offer,
// else its lease. offered and leased are the client's (invalid: none).
// Both pools' Confirm decide by it.
func Requested(want, offered, leased netip.Addr) (netip.Addr, error) {
	switch {
	case !want.IsValid() && offered.IsValid():
		return offered, nil
	case !want.IsValid() && leased.IsValid():
		return leased, nil
	case !want.IsValid():
		return netip.Addr{}, ErrNothingOffered
	case want != offered && want != leased:
		return netip.Addr{}, ErrNotOffered
	}
	return want, nil
}

func (p *Pool) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Offer returns an address for mac, held for OfferHold: the one it was
// offered or leased before if still free, else the lowest address never
// leased, else the one whose lease expired first, else the one offered
// longest ago to another machine.
func (p *Pool) Offer(mac string, r Range) (netip.Addr, error) {
	if err := p.load(); err != nil {
		return netip.Addr{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.sweep(now)
	hold := p.OfferHold
	if hold <= 0 {
		hold = DefaultOfferHold
	}
	// Who holds what, besides mac.
	leased := map[netip.Addr]lease{}
	for m, l := range p.leases {
		if m != mac {
			leased[l.ip] = l
		}
	}
	offered := map[netip.Addr]bool{}
	for m, o := range p.offers {
		if m != mac {
			offered[o.ip] = true
		}
	}
	free := func(a netip.Addr) bool {
		l, ok := leased[a]
		return r.Has(a) && !offered[a] && (!ok || !now.Before(l.expires))
	}
	pick := netip.Addr{}
	if o, ok := p.offers[mac]; ok && free(o.ip) {
		pick = o.ip
	} else if l, ok := p.leases[mac]; ok && free(l.ip) {
		pick = l.ip
	}
	if !pick.IsValid() {
		for a := r.First; a.IsValid() && !r.Last.Less(a); a = a.Next() {
			if _, ok := leased[a]; !ok && free(a) {
				pick = a
				break
			}
		}
	}
	if !pick.IsValid() {
		// Reclaim: the lease that expired first.
		var first time.Time
		for a, l := range leased {
			if free(a) && (!pick.IsValid() || l.expires.Before(first) || l.expires.Equal(first) && a.Less(pick)) {
				pick, first = a, l.expires
			}
		}
	}
	if !pick.IsValid() {
		// Take over the oldest offer: its machine may still win the
		// address with a REQUEST, first come first served.
		var victim string
		for m, o := range p.offers {
			if l, ok := leased[o.ip]; m == mac || !r.Has(o.ip) || ok && now.Before(l.expires) {
				continue
			}
			if victim == "" || o.until.Before(p.offers[victim].until) {
				victim = m
			}
		}
		if victim != "" {
			pick = p.offers[victim].ip
			delete(p.offers, victim)
		}
	}
	if !pick.IsValid() {
		return netip.Addr{}, ErrPoolFull
	}
	if p.offers == nil {
		p.offers = map[string]offer{}
	}
	p.offers[mac] = offer{pick, now.Add(hold)}
	return pick, nil
}

// Confirm leases want to mac for d and writes the lease down. Without
// want it is the address mac was offered, or its lease (a renewal). An
// expired lease of another machine on want is reclaimed; an offer of want
// to another machine is withdrawn. The journal is written after the pool's
// lock is released; Confirm returns once the lease is on disk.
func (p *Pool) Confirm(mac string, want netip.Addr, r Range, d time.Duration) (netip.Addr, error) {
	if err := p.load(); err != nil {
		return netip.Addr{}, err
	}
	seq, err := p.confirm(mac, &want, r, d)
	if err != nil {
		return netip.Addr{}, err
	}
	if err := p.journal.Sync(seq, p.snapshot); err != nil {
		return netip.Addr{}, fmt.Errorf("dhcp: %w", err)
	}
	return want, nil
}

// confirm is Confirm's decision, in memory, under the lock: the journal's
// change number of the lease.
func (p *Pool) confirm(mac string, want *netip.Addr, r Range, d time.Duration) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.sweep(now)
	if d <= 0 {
		d = defaultLease
	}
	a, err := Requested(*want, p.offers[mac].ip, p.leases[mac].ip)
	if err != nil {
		return 0, err
	}
	if !r.Has(a) {
		return 0, ErrUnavailable
	}
	for m, l := range p.leases {
		if m != mac && l.ip == a && now.Before(l.expires) {
			return 0, ErrUnavailable
		}
	}
	for m, l := range p.leases {
		if m != mac && l.ip == a { // reclaimed: its lease expired
			delete(p.leases, m)
			p.journal.Add(m, LeaseRecord{})
		}
	}
	p.leases[mac] = lease{a, now.Add(d)}
	seq := p.journal.Add(mac, LeaseRecord{a, now.Add(d)})
	for m, o := range p.offers {
		if m == mac || o.ip == a {
			delete(p.offers, m)
		}
	}
	*want = a
	return seq, nil
}

// sweep forgets offers whose time is up.
func (p *Pool) sweep(now time.Time) {
	for m, o := range p.offers {
		if !now.Before(o.until) {
			delete(p.offers, m)
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
			p.loadErr = fmt.Errorf("dhcp: %w", err)
			return
		}
		p.leases = make(map[string]lease, len(recs))
		for mac, r := range recs {
			p.leases[mac] = lease{r.IP, r.Expires}
		}
		p.offers = map[string]offer{}
	})
	return p.loadErr
}

// snapshot is the leases for a compaction of the journal, pruned of those
// expired longer than Retain ago (in memory too).
func (p *Pool) snapshot() (map[string]LeaseRecord, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	retain := p.Retain
	if retain <= 0 {
		retain = DefaultRetain
	}
	cut := p.now().Add(-retain)
	recs := make(map[string]LeaseRecord, len(p.leases))
	for mac, l := range p.leases {
		if l.expires.Before(cut) {
			delete(p.leases, mac)
			continue
		}
		recs[mac] = LeaseRecord{l.ip, l.expires}
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

// MACOf returns the MAC whose live lease is ip ("" if none): how the HTTP
// server keys an unknown machine that reports no usable identifier.
func (p *Pool) MACOf(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	a = a.Unmap().WithZone("") // leases are kept without the interface
	if p.load() != nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for mac, l := range p.leases {
		if l.ip == a && now.Before(l.expires) {
			return mac
		}
	}
	return ""
}

// MACSource knows the MAC of an address it leased: a DHCPv4 or DHCPv6
// Pool. The address is a string of either family ("198.18.0.12",
// "2001:db8::12", "fe80::1%eth0" with its zone ignored).
type MACSource interface {
	MACOf(ip string) string
}

// Pools are the lease stores of every site served, both families, for
// MACOf across them.
type Pools struct {
	mu    sync.Mutex
	pools []MACSource
}

// Add makes p one of them.
func (ps *Pools) Add(p MACSource) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.pools = append(ps.pools, p)
}

// MACOf returns the MAC whose live lease is ip in any of the pools.
func (ps *Pools) MACOf(ip string) string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.pools {
		if mac := p.MACOf(ip); mac != "" {
			return mac
		}
	}
	return ""
}
