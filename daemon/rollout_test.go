package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/agentapi"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/power"
)

// bmc is a BMC that is always on and keeps what it was told; fail, when
// set, is how each boot-device call fails (nil: it works), in turn.
type bmc struct {
	mu    sync.Mutex
	calls []string
	fail  []error
	tries int
	block chan struct{} // when set, a boot-device call waits for it
}

func (b *bmc) PowerState(context.Context) (string, error) { return power.On, nil }
func (b *bmc) SetPower(_ context.Context, a string) error { b.add("power " + a); return nil }
func (b *bmc) SetBootDevice(ctx context.Context, d string, once bool) error {
	if b.block != nil {
		select {
		case <-b.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.mu.Lock()
	b.tries++
	if len(b.fail) > 0 {
		err := b.fail[0]
		if len(b.fail) > 1 {
			b.fail = b.fail[1:]
		}
		if err != nil {
			b.mu.Unlock()
			return err
		}
	}
	b.mu.Unlock()
	b.add("boot " + d)
	return nil
}
func (b *bmc) SetVirtualMedia(_ context.Context, u string) error { b.add("media " + u); return nil }
func (b *bmc) add(c string)                                      { b.mu.Lock(); b.calls = append(b.calls, c); b.mu.Unlock() }
func (b *bmc) said() string                                      { b.mu.Lock(); defer b.mu.Unlock(); return strings.Join(b.calls, ", ") }

// fleet is three running nodes installed with image v1, a Plan that says
// v2 under rolling (one at a time, one canary), a status store, a power
// manager on fake BMCs, and the rollout controller.
type fleet struct {
	t      testing.TB
	names  []string
	dir    string
	live   *boot.Live
	store  *status.Durable
	bmcs   map[string]*bmc
	pm     *power.Manager
	r      *rollouts
	v1, v2 map[string]plan.Install
	reg    *prometheus.Registry
}

func newFleet(t *testing.T) *fleet { return newFleetOf(t, 3, nil) }

// newFleetOf is a fleet of count nodes (n1…), node i's BMC at 198.18.0.i;
// dial, when set, gives node i's BMC controller (else a fake bmc).
func newFleetOf(t testing.TB, count int, dial func(i int) power.Controller) *fleet {
	f := &fleet{t: t, dir: t.TempDir(), live: &boot.Live{}, bmcs: map[string]*bmc{}, v1: map[string]plan.Install{}, v2: map[string]plan.Install{}}
	os.WriteFile(filepath.Join(f.dir, "rack"), []byte("admin:pw\nallow: 198.18.0.0/24\n"), 0o600)
	site := &plan.Site{Name: "lab", Rollouts: map[string]*plan.Rollout{"base": {Strategy: plan.RolloutRolling, MaxUnavailable: "1", Canary: 1, HealthTimeout: "20m"}}}
	index := map[string]int{}
	for i := 1; i <= count; i++ {
		name, addr := fmt.Sprintf("n%d", i), fmt.Sprintf("198.18.0.%d", i)
		index[addr] = i
		f.names = append(f.names, name)
		n := &plan.Node{Name: name, Site: "lab", Profile: "base", BMC: &plan.BMC{Address: addr, Protocol: plan.BMCIPMI, Secret: "rack"},
			Artifacts: plan.Artifacts{Workflow: plan.Workflow{Node: name, Actions: []plan.Action{{Action: "image-to-disk", SHA256: "v1"}}}}}
		f.v1[name] = plan.InstallOf(n)
		n.Artifacts.Workflow.Actions[0].SHA256 = "v2"
		n.Install = plan.InstallOf(n)
		f.v2[name] = n.Install
		site.Nodes = append(site.Nodes, n)
		f.bmcs[addr] = &bmc{}
	}
	f.live.Swap(&plan.Plan{Sites: []*plan.Site{site}})
	var err error
	f.store, err = status.Open(filepath.Join(f.dir, "status.db"), status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.store.Close() })
	for _, name := range f.names {
		in := f.v1[name]
		f.report(name, &in)
	}
	f.pm = &power.Manager{
		Plan:    f.live.Current,
		Node:    func(string, string) (bool, int, bool) { return false, 0, true },
		Record:  func(string, string, string, bool, int) {},
		Secrets: &power.Secrets{Dir: f.dir},
		Dial: func(b *plan.BMC, _ netip.Addr, _ power.Credentials) power.Controller {
			if dial != nil {
				return dial(index[b.Address])
			}
			return f.bmcs[b.Address]
		},
		Timeout: time.Minute,
		Allow:   mustAllow(t, "198.18.0.0/24"),
	}
	f.pm.Round(context.Background()) // the BMCs answered: on
	f.restart()
	return f
}

func mustAllow(t testing.TB, s string) power.AllowList {
	a, err := power.ParseAllowList(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// restart is a new controller on the same store, as after a restart.
func (f *fleet) restart() {
	f.reg = prometheus.NewRegistry()
	var err error
	if f.r, err = newRollouts(f.live, nil, f.store, f.pm, slog.New(slog.DiscardHandler), f.reg); err != nil {
		f.t.Fatal(err)
	}
}

// report is an install of node that finished (nil: one that failed).
func (f *fleet) report(node string, in *plan.Install) {
	f.t.Helper()
	e := status.Event{Kind: status.KindAgent, Site: "lab", Node: node, State: status.StateProvisioned, Install: in, Seq: uint64(time.Now().UnixNano())}
	if in == nil {
		e.State, e.Message, e.Install = status.StateFailed, "2/4 image-to-disk failed: sha256 mismatch", nil
	}
	if err := f.store.RecordSync(e); err != nil {
		f.t.Fatal(err)
	}
	if in != nil {
		f.store.RecordSync(status.Event{Kind: status.KindReport, Site: "lab", Node: node, State: status.StateRunning, Install: &plan.Install{Digest: in.Digest}})
	}
}

func (f *fleet) round() {
	f.r.Round(context.Background())
	f.store.RecordSync() // what the round recorded is in
}

func (f *fleet) cycled() []string {
	var out []string
	for i, name := range []string{"n1", "n2", "n3"} {
		if strings.Contains(f.bmcs["198.18.0."+string(rune('1'+i))].said(), "power cycle") {
			out = append(out, name)
		}
	}
	return out
}

func (f *fleet) timeline(node string) string {
	var b strings.Builder
	for _, e := range f.store.Events("lab/" + node) {
		b.WriteString(e.Message + "\n")
	}
	return b.String()
}

// Git moves three running nodes to v2: they are out of date (on their
// timelines and in the metric), and reinstalled one at a time, canary
// first, each through its BMC; a node started boots the Micro-OS again
// at its generation until its disk holds v2; a restarted controller
// starts nobody twice.
// A node whose BMC boots it by virtual media is reinstalled that way: its
// medium from this server inserted, the CD booted once, a power cycle; no
// network boot.
func TestRolloutBootsVirtualMedia(t *testing.T) {
	f := newFleet(t)
	site := f.live.Current().Sites[0]
	site.Network = plan.Network{ServerAddress: "198.18.0.100", HTTPPort: 8080}
	for _, n := range site.Nodes {
		n.BMC.Protocol, n.BMC.Boot, n.BMC.TLSVerify = plan.BMCRedfish, plan.BootVirtualMedia, true
	}
	f.round()
	if b := f.bmcs["198.18.0.1"].said(); b != "media http://198.18.0.100:8080/media/lab/nodes/n1/media.iso, boot cdrom, power cycle" {
		t.Errorf("n1's BMC: %s", b)
	}
	if got := f.cycled(); len(got) != 1 || got[0] != "n1" {
		t.Errorf("cycled after the first round: %v", got)
	}
}

func TestRolloutController(t *testing.T) {
	f := newFleet(t)
	d := &daemon{events: f.store, overlays: &overlaySwap{live: f.live}, rollouts: f.r}
	f.round()
	if got := promtest.ToFloat64(f.r.outOfDate.WithLabelValues("lab", "base")); got != 3 {
		t.Errorf("bootops_nodes_out_of_date: %v", got)
	}
	if tl := f.timeline("n2"); !strings.Contains(tl, "sync: out of date: image v1→v2") {
		t.Errorf("n2's timeline:\n%s", tl)
	}
	if got := f.cycled(); len(got) != 1 || got[0] != "n1" {
		t.Fatalf("cycled after the first round: %v", got)
	}
	if b := f.bmcs["198.18.0.1"].said(); b != "boot pxe, power cycle" {
		t.Errorf("n1's BMC: %s", b)
	}
	if _, ok := d.provisioned("lab", "n1"); ok {
		t.Error("n1, started for v2, still boots its disk")
	}
	if _, ok := d.provisioned("lab", "n2"); !ok {
		t.Error("n2, not started, does not boot its disk")
	}
	// A restart while n1 installs: nobody is started again.
	f.restart()
	d.rollouts = f.r
	f.round()
	f.round()
	if got := f.cycled(); len(got) != 1 || strings.Count(f.bmcs["198.18.0.1"].said(), "cycle") != 1 {
		t.Fatalf("after a restart: cycled %v, n1's BMC %s", got, f.bmcs["198.18.0.1"].said())
	}
	if st := f.r.Status(); len(st) != 1 || st[0].InProgress != 1 || !strings.Contains(st[0].Summary, "canar") {
		t.Errorf("status: %+v", st)
	}
	// n1 comes back with v2: healthy, and n2 goes.
	v2 := f.v2["n1"]
	f.report("n1", &v2)
	if _, ok := d.provisioned("lab", "n1"); !ok {
		t.Error("n1, installed with v2, does not boot its disk")
	}
	f.round()
	if got := f.cycled(); len(got) != 2 || got[1] != "n2" {
		t.Fatalf("after n1 is healthy: cycled %v", got)
	}
	if tl := f.timeline("n1"); !strings.Contains(tl, "rollout: healthy") || !strings.Contains(tl, "sync: in sync") {
		t.Errorf("n1's timeline:\n%s", tl)
	}
	// n2 fails: the rollout halts, and n3 is never touched.
	f.report("n2", nil)
	for range 3 {
		f.round()
	}
	if got := f.cycled(); len(got) != 2 {
		t.Errorf("after n2 failed: cycled %v", got)
	}
	st := f.r.Status()
	if len(st) != 1 || !strings.HasPrefix(st[0].Halted, "n2: ") {
		t.Errorf("status after a failure: %+v", st)
	}
	if tl := f.timeline("n2"); !strings.Contains(tl, "halted") || !strings.Contains(tl, "sync: unknown") {
		t.Errorf("n2's timeline:\n%s", tl)
	}
	// The halt outlives a restart.
	f.restart()
	f.round()
	if st := f.r.Status(); len(st) != 1 || st[0].Halted == "" || len(f.cycled()) != 2 {
		t.Errorf("after a restart: %+v, cycled %v", st, f.cycled())
	}
}

// Finding 1 of the authority issue, on the rollout controller with the
// real report handler and status store: a report is only a node's word.
// One claiming a made-up install digest does not make a healthy, in-sync
// node out of date (nobody is power-cycled); one naming the digest Git
// wants does not make a node that installed nothing healthy (the rollout
// goes on waiting for it).
func TestForgedReportsDecideNothing(t *testing.T) {
	forgeReports(t, newFleet(t))
}

// forgeReports is TestForgedReportsDecideNothing on a fleet: with fake
// BMCs, or IPMI ones (TestForgedReportsIPMI).
func forgeReports(t *testing.T, f *fleet) {
	secret := boot.Secret(strings.Repeat("k", 32))
	srv := &agentapi.Server{Plans: f.live, Secret: secret, Store: f.store}
	h := srv.Handler()
	credential := func(node, install string) string {
		return secret.Mint(boot.Grant{Kind: boot.KindReport, Site: "lab", Subject: node, ID: install, Expires: time.Now().Add(time.Hour)})
	}
	send := func(node, cred, digest string) (int, string) {
		b, _ := json.Marshal(plan.OSReport{Site: "lab", Node: node, InstanceID: node + "-0", Install: digest})
		req := httptest.NewRequest("POST", plan.ReportPath, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+cred)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	// n1 and n2 run v2, installed by bootops (their sessions s-n1, s-n2):
	// in sync. n3's v2 install failed: it holds nothing bootops knows.
	for _, n := range []string{"n1", "n2"} {
		in := f.v2[n]
		if err := f.store.RecordSync(status.Event{Kind: status.KindAgent, Site: "lab", Node: n, State: status.StateProvisioned, Install: &in, InstallID: "s-" + n, Seq: uint64(time.Now().UnixNano())}); err != nil {
			t.Fatal(err)
		}
	}
	f.report("n3", nil)
	f.round()
	cycledBefore := f.cycled()

	// n1's own credential, with a made-up install digest.
	if code, body := send("n1", credential("n1", "s-n1"), strings.Repeat("0f", 32)); code != 409 {
		t.Errorf("n1's report of a made-up install: %d %s", code, body)
	}
	// n3's credential of an install that never finished, with what Git wants.
	if code, body := send("n3", credential("n3", "s-n3"), f.v2["n3"].Digest); code != 409 {
		t.Errorf("n3's report of the install Git wants: %d %s", code, body)
	}
	for range 3 {
		f.round()
	}
	if got := f.cycled(); len(got) != len(cycledBefore) || slices.Contains(got, "n1") {
		t.Errorf("after forged reports: cycled %v (before %v)", got, cycledBefore)
	}
	if m, _ := f.store.Machine("lab/n1"); m.Installed == nil || m.Installed.Digest != f.v2["n1"].Digest || status.NodeSync(&m, f.v2["n1"]) != status.SyncIn {
		t.Errorf("n1 after a forged report: %+v", m.Installed)
	}
	if m, _ := f.store.Machine("lab/n3"); m.State == status.StateRunning || m.Installed != nil {
		t.Errorf("n3 after a report of an install it never did: %s %+v", m.State, m.Installed)
	}
	if tl := f.timeline("n3"); strings.Contains(tl, "rollout: healthy") || !strings.Contains(tl, "report refused") {
		t.Errorf("n3's timeline:\n%s", tl)
	}
	// n1's real report (its install, its digest) is taken.
	if code, body := send("n1", credential("n1", "s-n1"), f.v2["n1"].Digest); code != 200 {
		t.Errorf("n1's own report: %d %s", code, body)
	}
}

// Finding 1 of the BMC issue: the boot plane asks, for every script
// request of a provisioned node, whether a rollout is reinstalling it,
// while the controller's rounds start, judge and fail nodes. Under -race
// the two must share nothing unlocked.
func TestRolloutRoundsBesideScriptRequests(t *testing.T) {
	f := newFleet(t)
	d := &daemon{events: f.store, overlays: &overlaySwap{live: f.live}, rollouts: f.r}
	done, stop := make(chan struct{}), make(chan struct{})
	asked := 0
	go func() {
		defer close(done)
		for i := 0; i < 1_000_000; i++ { // bounded; stopped after the rounds
			select {
			case <-stop:
				return
			default:
			}
			for _, n := range []string{"n1", "n2", "n3"} {
				d.provisioned("lab", n)
				asked++
			}
		}
	}()
	for i := 0; i < 30; i++ {
		f.round()
		switch i {
		case 3:
			v2 := f.v2["n1"]
			f.report("n1", &v2)
		case 8:
			f.report("n2", nil) // a failure: the group halts
		}
	}
	close(stop)
	<-done
	if got := f.cycled(); len(got) != 2 {
		t.Errorf("cycled %v, want n1 and n2 (then the halt)", got)
	}
	t.Logf("%d questions beside 30 rounds", asked)
}

// Finding 2 of the BMC issue: a BMC busy for a moment (the daemon's own
// poll) or dropping a connection is tried again with backoff; the node is
// reinstalled and nothing halts.
func TestRolloutRetriesTransientBMC(t *testing.T) {
	f := newFleet(t)
	f.r.bmcBackoff = 10 * time.Millisecond
	b := f.bmcs["198.18.0.1"]
	b.fail = []error{fmt.Errorf("%w: a poll of this BMC is running", power.ErrBusy), errors.New("read tcp: connection reset by peer"), nil}
	f.round()
	if got := f.cycled(); len(got) != 1 || got[0] != "n1" || b.tries != 3 {
		t.Errorf("cycled %v after %d tries, want n1 after 3", got, b.tries)
	}
	if st := f.r.Status(); len(st) != 1 || st[0].Halted != "" {
		t.Errorf("status: %+v", st)
	}
}

// A BMC that keeps failing fails its node after the retry budget, and the
// halt stops the wave at once: the other node started with it is not
// touched (and not waited for), and the status says halted in that round.
func TestRolloutHaltStopsTheWave(t *testing.T) {
	f := newFleet(t)
	p := f.live.Current()
	p.Sites[0].Rollouts["base"] = &plan.Rollout{Strategy: plan.RolloutRolling, MaxUnavailable: "2", HealthTimeout: "20m"}
	f.live.Swap(p)
	f.restart()
	f.r.bmcTries, f.r.bmcBackoff = 3, 10*time.Millisecond
	b := f.bmcs["198.18.0.1"]
	b.fail = []error{errors.New("dial tcp 198.18.0.1:623: i/o timeout")}
	f.round()
	if b.tries != 3 {
		t.Errorf("n1's BMC was tried %d times, want 3", b.tries)
	}
	if got := f.cycled(); len(got) != 0 {
		t.Errorf("cycled %v after the wave halted", got)
	}
	st := f.r.Status()
	if len(st) != 1 || !strings.HasPrefix(st[0].Halted, "n1: power: ") || !strings.Contains(st[0].Halted, "after 3 tries") {
		t.Errorf("status in the round that halted: %+v", st)
	}
	d := &daemon{events: f.store, overlays: &overlaySwap{live: f.live}, rollouts: f.r}
	if _, ok := d.provisioned("lab", "n2"); !ok {
		t.Error("n2, never touched, is served the Micro-OS")
	}
	if tl := f.timeline("n2"); !strings.Contains(tl, "halted before this node was touched") {
		t.Errorf("n2's timeline:\n%s", tl)
	}
}

// Finding 3 of the BMC issue: groups' waves run side by side, so a slow
// BMC in one group does not hold another group's reinstall: n3 (another
// profile) is cycled while n1's BMC is still stuck in its call.
func TestRolloutWavesSideBySide(t *testing.T) {
	f := newFleet(t)
	p := f.live.Current()
	p.Sites[0].Nodes[2].Profile = "other"
	p.Sites[0].Rollouts["other"] = &plan.Rollout{Strategy: plan.RolloutRolling, MaxUnavailable: "1", HealthTimeout: "20m"}
	f.live.Swap(p)
	f.restart()
	slow, other := f.bmcs["198.18.0.1"], f.bmcs["198.18.0.3"]
	slow.block = make(chan struct{})
	done := make(chan struct{})
	go func() { f.round(); close(done) }()
	testutil.Poll(30*time.Second, 10*time.Millisecond, func() bool { return strings.Contains(other.said(), "power cycle") })
	close(slow.block)
	<-done
	if !strings.Contains(other.said(), "power cycle") {
		t.Fatalf("n3 waited for n1's stuck BMC: %q", other.said())
	}
	if got := f.cycled(); len(got) != 2 {
		t.Errorf("cycled %v, want n1 and n3", got)
	}
}

// Two members of a site's cluster over one store of groups: only the one
// holding the rollouts acts; the other answers the boot plane from the
// groups the holder stored; when the role moves, the new holder goes on
// from them — the node already started is not started again, the next
// one is, once the first is healthy.
func TestRolloutHandsOver(t *testing.T) {
	f := newFleet(t)
	var aHolds atomic.Bool
	aHolds.Store(true)
	a := f.r
	a.active = aHolds.Load
	b, err := newRollouts(f.live, nil, f.store, f.pm, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b.active = func() bool { return !aHolds.Load() }
	round := func(r *rollouts) { r.Round(context.Background()); f.store.RecordSync() }
	round(b)
	if got := f.cycled(); len(got) != 0 {
		t.Fatalf("the member not holding the rollouts started %v", got)
	}
	round(a)
	round(b)
	if got := f.cycled(); len(got) != 1 || got[0] != "n1" {
		t.Fatalf("cycled: %v, want n1 (by the holder)", got)
	}
	if !b.Reinstalling("lab", "base", "n1", &plan.Install{Digest: f.v1["n1"].Digest}) {
		t.Error("the other member would send n1, started for v2, to its old disk")
	}
	aHolds.Store(false) // the role moves to b
	round(a)
	round(b)
	round(b)
	if n := strings.Count(f.bmcs["198.18.0.1"].said(), "cycle"); n != 1 || len(f.cycled()) != 1 {
		t.Fatalf("after the role moved: n1 cycled %d times, cycled %v", n, f.cycled())
	}
	v2 := f.v2["n1"]
	f.report("n1", &v2)
	round(b)
	if got := f.cycled(); len(got) != 2 || got[1] != "n2" {
		t.Fatalf("the new holder, n1 healthy: cycled %v, want n1 n2", got)
	}
}
