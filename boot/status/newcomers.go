package status

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Newcomers limits, per source address, how many machines the store has
// never seen one source may introduce: a budget of Burst, then one more
// per Every. A real machine introduces itself once (its DHCP sighting,
// its script request, its check-in); a flood of made-up identities from
// one address is turned away at the door, before it costs the store a
// write. Sources are forgotten past MaxSources (the table starts over).
type Newcomers struct {
	Burst int           // default 20
	Every time.Duration // default 1 s
	// MaxSources bounds the sources tracked (default 65536).
	MaxSources int
	// Now is the clock (default time.Now).
	Now func() time.Time

	once    sync.Once
	sources *Budgets
	denied  atomic.Uint64
}

// Allow spends one of src's newcomer tokens; false when it has none left.
// A nil *Newcomers allows everything. An IPv6 source's budget is its /64's
// (Prefix64): a machine on the link may take any address of it.
func (n *Newcomers) Allow(src string) bool {
	if n == nil {
		return true
	}
	n.once.Do(func() { n.sources = &Budgets{Burst: n.Burst, Every: n.Every, MaxKeys: n.MaxSources, Now: n.Now} })
	if !n.sources.Allow(Source(src)) {
		n.denied.Add(1)
		return false
	}
	return true
}

// Source is what a budget per source keys an address by, and how many
// addresses' worth it holds: an IPv6 address's /64 (Prefix64), shared by
// LinkShare; an IPv4 address (IPv4-mapped too) alone.
func Source(src string) (key string, scale float64) {
	if p, ok := Prefix64(src); ok {
		return p, LinkShare
	}
	if a, err := netip.ParseAddr(src); err == nil {
		return a.Unmap().String(), 1 // IPv4 on a dual-stack socket
	}
	return src, 1
}

// Denied counts the newcomers turned away.
func (n *Newcomers) Denied() uint64 {
	if n == nil {
		return 0
	}
	return n.denied.Load()
}

// LinkShare is how many addresses' budgets a whole link's is: an IPv6
// /64, or a DHCP link or relay.
const LinkShare = 50

// Prefix64 is the /64 an IPv6 address is in ("2001:db8:1:2::/64"), what a
// budget per source keys an IPv6 source by: SLAAC and privacy addresses
// let one machine use any address of its link's /64, so a budget per
// address would bound nothing. ok is false for IPv4 (IPv4-mapped too) and
// for what is no address.
func Prefix64(src string) (string, bool) {
	a, err := netip.ParseAddr(src)
	if err != nil || a.Unmap().Is4() {
		return "", false
	}
	p, _ := a.WithZone("").Prefix(64)
	return p.String(), true
}
