package power

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// fakeBMC is a machine's BMC in memory: its power, its next boot device,
// and every call made to it.
type fakeBMC struct {
	mu    sync.Mutex
	power string
	boot  string
	calls []string
	fail  error         // every call fails with it
	hang  chan struct{} // calls wait on it (or their deadline)
	// lag: a power change shows lag after the BMC took it (as on real
	// machines), pending until then.
	lag     time.Duration
	pending string
	at      time.Time
}

func (f *fakeBMC) call(ctx context.Context, what string) error {
	f.mu.Lock()
	f.calls = append(f.calls, what)
	fail, hang := f.fail, f.hang
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return &TimeoutError{What: what, BMC: "fake", After: time.Second}
		}
	}
	return fail
}

func (f *fakeBMC) PowerState(ctx context.Context) (string, error) {
	if err := f.call(ctx, "status"); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending != "" && !time.Now().Before(f.at) {
		f.power, f.pending = f.pending, ""
	}
	return f.power, nil
}

func (f *fakeBMC) SetPower(ctx context.Context, action string) error {
	if err := f.call(ctx, "power "+action); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch action {
	case "on", "off":
		if f.lag > 0 {
			f.pending, f.at = action, time.Now().Add(f.lag)
			return nil
		}
		f.power = action
	case "cycle":
		if f.power == Off {
			return errors.New("cycle of a machine that is off")
		}
	}
	return nil
}

func (f *fakeBMC) SetBootDevice(ctx context.Context, device string, once bool) error {
	if err := f.call(ctx, fmt.Sprintf("boot %s once=%v", device, once)); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.boot = device
	return nil
}

func (f *fakeBMC) actions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if c != "status" {
			out = append(out, c)
		}
	}
	return out
}

// rig is a Manager over a one-site Plan, fake BMCs by address and a
// timeline per node.
type rig struct {
	m      *Manager
	p      *plan.Plan
	bmcs   map[string]*fakeBMC
	mu     sync.Mutex
	events map[string][]string
	state  map[string]string
	inst   map[string]int
}

func newRig(t *testing.T, power string, nodes ...*plan.Node) *rig {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "rack"), []byte("admin:pw\nallow: 10.0.0.0/24\n"), 0o600)
	r := &rig{
		p:      &plan.Plan{Sites: []*plan.Site{{Name: "lab", Power: power, Nodes: nodes}}},
		bmcs:   map[string]*fakeBMC{},
		events: map[string][]string{},
		state:  map[string]string{},
		inst:   map[string]int{},
	}
	for _, n := range nodes {
		if n.BMC != nil {
			r.bmcs[n.BMC.Address] = &fakeBMC{power: Off}
		}
	}
	r.m = r.manager(dir)
	return r
}

func (r *rig) manager(dir string) *Manager {
	return &Manager{
		Plan: func() *plan.Plan { return r.p },
		Node: func(site, node string) (bool, int, bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			g, ok := r.inst[node]
			return r.state[node] == "provisioning" || r.state[node] == "microos", g, ok
		},
		Record: func(site, node, msg string, isErr bool, gen int) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.events[node] = append(r.events[node], msg)
		},
		Secrets: &Secrets{Dir: dir},
		Dial: func(b *plan.BMC, _ netip.Addr, c Credentials) Controller {
			if c.Username != "admin" || c.Password != "pw" {
				panic("credentials not read: " + c.Username)
			}
			return r.bmcs[b.Address]
		},
		Timeout:   200 * time.Millisecond,
		StateFile: filepath.Join(dir, "power.json"),
	}
}

