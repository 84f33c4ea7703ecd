//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The run's VM slots. Every QEMU guest runs under TCG and keeps a core busy
// while it boots or writes its disk: tests started side by side (-parallel)
// that together run more VMs than the machine can carry slow each other
// until their deadlines fail (CI saw an image written at 1 MB/s with eight
// guests on two cores). So a test reserves, before its first VM, as many
// slots as it runs VMs at once (its own and those its BMC simulators
// start), and waits for them; its deadlines count from there. lab.boot
// fails a test that runs more VMs at once than it reserved.
//
// A test takes its slots as soon as they are free, whoever asked first:
// the machine stays busy. Both ways of waiting in line were measured and
// left slots idle for most of a run: first come first served, and the same
// with an impatient waiter blocking the others (one or two VMs running
// while a four-VM test waited for its four). A test that needs many may
// wait until the others are done; the run's tests are finite, so it runs.
//
// BOOTOPS_E2E_VM_SLOTS sets how many (default: two per CPU and one, at
// least 5: on two CPUs the four VMs of TestEdgeOverTheInternet and one
// more, or TestRollout's three and TestEncryptedInstall's two).
var (
	slotsOnce sync.Once
	pool      *slotPool
)

type slotPool struct {
	mu   sync.Mutex
	cond *sync.Cond
	cap  int
	free int
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
		pool.cond = sync.NewCond(&pool.mu)
	})
	return pool
}

// acquire waits until n slots are free, then takes them.
func (p *slotPool) acquire(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.free < n {
		p.cond.Wait()
	}
	p.free -= n
}

func (p *slotPool) release(n int) {
	p.mu.Lock()
	p.free += n
	p.mu.Unlock()
	p.cond.Broadcast()
}

// vms reserves n VM slots for the lab's test until the lab closes (after
// its VMs are killed), waiting for them in line. Called again between two
// phases of a test (n the next phase's VMs at once), it gives back what it
// holds before it waits: a test never waits in line while it holds slots,
// which could leave the line stuck behind it.
func (l *lab) vms(n int) {
	l.t.Helper()
	p := vmSlots()
	if n > p.cap {
		l.t.Fatalf("the test runs %d VMs at once; the run has %d slots (BOOTOPS_E2E_VM_SLOTS)", n, p.cap)
	}
	if l.slots == n {
		return
	}
	l.releaseSlots()
	t0 := time.Now()
	p.acquire(n)
	l.slots = n
	if w := time.Since(t0); w > time.Second {
		l.t.Logf("timing: waited %s for %d of the run's %d VM slots", w.Round(time.Second), n, p.cap)
	}
}

// releaseSlots gives the lab's slots back; lab.close calls it once its
// processes are dead.
func (l *lab) releaseSlots() {
	if l.slots > 0 {
		vmSlots().release(l.slots)
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
	for live() >= l.slots && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if live := live(); live >= l.slots {
		l.t.Fatalf("VM %s would be the test's %d. running at once; it reserved %d slots (lab.vms)", name, live+1, l.slots)
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
