package rollout

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
)

// fleet is a scripted group: the nodes as the daemon would see them, and
// the Group it persists between steps.
type fleet struct {
	t     *testing.T
	pol   plan.Rollout
	nodes []Node
	saved []byte // the persisted Group, as JSON
	now   time.Time
}

// step runs one Step on the group as persisted, then persists it again,
// the way the daemon does, and moves the clock a minute on.
func (f *fleet) step() (Decision, *Group) {
	f.t.Helper()
	var g Group
	if f.saved != nil {
		if err := json.Unmarshal(f.saved, &g); err != nil {
			f.t.Fatal(err)
		}
	}
	d := mustStep(f.t, f.now, f.pol, slices.Clone(f.nodes), &g)
	saved, err := json.Marshal(&g)
	if err != nil {
		f.t.Fatal(err)
	}
	f.saved = saved
	f.now = f.now.Add(time.Minute)
	return d, &g
}

func (f *fleet) node(name string) *Node {
	for i := range f.nodes {
		if f.nodes[i].Name == name {
			return &f.nodes[i]
		}
	}
	f.t.Fatalf("no node %s", name)
	return nil
}

// git sets what Git wants for every node.
func (f *fleet) git(digest string) {
	for i := range f.nodes {
		f.nodes[i].Want = plan.Install{Digest: digest}
	}
}

// set moves a node to state, the install it now has (nil: unknown).
func (f *fleet) set(name, state string, have *plan.Install, err string) {
	n := f.node(name)
	n.State, n.Have, n.Error, n.Since = state, have, err, f.now
}

// expect checks what a step started, judged and is waiting for.
func expect(t *testing.T, what string, d Decision, start, healthy []string, failed map[string]string, waiting string) {
	t.Helper()
	same(t, what+": start", d.Start, start)
	same(t, what+": healthy", d.Healthy, healthy)
	same(t, what+": failed", d.Failed, failed)
	same(t, what+": waiting", d.Waiting, waiting)
}

// The story of a group: a rollout of v2 one node at a time behind a
// canary, a broken v3 that halts on its first node, and a revert to v2
// that reinstalls that node alone.
func TestScenario(t *testing.T) {
	f := &fleet{t: t, now: t0, pol: plan.Rollout{Strategy: plan.RolloutRolling,
		MaxUnavailable: "1", Canary: 1, HealthTimeout: "30m"}}
	for _, name := range []string{"n1", "n2", "n3"} {
		f.nodes = append(f.nodes, up(name, "v1", "v1"))
	}
	d, _ := f.step()
	expect(t, "in sync", d, nil, nil, nil, "")

	// Git moves to v2: n1 is the canary, the others wait for it.
	f.git("v2")
	d, g := f.step()
	expect(t, "v2 canary", d, []string{"n1"}, nil, nil, "canaries not yet healthy")
	if !g.Marks["n1"].Canary {
		t.Errorf("n1's mark = %s; want a canary", show(g.Marks["n1"]))
	}
	f.set("n1", stateProvisioning, nil, "")
	d, _ = f.step()
	expect(t, "canary installing", d, nil, nil, nil, "canaries not yet healthy")
	f.set("n1", stateRunning, install("v2"), "")
	d, _ = f.step()
	expect(t, "canary healthy", d, []string{"n2"}, []string{"n1"}, nil, "maxUnavailable reached: 1 of 1 down")
	f.set("n2", stateBooting, nil, "")
	d, _ = f.step()
	expect(t, "n2 booting", d, nil, nil, nil, "maxUnavailable reached: 1 of 1 down")
	f.set("n2", stateRunning, install("v2"), "")
	d, _ = f.step()
	expect(t, "n2 healthy", d, []string{"n3"}, []string{"n2"}, nil, "")
	f.set("n3", stateRunning, install("v2"), "")
	d, g = f.step()
	expect(t, "n3 healthy", d, nil, []string{"n3"}, nil, "")
	if d.OutOfDate != 0 || d.Done != 3 || Summary(d, g) != "rolling: in sync (3 nodes)" {
		t.Errorf("after v2: %s, %q", show(d), Summary(d, g))
	}
	for name, m := range g.Marks {
		if !m.Done || m.Digest != "v2" || m.Canary {
			t.Errorf("after v2, %s's mark = %s; want done with v2, canary flag cleared", name, show(m))
		}
	}

	// Git moves to v3, which is broken: the canary fails and the group
	// halts; n2 and n3 are never started, however long we wait.
	f.git("v3")
	d, _ = f.step()
	expect(t, "v3 canary", d, []string{"n1"}, nil, nil, "canaries not yet healthy")
	f.set("n1", stateProvisioning, nil, "")
	f.step()
	f.set("n1", stateFailed, nil, "no disk matches /dev/nvme0n1")
	f.power("n1", "off") // its Micro-OS powers off after the failure
	d, g = f.step()
	why := "install failed: no disk matches /dev/nvme0n1"
	expect(t, "v3 fails", d, nil, nil, map[string]string{"n1": why}, "halted: n1: "+why)
	want := &Halt{Node: "n1", Why: why, Digest: "v3", At: f.now.Add(-time.Minute)}
	same(t, "halt", d.Halted, want)
	if got := Summary(d, g); got != "halted: n1: "+why {
		t.Errorf("Summary = %q", got)
	}
	for range 5 {
		f.now = f.now.Add(time.Hour)
		d, g = f.step()
		expect(t, "halted", d, nil, nil, nil, "halted: n1: "+why)
		same(t, "halt held", g.Halt, want)
	}
	if d.OutOfDate != 3 {
		t.Errorf("halted: %d out of date; want 3", d.OutOfDate)
	}

	// Git reverts to v2: the halt lifts; n1, whose last attempt failed,
	// is the only node out of date and the only one started.
	f.git("v2")
	d, g = f.step()
	expect(t, "revert", d, []string{"n1"}, nil, nil, "")
	same(t, "resumed", d.Resumed, "Git moved on: n1 now wants v2")
	if g.Halt != nil || d.OutOfDate != 1 || d.Done != 2 {
		t.Errorf("after the revert: halt %s, %d out of date, %d done; want none, 1, 2", show(g.Halt), d.OutOfDate, d.Done)
	}
	for _, name := range []string{"n2", "n3"} {
		if m := g.Marks[name]; !m.Done || m.Digest != "v2" || !m.Started.Before(t0.Add(10*time.Minute)) {
			t.Errorf("%s's mark = %s; want untouched since the v2 rollout", name, show(m))
		}
	}
	// Still "failed" from v3 until its BMC cycles it: not judged on that.
	f.power("n1", "on")
	d, _ = f.step()
	expect(t, "n1 not cycled yet", d, nil, nil, nil, "")
	f.set("n1", stateProvisioning, nil, "")
	f.step()
	f.set("n1", stateRunning, install("v2"), "")
	d, g = f.step()
	expect(t, "n1 back on v2", d, nil, []string{"n1"}, nil, "")
	if Summary(d, g) != "rolling: in sync (3 nodes)" || d.Done != 3 {
		t.Errorf("end: %q, %s", Summary(d, g), show(d))
	}
}

// power sets a node's power as its BMC says it.
func (f *fleet) power(name, state string) {
	for i := range f.nodes {
		if f.nodes[i].Name == name {
			f.nodes[i].Power = state
		}
	}
}