// called waits until the BMC was called (up to 5 s).
func (b *fakeBMC) called(t *testing.T) {
	t.Helper()
	for range 500 {
		b.mu.Lock()
		n := len(b.calls)
		b.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the BMC was never called")
}

func bmcNode(name, addr string, gen int) *plan.Node {
	return &plan.Node{Name: name, Reprovision: gen, BMC: &plan.BMC{Address: addr, Protocol: plan.BMCIPMI, Secret: "rack"}}
}

// A new node on a power: auto site is set to PXE once and powered on,
// once: the next rounds, and a restarted daemon, leave it alone.
func TestAutoPowersOnANewNodeOnce(t *testing.T) {
	r := newRig(t, plan.PowerAuto, bmcNode("n1", "10.0.0.1", 0), &plan.Node{Name: "n2"})
	ctx := context.Background()
	r.m.Round(ctx)
	b := r.bmcs["10.0.0.1"]
	if got := strings.Join(b.actions(), ", "); got != "boot pxe once=true, power on" {
		t.Fatalf("BMC calls: %s", got)
	}
	if got := strings.Join(r.events["n1"], " | "); !strings.Contains(got, "power: set next boot pxe (once)") || !strings.Contains(got, "power: powered on (it was off) for generation 0 (a new node)") {
		t.Errorf("timeline: %s", got)
	}
	if st, _ := r.m.Status("lab/n1"); st.Power != Off { // as polled before acting
		t.Errorf("status: %+v", st)
	}
	r.m.Round(ctx)
	if st, _ := r.m.Status("lab/n1"); st.Power != On {
		t.Errorf("status after the next poll: %+v", st)
	}
	again := r.manager(filepath.Dir(r.m.StateFile))
	again.Round(ctx)
	if n := len(b.actions()); n != 2 {
		t.Errorf("cycled again (%d calls): %v", n, b.actions())
	}
	if _, ok := r.m.Status("lab/n2"); ok {
		t.Error("a node without a BMC has a power status")
	}
}

// Raising reprovision on an installed node cycles it (it is on); a node
// that is installing is never touched; a manual site is only watched.
func TestAutoCyclesOnAReprovision(t *testing.T) {
	r := newRig(t, plan.PowerAuto, bmcNode("n1", "10.0.0.1", 1), bmcNode("n2", "10.0.0.2", 1))
	r.bmcs["10.0.0.1"].power = On
	r.inst["n1"], r.state["n1"] = 0, "running"
	r.inst["n2"], r.state["n2"] = 0, "provisioning"
	r.m.Round(context.Background())
	if got := strings.Join(r.bmcs["10.0.0.1"].actions(), ", "); got != "boot pxe once=true, power cycle" {
		t.Errorf("n1: %s", got)
	}
	if got := r.events["n1"]; len(got) != 2 || !strings.Contains(got[1], "power: cycled for generation 1 (reprovision raised to 1)") {
		t.Errorf("n1's timeline: %q", got)
	}
	if got := r.bmcs["10.0.0.2"].actions(); len(got) != 0 {
		t.Errorf("n2 was touched while provisioning: %v", got)
	}
	// Installed at this generation: nothing to do.
	r.inst["n2"], r.state["n2"] = 1, "provisioned"
	r.m.Round(context.Background())
	if got := r.bmcs["10.0.0.2"].actions(); len(got) != 0 {
		t.Errorf("n2 was cycled though installed at its generation: %v", got)
	}

	m := newRig(t, "", bmcNode("n1", "10.0.0.1", 0))
	m.m.Round(context.Background())
	if got := m.bmcs["10.0.0.1"].actions(); len(got) != 0 {
		t.Errorf("a manual site acted: %v", got)
	}
	if st, _ := m.m.Status("lab/n1"); st.Power != Off || st.Checked.IsZero() {
		t.Errorf("a manual site's node is not watched: %+v", st)
	}
}

// A failing BMC is retried with backoff, each failure on the timeline
// with the BMC's message, and given up after MaxAttempts.
func TestAutoRetriesWithBackoff(t *testing.T) {
	r2 := newRig(t, plan.PowerAuto, bmcNode("n1", "10.0.0.1", 0))
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	r2.m.Now = func() time.Time { return now }
	calls := 0
	r2.m.Dial = func(bm *plan.BMC, _ netip.Addr, c Credentials) Controller {
		return failingSet{r2.bmcs["10.0.0.1"], &calls}
	}
	// Rounds a minute apart: the tries come at 0, 15 s, 30 s, 1, 2, 4 min.
	r2.m.Round(context.Background())
	r2.m.Round(context.Background()) // too soon: no try
	if calls != 1 {
		t.Fatalf("%d tries before the backoff ran out", calls)
	}
	for i := 0; i < 10; i++ {
		now = now.Add(11 * time.Minute)
		r2.m.Round(context.Background())
	}
	if calls != MaxAttempts {
		t.Errorf("%d attempts, want %d", calls, MaxAttempts)
	}
	ev := r2.events["n1"]
	if len(ev) != MaxAttempts || !strings.Contains(ev[0], "power: failed (attempt 1 of 6): boot device pxe: the BMC refused; next try in 15s") || !strings.Contains(ev[len(ev)-1], "power: gave up after 6 attempts for generation 0") {
		t.Errorf("timeline:\n%s", strings.Join(ev, "\n"))
	}
	if backoff(DefaultBackoff, 1) != 15*time.Second || backoff(DefaultBackoff, 3) != time.Minute || backoff(DefaultBackoff, 12) != 10*time.Minute {
		t.Errorf("backoff: %s %s %s", backoff(DefaultBackoff, 1), backoff(DefaultBackoff, 3), backoff(DefaultBackoff, 12))
	}
}

// failingSet answers status and refuses every change.
type failingSet struct {
	*fakeBMC
	calls *int
}

func (f failingSet) SetBootDevice(ctx context.Context, device string, once bool) error {
	*f.calls++
	return errors.New("boot device pxe: the BMC refused")
}

// One BMC that hangs, one whose secret is missing: both show as
// unreachable with why, within the timeout, and the others are served.
func TestUnreachableBMCsDoNotStopTheSite(t *testing.T) {
	r := newRig(t, plan.PowerAuto, bmcNode("n1", "10.0.0.1", 0), bmcNode("n2", "10.0.0.2", 0), bmcNode("n3", "10.0.0.3", 0))
	r.bmcs["10.0.0.1"].hang = make(chan struct{})
	defer close(r.bmcs["10.0.0.1"].hang)
	r.p.Sites[0].Nodes[1].BMC.Secret = "nowhere"
	start := time.Now()
	r.m.Round(context.Background())
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a round with a hanging BMC took %s", d)
	}
	st, _ := r.m.Status("lab/n1")
	if st.Power != Unreachable || !strings.Contains(st.Error, "did not answer") {
		t.Errorf("hanging BMC: %+v", st)
	}
	st, _ = r.m.Status("lab/n2")
	if st.Power != Unreachable || !strings.Contains(st.Error, `secret "nowhere": no file`) {
		t.Errorf("missing secret: %+v", st)
	}
	if got := strings.Join(r.bmcs["10.0.0.3"].actions(), ", "); got != "boot pxe once=true, power on" {
		t.Errorf("the healthy node: %s", got)
	}
	// Both are due (new nodes on a power: auto site): a failed attempt
	// each, with why, on their timelines.
	for node, want := range map[string]string{"n1": "did not answer", "n2": `secret "nowhere": no file`} {
		if ev := r.events[node]; len(ev) != 1 || !strings.Contains(ev[0], "power: failed (attempt 1 of 6)") || !strings.Contains(ev[0], want) {
			t.Errorf("%s's timeline: %q", node, ev)
		}
	}
	c := r.m.Counts()
	if c[Unreachable] != 2 || c[Off] != 1 {
		t.Errorf("counts: %v", c)
	}
}

