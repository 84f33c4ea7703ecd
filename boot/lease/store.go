// Package lease is the one lease store of both DHCP servers (boot/dhcp,
// boot/dhcp6): it hands machines addresses of a site's pool, an offer
// held briefly in memory, then a lease written to a journal on disk (with
// compaction) that survives restarts. The address family is the range's:
// it decides only the order a free address is looked for in (Range.walk);
// the rest, and the file, is the same for IPv4 and IPv6. It imports no
// package of ours.
package lease

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// DefaultOfferHold is how long an offered address waits for its REQUEST
// (or Request): long enough for a client's retransmissions, short enough
// that a flood of DISCOVERs or Solicits holds nothing for long.
const DefaultOfferHold = 30 * time.Second

// defaultLease is the lease time when the caller gives none.
const defaultLease = time.Hour

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

// Store hands machines, each named by a key (a MAC, or "duid:…" for a
// DHCPv6 client without one), addresses of a pool. A DISCOVER or Solicit
// only gets an offer, held for OfferHold and never written down; the
// REQUEST that follows makes it a lease with Confirm, appended to a
// journal at Path outside the store's lock. A flood of DISCOVERs cannot use
// up the pool, and every lookup is by index, so an offer or a renewal costs
// the same with 10 or 100,000 machines. An expired or released lease is
// kept (for Retain), so a machine that comes back gets its old address
// again while nobody else needed it; and when no address is free a new
// client takes over the oldest pending offer: an offer binds nobody, the
// first REQUEST for an address wins it. The zero Store (with a Path) is
// ready to use.
type Store struct {
	Path string
	// OfferHold is how long an offer waits for the client's REQUEST
	// (0: DefaultOfferHold).
	OfferHold time.Duration
	// Retain is how long an expired lease is kept before a compaction of
	// the journal prunes it (0: DefaultRetain).
	Retain time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Replicate, when set, is given every lease Confirm and Release write,
	// once it is in the journal and before they return: its error fails
	// them (the client is not answered). A site's cluster copies the
	// lease to the other members with it (Apply there).
	Replicate func(key string, r Record) error

	once    sync.Once
	loadErr error
	journal Journal

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

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Store) hold() time.Duration {
	if s.OfferHold > 0 {
		return s.OfferHold
	}
	return DefaultOfferHold
}

