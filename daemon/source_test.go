package daemon

import (
	"runtime"
	"testing"
)

// TestHeapLimit: the soft limit leaves a compilation's room above what the
// runtime already holds for the live heap, at a 10,000-node Plan (the
// 40 MiB rule, issue 18's RSS) and at a 50,000-node one, whose heap
// overhead alone passed 40 MiB and had the collector run back to back.
func TestHeapLimit(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name           string
		live, overhead int64
		want           int64
	}{
		{"an empty daemon", 2 * mib, 3 * mib, 64 * mib},
		{"10,000 nodes", 100 * mib, 20 * mib, 140 * mib},
		{"50,000 nodes", 448 * mib, 90 * mib, 448*mib + 90*mib + 56*mib},
	} {
		got := heapLimit(c.live, c.overhead)
		if got != c.want {
			t.Errorf("%s: heapLimit(%d MiB live, %d MiB overhead) = %d MiB, want %d MiB", c.name, c.live/mib, c.overhead/mib, got/mib, c.want/mib)
		}
		if room := got - c.live - c.overhead; room < 16*mib {
			t.Errorf("%s: %d MiB above what the runtime holds: the collector would run back to back", c.name, room/mib)
		}
	}
}

// TestReadHeap: the runtime knows every metric the soft limit and the free
// read (a misspelt name reads as zero, and would silently stop both).
func TestReadHeap(t *testing.T) {
	keep := make([][]byte, 64)
	for i := range keep {
		keep[i] = make([]byte, 64<<10)
	}
	runtime.GC()
	h := readHeap()
	if h.live < 4<<20 || h.objects < h.live/2 || h.overhead <= 0 {
		t.Errorf("heap figures %+v with 4 MiB held", h)
	}
	runtime.KeepAlive(keep)
}
