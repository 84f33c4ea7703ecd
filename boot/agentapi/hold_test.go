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

// A node Git holds whose profile has QA runs the QA that writes no disk
// first (commissioning, not an install), then is held; asking again, and
// after a reboot, it is held without running it again. Its release is
// the whole workflow, from its first action, in the same session. The
// words of one kind of session are refused in the other.
func TestHeldNodeCommissionsFirst(t *testing.T) {
	withQA := func(hold bool) *plan.Plan {
		p := heldPlan(hold)
		p.Sites[0].Rollouts = nil
		for _, n := range p.Sites[0].Nodes {
			n.Artifacts.Workflow.Actions = []plan.Action{{Action: plan.QAMemory, Name: plan.QAMemory}, {Action: plan.QACPU, Name: "burn"},
				{Action: "wipe-disk", Name: "wipe"}, {Action: plan.QADisk, Name: plan.QADisk, Write: true}, {Action: "reboot", Name: "reboot"}}
		}
		return p
	}
	s, mem := newServer(t, withQA(true))
	h := s.Handler()
	checkIn := func(token string) plan.CheckInReply {
		t.Helper()
		code, body := post(t, h, plan.AgentCheckInPath, token, plan.CheckIn{Site: "lab", Node: "h1", Identity: plan.Identity{Serial: "SER-H1"}, Inventory: inventoryOf(4 << 30)})
		if code != 200 {
			t.Fatalf("check-in: %d %s", code, body)
		}
		return reply(t, body)
	}
	events := func(sess string, evs ...plan.AgentEvent) (int, string) {
		t.Helper()
		return post(t, h, plan.AgentEventsPath, sess, plan.EventBatch{Site: "lab", Node: "h1", Events: evs})
	}
	seq := uint64(0)
	ev := func(typ string, step, steps int, action string) plan.AgentEvent {
		seq++
		return plan.AgentEvent{Seq: seq, Type: typ, Step: step, Steps: steps, Action: action}
	}

	r := checkIn(nodeToken(s, "lab", "h1"))
	if wf := r.Workflow; wf == nil || !wf.Commission || len(wf.Actions) != 2 || wf.Actions[0].Action != plan.QAMemory || wf.Actions[1].Name != "burn" || r.CloudInit != nil {
		t.Fatalf("held with QA: %+v", r)
	}
	if m, _ := mem.Machine("lab/h1"); m.State != status.StateCommissioning || !strings.HasPrefix(m.Held, "install: hold") {
		t.Fatalf("commissioning: state %q, held %q", m.State, m.Held)
	}
	sess := r.Session
	if code, body := events(sess, ev(plan.AgentStarted, 1, 2, plan.QAMemory), ev(plan.AgentActionDone, 1, 2, plan.QAMemory), ev(plan.AgentProvisioned, 0, 0, "")); code != 409 || !strings.Contains(body, "provisioned reported by a held node's QA") {
		t.Fatalf("provisioned in a commissioning: %d %s", code, body)
	}
	seq = 0
	if code, body := events(sess, ev(plan.AgentStarted, 1, 2, plan.QAMemory), ev(plan.AgentActionDone, 1, 2, plan.QAMemory), ev(plan.AgentCommissioned, 0, 0, "")); code != 409 || !strings.Contains(body, "commissioned reported after 1 of its 2 QA actions") {
		t.Fatalf("commissioned early: %d %s", code, body)
	}
	seq = 0
	if code, body := events(sess, ev(plan.AgentStarted, 1, 2, plan.QAMemory), ev(plan.AgentActionDone, 1, 2, plan.QAMemory),
		ev(plan.AgentStarted, 2, 2, "burn"), ev(plan.AgentActionDone, 2, 2, "burn"), ev(plan.AgentCommissioned, 0, 0, "")); code != 200 {
		t.Fatalf("the QA's events: %d %s", code, body)
	}
	m, _ := mem.Machine("lab/h1")
	if m.Commissioned == "" || m.State != status.StateCommissioning {
		t.Fatalf("commissioned: state %q, commissioned %q", m.State, m.Commissioned)
	}
	for _, token := range []string{sess, nodeToken(s, "lab", "h1")} { // asking again; a reboot
		r := checkIn(token)
		if r.Workflow != nil || !strings.HasPrefix(r.Hold, "install: hold") || r.RetrySeconds != HoldRetrySeconds {
			t.Fatalf("after its QA: %+v", r)
		}
		sess = r.Session
	}
	if m, _ := mem.Machine("lab/h1"); m.State != status.StateHeld {
		t.Fatalf("after its QA: state %q", m.State)
	}

	// Released: the whole workflow, from its first action.
	s.Plans.(*boot.Live).Swap(withQA(false))
	r = checkIn(sess)
	if r.Workflow == nil || r.Workflow.Commission || len(r.Workflow.Actions) != 5 {
		t.Fatalf("released: %+v", r)
	}
	if evs := mem.Events("lab/h1"); !strings.Contains(evs[len(evs)-1].Message, "released by Git (it was held)") {
		t.Errorf("the release: %s", evs[len(evs)-1].Message)
	}
	if code, body := events(r.Session, ev(plan.AgentStarted, 1, 5, plan.QAMemory), ev(plan.AgentActionDone, 1, 5, plan.QAMemory)); code != 200 {
		t.Fatalf("the install's first action: %d %s", code, body)
	}
	if code, body := events(r.Session, ev(plan.AgentCommissioned, 0, 0, "")); code != 409 || !strings.Contains(body, "commissioned reported by a workflow that is no held node's QA") {
		t.Fatalf("commissioned in an install: %d %s", code, body)
	}
	if m, _ := mem.Machine("lab/h1"); m.State != status.StateProvisioning || m.Commissioned != "" {
		t.Errorf("installing: state %q, commissioned %q", m.State, m.Commissioned)
	}
}
