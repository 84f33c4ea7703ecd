package rollout

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/bootops/bootops/plan"
)

// Rule 3: a halt is lifted by Git only; pause and manual stop starts but
// not judging.
func TestStepHalt(t *testing.T) {
	broken := &Halt{Node: "a", Why: "install failed: boom", Digest: "v3", At: at(-5)}
	failedA := func(want string) Node {
		return with(up("a", "", want), func(n *Node) { n.State, n.Since, n.Error = stateFailed, at(-5), "boom" })
	}
	failedMark := &Mark{Digest: "v3", Started: at(-10), Failed: "install failed: boom"}
	tests := map[string]struct {
		pol      plan.Rollout
		nodes    []Node
		g        *Group
		want     Decision
		wantHalt *Halt
	}{
		"halted while Git wants the failed install": {
			pol:   rolling("1"),
			nodes: []Node{failedA("v3"), up("b", "v2", "v3")},
			g:     &Group{Halt: broken, Marks: map[string]*Mark{"a": failedMark}},
			want: Decision{Strategy: "rolling", Nodes: 2, OutOfDate: 2,
				Waiting: "halted: a: install failed: boom"},
			wantHalt: broken,
		},
		"a fix lifts the halt": {
			pol:   rolling("1"),
			nodes: []Node{failedA("v4"), up("b", "v2", "v4")},
			g:     &Group{Halt: broken, Marks: map[string]*Mark{"a": failedMark}},
			want: Decision{Strategy: "rolling", Nodes: 2, OutOfDate: 2, InProgress: 1,
				Resumed: "Git moved on: a now wants v4", Start: []string{"a"},
				Waiting: "maxUnavailable reached: 1 of 1 down"},
		},
		"the halted node left the group": {
			pol:   rolling("1"),
			nodes: []Node{up("b", "v2", "v3")},
			g:     &Group{Halt: broken, Marks: map[string]*Mark{"a": failedMark}},
			want: Decision{Strategy: "rolling", Nodes: 1, OutOfDate: 1, InProgress: 1,
				Resumed: "Git moved on: a left the group", Start: []string{"b"}},
		},
		"pause does not lift a halt": {
			pol:      with2(rolling("1"), func(p *plan.Rollout) { p.Pause = true }),
			nodes:    []Node{failedA("v3"), up("b", "v2", "v3")},
			g:        &Group{Halt: broken, Marks: map[string]*Mark{"a": failedMark}},
			want:     Decision{Strategy: "rolling", Nodes: 2, OutOfDate: 2, Waiting: "halted: a: install failed: boom"},
			wantHalt: broken,
		},
		"paused": {
			pol:   with2(rolling("1"), func(p *plan.Rollout) { p.Pause = true }),
			nodes: []Node{up("a", "v2", "v3")},
			g:     &Group{},
			want:  Decision{Strategy: "rolling", Nodes: 1, OutOfDate: 1, Waiting: "paused"},
		},
		"manual starts nothing": {
			pol:   plan.Rollout{Strategy: plan.RolloutManual},
			nodes: []Node{up("a", "v2", "v3")},
			g:     &Group{},
			want:  Decision{Strategy: "manual", Nodes: 1, OutOfDate: 1, Waiting: "manual: raise reprovision to reinstall"},
		},
		"an empty strategy is manual": {
			nodes: []Node{up("a", "v2", "v3")},
			g:     &Group{},
			want:  Decision{Strategy: "manual", Nodes: 1, OutOfDate: 1, Waiting: "manual: raise reprovision to reinstall"},
		},
		"manual still judges": {
			pol: plan.Rollout{Strategy: plan.RolloutManual},
			nodes: []Node{with(up("a", "v3", "v3"), func(n *Node) { n.Since = at(-1) }),
				with(up("b", "", "v3"), func(n *Node) { n.State, n.Since, n.Error = stateFailed, at(-1), "boom" }),
				up("c", "v2", "v3")},
			g: marks(map[string]*Mark{"a": started("v3", -10), "b": started("v3", -10)}),
			want: Decision{Strategy: "manual", Nodes: 3, OutOfDate: 2, Done: 1,
				Healthy: []string{"a"}, Failed: map[string]string{"b": "install failed: boom"},
				Halted:  &Halt{Node: "b", Why: "install failed: boom", Digest: "v3", At: t0},
				Waiting: "manual: raise reprovision to reinstall"},
			wantHalt: &Halt{Node: "b", Why: "install failed: boom", Digest: "v3", At: t0},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			d := mustStep(t, t0, tt.pol, tt.nodes, tt.g)
			same(t, "decision", d, tt.want)
			same(t, "halt", tt.g.Halt, tt.wantHalt)
		})
	}
}

