package lease

import (
	"net/netip"
	"sync"
)

// load reads the journal once, before the store's first use, outside its
// lock. Two keys leasing one address (a file no store of today writes, but
// one an older daemon or a hand may have): the lease that ends last keeps
// it, the smaller key on a tie; the other is forgotten.
func (s *Store) load() error {
	s.once.Do(func() {
		s.journal.Path = s.Path
		recs, err := s.journal.Load()
		if err != nil {
			s.loadErr = err
			return
		}
		s.leases, s.leasedBy = make(map[string]held, len(recs)), make(map[netip.Addr]string, len(recs))
		s.offers, s.offeredTo = map[string]held{}, map[netip.Addr]string{}
		for key, r := range recs {
			if k, dup := s.leasedBy[r.IP]; dup {
				if o := recs[k].Expires; o.After(r.Expires) || o.Equal(r.Expires) && k < key {
					continue
				}
				delete(s.leases, k)
			}
			s.leases[key] = held{r.IP, r.Expires}
			s.leasedBy[r.IP] = key
		}
	})
	return s.loadErr
}

// snapshot is the leases for a compaction of the journal, pruned of those
// expired longer than Retain ago (in memory too).
func (s *Store) snapshot() (map[string]Record, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	retain := s.Retain
	if retain <= 0 {
		retain = DefaultRetain
	}
	cut := s.now().Add(-retain)
	recs := make(map[string]Record, len(s.leases))
	for key, l := range s.leases {
		if l.until.Before(cut) {
			delete(s.leases, key)
			if s.leasedBy[l.ip] == key {
				delete(s.leasedBy, l.ip)
			}
			continue
		}
		recs[key] = Record{IP: l.ip, Expires: l.until}
	}
	return recs, s.journal.Seq()
}

// Leases is how many leases the store keeps (live and expired).
func (s *Store) Leases() int {
	if s.load() != nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases)
}

// MACOf returns the key (a MAC, or "duid:…") whose live lease is ip, ""
// if none: how the HTTP server keys an unknown machine that reports no
// usable identifier. ip is of either family, its zone ignored
// ("198.18.0.12", "2001:db8::12", "fe80::1%eth0").
func (s *Store) MACOf(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	a = a.Unmap().WithZone("") // leases are kept without the interface
	if s.load() != nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.leasedBy[a]; ok && s.now().Before(s.leases[k].until) {
		return k
	}
	return ""
}

// MACSource knows the MAC of an address it leased: a Store.
type MACSource interface {
	MACOf(ip string) string
}

// Stores are the lease stores of every site served, both families, for
// MACOf across them.
type Stores struct {
	mu     sync.Mutex
	stores []MACSource
}

// Add makes s one of them.
func (ss *Stores) Add(s MACSource) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.stores = append(ss.stores, s)
}

// MACOf returns the MAC whose live lease is ip in any of the stores.
func (ss *Stores) MACOf(ip string) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, s := range ss.stores {
		if mac := s.MACOf(ip); mac != "" {
			return mac
		}
	}
	return ""
}
