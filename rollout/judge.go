package rollout

import (
	"fmt"
	"strings"

	"github.com/bootops/bootops/plan"
)

// judge settles the marks in progress, in rollout order so that when two
// nodes fail in one step the halt names the one the policy put first.
// Marks are judged whatever the strategy, pause or window say: a node
// already reinstalling finishes its story.
func (s *step) judge() {
	var open []int
	for i, m := range s.marks {
		if inProgress(m) {
			open = append(open, i)
		}
	}
	s.sort(open)
	for _, i := range open {
		n, m := &s.nodes[i], s.marks[i]
		healthy, why := s.verdict(n, m)
		switch {
		case healthy:
			// A mark Git moved past in flight ends with what the node
			// really installed (see verdict).
			m.Digest, m.Done = n.Have.Digest, true
			s.d.Healthy = append(s.d.Healthy, n.Name)
		case why != "":
			m.Failed = why
			if s.d.Failed == nil {
				s.d.Failed = map[string]string{}
			}
			s.d.Failed[n.Name] = why
			s.halt(n, m)
		}
	}
}

// halt stops the group on a failed mark. The first failure holds the
// halt; later ones are only recorded. A mark for an install Git no longer
// wants does not halt: Git has already moved on, which is what would lift
// the halt, and the node, now out of date, is retried with the new
// install like any other.
func (s *step) halt(n *Node, m *Mark) {
	if s.g.Halt != nil || m.Digest != n.Want.Digest {
		return
	}
	s.g.Halt = &Halt{Node: n.Name, Why: m.Failed, Digest: m.Digest, At: s.now}
	s.d.Halted = s.g.Halt
}

// verdict says whether a started node is healthy, failed (and why), or
// neither yet. A mark whose digest Git no longer wants stays in progress
// rather than being started again (that would power-cycle a node mid
// install); since the boot plane serves what Git wants when the node
// boots, the node is healthy with either the mark's install or Git's.
func (s *step) verdict(n *Node, m *Mark) (healthy bool, why string) {
	// A state the node was in before it was started says nothing about
	// this attempt: a node restarted from "failed" stays "failed" until
	// its BMC has cycled it.
	fresh := n.Since.IsZero() || !n.Since.Before(m.Started)
	installed := n.Have != nil && (n.Have.Digest == m.Digest || n.Have.Digest == n.Want.Digest)
	cloudInitOK := !s.pol.CloudInit || n.CloudInit == "done"
	switch {
	case fresh && n.State == stateRunning && installed && cloudInitOK:
		return true, ""
	case fresh && n.State == stateFailed:
		return false, strings.TrimSuffix("install failed: "+n.Error, ": ")
	case s.pol.CloudInit && installed && strings.HasPrefix(n.CloudInit, "error"):
		return false, "cloud-init: " + n.CloudInit
	case s.now.Sub(m.Started) > s.pol.timeout && !fresh:
		// Nothing of the node since its BMC cycled it: it never booted
		// from the network (a BMC that took the cycle and did nothing, a
		// boot order that skips the NIC).
		return false, fmt.Sprintf("cycled at %s, no network boot seen since: not running with the new install after %s",
			m.Started.UTC().Format("2006-01-02 15:04:05Z"), s.pol.timeoutText)
	case s.now.Sub(m.Started) > s.pol.timeout:
		return false, fmt.Sprintf("not running with the new install after %s (%s since %s)", s.pol.timeoutText, n.State, n.Since.UTC().Format("15:04:05Z"))
	}
	return false, ""
}

// OutOfDate says whether n needs installing and why, given the group's
// marks (g may be nil): the SYNC column shows the why.
//
// A node whose install is unknown (Have nil) is out of date only when the
// rollout started it and that attempt has not ended well: its disk is in
// whatever state the attempt left. A node bootops never saw install is
// not the rollout's to reinstall. A node whose last rollout attempt failed
// for an install Git no longer wants is out of date even if Have equals
// Want again: that is how a revert reinstalls a node a broken change
// left half-installed.
func OutOfDate(n Node, g *Group) (bool, string) {
	var m *Mark
	if g != nil {
		m = g.Marks[n.Name]
	}
	switch {
	case inProgress(m):
		return true, "installing " + plan.Short(m.Digest)
	case m != nil && m.Failed != "" && (n.Have == nil || m.Digest != n.Want.Digest):
		return true, "install of " + plan.Short(m.Digest) + " failed: " + m.Failed
	case n.Have == nil:
		return false, "install unknown: never reported one"
	case n.Have.Digest != n.Want.Digest:
		return true, strings.Join(n.Have.Changes(n.Want), ", ")
	}
	return false, ""
}

// outOfDate is OutOfDate without building the why, for the planner's
// passes over every node.
func outOfDate(n *Node, m *Mark) bool {
	switch {
	case inProgress(m):
		return true
	case m != nil && m.Failed != "" && (n.Have == nil || m.Digest != n.Want.Digest):
		return true
	case n.Have == nil:
		return false
	}
	return n.Have.Digest != n.Want.Digest
}
