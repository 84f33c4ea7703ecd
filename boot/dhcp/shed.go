package dhcp

import (
	"bytes"
	"sync"
	"time"
)

// bootClient says, from the raw packet and without parsing it, whether it
// may be a PXE or UEFI HTTP-boot client's BOOTREQUEST: op 1, the magic
// cookie, and option 60 starting "PXEClient" or "HTTPClient". In proxy
// mode nothing else gets an answer, so the rest is dropped here, before
// any allocation: a flood of ordinary DHCP costs a read and this scan.
func bootClient(pkt []byte) bool {
	if len(pkt) < 240 || pkt[0] != 1 || !bytes.Equal(pkt[236:240], []byte{99, 130, 83, 99}) {
		return false
	}
	for i := 240; i < len(pkt); {
		code := pkt[i]
		switch code {
		case 0: // pad
			i++
			continue
		case 255: // end
			return false
		}
		if i+1 >= len(pkt) {
			return false
		}
		n := int(pkt[i+1])
		if i+2+n > len(pkt) {
			return false
		}
		if code == 60 {
			v := pkt[i+2 : i+2+n]
			return bytes.HasPrefix(v, []byte("PXEClient")) || bytes.HasPrefix(v, []byte("HTTPClient"))
		}
		i += 2 + n
	}
	return false
}

// eventGate decides which replies become status events, so a flood of
// DHCP does not become a flood of disk writes: a machine's same answer
// again within repeatWithin is not recorded again (PXE clients retry,
// every few seconds), and past perSecond events a second (burst 2×) the
// rest are not recorded but counted.
type eventGate struct {
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

func newEventGate() *eventGate {
	return &eventGate{repeatWithin: 5 * time.Second, perSecond: 2000, last: map[string]gateEntry{}}
}

// allow says whether machine's reply msg at now is recorded.
func (g *eventGate) allow(machine, msg string, now time.Time) bool {
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
func (g *eventGate) Suppressed() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.suppressed
}