// with2 is p changed by f.
func with2(p plan.Rollout, f func(*plan.Rollout)) plan.Rollout { f(&p); return p }

// Rule 4: a finished mark for an old install is replaced when the node
// starts again; a mark in progress for an old install is not started
// twice.
func TestStepOldMarks(t *testing.T) {
	g := marks(map[string]*Mark{
		"a": {Digest: "v2", Started: at(-100), Done: true, Canary: true},
		"b": started("v2", -5),
	})
	nodes := []Node{up("a", "v2", "v3"), with(up("b", "", "v3"), func(n *Node) { n.State, n.Since = stateProvisioning, at(-4) })}
	d := mustStep(t, t0, rolling("2"), nodes, g)
	same(t, "start", d.Start, []string{"a"})
	same(t, "a's mark", g.Marks["a"], &Mark{Digest: "v3", Started: t0})
	same(t, "b's mark", g.Marks["b"], started("v2", -5))
	if d.InProgress != 2 || d.OutOfDate != 2 {
		t.Errorf("in progress %d, out of date %d; want 2, 2", d.InProgress, d.OutOfDate)
	}
}

// Rule 5: how many start at once.
func TestStepCapacity(t *testing.T) {
	three := []Node{up("a", "v1", "v2"), up("b", "v1", "v2"), up("c", "v1", "v2")}
	reprovisioning := with(up("z", "v2", "v2"), func(n *Node) { n.State = stateProvisioning })
	tests := map[string]struct {
		max     string
		nodes   []Node
		g       *Group
		start   []string
		waiting string
	}{
		"one":                     {max: "1", nodes: three, start: []string{"a"}, waiting: "maxUnavailable reached: 1 of 1 down"},
		"two":                     {max: "2", nodes: three, start: []string{"a", "b"}, waiting: "maxUnavailable reached: 2 of 2 down"},
		"more than needed":        {max: "5", nodes: three, start: []string{"a", "b", "c"}},
		"a share":                 {max: "67%", nodes: three, start: []string{"a", "b"}, waiting: "maxUnavailable reached: 2 of 2 down"},
		"a small share is one":    {max: "10%", nodes: three, start: []string{"a"}, waiting: "maxUnavailable reached: 1 of 1 down"},
		"empty takes the default": {max: "", nodes: three, start: []string{"a"}, waiting: "maxUnavailable reached: 1 of 1 down"},
		"a mark in progress uses the budget": {max: "2", nodes: three,
			g:     marks(map[string]*Mark{"a": started("v2", -1)}),
			start: []string{"b"}, waiting: "maxUnavailable reached: 2 of 2 down"},
		"full": {max: "1", nodes: three,
			g: marks(map[string]*Mark{"a": started("v2", -1)}), waiting: "maxUnavailable reached: 1 of 1 down"},
		"a node reinstalling on its own uses the budget": {max: "2", nodes: append(slices.Clone(three), reprovisioning),
			start: []string{"a"}, waiting: "maxUnavailable reached: 2 of 2 down"},
		"so does one the rollout finished with": {max: "2", nodes: append(slices.Clone(three), reprovisioning),
			g:     marks(map[string]*Mark{"z": {Digest: "v2", Done: true}}),
			start: []string{"a"}, waiting: "maxUnavailable reached: 2 of 2 down"},
		"booting counts too": {max: "1", nodes: append(slices.Clone(three), with(reprovisioning, func(n *Node) { n.State = stateBooting })),
			waiting: "maxUnavailable reached: 1 of 1 down"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := tt.g
			if g == nil {
				g = &Group{}
			}
			d := mustStep(t, t0, rolling(tt.max), tt.nodes, g)
			same(t, "start", d.Start, tt.start)
			same(t, "waiting", d.Waiting, tt.waiting)
		})
	}
}

