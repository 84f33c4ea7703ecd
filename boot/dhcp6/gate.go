package dhcp6

import (
	"sync"
	"time"
)

// eventGate decides which replies become status events, as the DHCPv4
// server's does: a client's same answer again within repeatWithin is not
// recorded again (clients retransmit), and past perSecond events a second
// (burst 2×) the rest are only counted.
type eventGate struct {
	repeatWithin time.Duration
	perSecond    float64

	mu         sync.Mutex
	last       map[string]gateEntry
	tokens     float64
	at         time.Time
	suppressed uint64
}

type gateEntry struct {
	msg string
	at  time.Time
}

// gateClients bounds the clients remembered: past it the memory starts
// over (at worst a repeat is recorded again).
const gateClients = 1 << 16

func newEventGate() *eventGate {
	return &eventGate{repeatWithin: 5 * time.Second, perSecond: 2000, last: map[string]gateEntry{}}
}

// allow says whether client's reply msg at now is recorded.
func (g *eventGate) allow(client, msg string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.last[client]; ok && e.msg == msg && now.Sub(e.at) < g.repeatWithin {
		g.suppressed++
		return false
	}
	if g.at.IsZero() {
		g.tokens = 2 * g.perSecond
	} else {
		g.tokens = min(2*g.perSecond, g.tokens+now.Sub(g.at).Seconds()*g.perSecond)
	}
	g.at = now
	if g.tokens < 1 {
		g.suppressed++
		return false
	}
	g.tokens--
	if len(g.last) >= gateClients {
		clear(g.last)
	}
	g.last[client] = gateEntry{msg, now}
	return true
}

// Suppressed is how many events were not recorded.
func (g *eventGate) Suppressed() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.suppressed
}
