package http

import (
	"strings"
	"testing"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// An unknown machine's history is not grafted onto a registered node by
// a script request that names the node's serial beside the unknown
// machine's MAC: the node's record keeps only what Git registers. Nor
// can a session name actions its workflow does not have (a QA verdict
// is kept by its action's name).
func TestNoGraftOntoANode(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Node: "a", Actions: []plan.Action{{Action: "qa-disk"}, {Action: "reboot"}}}
	s, mem, _ := newServer(t, p)
	h := s.Handler()
	const stranger = "52:54:00:99:99:99"
	mem.Record(status.Event{Kind: status.KindDHCP, MAC: stranger, State: status.StateDiscovered, Message: "the stranger's DHCP"})
	mem.Record(status.Event{Kind: status.KindAgent, MAC: stranger, Action: "qa-memory", Message: "qa-memory: 1 GiB, pass"})
	tok := script(t, h, "serial=SER-A&mac="+stranger+"&site=lab")
	a, _ := mem.Machine("lab/a")
	if a.MAC != "" || len(mem.Events("lab/a")) != 1 {
		t.Errorf("node a after a script request naming the stranger's MAC: mac %q, %d events", a.MAC, len(mem.Events("lab/a")))
	}
	if _, ok := mem.Machine("mac:" + stranger); !ok {
		t.Error("the stranger's own history is gone")
	}
	code, body := post(t, h, plan.AgentCheckInPath, tok, plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}})
	if code != 200 {
		t.Fatalf("check-in: %d %s", code, body)
	}
	sess := sessionOf(t, body)
	b := plan.EventBatch{Site: "lab", Node: "a", Events: []plan.AgentEvent{{Seq: 1, Type: plan.AgentLog, Step: 1, Steps: 2, Action: "qa-memory", Message: "pass"}}}
	if code, body := post(t, h, plan.AgentEventsPath, sess, b); code != 409 || !strings.Contains(body, `"qa-memory" at step 1; the workflow's is qa-disk`) {
		t.Errorf("an action the workflow does not have: %d %s", code, body)
	}
	b.Events[0].Action = "qa-disk"
	if code, body := post(t, h, plan.AgentEventsPath, sess, b); code != 200 {
		t.Errorf("the workflow's own action: %d %s", code, body)
	}
}
