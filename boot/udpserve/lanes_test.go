package udpserve

import "testing"

// A node's packet queued behind a full lane of unknown clients is the next
// one a worker takes; a full lane refuses more; closed lanes give what
// they hold, then nothing.
func TestLanesNodesFirst(t *testing.T) {
	l := NewLanes[int](100)
	for i := range 100 {
		if !l.Put(i, false) {
			t.Fatalf("packet %d did not fit", i)
		}
	}
	if l.Put(100, false) {
		t.Error("a full lane took one more")
	}
	if !l.Put(-1, true) || !l.Put(-2, true) {
		t.Fatal("the nodes' lane is full behind the unknown clients'")
	}
	for _, want := range []int{-1, -2, 0, 1} {
		if got, ok := l.Next(); !ok || got != want {
			t.Fatalf("next: %d %v, want %d", got, ok, want)
		}
	}
	l.Close()
	n := 0
	for _, ok := l.Next(); ok; _, ok = l.Next() {
		n++
	}
	if n != 98 {
		t.Errorf("%d packets after closing, want the 98 queued", n)
	}
}