// Rule 6: order and canaries.
func TestStepOrderAndCanary(t *testing.T) {
	racked := []Node{rack(up("z", "v1", "v2"), "r1"), rack(up("a", "v1", "v2"), "r2"),
		up("m", "v1", "v2"), rack(up("b", "v1", "v2"), "r1")}
	three := []Node{up("c", "v1", "v2"), up("a", "v1", "v2"), up("b", "v1", "v2")}
	noBMC := func(n Node) Node { return with(n, func(n *Node) { n.HasBMC, n.Power = false, "" }) }
	tests := map[string]struct {
		max     string
		canary  int
		order   []string
		nodes   []Node
		g       *Group
		start   []string
		canarys []string // marks with Canary set after the step
		waiting string
		skipped map[string]string
	}{
		"by name":               {max: "10", nodes: racked, start: []string{"a", "b", "m", "z"}},
		"by rack, missing last": {max: "10", order: []string{"rack"}, nodes: racked, start: []string{"b", "z", "a", "m"}},
		"by two labels": {max: "10", order: []string{"row", "rack"}, nodes: []Node{
			with(rack(up("a", "v1", "v2"), "r1"), func(n *Node) { n.Labels["row"] = "2" }),
			with(rack(up("b", "v1", "v2"), "r2"), func(n *Node) { n.Labels["row"] = "1" }),
			with(rack(up("c", "v1", "v2"), "r1"), func(n *Node) { n.Labels["row"] = "1" }),
		}, start: []string{"c", "b", "a"}},
		"one canary first": {max: "10", canary: 1, nodes: three,
			start: []string{"a"}, canarys: []string{"a"}, waiting: "canaries not yet healthy"},
		"canaries within capacity": {max: "1", canary: 2, nodes: three,
			start: []string{"a"}, canarys: []string{"a"}, waiting: "maxUnavailable reached: 1 of 1 down"},
		"a skipped canary is replaced": {max: "10", canary: 1, nodes: []Node{noBMC(up("a", "v1", "v2")), up("b", "v1", "v2"), up("c", "v1", "v2")},
			start: []string{"b"}, canarys: []string{"b"}, waiting: "canaries not yet healthy",
			skipped: map[string]string{"a": "no BMC: raise reprovision to reinstall it"}},
		"canary in progress": {max: "10", canary: 1, nodes: three,
			g:       marks(map[string]*Mark{"a": {Digest: "v2", Started: at(-1), Canary: true}}),
			canarys: []string{"a"}, waiting: "canaries not yet healthy"},
		"second canary once capacity frees": {max: "1", canary: 2, nodes: []Node{up("a", "v2", "v2"), up("b", "v1", "v2"), up("c", "v1", "v2")},
			g:     marks(map[string]*Mark{"a": {Digest: "v2", Started: at(-10), Canary: true, Done: true}}),
			start: []string{"b"}, canarys: []string{"a", "b"}, waiting: "canaries not yet healthy"},
		"canaries healthy, the rest follow": {max: "10", canary: 1, nodes: []Node{up("a", "v2", "v2"), up("b", "v1", "v2"), up("c", "v1", "v2")},
			g:     marks(map[string]*Mark{"a": {Digest: "v2", Started: at(-10), Canary: true, Done: true}}),
			start: []string{"b", "c"}, canarys: []string{"a"}},
		"a canary for an old install does not count": {max: "10", canary: 1, nodes: []Node{up("a", "v2", "v3"), up("b", "v2", "v3")},
			g:     marks(map[string]*Mark{"a": {Digest: "v2", Started: at(-10), Canary: true, Done: true}}),
			start: []string{"a"}, canarys: []string{"a"}, waiting: "canaries not yet healthy"},
		"a failed canary holds the others": {max: "10", canary: 1, nodes: []Node{
			with(up("a", "v2", "v2"), func(n *Node) { n.CloudInit = "error: x" }), up("b", "v1", "v2")},
			g:       marks(map[string]*Mark{"a": {Digest: "v2", Started: at(-10), Canary: true, Failed: "cloud-init: error: x"}}),
			canarys: []string{"a"}, waiting: "canaries not yet healthy"},
		"in sync clears the canary flags": {max: "10", canary: 1, nodes: []Node{up("a", "v2", "v2"), up("b", "v2", "v2")},
			g: marks(map[string]*Mark{"a": {Digest: "v2", Started: at(-10), Canary: true, Done: true}})},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := tt.g
			if g == nil {
				g = &Group{}
			}
			pol := rolling(tt.max)
			pol.Canary, pol.Order = tt.canary, tt.order
			d := mustStep(t, t0, pol, tt.nodes, g)
			same(t, "start", d.Start, tt.start)
			same(t, "waiting", d.Waiting, tt.waiting)
			same(t, "skipped", d.Skipped, tt.skipped)
			var canarys []string
			for name, m := range g.Marks {
				if m.Canary {
					canarys = append(canarys, name)
				}
			}
			slices.Sort(canarys)
			same(t, "canaries", canarys, tt.canarys)
		})
	}
}