// An operator's actions: on, off, cycle of an off machine, a boot device;
// each on the timeline. Unknown nodes and nodes without a BMC say so.
func TestOperatorActions(t *testing.T) {
	r := newRig(t, "", bmcNode("n1", "10.0.0.1", 0), &plan.Node{Name: "n2"})
	ctx := context.Background()
	if st, err := r.m.Act(ctx, "lab/n1", "cycle"); err != nil || st.Power != On {
		t.Fatalf("cycle: %+v %v", st, err)
	}
	if st, err := r.m.Act(ctx, "lab/n1", "off"); err != nil || st.Power != Off {
		t.Fatalf("off: %+v %v", st, err)
	}
	if err := r.m.BootDevice(ctx, "lab/n1", "pxe", true); err != nil {
		t.Fatal(err)
	}
	want := "power: cycle of a machine that was off: powered on (asked by an operator) | power: off (asked by an operator) | power: set next boot pxe (once, asked by an operator)"
	if got := strings.Join(r.events["n1"], " | "); got != want {
		t.Errorf("timeline:\n%s\nwant\n%s", got, want)
	}
	if _, err := r.m.Act(ctx, "lab/n2", "on"); !errors.Is(err, ErrNoBMC) {
		t.Errorf("no BMC: %v", err)
	}
	if _, err := r.m.Act(ctx, "lab/n9", "on"); !errors.Is(err, ErrNoNode) {
		t.Errorf("no node: %v", err)
	}
	if _, err := r.m.Act(ctx, "lab/n1", "reboot"); err == nil || !strings.Contains(err.Error(), "want on, off or cycle") {
		t.Errorf("bad action: %v", err)
	}
	if err := r.m.BootDevice(ctx, "lab/n1", "cdrom", true); err == nil {
		t.Error("cdrom accepted")
	}
}

