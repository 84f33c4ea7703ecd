package rollout

import (
	"testing"

	"time"
)

// Rule 2: how a started node is judged. The mark for v2 was started at
// minute 0; the step runs at minute 10 unless said otherwise.
func TestStepJudge(t *testing.T) {
	after := at(5) // the node reached its state after the start
	tests := map[string]struct {
		node      Node
		mark      *Mark
		cloudInit bool
		now       int // minutes
		healthy   bool
		failed    string
		halt      bool
	}{
		"running with the new install": {
			node: with(up("a", "v2", "v2"), func(n *Node) { n.Since = after }), healthy: true},
		"still running the old install": {
			node: up("a", "v1", "v2")},
		"reinstalling": {
			node: with(up("a", "", "v2"), func(n *Node) { n.State, n.Since = stateProvisioning, after })},
		"running with it since before the start": {
			node: up("a", "v2", "v2")},
		"unknown since": {
			node: with(up("a", "v2", "v2"), func(n *Node) { n.Since = time.Time{} }), healthy: true},
		"cloud-init not reported": {
			node: with(up("a", "v2", "v2"), func(n *Node) { n.Since = after }), cloudInit: true},
		"cloud-init done": {
			node: with(up("a", "v2", "v2"), func(n *Node) { n.Since, n.CloudInit = after, "done" }), cloudInit: true, healthy: true},
		"cloud-init ignored when the policy does not ask": {
			node: with(up("a", "v2", "v2"), func(n *Node) { n.Since, n.CloudInit = after, "error: x" }), healthy: true},
		"cloud-init error": {
			node:      with(up("a", "v2", "v2"), func(n *Node) { n.Since, n.CloudInit = after, "error: runcmd exited 1" }),
			cloudInit: true, failed: "cloud-init: error: runcmd exited 1", halt: true},
		"cloud-init error of the old install": {
			node: with(up("a", "v1", "v2"), func(n *Node) { n.CloudInit = "error: old" }), cloudInit: true},
		"install failed": {
			node:   with(up("a", "", "v2"), func(n *Node) { n.State, n.Since, n.Error = stateFailed, after, "no disk matches /dev/sda" }),
			failed: "install failed: no disk matches /dev/sda", halt: true},
		"install failed without a message": {
			node:   with(up("a", "", "v2"), func(n *Node) { n.State, n.Since = stateFailed, after }),
			failed: "install failed", halt: true},
		"failed before the start": {
			node: with(up("a", "", "v2"), func(n *Node) { n.State = stateFailed })},
		"at the timeout": {
			node: with(up("a", "", "v2"), func(n *Node) { n.State, n.Since = stateBooting, after }), now: 30},
		"past the timeout": {
			node: with(up("a", "", "v2"), func(n *Node) { n.State, n.Since = stateBooting, after }), now: 31,
			failed: "not running with the new install after 30m (booting since " + after.UTC().Format("15:04:05Z") + ")", halt: true},
		"past the timeout, never booted after the cycle": {
			node: with(up("a", "v1", "v2"), func(n *Node) { n.State = stateRunning }), now: 31,
			failed: "cycled at " + at(0).UTC().Format("2006-01-02 15:04:05Z") + ", no network boot seen since: not running with the new install after 30m", halt: true},
		"healthy past the timeout": {
			node: with(up("a", "v2", "v2"), func(n *Node) { n.Since = after }), now: 90, healthy: true},
		// Rule 4: Git moved from v2 to v3 while a was installing v2.
		"Git moved on, healthy with the mark's install": {
			node: with(up("a", "v2", "v3"), func(n *Node) { n.Since = after }), healthy: true},
		"Git moved on, healthy with Git's install": {
			node: with(up("a", "v3", "v3"), func(n *Node) { n.Since = after }), healthy: true},
		"Git moved on, failed: recorded, no halt": {
			node:   with(up("a", "", "v3"), func(n *Node) { n.State, n.Since, n.Error = stateFailed, after, "x" }),
			failed: "install failed: x"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			pol := rolling("1")
			pol.CloudInit = tt.cloudInit
			pol.Pause = true // judging goes on while nothing starts
			g := marks(map[string]*Mark{"a": started("v2", 0)})
			now := tt.now
			if now == 0 {
				now = 10
			}
			d := mustStep(t, at(now), pol, []Node{tt.node}, g)
			m := g.Marks["a"]
			switch {
			case tt.healthy:
				same(t, "healthy", d.Healthy, []string{"a"})
				if !m.Done || m.Failed != "" || m.Digest != tt.node.Have.Digest {
					t.Errorf("mark = %s; want done with %s", show(m), tt.node.Have.Digest)
				}
			case tt.failed != "":
				same(t, "failed", d.Failed, map[string]string{"a": tt.failed})
				if m.Failed != tt.failed || m.Done {
					t.Errorf("mark = %s; want failed", show(m))
				}
			default:
				if d.Healthy != nil || d.Failed != nil || m.finished() {
					t.Errorf("decision %s, mark %s; want still in progress", show(d), show(m))
				}
			}
			var want *Halt
			if tt.halt {
				want = &Halt{Node: "a", Why: tt.failed, Digest: "v2", At: at(now)}
			}
			same(t, "g.Halt", g.Halt, want)
			same(t, "d.Halted", d.Halted, want)
		})
	}
}

// Rule 2: the first failure in rollout order holds the halt; a failure
// while halted is recorded but does not replace it.
func TestStepJudgeHaltHeldByFirst(t *testing.T) {
	fail := func(n Node) Node {
		return with(n, func(n *Node) { n.State, n.Since, n.Error, n.Have = stateFailed, at(5), "boom", nil })
	}
	nodes := []Node{fail(up("b", "v1", "v2")), fail(up("a", "v1", "v2"))}
	g := marks(map[string]*Mark{"a": started("v2", 0), "b": started("v2", 0)})
	d := mustStep(t, at(10), rolling("2"), nodes, g)
	want := &Halt{Node: "a", Why: "install failed: boom", Digest: "v2", At: at(10)}
	same(t, "halt", g.Halt, want)
	same(t, "failed", d.Failed, map[string]string{"a": "install failed: boom", "b": "install failed: boom"})

	g.Marks["c"] = started("v2", 0)
	nodes = append(nodes, fail(up("c", "v1", "v2")))
	d = mustStep(t, at(11), rolling("2"), nodes, g)
	same(t, "halt after a second failure", g.Halt, want)
	if d.Halted != nil {
		t.Errorf("Halted = %s; want nil: the group was already halted", show(d.Halted))
	}
}
