package rollout

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/bootops/bootops/plan"
)

// plan picks the nodes to start now. Out-of-date nodes not already in
// progress are walked in rollout order; the policy's gates (strategy,
// halt, pause, window) come first, then canaries, then capacity.
func (s *step) plan() {
	sv := s.survey()
	if len(sv.cands) == 0 {
		if sv.busy == 0 {
			s.settle()
		}
		return
	}
	if why := s.gate(); why != "" {
		s.d.Waiting = why
		return
	}
	free := s.pol.max - sv.busy
	limit, canary, need := free, false, 0
	if s.pol.Canary > 0 {
		switch {
		case sv.canaries < s.pol.Canary:
			need = s.pol.Canary - sv.canaries
			canary, limit = true, min(free, need)
		case !sv.canariesDone:
			s.d.Waiting = "canaries not yet healthy"
			return
		}
	}
	if free <= 0 {
		s.d.Waiting = s.full(sv.busy)
		return
	}
	started, left := s.walk(sv.cands, limit, canary)
	switch {
	case left == 0:
	case canary && started == need:
		// Capacity may be spent too, but the canaries are what the
		// others wait for.
		s.d.Waiting = "canaries not yet healthy"
	default:
		s.d.Waiting = s.full(sv.busy + started)
	}
}

// full is the Waiting of a group at its maxUnavailable.
func (s *step) full(busy int) string {
	return fmt.Sprintf("maxUnavailable reached: %d of %d down", busy, s.pol.max)
}

// survey is one pass over the group before anything starts.
type survey struct {
	cands        []int // out of date and not in progress, in rollout order
	busy         int   // nodes down now: in progress, or (re)installing on their own
	canaries     int   // canary marks for what Git wants now
	canariesDone bool  // ... all of them healthy
}

func (s *step) survey() survey {
	sv := survey{canariesDone: true}
	for i := range s.nodes {
		n, m := &s.nodes[i], s.marks[i]
		switch {
		case inProgress(m):
			sv.busy++
		case n.State == stateBooting || n.State == stateProvisioning:
			// Down for another reason (a manual reprovision): it uses
			// the same budget of unavailable nodes.
			sv.busy++
		}
		if outOfDate(n, m) && !inProgress(m) {
			sv.cands = append(sv.cands, i)
		}
		if m != nil && m.Canary && m.Digest == n.Want.Digest {
			sv.canaries++
			sv.canariesDone = sv.canariesDone && m.Done
		}
	}
	s.sort(sv.cands)
	return sv
}

// settle clears the canary flags once the group is in sync, so the next
// change, even one that leaves the old canaries' installs as they were,
// is tried on canaries of its own.
func (s *step) settle() {
	for _, m := range s.g.Marks {
		m.Canary = false
	}
}

// gate says why the policy starts nothing now, if it does not.
func (s *step) gate() string {
	switch {
	case s.pol.Strategy != plan.RolloutRolling:
		return "manual: raise reprovision to reinstall"
	case s.g.Halt != nil:
		return "halted: " + s.g.Halt.Node + ": " + s.g.Halt.Why
	case s.pol.Pause:
		return "paused"
	case !s.pol.open:
		return "outside the window"
	}
	return ""
}

// walk starts up to limit of cands in order, skipping those that cannot
// be started now (the next one takes the turn, as a canary too), and
// says how many it started and how many it did not reach.
func (s *step) walk(cands []int, limit int, canary bool) (started, left int) {
	// One allocation for every mark this step can add, rather than one
	// per started node.
	s.slab = make([]Mark, 0, min(limit, len(cands)))
	for k, i := range cands {
		if started == limit {
			return started, len(cands) - k
		}
		if why := ineligible(&s.nodes[i], s.marks[i]); why != "" {
			s.skip(s.nodes[i].Name, why)
			continue
		}
		s.start(i, canary)
		started++
	}
	return started, 0
}

// ineligible says why an out-of-date node cannot be reinstalled through
// its BMC now, or "" if it can. Only running nodes are started: a node in
// any other state is down or busy for a reason the rollout should not
// override. The exception is a node the rollout itself left failed, which
// is retried once Git wants something else for it, off or on.
func ineligible(n *Node, m *Mark) string {
	failedHere := m != nil && m.Failed != ""
	switch {
	case failedHere && m.Digest == n.Want.Digest:
		return "install of " + plan.Short(m.Digest) + " failed: " + m.Failed + "; waiting for Git to move on"
	case n.State != stateRunning && !(n.State == stateFailed && failedHere):
		return "not running: " + cmp.Or(n.State, "unknown")
	case !n.HasBMC:
		return "no BMC: raise reprovision to reinstall it"
	case n.Power == "unreachable":
		return strings.TrimSuffix("BMC unreachable: "+n.PowerProblem, ": ")
	case n.Power == "off" && !failedHere:
		// Someone turned it off; a node the rollout left failed is
		// usually off (its Micro-OS powers off): that one is powered on.
		return "powered off"
	case n.Power == "":
		return "BMC not yet polled"
	}
	return ""
}

// sort puts node indexes in rollout order: by the values of the policy's
// Order labels in turn (a node without the label after those with it;
// values compare as strings), then by name.
func (s *step) sort(idx []int) {
	slices.SortFunc(idx, func(a, b int) int {
		na, nb := &s.nodes[a], &s.nodes[b]
		for _, l := range s.pol.Order {
			va, oka := na.Labels[l]
			vb, okb := nb.Labels[l]
			switch {
			case oka != okb:
				if oka {
					return -1
				}
				return 1
			case va != vb:
				return strings.Compare(va, vb)
			}
		}
		return strings.Compare(na.Name, nb.Name)
	})
}