func TestTidyBMCLibErrors(t *testing.T) {
	err := errors.New("2 errors occurred:\n\t* provider: ipmitool: Error in open session response message : invalid authentication algorithm\nError: Unable to establish IPMI v2 / RMCP+ session: exit status 1\n\t* no Opener implementations found\n\n")
	if got := tidy(err); got != "Error in open session response message : invalid authentication algorithm Error: Unable to establish IPMI v2 / RMCP+ session: exit status 1" {
		t.Errorf("%q", got)
	}
}

// After an operator's off, the BMC reports the machine off only a moment
// later: the answer and the status wait for it, a few reads within
// Settle; when it does not come in that time they say "requested off",
// not the state from before, until the next poll.
func TestOperatorActionWaitsForTheState(t *testing.T) {
	r := newRig(t, "", bmcNode("n1", "10.0.0.1", 0))
	b := r.bmcs["10.0.0.1"]
	b.power, b.lag = On, 300*time.Millisecond
	r.m.Settle = 3 * time.Second
	ctx := context.Background()
	r.m.Round(ctx)
	st, err := r.m.Act(ctx, "lab/n1", "off")
	if err != nil || st.Power != Off {
		t.Fatalf("off, seen off after %s: %+v %v", b.lag, st, err)
	}
	if st, _ := r.m.Status("lab/n1"); st.Power != Off {
		t.Errorf("status after off: %+v", st)
	}

	b.lag = time.Hour
	r.m.Settle = 300 * time.Millisecond
	start := time.Now()
	st, err = r.m.Act(ctx, "lab/n1", "on")
	if err != nil || st.Power != "requested on" {
		t.Fatalf("on, never seen on: %+v %v", st, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("on waited %s for a state that did not come (settle %s)", d, r.m.Settle)
	}
	if st, _ := r.m.Status("lab/n1"); st.Power != "requested on" {
		t.Errorf("status after on: %+v", st)
	}
	if c := r.m.Counts(); c[Off] != 1 {
		t.Errorf("counts: %v", c)
	}
	r.m.Round(ctx)
	if st, _ := r.m.Status("lab/n1"); st.Power != Off {
		t.Errorf("status after the next poll: %+v", st)
	}
}

// An operator's call does not wait behind a poll of the same BMC that
// hangs (for up to the whole BMC timeout): after Busy it says the BMC is
// busy, and why.
func TestOperatorDoesNotWaitBehindAHungPoll(t *testing.T) {
	r := newRig(t, "", bmcNode("n1", "10.0.0.1", 0))
	b := r.bmcs["10.0.0.1"]
	b.hang = make(chan struct{})
	r.m.Timeout = time.Minute
	r.m.Busy = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.m.Round(ctx) }()
	defer func() { cancel(); close(b.hang); <-done }()
	b.called(t) // the poll is at the BMC
	for name, call := range map[string]func() error{
		"off":         func() error { _, err := r.m.Act(context.Background(), "lab/n1", "off"); return err },
		"status":      func() error { _, err := r.m.Query(context.Background(), "lab/n1"); return err },
		"boot-device": func() error { return r.m.BootDevice(context.Background(), "lab/n1", "pxe", true) },
	} {
		start := time.Now()
		err := call()
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s waited %s behind a hung poll", name, d)
		}
		if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "busy: a poll of this BMC is running") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A rollout's calls (Queued) wait their turn behind a poll of the same
