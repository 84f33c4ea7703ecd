package agentapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// A machine that does not meet its node's expectations is held before any
// workflow is handed out (nothing touches its disk), with each unmet
// expectation on its timeline and in its status; the same machine with
// enough memory gets its workflow. Its inventory is kept, cleaned.
func TestCheckInHeldByExpectations(t *testing.T) {
	p := testPlan("", "")
	a := p.Sites[0].Nodes[0]
	a.Artifacts.Workflow = plan.Workflow{Node: "a", Profile: "base", Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}
	a.Expect = &plan.Expect{Memory: ">=2Gi"}
	s, mem := newServer(t, p)
	h := s.Handler()
	id := plan.Identity{Serial: "SER-A"}
	small := inventoryOf(1 << 30)
	small.System.Product = "Standard PC\x1b[2J" // a terminal escape from the machine
	code, body := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), plan.CheckIn{Site: "lab", Node: "a", Identity: id, Inventory: small})
	var r plan.CheckInReply
	json.Unmarshal([]byte(body), &r)
	if code != 200 || r.Workflow != nil || !strings.Contains(r.Hold, "memory: expected >=2Gi, found 1Gi") || r.RetrySeconds == 0 {
		t.Fatalf("held check-in: %d %s", code, body)
	}
	m := machine(mem, "lab/a")
	if m.State != status.StateHeld || m.Held != "memory: expected >=2Gi, found 1Gi" || !strings.Contains(m.Last.Message, "held before any disk is touched: memory: expected >=2Gi, found 1Gi") {
		t.Errorf("the held node: state %s, held %q, last %q", m.State, m.Held, m.Last.Message)
	}
	if m.Inventory == nil || m.Inventory.Memory.Total != 1<<30 || strings.ContainsRune(m.Inventory.System.Product, 0x1b) || m.Inventory.NICs[0].MAC != "52:54:00:00:00:0a" {
		t.Errorf("the kept inventory: %+v", m.Inventory)
	}
	// Fixed (at its next boot): it goes on.
	code, body = post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), plan.CheckIn{Site: "lab", Node: "a", Identity: id, Inventory: inventoryOf(2 << 30)})
	r = plan.CheckInReply{}
	json.Unmarshal([]byte(body), &r)
	if code != 200 || r.Workflow == nil || r.Hold != "" {
		t.Fatalf("check-in of the fixed machine: %d %s", code, body)
	}
	if m := machine(mem, "lab/a"); m.Held != "" || m.State == status.StateHeld {
		t.Errorf("after the fix: state %s, held %q", m.State, m.Held)
	}
}

func machine(mem *status.Memory, key string) status.Machine {
	for _, m := range mem.Machines() {
		if m.Key == key {
			return m
		}
	}
	return status.Machine{}
}
