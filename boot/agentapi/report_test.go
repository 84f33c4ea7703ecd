package agentapi

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// The check-in gives the node a report script with a credential for that
// install; once the install is recorded (the session's "provisioned"),
// the installed OS's report with it makes the node running, with hostname
// and kernel. Nothing else does: no credential, another node's, another
// instance-id, a node that installed nothing, a claim of another install
// digest, a previous install's credential, a report over plain HTTP at a
// TLS site, and a flood past the node's budget are refused (and counted);
// none of them changes what the node's record says its disk holds.
func TestOSReport(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	for _, n := range p.Sites[0].Nodes {
		n.Artifacts.UserData, n.Artifacts.MetaData = "#cloud-config\n", "instance-id: "+n.Name+"\n"
		n.Artifacts.Workflow = plan.Workflow{Node: n.Name, Actions: []plan.Action{{Action: "wipe-disk"}}}
		n.Install = plan.InstallOf(n)
	}
	s, mem := newServer(t, p)
	s.Limits.Reports = &status.Budgets{Burst: 20, Every: time.Hour}
	var mu sync.Mutex // the script's requests come through a real listener
	counts := map[string]int{}
	s.Count = func(r string) { mu.Lock(); counts[r]++; mu.Unlock() }
	h := s.Handler()
	// checkIn boots the machine and checks it in: its report script and
	// that script's credential, and the session.
	checkIn := func(query, node string, id plan.Identity) (rs, token, session string) {
		code, body := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", node), plan.CheckIn{Site: "lab", Node: node, Identity: id})
		var r plan.CheckInReply
		if json.Unmarshal([]byte(body), &r); code != 200 || r.CloudInit == nil || r.CloudInit.Report == "" {
			t.Fatalf("check-in of %s: %d, no report script: %s", node, code, body)
		}
		m := regexp.MustCompile(`url, token, site, node, ca, install = "[^"]*", "([^"]+)"`).FindStringSubmatch(r.CloudInit.Report)
		if m == nil {
			t.Fatalf("no credential in the report script:\n%s", r.CloudInit.Report)
		}
		return r.CloudInit.Report, m[1], r.Session
	}
	// install is the agent's part: the workflow's one action, then
	// provisioned at the node's generation.
	install := func(node string, gen int, session string) {
		t.Helper()
		b := plan.EventBatch{Site: "lab", Node: node, Events: []plan.AgentEvent{
			{Seq: 1, Time: time.Now(), Type: plan.AgentActionDone, Step: 1, Steps: 1, Action: "wipe-disk"},
			{Seq: 2, Time: time.Now(), Type: plan.AgentProvisioned, Generation: gen}}}
		if code, body := post(t, h, plan.AgentEventsPath, session, b); code != 200 {
			t.Fatalf("install of %s: %d %s", node, code, body)
		}
	}
	machine := func(key string) status.Machine {
		m, _ := mem.Machine(key)
		return m
	}
	scriptA, tokA, sessA := checkIn("serial=SER-A&site=lab", "a", plan.Identity{Serial: "SER-A"})
	_, tokB, _ := checkIn("mac=52:54:00:00:00:0b&site=lab", "b", plan.Identity{MACs: []string{"52:54:00:00:00:0b"}})
	good := plan.OSReport{Site: "lab", Node: "a", InstanceID: "a-0", Hostname: "node-a", Kernel: "6.1.0-56-amd64", Addresses: []string{"198.18.0.100"}}
	want := p.Sites[0].Nodes[0].Install
	forged := good
	forged.Install = strings.Repeat("0f", 32)
	goodB := plan.OSReport{Site: "lab", Node: "b", InstanceID: "b-2", Install: p.Sites[0].Nodes[1].Install.Digest}

	// Before node a's install is recorded, its own credential is refused.
	if code, body := post(t, h, plan.ReportPath, tokA, good); code != 409 || !strings.Contains(body, "no finished install") {
		t.Errorf("a report before the install finished: %d %s", code, body)
	}
	install("a", 0, sessA)
	for _, c := range []struct {
		name  string
		token string
		rep   plan.OSReport
		code  int
	}{
		{"none", "", good, 401},
		{"node b's credential", tokB, good, 401},
		{"another instance", tokA, plan.OSReport{Site: "lab", Node: "a", InstanceID: "a-7", Hostname: "x"}, 409},
		{"a made-up install digest", tokA, forged, 409},
		{"node b, which installed nothing, with the digest Git wants", tokB, goodB, 409},
		{"node a", tokA, good, 200},
	} {
		code, body := post(t, h, plan.ReportPath, c.token, c.rep)
		if code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.code)
		}
		if a := machine("lab/a"); a.Installed == nil || a.Installed.Digest != want.Digest {
			t.Errorf("after %s: node a's install %+v, want %s", c.name, a.Installed, want.Digest)
		}
	}
	if counts[ResultReportRefused] != 6 {
		t.Errorf("refused reports counted: %d, want 6", counts[ResultReportRefused])
	}
	a := machine("lab/a")
	if a.State != status.StateRunning || a.Hostname != "node-a" || a.Kernel != "6.1.0-56-amd64" || !strings.Contains(a.Last.Message, "198.18.0.100") {
		t.Errorf("node a after its report: %+v", a)
	}
	if b := machine("lab/b"); b.State == status.StateRunning || b.Installed != nil {
		t.Errorf("node b after a report of an install it never did: %+v", b)
	}
	// Git raises node a's generation: the old install's credential is refused.
	p.Sites[0].Nodes[0].Reprovision = 1
	if code, body := post(t, h, plan.ReportPath, tokA, good); code != 409 || !strings.Contains(body, "generation 0") {
		t.Errorf("old generation: %d %s", code, body)
	}
	p.Sites[0].Nodes[0].Reprovision = 0
	// A TLS site: a report over plain HTTP is refused, over TLS taken.
	p.Sites[0].Network.HTTPSPort = 8443
	if code, body := post(t, h, plan.ReportPath, tokA, good); code != 403 || !strings.Contains(body, "plain HTTP") {
		t.Errorf("over plain HTTP at a TLS site: %d %s", code, body)
	}
	if code, body := postOverTLS(t, h, plan.ReportPath, tokA, good); code != 200 {
		t.Errorf("over TLS: %d %s", code, body)
	}
	p.Sites[0].Network.HTTPSPort = 0

	// The script itself, run by Python as cloud-init would: it reaches the
	// server with its credential, its install's digest and cloud-init's
	// result (here a fake /run/cloud-init, with an error), and keeps the
	// renewed credential it is answered with.
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed (make test installs it)")
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	scriptA = strings.Replace(scriptA, `url, token, site, node, ca, install = "http://`, `url, token, site, node, ca, install = "`+srv.URL+`/api/v1/report" or "http://`, 1)
	dir := t.TempDir()
	f := filepath.Join(dir, "bootops-report")
	os.WriteFile(f, []byte(scriptA), 0o700)
	run := filepath.Join(dir, "run")
	os.MkdirAll(run, 0o755)
	os.WriteFile(filepath.Join(run, ".instance-id"), []byte("a-0\n"), 0o644)
	os.WriteFile(filepath.Join(run, "result.json"), []byte(`{"v1": {"datasource": "DataSourceNoCloud", "errors": ["('scripts_user', RuntimeError('1 failed'))"]}}`), 0o644)
	state := filepath.Join(dir, "state")
	runScript := func() string {
		cmd := exec.Command("sh", f)
		cmd.Env = append(os.Environ(), "BOOTOPS_REPORT_FOREGROUND=1", "BOOTOPS_CLOUD_INIT_RUN="+run, "BOOTOPS_REPORT_STATE="+state)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("the script (%s): %v\n%s", py, err, out)
		}
		return string(out)
	}
	out := runScript()
	a = machine("lab/a")
	if !strings.Contains(out, "reported to") || a.Installed == nil || a.Installed.Digest != want.Digest || !strings.HasPrefix(a.CloudInit, "error: ") || !strings.Contains(a.CloudInit, "scripts_user") {
		t.Errorf("after the script's report: installed %+v (want digest %s), cloud-init %q; last %q\n%s", a.Installed, want.Digest, a.CloudInit, a.Last.Message, out)
	}
	renewed, err := os.ReadFile(filepath.Join(state, "report-credential"))
	if err != nil {
		t.Fatalf("the renewed credential was not kept: %v", err)
	}
	if _, err := s.Secret.Verify(string(renewed), boot.KindReport, "lab", "a", time.Now()); err != nil {
		t.Errorf("the kept credential %q: %v", renewed, err)
	}

	// Node a is installed again: every credential of its previous install
	// (the script's, the renewed one) is refused, with the right digest too.
	_, tokA2, sessA2 := checkIn("serial=SER-A&site=lab", "a", plan.Identity{Serial: "SER-A"})
	install("a", 0, sessA2)
	for _, old := range []string{tokA, string(renewed)} {
		if code, body := post(t, h, plan.ReportPath, old, good); code != 409 || !strings.Contains(body, "another install") {
			t.Errorf("the previous install's credential: %d %s", code, body)
		}
	}
	if out := runScript(); !strings.Contains(out, "refused: 409") {
		t.Errorf("the previous install's script:\n%s", out)
	}
	// A flood of reports with the node's own credential: past its budget
	// they are turned away unrecorded; its history stays.
	before := len(mem.Events("lab/a"))
	throttled := 0
	for range 200 {
		if code, _ := post(t, h, plan.ReportPath, tokA2, good); code == 429 {
			throttled++
		}
	}
	if after := len(mem.Events("lab/a")); throttled < 180 || after-before > 20 {
		t.Errorf("a flood of 200 reports: %d throttled, %d events recorded", throttled, after-before)
	}
}

