//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The run's VM slots. Every QEMU guest runs under TCG and keeps a core busy
// while it boots or writes its disk: tests started side by side (-parallel)
// that together run more VMs than the machine can carry slow each other
// until their deadlines fail (CI saw an image written at 1 MB/s with eight
// guests on two cores). So a test reserves, before its first VM, as many
// slots as it runs busy VMs at once (its own and those its BMC simulators
// start), and waits for them; its deadlines count from there. lab.boot
// fails a test that runs more VMs at once than it reserved and declared
// at rest (lab.resting).
//
// A guest at rest costs almost nothing: an installed Debian at its login
// prompt, or a refused machine waiting, took 1 % of a core (measured), a
// busy one all of one. A test whose phase leaves guests at rest says so
// (lab.resting) and keeps fewer slots (lab.vms with a smaller n gives the
// rest back at once, without waiting): TestRollout's two machines are
// installed at once, then reinstalled one at a time while the other runs.
// Counting every live guest made the tests that hold three or four slots
// for a long time exclude each other: CI's e2e stage ran past 70 min.
//
// Who gets free slots: the tests in longFirst, in its order (the longest,
// measured: started last they make the run's tail), then the others,
// the largest request first. Nobody passes a waiting long test or a
// request for three slots or more: let in whenever fewer were free, the
// one- and two-VM tests kept them from the three-VM ones until the end of
// a run, which then ran one after another (measured: the last 20 min).
// One exception: while such a request waits, one one-slot test at a time
// may take a free slot it cannot use (a short test, its slot back within
// minutes; the long tests' guests often wait on a WAN or sit idle, and
// the one-VM tests had waited for the end of the run). A smaller request
// passes a two-slot one that does not fit.
//
// BOOTOPS_E2E_VM_SLOTS sets how many (default: two per CPU and one, at
// least 5).
var (
	slotsOnce sync.Once
	pool      *slotPool
)

// longFirst are the run's longest VM tests, longest first (CI's summary
// lists each test's time).
var longFirst = []string{"TestRollout", "TestEncryptedInstall", "TestEdgeOverTheInternet", "TestRunning", "TestARM64"}

type slotPool struct {
	mu       sync.Mutex
	cap      int
	free     int
	waiting  []*slotWaiter
	seq      int
	backfill string // the one-slot test let past a waiting request, or ""
}

type slotWaiter struct {
	test         string
	n, rank, seq int
	granted      chan struct{}
}

func vmSlots() *slotPool {
	slotsOnce.Do(func() {
		n := max(5, 2*runtime.NumCPU()+1)
		if s := os.Getenv("BOOTOPS_E2E_VM_SLOTS"); s != "" {
			if v, err := strconv.Atoi(s); err == nil && v > 0 {
				n = v
			}
		}
		pool = &slotPool{cap: n, free: n}
	})
	return pool
}

// rank orders a test's requests: the long tests by their place in
// longFirst, all others after them.
func rank(test string) int {
	test, _, _ = strings.Cut(test, "/")
	if i := slices.Index(longFirst, test); i >= 0 {
		return i
	}
	return len(longFirst)
}

// acquire waits until n slots are given to the test, in the order above.
func (p *slotPool) acquire(test string, n int) {
	p.mu.Lock()
	p.seq++
	w := &slotWaiter{test: test, n: n, rank: rank(test), seq: p.seq, granted: make(chan struct{})}
	p.waiting = append(p.waiting, w)
	p.grant()
	p.mu.Unlock()
	<-w.granted
}

// release gives back n of test's slots.
func (p *slotPool) release(test string, n int) {
	p.mu.Lock()
	if test == p.backfill {
		p.backfill = ""
	}
	p.free += n
	p.grant()
	p.mu.Unlock()
}

// grant gives free slots to the waiters in line; p.mu is held.
func (p *slotPool) grant() {
	slices.SortFunc(p.waiting, func(a, b *slotWaiter) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		if a.n != b.n {
			return b.n - a.n
		}
		return a.seq - b.seq
	})
	kept := p.waiting[:0]
	blocked := false
	for _, w := range p.waiting {
		if w.n <= p.free && (!blocked || w.n == 1 && p.backfill == "") {
			if blocked {
				p.backfill = w.test
			}
			p.free -= w.n
			close(w.granted)
			continue
		}
		if w.rank < len(longFirst) || w.n >= 3 {
			blocked = true
		}
		kept = append(kept, w)
	}
	p.waiting = kept
}

// vms reserves n VM slots for the lab's test until the lab closes (after
// its VMs are killed), waiting for them in line. Called again between two
// phases of a test (n the next phase's busy VMs at once): fewer than it
// holds are kept and the rest given back at once; more are waited for
// after it gives back what it holds: a test never waits in line while it
// holds slots, which could leave the line stuck behind it.
func (l *lab) vms(n int) {
	l.t.Helper()
	p := vmSlots()
	if n > p.cap {
		l.t.Fatalf("the test runs %d VMs at once; the run has %d slots (BOOTOPS_E2E_VM_SLOTS)", n, p.cap)
	}
	if n == l.slots {
		return
	}
	if n < l.slots {
		p.release(l.t.Name(), l.slots-n)
		l.slots = n
		return
	}
	l.releaseSlots()
	t0 := time.Now()
	p.acquire(l.t.Name(), n)
	l.slots = n
	if w := time.Since(t0); w > time.Second {
		l.t.Logf("timing: waited %s for %d of the run's %d VM slots", w.Round(time.Second), n, p.cap)
	}
}