// BMC, up to the poll's deadline, instead of failing busy after Busy: the
// poll hangs 300 ms, Busy is 50 ms, and the queued cycle goes once the
// poll is over — after it, never beside it.
func TestQueuedCallWaitsItsTurn(t *testing.T) {
	r := newRig(t, plan.PowerAuto, bmcNode("n1", "10.0.0.1", 0))
	b := r.bmcs["10.0.0.1"]
	b.hang = make(chan struct{})
	r.m.Timeout = 5 * time.Second
	r.m.Busy = 50 * time.Millisecond
	done := make(chan struct{})
	go func() { defer close(done); r.m.Round(context.Background()) }()
	b.called(t) // the poll is at the BMC
	if _, err := r.m.Act(context.Background(), "lab/n1", "cycle"); !errors.Is(err, ErrBusy) {
		t.Fatalf("an operator's cycle beside a hung poll: %v, want busy", err)
	}
	time.AfterFunc(300*time.Millisecond, func() { close(b.hang) })
	start := time.Now()
	_, err := r.m.Act(Queued(context.Background()), "lab/n1", "cycle")
	waited := time.Since(start)
	<-done
	if err != nil {
		t.Fatalf("a queued cycle: %v", err)
	}
	if waited < 200*time.Millisecond {
		t.Errorf("the queued cycle went after %s, beside the poll", waited)
	}
	b.mu.Lock()
	calls := slices.Clone(b.calls)
	b.mu.Unlock()
	if len(calls) < 2 || calls[0] != "status" || !slices.Contains(calls[1:], "power cycle") {
		t.Errorf("the BMC's calls: %q; want the poll's read, then the cycle", calls)
	}
}

