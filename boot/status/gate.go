package status

import (
	"sync"
	"time"
)

// EventGate decides which of a DHCP server's replies (v4 or v6) become
// status events, so a flood of DHCP does not become a flood of disk writes: a machine's same answer
// again within repeatWithin is not recorded again (PXE clients retry,
// every few seconds), and past perSecond events a second (burst 2×) the
// rest are not recorded but counted.
type EventGate struct {
	repeatWithin time.Duration
	perSecond    float64

	mu     sync.Mutex
	last   map[string]gateEntry
	tokens float64
	at     time.Time
	// Suppressed counts events not recorded.
	suppressed uint64
}

type gateEntry struct {
	msg string
	at  time.Time
}

// gateMachines bounds the machines remembered: past it the memory starts
// over (at worst a repeat is recorded again).
const gateMachines = 1 << 16

// NewEventGate remembers a machine's answer for 5 s and records at most
// 2,000 events a second.
func NewEventGate() *EventGate {
	return &EventGate{repeatWithin: 5 * time.Second, perSecond: 2000, last: map[string]gateEntry{}}
}

// Allow says whether machine's reply msg at now is recorded.
func (g *EventGate) Allow(machine, msg string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.last[machine]; ok && e.msg == msg && now.Sub(e.at) < g.repeatWithin {
		g.suppressed++
		return false
	}
	// Refill the bucket.
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
	if len(g.last) >= gateMachines {
		clear(g.last)
	}
	g.last[machine] = gateEntry{msg, now}
	return true
}

// Suppressed is how many events were not recorded.
func (g *EventGate) Suppressed() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.suppressed
}