// Rule 7: which nodes may be started through their BMC.
func TestStepEligibility(t *testing.T) {
	base := up("a", "v1", "v2")
	tests := map[string]struct {
		node Node
		mark *Mark
		skip string // "" when started
	}{
		"running":         {node: base},
		"power unknown":   {node: with(base, func(n *Node) { n.Power = "unknown" })},
		"provisioned":     {node: with(base, func(n *Node) { n.State = "provisioned" }), skip: "not running: provisioned"},
		"held":            {node: with(base, func(n *Node) { n.State = "held" }), skip: "not running: held"},
		"no state":        {node: with(base, func(n *Node) { n.State = "" }), skip: "not running: unknown"},
		"failed":          {node: with(base, func(n *Node) { n.State = stateFailed }), skip: "not running: failed"},
		"no BMC":          {node: with(base, func(n *Node) { n.HasBMC, n.Power = false, "" }), skip: "no BMC: raise reprovision to reinstall it"},
		"BMC not polled":  {node: with(base, func(n *Node) { n.Power = "" }), skip: "BMC not yet polled"},
		"powered off":     {node: with(base, func(n *Node) { n.Power = "off" }), skip: "powered off"},
		"BMC unreachable": {node: with(base, func(n *Node) { n.Power, n.PowerProblem = "unreachable", "dial tcp 10.0.0.9:623: i/o timeout" }), skip: "BMC unreachable: dial tcp 10.0.0.9:623: i/o timeout"},
		"failed by the rollout, Git moved on": {
			node: with(up("a", "", "v2"), func(n *Node) { n.State = stateFailed }),
			mark: &Mark{Digest: "v1", Failed: "install failed: x"}},
		"failed by the rollout and off (its Micro-OS powered off), Git moved on": {
			node: with(up("a", "", "v2"), func(n *Node) { n.State, n.Power = stateFailed, "off" }),
			mark: &Mark{Digest: "v1", Failed: "install failed: x"}},
		"failed by the rollout, Git did not move": {
			node: with(up("a", "", "v2"), func(n *Node) { n.State = stateFailed }),
			mark: &Mark{Digest: "v2", Failed: "install failed: x"},
			skip: "install of v2 failed: install failed: x; waiting for Git to move on"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := &Group{Marks: map[string]*Mark{}}
			if tt.mark != nil {
				g.Marks["a"] = tt.mark
			}
			nodes := []Node{tt.node, up("b", "v1", "v2")}
			d := mustStep(t, t0, rolling("1"), nodes, g)
			if tt.skip == "" {
				same(t, "start", d.Start, []string{"a"})
				same(t, "skipped", d.Skipped, map[string]string(nil))
				return
			}
			// The next node takes the turn; the skipped one is not done.
			same(t, "start", d.Start, []string{"b"})
			same(t, "skipped", d.Skipped, map[string]string{"a": tt.skip})
			if d.Done != 0 || d.OutOfDate != 2 {
				t.Errorf("done %d, out of date %d; want 0, 2", d.Done, d.OutOfDate)
			}
		})
	}
}

