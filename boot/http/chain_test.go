package http

import (
	"encoding/json"
	"errors"
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
	s, mem, _ := newServer(t, p)
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

// The overlay is served as the bytes built for the Plan, over HTTP and
// TFTP; without them, 503 with the reason.
func TestOverlayServed(t *testing.T) {
	s, _, _ := newServer(t, testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32)))
	h := s.Handler()
	if rec := get(t, h, "/artifacts/overlay/lab"); rec.StatusCode != 503 {
		t.Errorf("no overlays: %d, want 503", rec.StatusCode)
	}
	built := map[string][]byte{"lab": []byte("070701 the lab overlay")}
	s.Overlay = func(site string) ([]byte, error) {
		if b, ok := built[site]; ok {
			return b, nil
		}
		return nil, errors.New("no overlay key: run 'bootops ca init'")
	}
	if got := body(t, get(t, h, "/artifacts/overlay/lab")); got != string(built["lab"]) {
		t.Errorf("served %q", got)
	}
	if rec := get(t, h, "/artifacts/overlay/other"); rec.StatusCode != 503 || !strings.Contains(body(t, rec), "ca init") {
		t.Errorf("no overlay: %d, want 503 with the reason", rec.StatusCode)
	}
	if b, ok := s.TFTPFile("/artifacts/overlay/lab", "198.18.0.100"); !ok || string(b) != string(built["lab"]) {
		t.Error("the overlay is not served over TFTP")
	}
}

// GRUB's dispatcher asks for the machine's config with its MAC, SMBIOS
// serial and UUID; the config is the node's, with a fresh token on a
// plain-HTTP site; a machine whose Micro-OS has no GRUB config is told so.
func TestGRUBOverTFTP(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	p.Sites[0].Nodes[0].Artifacts.GRUB = "linux (tftp,198.18.0.1)/artifacts/microos/default/kernel 'bootops.node=a' 'bootops.token=" + plan.TokenPlaceholder + "'\nboot\n"
	s, mem, _ := newServer(t, p)
	d, ok := s.TFTPFile("/grub/grub.cfg", "198.18.0.100")
	if !ok || !strings.Contains(string(d), "smbios --type 1 --get-string 7") || !strings.Contains(string(d), "configfile \"(tftp)/grub/machine?mac=${net_default_mac}") {
		t.Fatalf("dispatcher:\n%s", d)
	}
	cfg, ok := s.TFTPFile("/grub/machine?mac=52:54:00:00:00:0a&serial=SER-A&uuid=", "198.18.0.100")
	if !ok || !strings.Contains(string(cfg), "'bootops.node=a'") || strings.Contains(string(cfg), plan.TokenPlaceholder) || tokenIn(string(cfg)) == "" {
		t.Errorf("node a's GRUB config:\n%s", cfg)
	}
	cfg, _ = s.TFTPFile("/grub/machine?mac=52:54:00:00:00:0b&serial=&uuid=", "198.18.0.101")
	if !strings.Contains(string(cfg), "has no GRUB script") || !strings.Contains(string(cfg), "halt") {
		t.Errorf("node b (an iPXE Micro-OS):\n%s", cfg)
	}
	if k, ok := s.TFTPFile("artifacts/microos/default/kernel", "198.18.0.100"); !ok || string(k) != "0123456789abcdef" {
		t.Errorf("kernel over TFTP: %q %v", k, ok)
	}
	if _, ok := s.TFTPFile("artifacts/microos/default/../../etc/passwd", "198.18.0.100"); ok {
		t.Error("a path out of the artifacts was served")
	}
	var script status.Event
	for _, e := range mem.Events("lab/a") {
		if e.Kind == status.KindScript {
			script = e
		}
	}
	if !strings.Contains(script.Message, "GRUB script") || script.State != status.StateBooting {
		t.Errorf("node a's script event: %+v", script)
	}
}
