package rollout

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
)

// t0 is the tests' fixed clock: Monday 2 March 2026, 03:00 UTC.
var t0 = time.Date(2026, time.March, 2, 3, 0, 0, 0, time.UTC)

// at is t0 plus some minutes.
func at(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }

func install(digest string) *plan.Install { return &plan.Install{Digest: digest} }

// up is a healthy node with a BMC that installed have and is asked for
// want; it has been running since an hour before t0.
func up(name, have, want string) Node {
	n := Node{Name: name, Want: plan.Install{Digest: want}, State: stateRunning,
		Since: at(-60), HasBMC: true, Power: "on"}
	if have != "" {
		n.Have = install(have)
	}
	return n
}

// with is n changed by f, for table cases that differ from up in one way.
func with(n Node, f func(*Node)) Node { f(&n); return n }

// rack is n with a rack label.
func rack(n Node, r string) Node {
	return with(n, func(n *Node) { n.Labels = map[string]string{"rack": r} })
}

// rolling is a rolling policy with no canaries and the default timeout.
func rolling(maxUnavailable string) plan.Rollout {
	return plan.Rollout{Strategy: plan.RolloutRolling, MaxUnavailable: maxUnavailable, HealthTimeout: "30m"}
}

// started is a mark in progress for digest, started at minute min.
func started(digest string, min int) *Mark { return &Mark{Digest: digest, Started: at(min)} }

// marks is a Group holding ms, by node name.
func marks(ms map[string]*Mark) *Group { return &Group{Marks: ms} }

// show prints a value as JSON, so pointers show what they point to.
func show(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// same fails t when got and want differ.
func same(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\ngot  %s\nwant %s", what, show(got), show(want))
	}
}

// mustStep is Step that fails t on an error.
func mustStep(t *testing.T, now time.Time, pol plan.Rollout, nodes []Node, g *Group) Decision {
	t.Helper()
	d, err := Step(now, pol, nodes, g)
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	return d
}
