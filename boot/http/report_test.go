package http

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// The check-in gives the node a report script with its own credential;
// the installed OS's report with it makes the node running, with hostname
// and kernel; another node's credential, none, an old generation's, or
// another instance-id are refused and counted.
func TestOSReport(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	for _, n := range p.Sites[0].Nodes {
		n.Artifacts.UserData, n.Artifacts.MetaData = "#cloud-config\n", "instance-id: "+n.Name+"\n"
		n.Artifacts.Workflow = plan.Workflow{Node: n.Name, Actions: []plan.Action{{Action: "wipe-disk"}}}
		n.Install = plan.InstallOf(n)
	}
	s, mem, _ := newServer(t, p)
	counts := map[string]int{}
	s.AgentCount = func(r string) { counts[r]++ }
	h := s.Handler()
	reportOf := func(query, node string, id plan.Identity) (rs, token string) {
		code, body := post(t, h, plan.AgentCheckInPath, script(t, h, query), plan.CheckIn{Site: "lab", Node: node, Identity: id})
		var r plan.CheckInReply
		if json.Unmarshal([]byte(body), &r); code != 200 || r.CloudInit == nil || r.CloudInit.Report == "" {
			t.Fatalf("check-in of %s: %d, no report script: %s", node, code, body)
		}
		m := regexp.MustCompile(`url, token, site, node, ca, install = "[^"]*", "([^"]+)"`).FindStringSubmatch(r.CloudInit.Report)
		if m == nil {
			t.Fatalf("no credential in the report script:\n%s", r.CloudInit.Report)
		}
		return r.CloudInit.Report, m[1]
	}
	scriptA, tokA := reportOf("serial=SER-A&site=lab", "a", plan.Identity{Serial: "SER-A"})
	_, tokB := reportOf("mac=52:54:00:00:00:0b&site=lab", "b", plan.Identity{MACs: []string{"52:54:00:00:00:0b"}})
	good := plan.OSReport{Site: "lab", Node: "a", InstanceID: "a-0", Hostname: "node-a", Kernel: "6.1.0-56-amd64", Addresses: []string{"198.18.0.100"}}

	for _, c := range []struct {
		name  string
		token string
		rep   plan.OSReport
		code  int
	}{
		{"none", "", good, 401},
		{"node b's credential", tokB, good, 401},
		{"another instance", tokA, plan.OSReport{Site: "lab", Node: "a", InstanceID: "a-7", Hostname: "x"}, 409},
		{"node a", tokA, good, 200},
	} {
		if code, body := post(t, h, plan.ReportPath, c.token, c.rep); code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.code)
		}
	}
	if counts[AgentReportRefused] != 3 {
		t.Errorf("refused reports counted: %d, want 3", counts[AgentReportRefused])
	}
	var a status.Machine
	for _, m := range mem.Machines() {
		if m.Key == "lab/a" {
			a = m
		}
	}
	if a.State != status.StateRunning || a.Hostname != "node-a" || a.Kernel != "6.1.0-56-amd64" || !strings.Contains(a.Last.Message, "198.18.0.100") {
		t.Errorf("node a after its report: %+v", a)
	}
	// Git raises node a's generation: the old install's credential is refused.
	p.Sites[0].Nodes[0].Reprovision = 1
	if code, body := post(t, h, plan.ReportPath, tokA, good); code != 409 || !strings.Contains(body, "generation 0") {
		t.Errorf("old generation: %d %s", code, body)
	}
	p.Sites[0].Nodes[0].Reprovision = 0

	// The script itself, run by Python as cloud-init would: it reaches the
	// server with its credential, its install's digest and cloud-init's
	// result (here a fake /run/cloud-init, with an error).
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
	cmd := exec.Command("sh", f)
	cmd.Env = append(os.Environ(), "BOOTOPS_REPORT_FOREGROUND=1", "BOOTOPS_CLOUD_INIT_RUN="+run)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reported to") {
		t.Errorf("the script (%s): %v\n%s", py, err, out)
	}
	for _, m := range mem.Machines() {
		if m.Key == "lab/a" {
			a = m
		}
	}
	want := p.Sites[0].Nodes[0].Install
	if a.Installed == nil || a.Installed.Digest != want.Digest || !strings.HasPrefix(a.CloudInit, "error: ") || !strings.Contains(a.CloudInit, "scripts_user") {
		t.Errorf("after the script's report: installed %+v (want digest %s), cloud-init %q; last %q\n%s", a.Installed, want.Digest, a.CloudInit, a.Last.Message, out)
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
	s, _, _ := newServer(t, p)
	h := s.Handler()
	code, body := post(t, h, plan.AgentCheckInPath, script(t, h, "serial=SER-A&site=lab"),
		plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A", MACs: []string{"52:54:00:AA:00:01", "52:54:00:aa:00:02"}}})
	var r plan.CheckInReply
	json.Unmarshal([]byte(body), &r)
	if code != 200 || r.CloudInit == nil || !strings.Contains(r.CloudInit.NetworkConfig, "    match:\n      macaddress: \"52:54:00:aa:00:01\"\n") || strings.Contains(r.CloudInit.NetworkConfig, "e*") {
		t.Errorf("network-config: %d %+v", code, r.CloudInit)
	}
}
