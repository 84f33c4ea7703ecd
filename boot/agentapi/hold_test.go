package agentapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// heldPlan: site lab with nodes h1, h2, h3 of profile base, which has a
// rolling policy of maxUnavailable 1; held by Git (at "site.yaml:9")
// when hold is set.
func heldPlan(hold bool) *plan.Plan {
	p := testPlan("", "")
	lab := p.Sites[0]
	lab.Rollouts = map[string]*plan.Rollout{"base": {Strategy: plan.RolloutRolling, MaxUnavailable: "1", HealthTimeout: "30m"}}
	lab.Nodes = nil
	for i := 1; i <= 3; i++ {
		n := &plan.Node{Name: fmt.Sprintf("h%d", i), Site: "lab", Profile: "base", Source: "h.yaml:1",
			Identity:  plan.Identity{Serial: fmt.Sprintf("SER-H%d", i)},
			Artifacts: plan.Artifacts{Workflow: plan.Workflow{Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}}}
		if hold {
			n.Hold = "sites/lab/site.yaml:9"
		}
		lab.Nodes = append(lab.Nodes, n)
	}
	return p
}

// A node Git holds checks in, shows its inventory and is held, asking
// again every few seconds, with where Git holds it; the commit that
// releases the profile's three nodes at once gives one of them its
// workflow (maxUnavailable 1) and holds the others for a slot, until the
// one installing is provisioned.
func TestHoldAndPacedRelease(t *testing.T) {
	s, mem := newServer(t, heldPlan(true))
	h := s.Handler()
	sess := map[string]string{}
	checkIn := func(node, token string) plan.CheckInReply {
		t.Helper()
		code, body := post(t, h, "/api/v1/agent/checkin", token, plan.CheckIn{Site: "lab", Node: node,
			Identity: plan.Identity{Serial: "SER-" + strings.ToUpper(node)}, Inventory: inventoryOf(4 << 30)})
		if code != 200 {
			t.Fatalf("%s's check-in: %d %s", node, code, body)
		}
		r := reply(t, body)
		if r.Session != "" {
			sess[node] = r.Session
		}
		return r
	}
	for _, n := range []string{"h1", "h2", "h3"} {
		r := checkIn(n, nodeToken(s, "lab", n))
		if r.Workflow != nil || r.RetrySeconds != HoldRetrySeconds || r.Hold != "install: hold (sites/lab/site.yaml:9): it waits until a commit says install: auto" {
			t.Fatalf("%s held by Git: %+v", n, r)
		}
		m, _ := mem.Machine("lab/" + n)
		if m.State != status.StateHeld || !strings.HasPrefix(m.Held, "install: hold") || m.Inventory == nil {
			t.Fatalf("%s's status while held: %q %q, inventory %v", n, m.State, m.Held, m.Inventory != nil)
		}
	}
	// Asking again with its session: still held.
	if r := checkIn("h1", sess["h1"]); r.Workflow != nil || !strings.Contains(r.Hold, "install: hold") {
		t.Fatalf("h1 asking again while held: %+v", r)
	}

	// One commit releases all three: one slot.
	s.Plans.(*boot.Live).Swap(heldPlan(false))
	if r := checkIn("h1", sess["h1"]); r.Workflow == nil {
		t.Fatalf("h1, released: %+v", r)
	}
	for _, n := range []string{"h2", "h3"} {
		r := checkIn(n, sess[n])
		want := "install: released; waiting for an install slot: 1 of profile base's nodes installing, its rollout's maxUnavailable is 1 (1)"
		if r.Workflow != nil || r.Hold != want || r.RetrySeconds != HoldRetrySeconds {
			t.Fatalf("%s, released while h1 installs: %+v, want held: %s", n, r, want)
		}
	}
	if evs := mem.Events("lab/h1"); !strings.Contains(evs[len(evs)-1].Message, "released by Git (it was held)") {
		t.Errorf("h1's timeline does not say it was released: %+v", evs[len(evs)-1])
	}
	// h1 installs, then is done: h2 takes the slot, h3 waits for it.
	mem.Record(status.Event{Kind: status.KindAgent, Site: "lab", Node: "h1", State: status.StateProvisioning, Message: "1/1 wipe"})
	if r := checkIn("h2", sess["h2"]); r.Workflow != nil {
		t.Fatalf("h2 given a workflow while h1 provisions: %+v", r)
	}
	mem.Record(status.Event{Kind: status.KindAgent, Site: "lab", Node: "h1", State: status.StateProvisioned, Message: "provisioned"})
	if r := checkIn("h2", sess["h2"]); r.Workflow == nil {
		t.Fatalf("h2 once h1 is provisioned: %+v", r)
	}
	if r := checkIn("h3", sess["h3"]); r.Workflow != nil {
		t.Fatalf("h3 given a workflow while h2 has the slot: %+v", r)
	}
}

// Without a rollout policy in Git every released node installs at once;
// a node Git never held is never paced.
func TestReleaseUnpaced(t *testing.T) {
	p := heldPlan(true)
	p.Sites[0].Rollouts = nil
	s, _ := newServer(t, p)
	h := s.Handler()
	sess := map[string]string{}
	for _, n := range []string{"h1", "h2"} {
		_, body := post(t, h, "/api/v1/agent/checkin", nodeToken(s, "lab", n), plan.CheckIn{Site: "lab", Node: n, Identity: plan.Identity{Serial: "SER-" + strings.ToUpper(n)}})
		sess[n] = reply(t, body).Session
	}
	s.Plans.(*boot.Live).Swap(func() *plan.Plan { p := heldPlan(false); p.Sites[0].Rollouts = nil; return p }())
	for _, n := range []string{"h1", "h2"} {
		if _, body := post(t, h, "/api/v1/agent/checkin", sess[n], plan.CheckIn{Site: "lab", Node: n, Identity: plan.Identity{Serial: "SER-" + strings.ToUpper(n)}}); reply(t, body).Workflow == nil {
			t.Errorf("%s released without a policy: %s", n, body)
		}
	}
	// h3 was never held: a policy in Git does not pace it.
	s2, _ := newServer(t, heldPlan(false))
	for _, n := range []string{"h1", "h2", "h3"} {
		if _, body := post(t, s2.Handler(), "/api/v1/agent/checkin", nodeToken(s2, "lab", n), plan.CheckIn{Site: "lab", Node: n, Identity: plan.Identity{Serial: "SER-" + strings.ToUpper(n)}}); reply(t, body).Workflow == nil {
			t.Errorf("%s, never held, not given its workflow: %s", n, body)
		}
	}
}