// A node Git knows by serial only gets its network-config matched to the
// MAC its machine reports (cloud-init's ifupdown renderer takes no name
// pattern); a node with a MAC in Git keeps its own.
func TestNetworkConfigTakesTheReportedMAC(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	a := p.Sites[0].Nodes[0]
	a.Artifacts.UserData, a.Artifacts.MetaData = "#cloud-config\n", "instance-id: a-0\n"
	a.Artifacts.NetworkConfig = "version: 2\nethernets:\n  primary:\n" + plan.NetworkMatchAny + "    dhcp4: true\n"
	a.Artifacts.Workflow = plan.Workflow{Node: "a", Actions: []plan.Action{{Action: "wipe-disk"}}}
	s, _ := newServer(t, p)
	h := s.Handler()
	code, body := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"),
		plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A", MACs: []string{"52:54:00:AA:00:01", "52:54:00:aa:00:02"}}})
	var r plan.CheckInReply
	json.Unmarshal([]byte(body), &r)
	if code != 200 || r.CloudInit == nil || !strings.Contains(r.CloudInit.NetworkConfig, "    match:\n      macaddress: \"52:54:00:aa:00:01\"\n") || strings.Contains(r.CloudInit.NetworkConfig, "e*") {
		t.Errorf("network-config: %d %+v", code, r.CloudInit)
	}
}
