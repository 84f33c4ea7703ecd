package status

import (
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
// A nil *Newcomers allows everything. An IPv6 source spends from its own
// budget and its /64's (Budgets.AllowSource): a machine on the link may
// take any address of it, and one address cannot starve the others.
func (n *Newcomers) Allow(src string) bool {
	if n == nil {
		return true
	}
	n.once.Do(func() { n.sources = &Budgets{Burst: n.Burst, Every: n.Every, MaxKeys: n.MaxSources, Now: n.Now} })
	if !n.sources.AllowSource(src) {
		n.denied.Add(1)
		return false
	}
	return true
}

// Denied counts the newcomers turned away.
func (n *Newcomers) Denied() uint64 {
	if n == nil {
		return 0
	}
	return n.denied.Load()
}

// LinkShare is how many addresses' budgets an IPv6 /64's is: SLAAC and
// privacy addresses let one machine use any address of its link's /64, so
// a budget per address alone would bound nothing.
const LinkShare = 50
