package rollout

import (
	"errors"
	"fmt"
	"time"

	"github.com/bootops/bootops/plan"
)

// Node is one node of a group (one site, one profile) as the daemon sees
// it now.
type Node struct {
	// Name is unique in the group; marks are kept by it.
	Name string
	// Labels are the node's labels; the policy's Order sorts by them.
	Labels map[string]string
	// Want is the install Git asks for now.
	Want plan.Install
	// Have is the install the node last finished; nil when unknown (never
	// installed, or an install began and did not finish).
	Have *plan.Install
	// State is the boot plane's state: "running", "provisioned",
	// "provisioning", "booting", "failed", "registered", "held", ...
	State string
	// Since is when the node entered State. It tells a state the node
	// reached after the rollout started it from one left over from before
	// (a node restarted from "failed" is still "failed" until it boots).
	// Zero means unknown: the state is then taken as current.
	Since time.Time
	// HasBMC: the rollout can only reinstall a node it can power-cycle.
	HasBMC bool
	// Power is what the BMC last said: "on", "off", "unreachable",
	// "unknown", or "" when it has not been polled (or there is no BMC).
	Power string
	// PowerProblem is why the BMC is unreachable.
	PowerProblem string
	// CloudInit is the installed OS's report: "" (none), "done", or
	// "error: <why>". It is read only once Have is the started install.
	CloudInit string
	// Error is the message of the event that put the node in "failed".
	Error string
}

// Group is the durable state of one group's rollout. The daemon stores it
// (as JSON) and hands it back to the next Step unchanged.
type Group struct {
	// Halt, when set, stops every new start until Git moves on.
	Halt *Halt `json:"halt,omitempty"`
	// Marks are the nodes the rollout started, by name.
	Marks map[string]*Mark `json:"marks,omitempty"`
}

// Mark records that the rollout started a node, and how that ended.
type Mark struct {
	// Digest is the install the node was started for.
	Digest  string    `json:"digest"`
	Started time.Time `json:"started"`
	// Canary marks a node started ahead of the others. The flags are
	// cleared once the group is in sync, so the next change gets canaries
	// of its own.
	Canary bool `json:"canary,omitempty"`
	// Done: the node was healthy with Digest.
	Done bool `json:"done,omitempty"`
	// Failed is why the node failed; empty if it did not.
	Failed string `json:"failed,omitempty"`
}

// finished says whether the mark has been judged.
func (m *Mark) finished() bool { return m.Done || m.Failed != "" }

// inProgress says whether m is a started node not yet judged.
func inProgress(m *Mark) bool { return m != nil && !m.finished() }

// Halt is a failed node that stopped the group's rollout.
type Halt struct {
	Node string `json:"node"`
	Why  string `json:"why"`
	// Digest is the install that failed; the halt lasts until Git wants
	// something else for Node.
	Digest string    `json:"digest"`
	At     time.Time `json:"at"`
}

// Decision is what one Step decided, for the daemon to act on and report.
type Decision struct {
	// Strategy is the policy's strategy ("manual" when it was empty).
	Strategy string
	// Start are the nodes to reinstall now, in order. Step has already
	// marked them in the Group.
	Start []string
	// Healthy are the nodes that became healthy in this step.
	Healthy []string
	// Failed are the nodes that failed in this step, and why.
	Failed map[string]string
	// Halted is set when this step halted the group.
	Halted *Halt
	// Resumed says why a halt was lifted in this step, if one was.
	Resumed string
	// Skipped are out-of-date nodes passed over at their turn, and why.
	Skipped map[string]string
	// Waiting is why nothing more starts now while nodes are still out of
	// date ("paused", "outside the window", "canaries not yet healthy",
	// ...); empty when nothing waits or every remaining node was skipped.
	Waiting string
	// Nodes is the size of the group; OutOfDate, InProgress (started and
	// not yet judged) and Done (healthy with what Git wants) count its
	// nodes after this step.
	Nodes, OutOfDate, InProgress, Done int
}

