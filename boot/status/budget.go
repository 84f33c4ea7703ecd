package status

import (
	"net/netip"
	"sync"
	"time"
)

// Budgets are token buckets by key: Burst at once, then one more per
// Every. What a machine may make the server do or keep (reports,
// challenges, anonymous check-ins) is spent from one, so a sender that
// repeats itself pays for it and nobody else does. Keys are forgotten past
// MaxKeys (the table starts over: a bound that costs a flood its own
// history, never a real machine more than one burst).
type Budgets struct {
	Burst int           // default 20
	Every time.Duration // default 1 s
	// MaxKeys bounds the keys tracked (default 65536).
	MaxKeys int
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu   sync.Mutex
	keys map[string]*budget
}

// budget is one key's bucket. suppressed counts what it refused since
// the last thing it allowed.
type budget struct {
	tokens     float64
	last       time.Time
	suppressed int
}

// Allow spends one of key's tokens; false when it has none left. scale
// multiplies the key's burst and refill (a /64 or a link shares one
// budget between many machines); 0 means 1. A nil *Budgets allows
// everything.
func (b *Budgets) Allow(key string, scale float64) bool {
	ok, _ := b.take(key, scale, b.now())
	return ok
}

func (b *Budgets) now() time.Time {
	if b != nil && b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// AllowSource spends one token of src's budget. An IPv4 address has its
// own; an IPv6 address spends from its own and from its /64's (LinkShare
// times larger) at once, so one address of a link never takes more than
// its own share and the rest of the /64 keeps what it leaves; anything
// else (a name such as "link") is its own key.
func (b *Budgets) AllowSource(src string) bool {
	if b == nil {
		return true
	}
	a, err := netip.ParseAddr(src)
	switch {
	case err != nil:
		ok, _ := b.take(src, 1, b.now())
		return ok
	case a.Unmap().Is4():
		ok, _ := b.take(a.Unmap().String(), 1, b.now())
		return ok
	}
	p, _ := a.WithZone("").Prefix(64)
	return b.takeAll(b.now(), share{a.WithZone("").String(), 1}, share{p.String(), LinkShare})
}

// share is a key and its scale.
type share struct {
	key   string
	scale float64
}

// take is Allow at now that also says how many were refused since the
// key was last allowed (0 when refused now).
func (b *Budgets) take(key string, scale float64, now time.Time) (bool, int) {
	if b == nil {
		return true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.bucket(key, scale, now)
	if k.tokens < 1 {
		k.suppressed++
		return false, 0
	}
	k.tokens--
	n := k.suppressed
	k.suppressed = 0
	return true, n
}

// takeAll spends one token of every key, or of none when one has none.
func (b *Budgets) takeAll(now time.Time, keys ...share) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ks := make([]*budget, len(keys))
	for i, s := range keys {
		ks[i] = b.bucket(s.key, s.scale, now)
		if ks[i].tokens < 1 {
			ks[i].suppressed++
			return false
		}
	}
	for _, k := range ks {
		k.tokens--
		k.suppressed = 0
	}
	return true
}

// bucket is key's bucket, refilled to now; b.mu is held.
func (b *Budgets) bucket(key string, scale float64, now time.Time) *budget {
	if scale <= 0 {
		scale = 1
	}
	burst, every := float64(orDefault(b.Burst, 20))*scale, time.Duration(float64(orDefault(b.Every, time.Second))/scale)
	if b.keys == nil || len(b.keys) >= orDefault(b.MaxKeys, 65536) {
		b.keys = map[string]*budget{}
	}
	k := b.keys[key]
	if k == nil {
		k = &budget{tokens: burst, last: now}
		b.keys[key] = k
	}
	if dt := now.Sub(k.last); dt > 0 {
		k.tokens = min(burst, k.tokens+float64(dt)/float64(every))
		k.last = now
	}
	return k
}
