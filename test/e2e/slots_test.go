//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// The run's VM slots. Every QEMU guest runs under TCG and keeps a core busy
// while it boots or writes its disk: tests started side by side (-parallel)
// that together run more VMs than the machine can carry slow each other
// until their deadlines fail (CI saw an image written at 1 MB/s with eight
// guests on two cores). So a test reserves, before its first VM, as many
// slots as it runs VMs at once (its own and those its BMC simulators
// start), and waits for them in line (first come, first served: a test that
// needs many is not starved by small ones); its deadlines count from there.
// lab.boot fails a test that runs more VMs at once than it reserved.
//
// BOOTOPS_E2E_VM_SLOTS sets how many (default: two per CPU, at least 4).
var (
	slotsOnce sync.Once
	slots     *semaphore.Weighted
	slotCap   int64
)

func vmSlots() (*semaphore.Weighted, int64) {
	slotsOnce.Do(func() {
		slotCap = int64(max(4, 2*runtime.NumCPU()))
		if s := os.Getenv("BOOTOPS_E2E_VM_SLOTS"); s != "" {
			if n, err := strconv.Atoi(s); err == nil && n > 0 {
				slotCap = int64(n)
			}
		}
		slots = semaphore.NewWeighted(slotCap)
	})
	return slots, slotCap
}

// vms reserves n VM slots for the lab's test until the lab closes (after
// its VMs are killed), waiting for them in line. Called again between two
// phases of a test (n the next phase's VMs at once), it gives back what it
// holds before it waits: a test never waits in line while it holds slots,
// which could leave the line stuck behind it.
func (l *lab) vms(n int) {
	l.t.Helper()
	sem, capacity := vmSlots()
	if int64(n) > capacity {
		l.t.Fatalf("the test runs %d VMs at once; the run has %d slots (BOOTOPS_E2E_VM_SLOTS)", n, capacity)
	}
	if l.slots == n {
		return
	}
	l.releaseSlots()
	t0 := time.Now()
	if err := sem.Acquire(context.Background(), int64(n)); err != nil {
		l.t.Fatal(err)
	}
	l.slots = n
	if w := time.Since(t0); w > time.Second {
		l.t.Logf("timing: waited %s for %d of the run's %d VM slots", w.Round(time.Second), n, capacity)
	}
}

// releaseSlots gives the lab's slots back; lab.close calls it once its
// processes are dead.
func (l *lab) releaseSlots() {
	if l.slots > 0 {
		sem, _ := vmSlots()
		sem.Release(int64(l.slots))
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