// Offer returns an address for key, held for OfferHold: the one it was
// offered (while the offer holds) or leased before if still free, else the
// first address nobody holds in the range's walk, else the free one whose
// lease expired first, else the address of the oldest offer to another
// client.
func (s *Store) Offer(key string, r Range) (netip.Addr, error) {
	if err := s.load(); err != nil {
		return netip.Addr{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	pick := netip.Addr{}
	if o := s.offered(key, now); o.IsValid() && s.free(key, o, r, now) {
		pick = o
	} else if l, ok := s.leases[key]; ok && s.free(key, l.ip, r, now) {
		pick = l.ip
	}
	if !pick.IsValid() {
		pick = s.search(key, r, now)
	}
	if !pick.IsValid() {
		return netip.Addr{}, ErrPoolFull
	}
	s.offer(key, pick, now.Add(s.hold()))
	return pick, nil
}

// offered is the address key's offer holds at now (invalid: none, or its
// time is up).
func (s *Store) offered(key string, now time.Time) netip.Addr {
	if o, ok := s.offers[key]; ok && now.Before(o.until) {
		return o.ip
	}
	return netip.Addr{}
}

// free says a is key's to take: in r, not offered to another client, not
// leased to another one (or that lease expired).
func (s *Store) free(key string, a netip.Addr, r Range, now time.Time) bool {
	if !r.Has(a) {
		return false
	}
	if k, ok := s.offeredTo[a]; ok && k != key && now.Before(s.offers[k].until) {
		return false
	}
	if k, ok := s.leasedBy[a]; ok && k != key && now.Before(s.leases[k].until) {
		return false
	}
	return true
}

// search walks r (Range.walk): the first address nobody holds, else the
// free one whose lease expired first, else the one whose offer ends first
// (ties: the first in the walk).
func (s *Store) search(key string, r Range, now time.Time) netip.Addr {
	start, n, size := r.walk(key)
	var expired, stolen netip.Addr
	var expiredAt, stolenAt time.Time
	for i := range n {
		a := addOffset(r.First, (start+i)%size)
		if !r.Has(a) {
			continue
		}
		lk, leased := s.leasedBy[a]
		ok, offered := s.offeredTo[a]
		switch {
		case !leased && !offered:
			return a
		case offered && ok != key && now.Before(s.offers[ok].until):
			if leased && lk != key && now.Before(s.leases[lk].until) {
				continue
			}
			if u := s.offers[ok].until; !stolen.IsValid() || u.Before(stolenAt) {
				stolen, stolenAt = a, u
			}
		case leased && lk != key && now.Before(s.leases[lk].until):
		case leased:
			if u := s.leases[lk].until; !expired.IsValid() || u.Before(expiredAt) {
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
func (s *Store) offer(key string, a netip.Addr, until time.Time) {
	if old, ok := s.offers[key]; ok && s.offeredTo[old.ip] == key {
		delete(s.offeredTo, old.ip)
	}
	if k, ok := s.offeredTo[a]; ok && k != key {
		delete(s.offers, k)
	}
	s.offers[key] = held{a, until}
	s.offeredTo[a] = key
}

// Confirm leases want to key for d (0: an hour) and writes the lease down.
// Without want it is the address key was offered, or its lease (a
// renewal). An expired lease of another key on the address is reclaimed;
// an offer of it to another key is withdrawn. The journal is written after
// the store's lock is released; Confirm returns once the lease is on disk.
func (s *Store) Confirm(key string, want netip.Addr, r Range, d time.Duration) (netip.Addr, error) {
	if err := s.load(); err != nil {
		return netip.Addr{}, err
	}
	seq, err := s.confirm(key, &want, r, d)
	if err != nil {
		return netip.Addr{}, err
	}
	if err := s.journal.Sync(seq, s.snapshot); err != nil {
		return netip.Addr{}, err
	}
	if s.Replicate != nil {
		if err := s.Replicate(key, Record{IP: want, Expires: s.Leased(key).Expires}); err != nil {
			return netip.Addr{}, err
		}
	}
	return want, nil
}

// Leased is key's lease as the store keeps it (zero: none).
func (s *Store) Leased(key string) Record {
	if s.load() != nil {
		return Record{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.leases[key]; ok {
		return Record{IP: l.ip, Expires: l.until}
	}
	return Record{}
}

// Apply makes r key's lease as another server of the pool wrote it (a
// member of the site's cluster), in memory and in the journal: the
// address is key's, any other key's lease of it is gone. r without an
// address: key has none any more.
func (s *Store) Apply(key string, r Record) error {
	if err := s.load(); err != nil {
		return err
	}
	s.mu.Lock()
	var seq uint64
	if !r.IP.IsValid() {
		if l, ok := s.leases[key]; ok {
			delete(s.leases, key)
			if s.leasedBy[l.ip] == key {
				delete(s.leasedBy, l.ip)
			}
		}
		seq = s.journal.Add(key, Record{})
	} else {
		if k, ok := s.leasedBy[r.IP]; ok && k != key {
			s.journal.Add(k, Record{})
		}
		s.setLease(key, held{r.IP, r.Expires})
		if k, ok := s.offeredTo[r.IP]; ok && k != key {
			delete(s.offers, k)
			delete(s.offeredTo, r.IP)
		}
		seq = s.journal.Add(key, r)
	}
	s.mu.Unlock()
	return s.journal.Sync(seq, s.snapshot)
}

// confirm is Confirm's decision, in memory, under the lock: the journal's
// change number of the lease.
func (s *Store) confirm(key string, want *netip.Addr, r Range, d time.Duration) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if d <= 0 {
		d = defaultLease
	}
	a, err := requested(*want, s.offered(key, now), s.leases[key].ip)
	if err != nil {
		return 0, err
	}
	if !r.Has(a) {
		return 0, ErrUnavailable
	}
	if k, ok := s.leasedBy[a]; ok && k != key && now.Before(s.leases[k].until) {
		return 0, ErrUnavailable
	}
	if k, ok := s.leasedBy[a]; ok && k != key {
		s.journal.Add(k, Record{}) // reclaimed: its lease expired
	}
	s.setLease(key, held{a, now.Add(d)})
	seq := s.journal.Add(key, Record{IP: a, Expires: now.Add(d)})
	// The offer is taken up; anyone else's offer of the address is void.
	if o, ok := s.offers[key]; ok {
		delete(s.offers, key)
		if s.offeredTo[o.ip] == key {
			delete(s.offeredTo, o.ip)
		}
	}
	if k, ok := s.offeredTo[a]; ok {
		delete(s.offers, k)
		delete(s.offeredTo, a)
	}
	*want = a
	return seq, nil
}

// requested is the address a REQUEST is leased: want, when the client was
// offered it or holds (or held) a lease of it; without want, its offer,
// else its lease. offered and leased are the client's (invalid: none).
func requested(want, offered, leased netip.Addr) (netip.Addr, error) {
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

// setLease gives key lease l, taking the address from an expired lease of
// another key.
func (s *Store) setLease(key string, l held) {
	old, had := s.leases[key]
	if prevKey, taken := s.leasedBy[l.ip]; taken && prevKey != key {
		delete(s.leases, prevKey)
	}
	if had && s.leasedBy[old.ip] == key {
		delete(s.leasedBy, old.ip)
	}
	s.leases[key] = l
	s.leasedBy[l.ip] = key
}

// Release ends key's lease of a now (a DHCPv6 Release). The lease stays
// in the journal, expired: the address is key's again if nobody needed it
// meanwhile.
func (s *Store) Release(key string, a netip.Addr) error {
	if err := s.load(); err != nil {
		return err
	}
	s.mu.Lock()
	l, ok := s.leases[key]
	if !ok || l.ip != a {
		s.mu.Unlock()
		return ErrUnavailable
	}
	now := s.now()
	if !now.Before(l.until) {
		s.mu.Unlock()
		return nil
	}
	s.leases[key] = held{a, now}
	seq := s.journal.Add(key, Record{IP: a, Expires: now})
	s.mu.Unlock()
	if err := s.journal.Sync(seq, s.snapshot); err != nil {
		return err
	}
	if s.Replicate != nil {
		return s.Replicate(key, Record{IP: a, Expires: now})
	}
	return nil
}

// sweep forgets offers past their time, at most once per hold: memory for
// a flood of DISCOVERs is bounded by what arrives in one hold. Every
// decision reads an offer's time itself, so when the sweep runs changes
// nothing else.
func (s *Store) sweep(now time.Time) {
	if now.Sub(s.swept) < s.hold() {
		return
	}
	s.swept = now
	for k, o := range s.offers {
		if !now.Before(o.until) {
			delete(s.offers, k)
			if s.offeredTo[o.ip] == k {
				delete(s.offeredTo, o.ip)
			}
		}
	}
}
