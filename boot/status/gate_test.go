package status

import (
	"testing"
	"time"
)

func TestEventGate(t *testing.T) {
	g := NewEventGate()
	now := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	if !g.Allow("a", "offer", now) || g.Allow("a", "offer", now.Add(time.Second)) {
		t.Error("a repeat within 5 s was recorded")
	}
	if !g.Allow("a", "another answer", now.Add(2*time.Second)) || !g.Allow("a", "another answer", now.Add(8*time.Second)) {
		t.Error("a new answer, or the same after 5 s, was not recorded")
	}
	// 10,000 distinct machines in one second: the burst (4,000), no more.
	g = NewEventGate()
	n := 0
	for i := range 10000 {
		if g.Allow(string(rune(i+1000)), "offer", now) {
			n++
		}
	}
	if n != 4000 || g.Suppressed() != 6000 {
		t.Errorf("recorded %d, suppressed %d", n, g.Suppressed())
	}
	// A second later the bucket holds 2,000 more.
	n = 0
	for i := range 5000 {
		if g.Allow(string(rune(i+20000)), "offer", now.Add(time.Second)) {
			n++
		}
	}
	if n != 2000 {
		t.Errorf("after a second: %d recorded", n)
	}
}
