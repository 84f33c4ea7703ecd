package wanem

import (
	"testing"
	"time"
)

// admit is the link's whole policy: these run it without a namespace.

func TestAdmitPacesAtTheRateThenAddsTheDelay(t *testing.T) {
	l := &Link{shape: Shape{Delay: 50 * time.Millisecond, Rate: 8_000_000}} // 1 byte per µs
	d := &direction{}
	now := time.Unix(0, 0)
	for i, want := range []time.Duration{1500, 3000, 4500} {
		at, ok := l.admit(d, 1500, now)
		if !ok || at.Sub(now) != want*time.Microsecond+50*time.Millisecond {
			t.Errorf("packet %d leaves after %s (admitted %v), want %s + 50ms", i, at.Sub(now), ok, want*time.Microsecond)
		}
	}
	// Once the queue has drained, a packet waits for nothing but itself.
	later := now.Add(time.Second)
	if at, _ := l.admit(d, 1500, later); at.Sub(later) != 1500*time.Microsecond+50*time.Millisecond {
		t.Errorf("after a quiet second a packet leaves after %s", at.Sub(later))
	}
}

func TestAdmitDropsWhenTheQueueIsFull(t *testing.T) {
	l := &Link{shape: Shape{Rate: 8_000_000, Queue: 10}}
	d := &direction{}
	now := time.Unix(0, 0)
	admitted := 0
	for range 20 {
		if _, ok := l.admit(d, 1500, now); ok {
			admitted++
		}
	}
	// 10 packets waiting, plus the one being sent.
	if admitted != 11 || d.n.overflow.Load() != 9 {
		t.Errorf("admitted %d, overflow %d; want 11 and 9", admitted, d.n.overflow.Load())
	}
}

func TestAdmitLossAndCut(t *testing.T) {
	l := &Link{shape: Shape{Loss: 0.25}}
	d := &direction{}
	now := time.Unix(0, 0)
	const n = 20_000
	for range n {
		l.admit(d, 100, now)
	}
	// 5,000 expected; the bounds are 10 standard deviations (61) away.
	if lost := d.n.lost.Load(); lost < 4400 || lost > 5600 {
		t.Errorf("lost %d of %d at 25 %%", lost, n)
	}
	l.Down()
	if _, ok := l.admit(d, 100, now); ok || d.n.cut.Load() != 1 {
		t.Errorf("a packet passed a cut link (cut count %d)", d.n.cut.Load())
	}
	l.Up()
	l.Set(Shape{})
	if _, ok := l.admit(d, 100, now); !ok {
		t.Error("a packet was dropped by a restored, unimpaired link")
	}
}