// Boot plane states the planner reads.
const (
	stateRunning      = "running"
	stateFailed       = "failed"
	stateBooting      = "booting"
	stateProvisioning = "provisioning"
)

// Step judges the group's started nodes, then picks the nodes to start
// now, marking them in g. It is deterministic: the same (now, pol, nodes,
// g) give the same Decision and the same g, and a second call with the g
// the first one left starts nothing the first did. The order of nodes does
// not matter. On an error (a policy the compiler would have refused, a
// name twice) g is left as it was.
func Step(now time.Time, pol plan.Rollout, nodes []Node, g *Group) (Decision, error) {
	if g == nil {
		return Decision{}, errors.New("rollout: step: nil group")
	}
	p, err := compile(now, pol, len(nodes))
	if err != nil {
		return Decision{}, err
	}
	byName := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if _, dup := byName[n.Name]; dup {
			return Decision{}, fmt.Errorf("rollout: step: node %q is in the group twice", n.Name)
		}
		byName[n.Name] = i
	}
	if g.Marks == nil {
		g.Marks = map[string]*Mark{}
	}
	s := &step{now: now, pol: p, nodes: nodes, byName: byName, g: g,
		marks: make([]*Mark, len(nodes)),
		d:     Decision{Strategy: p.Strategy, Nodes: len(nodes)}}
	s.prune()
	s.lift()
	s.judge()
	s.plan()
	s.count()
	return s.d, nil
}

// step is one Step's working state.
type step struct {
	now    time.Time
	pol    policy
	nodes  []Node
	byName map[string]int
	g      *Group
	marks  []*Mark // g.Marks by node index, looked up once
	slab   []Mark  // the new marks, allocated together (walk sizes it)
	d      Decision
}

// prune forgets the marks of nodes that left the group (Git removed them
// or moved them to another profile), so Group does not grow forever and
// a node that comes back starts clean. It also fills s.marks.
func (s *step) prune() {
	for name, m := range s.g.Marks {
		i, ok := s.byName[name]
		if !ok {
			delete(s.g.Marks, name)
			continue
		}
		s.marks[i] = m
	}
}

// lift clears a halt once Git no longer wants, for the halted node, the
// install that failed: a fix or a revert was committed. Nothing else
// lifts it, not unpausing nor a manual reprovision: a person has to say
// in Git what should happen next.
func (s *step) lift() {
	h := s.g.Halt
	if h == nil {
		return
	}
	i, ok := s.byName[h.Node]
	switch {
	case !ok:
		s.d.Resumed = "Git moved on: " + h.Node + " left the group"
	case s.nodes[i].Want.Digest != h.Digest:
		s.d.Resumed = "Git moved on: " + h.Node + " now wants " + plan.Short(s.nodes[i].Want.Digest)
	default:
		return
	}
	s.g.Halt = nil
}

// start marks node i as started now.
func (s *step) start(i int, canary bool) {
	n := &s.nodes[i]
	s.slab = append(s.slab, Mark{Digest: n.Want.Digest, Started: s.now, Canary: canary})
	m := &s.slab[len(s.slab)-1]
	s.g.Marks[n.Name] = m
	s.marks[i] = m
	s.d.Start = append(s.d.Start, n.Name)
}

// skip records why an out-of-date node was passed over.
func (s *step) skip(name, why string) {
	if s.d.Skipped == nil {
		s.d.Skipped = map[string]string{}
	}
	s.d.Skipped[name] = why
}

// count fills the decision's tallies once every mark is settled.
func (s *step) count() {
	for i := range s.nodes {
		n, m := &s.nodes[i], s.marks[i]
		if outOfDate(n, m) {
			s.d.OutOfDate++
		}
		if inProgress(m) {
			s.d.InProgress++
		}
		if m != nil && m.Done && m.Digest == n.Want.Digest {
			s.d.Done++
		}
	}
}