// Rule 8: starts only in the window; judging goes on outside it.
func TestStepWindow(t *testing.T) {
	pol := rolling("1")
	pol.Window = &plan.Window{Days: []string{"mon"}, Start: "02:00", End: "04:00"}
	nodes := []Node{
		with(up("a", "v2", "v2"), func(n *Node) { n.Since = at(-1) }),
		up("b", "v1", "v2"),
	}
	tests := map[string]struct {
		now     int // minutes from Monday 03:00
		start   []string
		waiting string
	}{
		"inside":            {now: 0, start: []string{"b"}},
		"last minute":       {now: 59, start: []string{"b"}},
		"at the end":        {now: 60, waiting: "outside the window"},
		"before the start":  {now: -61, waiting: "outside the window"},
		"the next day":      {now: 24 * 60, waiting: "outside the window"},
		"a week later, in ": {now: 7 * 24 * 60, start: []string{"b"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := marks(map[string]*Mark{"a": started("v2", -20)})
			d := mustStep(t, at(tt.now), pol, nodes, g)
			same(t, "healthy", d.Healthy, []string{"a"})
			same(t, "start", d.Start, tt.start)
			same(t, "waiting", d.Waiting, tt.waiting)
		})
	}
}

// Rule 9: a second Step with the persisted group starts nothing again,
// and the order the daemon lists the nodes in does not matter.
func TestStepTwice(t *testing.T) {
	pol := rolling("2")
	pol.Canary = 1
	nodes := []Node{up("c", "v1", "v2"), up("a", "v1", "v2"), up("b", "v1", "v2")}
	g := &Group{}
	first := mustStep(t, t0, pol, nodes, g)
	same(t, "first start", first.Start, []string{"a"})

	saved, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var back Group
	if err := json.Unmarshal(saved, &back); err != nil {
		t.Fatal(err)
	}
	second := mustStep(t, t0, pol, nodes, &back)
	same(t, "second start", second.Start, []string(nil))
	same(t, "second waiting", second.Waiting, "canaries not yet healthy")
	again, _ := json.Marshal(&back)
	same(t, "group after the second step", string(again), string(saved))

	reversed := slices.Clone(nodes)
	slices.Reverse(reversed)
	g2 := &Group{}
	same(t, "reversed input", mustStep(t, t0, pol, reversed, g2), first)
	same(t, "reversed group", g2, g)
}

