package rollout

import (
	"fmt"
	"testing"

	"github.com/bootops/bootops/plan"
)

// BenchmarkStep10000 is one Step of a 10,000-node group, ordered by rack,
// right after Git changed a tenth of it: every node carries the Done mark
// of the previous rollout, and the step judges nothing, sorts the 1,000
// out-of-date nodes and starts as many as 10% allows (all of them). Each
// iteration starts from the same group; the reset is not timed.
func BenchmarkStep10000(b *testing.B) {
	const size = 10000
	nodes := make([]Node, size)
	before := make(map[string]*Mark, size)
	for i := range nodes {
		name := fmt.Sprintf("n%05d", i)
		old := fmt.Sprintf("%064x", i)
		want := old
		if i%10 == 0 {
			want = fmt.Sprintf("%064x", size+i)
		}
		nodes[i] = Node{Name: name, Labels: map[string]string{"rack": fmt.Sprintf("r%02d", i%40), "site": "a"},
			Want: plan.Install{Digest: want}, Have: &plan.Install{Digest: old},
			State: stateRunning, Since: at(-600), HasBMC: true, Power: "on"}
		before[name] = &Mark{Digest: old, Started: at(-900), Done: true}
	}
	pol := rolling("10%")
	pol.Order = []string{"rack"}
	g := &Group{Marks: make(map[string]*Mark, size)}
	for b.Loop() {
		b.StopTimer()
		for name, m := range before {
			g.Marks[name] = m
		}
		b.StartTimer()
		d, err := Step(t0, pol, nodes, g)
		if err != nil || len(d.Start) != size/10 || d.OutOfDate != size/10 {
			b.Fatalf("Step = %d started, %d out of date, %v", len(d.Start), d.OutOfDate, err)
		}
	}
}