// A failed automatic attempt is tried again when its backoff is over,
// not at the next poll round: with rounds an hour apart and a backoff of
// 100 ms, the second try comes well within the hour.
func TestAutoRetryComesWhenItIsDue(t *testing.T) {
	r := newRig(t, plan.PowerAuto, bmcNode("n1", "10.0.0.1", 0))
	var tries atomic.Int32
	r.m.Dial = func(*plan.BMC, netip.Addr, Credentials) Controller {
		return refusingBoot{r.bmcs["10.0.0.1"], &tries}
	}
	r.m.Interval = time.Hour
	r.m.Backoff = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	start := time.Now()
	for tries.Load() < 3 && time.Since(start) < 20*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if n := tries.Load(); n < 3 {
		t.Fatalf("%d tries in %s: the retries wait for the next round (in an hour)", n, time.Since(start))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events["n1"]
	if len(ev) < 2 || !strings.Contains(ev[0], "attempt 1 of 6") || !strings.Contains(ev[0], "next try in 100ms") || !strings.Contains(ev[1], "attempt 2 of 6") {
		t.Errorf("timeline:\n%s", strings.Join(ev, "\n"))
	}
}

// refusingBoot answers status and refuses a boot device, counting the
// tries.
type refusingBoot struct {
	*fakeBMC
	tries *atomic.Int32
}

func (f refusingBoot) SetBootDevice(context.Context, string, bool) error {
	f.tries.Add(1)
	return errors.New("boot device pxe: the BMC refused")
}

// A BMC that refuses the login is polled less and less once it has refused
// LoginFailures in a row (a real BMC locks an account that keeps failing),
// its status says so; a changed secret tries again at once.
func TestRefusedCredentialsBackOff(t *testing.T) {
	r := newRig(t, plan.PowerManual, bmcNode("n1", "10.0.0.1", 0))
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	r.m.Now = func() time.Time { return now }
	r.m.Interval = time.Minute
	b := r.bmcs["10.0.0.1"]
	b.fail = errors.New("status: BMC 10.0.0.1 (ipmi): cipher suite 3: Error: Unable to establish IPMI v2 / RMCP+ session")
	ctx := context.Background()
	tries := func() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.calls) }
	for range 3 {
		r.m.Round(ctx)
		now = now.Add(time.Minute)
	}
	if n := tries(); n != 3 {
		t.Fatalf("%d polls, want 3", n)
	}
	st, _ := r.m.Status("lab/n1")
	if !strings.Contains(st.Error, "credentials refused (3 logins failed in a row") {
		t.Errorf("status after 3 refused logins: %+v", st)
	}
	// Quiet for one interval (it ended a minute after the third), then
	// two, then four: 10 more minutes of rounds try 3 more logins, not 10.
	for range 10 {
		r.m.Round(ctx)
		now = now.Add(time.Minute)
	}
	if n := tries(); n != 6 {
		t.Errorf("%d polls after 13 rounds, want 6", n)
	}
	// A new password: tried at once.
	os.WriteFile(filepath.Join(filepath.Dir(r.m.StateFile), "rack"), []byte("admin:pw2\nallow: 10.0.0.0/24\n"), 0o600)
	r.m.Dial = func(bm *plan.BMC, _ netip.Addr, c Credentials) Controller { return r.bmcs[bm.Address] }
	b.mu.Lock()
	b.fail = nil
	b.mu.Unlock()
	r.m.Round(ctx)
	if n := tries(); n != 7 {
		t.Errorf("%d polls after the secret changed, want 7", n)
	}
	if st, _ := r.m.Status("lab/n1"); st.Error != "" || st.Power != Off {
		t.Errorf("status with the new secret: %+v", st)
	}
}

// Run's polls do not wait for the slowest BMC: while one hangs for its
// whole timeout, the others are polled at the interval (Interval 50 ms,
// Timeout 3 s: before, one poll of the other per 3 s).
func TestRunPollsPastAHungBMC(t *testing.T) {
	r := newRig(t, plan.PowerManual, bmcNode("n1", "10.0.0.1", 0), bmcNode("n2", "10.0.0.2", 0))
	r.m.Interval, r.m.Timeout = 50*time.Millisecond, 3*time.Second
	hung := r.bmcs["10.0.0.1"]
	hung.hang = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.m.Run(ctx) }()
	polls := func(b *fakeBMC) int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.calls) }
	other := r.bmcs["10.0.0.2"]
	testutil.Poll(30*time.Second, 10*time.Millisecond, func() bool { return polls(other) >= 10 })
	n, h := polls(other), polls(hung)
	close(hung.hang)
	cancel()
	<-done
	if n < 10 || h != 1 {
		t.Errorf("n2 polled %d times while n1 hung in its first call (n1 asked %d times): want 10, and n1 once", n, h)
	}
}