// resting says that n of the test's live guests are at rest from now on
// (an installed OS idle at its prompt, a refused machine waiting): they
// do not count against its slots.
func (l *lab) resting(n int) { l.rest = n }

// releaseSlots gives the lab's slots back; lab.close calls it once its
// processes are dead.
func (l *lab) releaseSlots() {
	if l.slots > 0 {
		vmSlots().release(l.t.Name(), l.slots)
		l.slots = 0
	}
}

// checkSlot fails the test when starting VM name would run more VMs at
// once than the lab reserved.
func (l *lab) checkSlot(name string) {
	l.t.Helper()
	if l.slots == 0 {
		l.t.Fatalf("VM %s: the test reserved no VM slots (call lab.vms first)", name)
	}
	live := func() int {
		n := 0
		for _, v := range l.guests {
			if alive(v.cmd) {
				n++
			}
		}
		return n
	}
	// A VM killed a moment ago may take that moment to end.
	deadline := time.Now().Add(5 * time.Second)
	for live() >= l.slots+l.rest && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if live := live(); live >= l.slots+l.rest {
		l.t.Fatalf("VM %s would be the test's %d. running at once; it reserved %d slots (lab.vms) and has %d at rest (lab.resting)", name, live+1, l.slots, l.rest)
	}
}

// alive says whether cmd's process runs (a zombie waiting to be reaped
// does not).
func alive(cmd *exec.Cmd) bool {
	if cmd.Process == nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: comm may hold spaces; the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// The line's order: a long test first, a waiting long test or one of
// three slots not passed but by one one-slot test at a time, the others
// largest first, a smaller one let in when a two-slot one does not fit.
func TestSlotLine(t *testing.T) {
	p := &slotPool{cap: 5, free: 1}
	var got []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	ask := func(test string, n int) {
		p.mu.Lock()
		before := len(p.waiting)
		p.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.acquire(test, n)
			mu.Lock()
			got = append(got, test)
			mu.Unlock()
		}()
		// in line before the next one asks
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			p.mu.Lock()
			n := len(p.waiting)
			p.mu.Unlock()
			if n > before || time.Now().After(deadline) {
				break
			}
		}
	}
	granted := func(want ...string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			mu.Lock()
			n := len(got)
			mu.Unlock()
			if n >= len(want) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond) // nothing more than wanted
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("granted %v, want %v", got, want)
		}
	}
	ask("TestSmall", 2)
	ask("TestBig", 3)
	ask("TestRunning", 2)
	granted()
	p.release("", 1) // 2 free: TestRunning (long) first
	granted("TestRunning")
	ask("TestEdgeOverTheInternet/x", 3) // long, ranked before TestRunning
	p.release("", 2)                    // 2 free: the waiting long test (3) does not fit and is not passed
	granted("TestRunning")
	p.release("", 1) // 3 free
	granted("TestRunning", "TestEdgeOverTheInternet/x")
	p.release("", 2) // 2 free: TestBig (3) does not fit, and TestSmall (2) does not pass it
	granted("TestRunning", "TestEdgeOverTheInternet/x")
	p.release("", 1) // 3 free: TestBig
	granted("TestRunning", "TestEdgeOverTheInternet/x", "TestBig")
	ask("TestPair", 2)
	ask("TestOne", 1)
	p.release("", 1) // 1 free: TestPair (2) does not fit, TestOne passes it
	granted("TestRunning", "TestEdgeOverTheInternet/x", "TestBig", "TestOne")
	p.release("", 2) // 2 free: TestSmall and TestPair (2 each), the first asked first
	granted("TestRunning", "TestEdgeOverTheInternet/x", "TestBig", "TestOne", "TestSmall")
	p.release("", 2)
	granted("TestRunning", "TestEdgeOverTheInternet/x", "TestBig", "TestOne", "TestSmall", "TestPair")
	// One one-slot test at a time past a waiting long test.
	ask("TestEncryptedInstall", 2)
	ask("TestA", 1)
	ask("TestB", 1)
	p.release("", 1) // 1 free: TestA passes the waiting long test
	granted("TestRunning", "TestEdgeOverTheInternet/x", "TestBig", "TestOne", "TestSmall", "TestPair", "TestA")
	p.release("", 1) // 1 free: TestB does not, while TestA holds its slot
	granted("TestRunning", "TestEdgeOverTheInternet/x", "TestBig", "TestOne", "TestSmall", "TestPair", "TestA")
	p.release("TestA", 1) // 2 free: the long test
	granted("TestRunning", "TestEdgeOverTheInternet/x", "TestBig", "TestOne", "TestSmall", "TestPair", "TestA", "TestEncryptedInstall")
	p.release("", 1)
	granted("TestRunning", "TestEdgeOverTheInternet/x", "TestBig", "TestOne", "TestSmall", "TestPair", "TestA", "TestEncryptedInstall", "TestB")
	wg.Wait()
	if p.free != 0 || len(p.waiting) != 0 {
		t.Errorf("free %d, waiting %d; want 0, 0", p.free, len(p.waiting))
	}
}