// A policy the compiler would refuse, or a name twice, is an error that
// leaves the group as it was.
func TestStepErrors(t *testing.T) {
	nodes := []Node{up("a", "v1", "v2")}
	tests := map[string]struct {
		pol    plan.Rollout
		nodes  []Node
		policy bool // the error is an ErrPolicy
	}{
		"strategy":       {pol: plan.Rollout{Strategy: "yolo"}, nodes: nodes, policy: true},
		"maxUnavailable": {pol: rolling("0%"), nodes: nodes, policy: true},
		"healthTimeout":  {pol: with2(rolling("1"), func(p *plan.Rollout) { p.HealthTimeout = "soon" }), nodes: nodes, policy: true},
		"zero timeout":   {pol: with2(rolling("1"), func(p *plan.Rollout) { p.HealthTimeout = "0s" }), nodes: nodes, policy: true},
		"canary":         {pol: with2(rolling("1"), func(p *plan.Rollout) { p.Canary = -1 }), nodes: nodes, policy: true},
		"window": {pol: with2(rolling("1"), func(p *plan.Rollout) { p.Window = &plan.Window{Start: "late", End: "06:00"} }),
			nodes: nodes, policy: true},
		"a node twice": {pol: rolling("1"), nodes: []Node{up("a", "v1", "v2"), up("a", "v1", "v2")}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := marks(map[string]*Mark{"a": started("v2", -60), "gone": started("v2", -1)})
			before := show(g)
			_, err := Step(t0, tt.pol, tt.nodes, g)
			if err == nil || errors.Is(err, ErrPolicy) != tt.policy {
				t.Fatalf("Step = %v; want an error (ErrPolicy: %v)", err, tt.policy)
			}
			same(t, "group", show(g), before)
		})
	}
	if _, err := Step(t0, rolling("1"), nodes, nil); err == nil {
		t.Error("Step with a nil group: want an error")
	}
}

// Marks of nodes that left the group are forgotten.
func TestStepPrunes(t *testing.T) {
	g := marks(map[string]*Mark{"gone": started("v2", -1), "a": {Digest: "v2", Done: true}})
	mustStep(t, t0, rolling("1"), []Node{up("a", "v2", "v2")}, g)
	same(t, "marks", g.Marks, map[string]*Mark{"a": {Digest: "v2", Done: true}})
}

func TestSummary(t *testing.T) {
	tests := map[string]struct {
		d    Decision
		g    *Group
		want string
	}{
		"in sync": {d: Decision{Strategy: "rolling", Nodes: 10},
			want: "rolling: in sync (10 nodes)"},
		"one node": {d: Decision{Strategy: "manual", Nodes: 1},
			want: "manual: in sync (1 node)"},
		"waiting": {d: Decision{Strategy: "rolling", Nodes: 10, OutOfDate: 2, InProgress: 1, Waiting: "canaries not yet healthy"},
			want: "rolling: 2 of 10 out of date, 1 in progress; waiting: canaries not yet healthy"},
		"starting": {d: Decision{Strategy: "rolling", Nodes: 10, OutOfDate: 2, InProgress: 2, Start: []string{"a", "b"}},
			want: "rolling: 2 of 10 out of date, 2 in progress; starting a, b"},
		"starting many": {d: Decision{Strategy: "rolling", Nodes: 10, OutOfDate: 5, InProgress: 4, Start: []string{"a", "b", "c", "d"},
			Skipped: map[string]string{"e": "powered off"}},
			want: "rolling: 5 of 10 out of date, 4 in progress; starting 4 nodes; 1 skipped"},
		"resumed": {d: Decision{Strategy: "rolling", Nodes: 3, OutOfDate: 1, InProgress: 1, Resumed: "Git moved on: a now wants v2", Start: []string{"a"}},
			want: "rolling: 1 of 3 out of date, 1 in progress; resumed: Git moved on: a now wants v2; starting a"},
		"halted": {d: Decision{Strategy: "rolling", Nodes: 10, OutOfDate: 10},
			g:    &Group{Halt: &Halt{Node: "r1-03", Why: "install failed: no disk"}},
			want: "halted: r1-03: install failed: no disk"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Summary(tt.d, tt.g); got != tt.want {
				t.Errorf("Summary = %q; want %q", got, tt.want)
			}
		})
	}
}

// Every node skipped: nothing starts, nothing waits, Start stays nil.
func TestStepAllSkipped(t *testing.T) {
	nodes := []Node{with(up("a", "v1", "v2"), func(n *Node) { n.Power = "off" })}
	d := mustStep(t, t0, rolling("1"), nodes, &Group{})
	same(t, "decision", d, Decision{Strategy: "rolling", Nodes: 1, OutOfDate: 1,
		Skipped: map[string]string{"a": "powered off"}})
}
