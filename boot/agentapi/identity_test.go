package agentapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// Over TLS, an agent with no token checks in by its identity: the server
// finds the node and names it in the reply; a provisioned node is told to
// boot its disk; identifiers of two nodes are refused. Over plain HTTP the
// same check-in is refused.
func TestCheckInByIdentityOverTLS(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Node: "a", Profile: "base", Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}
	p.Sites[0].Unknown.Workflow = plan.Workflow{Profile: "base", Actions: []plan.Action{{Action: "reboot", Name: "reboot"}}}
	s, mem := newServer(t, p)
	h := s.Handler()
	boot := plan.BootInfo{Firmware: "uefi", SecureBoot: true, Chain: plan.ChainUKI, TLS: true}
	in := plan.CheckIn{Site: "lab", Identity: plan.Identity{Serial: "SER-A", MACs: []string{"52:54:00:00:00:0a"}}, Boot: boot}

	if code, body := post(t, h, plan.AgentCheckInPath, "", in); code != 401 {
		t.Errorf("plain HTTP, no token: %d %s, want 401", code, body)
	}
	code, body := postOverTLS(t, h, plan.AgentCheckInPath, "", in)
	var r plan.CheckInReply
	json.Unmarshal([]byte(body), &r)
	if code != 200 || r.Node != "a" || r.Session == "" || r.Workflow == nil {
		t.Fatalf("TLS check-in by identity: %d %s", code, body)
	}
	// Its events, with the session, as node a.
	code, body = postOverTLS(t, h, plan.AgentEventsPath, r.Session, plan.EventBatch{Site: "lab", Node: "a", Events: []plan.AgentEvent{{Seq: 1, Type: plan.AgentStarted, Step: 1, Steps: 1, Action: "wipe"}}})
	if code != 200 {
		t.Errorf("events after an identity check-in: %d %s", code, body)
	}
	var m status.Machine
	for _, x := range mem.Machines() {
		if x.Key == "lab/a" {
			m = x
		}
	}
	if m.Boot != "uefi, secure boot, uki, tls" {
		t.Errorf("node a's boot: %q", m.Boot)
	}
	// An unknown machine: keyed by its MAC, named in the reply.
	code, body = postOverTLS(t, h, plan.AgentCheckInPath, "", plan.CheckIn{Site: "lab", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:99"}}})
	if code != 200 || !strings.Contains(body, `"machine":"mac:52:54:00:00:00:99"`) {
		t.Errorf("unknown machine by identity: %d %s", code, body)
	}
	// Node b is provisioned at 1, registered at 2: reinstalled. At 1 it
	// would boot its disk.
	p.Sites[0].Nodes[1].Reprovision = 1
	p.Sites[0].Nodes[1].Artifacts.Workflow = plan.Workflow{Node: "b", Actions: []plan.Action{{Action: "wipe-disk"}}}
	code, body = postOverTLS(t, h, plan.AgentCheckInPath, "", plan.CheckIn{Site: "lab", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:0b"}}})
	if code != 200 || !strings.Contains(body, "boot from its disk") || strings.Contains(body, "workflow") {
		t.Errorf("provisioned node by identity: %d %s", code, body)
	}
	// One NIC of node a, one of node b.
	code, body = postOverTLS(t, h, plan.AgentCheckInPath, "", plan.CheckIn{Site: "lab", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:0b", "52:54:00:00:00:0c"}, Serial: "SER-A"}})
	if code != 409 {
		t.Errorf("a machine with two nodes' identifiers: %d %s, want 409", code, body)
	}
}

func TestChunkServerFollowsTheFamily(t *testing.T) {
	dual := &plan.Site{Name: "lab", Network: plan.Network{ServerAddress: "127.0.0.1", HTTPPort: 8080, IPv6: &plan.NetworkV6{ServerAddress: "::1"}}}
	for _, c := range []struct {
		ip   string
		port int
		want string
	}{
		{"127.0.0.1", 0, "http://127.0.0.1:8080"},
		{"127.0.0.1", 7070, "http://127.0.0.1:7070"},
		{"::1", 0, "http://[::1]:8080"},
		{"::1", 7070, "http://[::1]:7070"},
	} {
		if got := chunkServer(dual, c.ip, c.port); got != c.want {
			t.Errorf("machine %s, swarm port %d: %s, want %s", c.ip, c.port, got, c.want)
		}
	}
}
