package http

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
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

// The overlay is a cpio with the document and its signature, which verify
// with the key's public half; a site without a key gets none.
func TestOverlayServed(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	p.Sites[0].Network = plan.Network{ServerAddress: "198.18.0.1", HTTPPort: 8080, HTTPSPort: 8443}
	p.Sites[0].Env = map[string]string{"HTTP_PROXY": "http://198.18.0.9:3128"}
	s, _, _ := newServer(t, p)
	h := s.Handler()
	if rec := get(t, h, "/artifacts/overlay/lab"); rec.StatusCode != 503 || !strings.Contains(body(t, rec), "ca init") {
		t.Errorf("no key: %d, want 503 naming bootops ca init", rec.StatusCode)
	}
	pub, priv, _ := ed25519.GenerateKey(nil)
	s.OverlayKey, s.SiteCA = priv, "-----BEGIN CERTIFICATE-----\n"
	got := body(t, get(t, h, "/artifacts/overlay/lab"))
	doc, sig := cpioFile(got, strings.TrimPrefix(trust.OverlayPath, "/")), cpioFile(got, strings.TrimPrefix(trust.OverlaySigPath, "/"))
	o, err := trust.VerifyOverlay([]string{base64.StdEncoding.EncodeToString(pub)}, []byte(doc), []byte(sig))
	if err != nil {
		t.Fatal(err)
	}
	if o.Server != "https://198.18.0.1:8443" || o.Site != "lab" || o.CA == "" || o.Env["HTTP_PROXY"] == "" {
		t.Errorf("overlay: %+v", o)
	}
	if b, ok := s.TFTPFile("/artifacts/overlay/lab", "198.18.0.100"); !ok || !strings.Contains(string(b), "overlay.sig") {
		t.Error("the overlay is not served over TFTP")
	}
}

// cpioFile is the content of name in a newc archive (test helper: small
// archives, ASCII headers).
func cpioFile(a, name string) string {
	for len(a) >= 110 && a[:6] == "070701" {
		var size, nameLen int64
		for i, f := range []*int64{&size, &nameLen} {
			off := []int{54, 94}[i]
			for _, c := range a[off : off+8] {
				*f = *f*16 + int64(strings.IndexRune("0123456789ABCDEF", c))
			}
		}
		n := a[110 : 110+nameLen-1]
		start := (110 + int(nameLen) + 3) &^ 3
		if n == name {
			return a[start : start+int(size)]
		}
		a = a[(start+int(size)+3)&^3:]
	}
	return ""
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