// A node Git retires is booted into the Micro-OS once for its retirement,
// whatever generation its OS is: never while it runs a step, never again
// once retired; back in service and retired again, it is booted again.
func TestAutoBootsARetirementOnce(t *testing.T) {
	n1 := bmcNode("n1", "10.0.0.1", 0)
	n1.Retire = &plan.Retire{Erase: plan.ErasePurge}
	r := newRig(t, plan.PowerAuto, n1)
	r.inst["n1"], r.state["n1"] = 0, "microos" // installed at its generation, but in the Micro-OS now
	retired := false
	r.m.Retired = func(site, node string) bool { return retired }
	b := r.bmcs["10.0.0.1"]
	b.power = On
	ctx := context.Background()
	r.m.Round(ctx)
	if got := b.actions(); len(got) != 0 {
		t.Fatalf("cycled while it runs a step: %v", got)
	}
	r.state["n1"] = "running"
	r.m.Round(ctx)
	if got := strings.Join(b.actions(), ", "); got != "boot pxe once=true, power cycle" {
		t.Fatalf("BMC calls: %s", got)
	}
	if got := strings.Join(r.events["n1"], " | "); !strings.Contains(got, "power: cycled for its retirement (Git retires it)") {
		t.Errorf("timeline: %s", got)
	}
	r.m.Round(ctx)
	again := r.manager(filepath.Dir(r.m.StateFile)) // a restarted daemon
	again.Round(ctx)
	if n := len(b.actions()); n != 2 {
		t.Fatalf("booted again for the same retirement: %v", b.actions())
	}

	// Retired, then the state file lost: it stays off all the same.
	retired = true
	fresh := r.manager(t.TempDir())
	fresh.Secrets = r.m.Secrets
	fresh.Retired = r.m.Retired
	fresh.Round(ctx)
	if n := len(b.actions()); n != 2 {
		t.Fatalf("a retired node was booted: %v", b.actions())
	}

	// Back in service (installed at its generation: nothing to do), then
	// retired again: booted again.
	retired = false
	n1.Retire = nil
	r.m.Round(ctx)
	n1.Retire = &plan.Retire{Erase: plan.EraseClear}
	r.m.Round(ctx)
	if n := len(b.actions()); n != 4 {
		t.Errorf("a second retirement was not booted: %v", b.actions())
	}
}

// cycleStore is a site cluster's record in memory.
type cycleStore struct {
	mu sync.Mutex
	b  []byte
}

func (c *cycleStore) LoadCycles() (map[string]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.b == nil {
		return nil, nil
	}
	var m map[string]int
	return m, json.Unmarshal(c.b, &m)
}

func (c *cycleStore) SaveCycles(m map[string]int) error {
	b, err := json.Marshal(m)
	c.mu.Lock()
	c.b = b
	c.mu.Unlock()
	return err
}

// Two members of a site's cluster, one record: only the member that acts
// powers a new node on; when the other takes over it knows the node was
// started and leaves it alone; a raised reprovision is then its to act on.
func TestAutoActsFromOneMember(t *testing.T) {
	r := newRig(t, plan.PowerAuto, bmcNode("n1", "10.0.0.1", 0))
	store := &cycleStore{}
	var aActs atomic.Bool
	aActs.Store(true)
	a, b := r.m, r.manager(filepath.Dir(r.m.StateFile)) // the same secrets
	b.StateFile = filepath.Join(t.TempDir(), "power.json")
	a.Cycles, a.Acts = store, aActs.Load
	b.Cycles, b.Acts = store, func() bool { return !aActs.Load() }
	ctx := context.Background()
	bmc := r.bmcs["10.0.0.1"]
	b.Round(ctx)
	if n := len(bmc.actions()); n != 0 {
		t.Fatalf("the member not acting powered the node: %v", bmc.actions())
	}
	a.Round(ctx)
	if got := strings.Join(bmc.actions(), ", "); got != "boot pxe once=true, power on" {
		t.Fatalf("the acting member: %s", got)
	}
	aActs.Store(false) // b acts now
	b.Round(ctx)
	a.Round(ctx)
	if n := len(bmc.actions()); n != 2 {
		t.Fatalf("after the takeover the node was started again: %v", bmc.actions())
	}
	r.p.Sites[0].Nodes[0].Reprovision = 1
	r.inst["n1"], r.state["n1"] = 0, "running"
	bmc.power = On
	b.Round(ctx)
	if got := strings.Join(bmc.actions()[2:], ", "); got != "boot pxe once=true, power cycle" {
		t.Errorf("a raised reprovision, the new member acting: %s", got)
	}
}
