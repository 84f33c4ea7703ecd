package rollout

import "testing"

// Rule 1: what counts as out of date.
func TestOutOfDate(t *testing.T) {
	tests := map[string]struct {
		node Node
		mark *Mark
		want bool
		why  string
	}{
		"in sync":            {node: up("a", "v2", "v2")},
		"in sync, done mark": {node: up("a", "v2", "v2"), mark: &Mark{Digest: "v2", Done: true}},
		"Git moved on":       {node: up("a", "v1", "v2"), want: true, why: "install v1→v2"},
		"never installed by bootops": {node: up("a", "", "v2"),
			why: "install unknown: never reported one"},
		"unknown after a finished mark": {node: up("a", "", "v2"), mark: &Mark{Digest: "v2", Done: true},
			why: "install unknown: never reported one"},
		"unknown after a failed attempt": {node: up("a", "", "v2"), mark: &Mark{Digest: "v2", Failed: "install failed: x"},
			want: true, why: "install of v2 failed: install failed: x"},
		"in progress": {node: up("a", "v1", "v2"), mark: started("v2", 0),
			want: true, why: "installing v2"},
		"in progress, install unknown": {node: up("a", "", "v2"), mark: started("v2", 0),
			want: true, why: "installing v2"},
		// A revert: Have is what Git wants again, but the last attempt
		// (for another install) failed, so the disk is suspect.
		"reverted after a failure": {node: up("a", "v2", "v2"), mark: &Mark{Digest: "v3", Failed: "install failed: x"},
			want: true, why: "install of v3 failed: install failed: x"},
		// Installed fine, cloud-init failed: the node has what Git wants.
		"failed for what it has": {node: up("a", "v3", "v3"), mark: &Mark{Digest: "v3", Failed: "cloud-init: error: x"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := &Group{Marks: map[string]*Mark{}}
			if tt.mark != nil {
				g.Marks["a"] = tt.mark
			}
			got, why := OutOfDate(tt.node, g)
			if got != tt.want || why != tt.why {
				t.Errorf("OutOfDate = %v, %q; want %v, %q", got, why, tt.want, tt.why)
			}
			if fast := outOfDate(&tt.node, tt.mark); fast != got {
				t.Errorf("outOfDate = %v, OutOfDate = %v", fast, got)
			}
		})
	}
	if got, _ := OutOfDate(up("a", "v1", "v2"), nil); !got {
		t.Error("OutOfDate with a nil group: want out of date")
	}
}

// Rule 1 in Step: a node whose install is unknown is not started unless
// the rollout's own attempt left it so.
func TestStepUnknownInstall(t *testing.T) {
	nodes := []Node{up("a", "", "v2"), up("b", "v2", "v2")}
	g := &Group{}
	d := mustStep(t, t0, rolling("2"), nodes, g)
	same(t, "decision", d, Decision{Strategy: "rolling", Nodes: 2})
}
