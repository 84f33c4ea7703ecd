package agentapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/tpm"
	"github.com/bootops/bootops/tpm/tpmtest"
)

// BenchmarkReport: the installed OS's report of a node installed by the
// real flow (the script's token, the check-in, the install's events),
// through the server: the credential, the node's budget (the clock moves
// five minutes a report, so none is throttled), the proof of the
// recorded install, the event stored. Written to run on the commits
// before the authority issue too, for BENCHMARKS.md's cost of proof.
func BenchmarkReport(b *testing.B) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	n := p.Sites[0].Nodes[0]
	n.Artifacts.UserData, n.Artifacts.MetaData = "#cloud-config\n", "instance-id: a-0\n"
	n.Artifacts.Workflow = plan.Workflow{Node: "a", Actions: []plan.Action{{Action: "wipe-disk"}}}
	n.Install = plan.InstallOf(n)
	s, _ := newServer(b, p)
	now := time.Now()
	s.Now = func() time.Time { return now }
	saved := checkRoutes
	checkRoutes = nil
	h := s.Handler()
	checkRoutes = saved
	code, body := post(b, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}})
	r := reply(b, body)
	if code != 200 || r.CloudInit == nil {
		b.Fatalf("check-in: %d %s", code, body)
	}
	m := regexp.MustCompile(`url, token, site, node, ca, install = "[^"]*", "([^"]+)"`).FindStringSubmatch(r.CloudInit.Report)
	if m == nil {
		b.Fatal("no report credential")
	}
	evs := plan.EventBatch{Site: "lab", Node: "a", Events: []plan.AgentEvent{
		{Seq: 1, Time: now, Type: plan.AgentActionDone, Step: 1, Steps: 1, Action: "wipe-disk"},
		{Seq: 2, Time: now, Type: plan.AgentProvisioned}}}
	if code, body := post(b, h, plan.AgentEventsPath, r.Session, evs); code != 200 {
		b.Fatalf("install: %d %s", code, body)
	}
	rep := plan.OSReport{Site: "lab", Node: "a", InstanceID: "a-0", Hostname: "node-a", Kernel: "6.1.0", Install: n.Install.Digest, CloudInit: "done"}
	for b.Loop() {
		now = now.Add(5 * time.Minute)
		if code, body := post(b, h, plan.ReportPath, m[1], rep); code != 200 {
			b.Fatalf("report: %d %s", code, body)
		}
	}
}

// BenchmarkReportQuoted is BenchmarkReport for a node whose install is
// bound to its TPM: each report carries a quote by the install's key
// (made once, by a simulated TPM), which the server checks.
func BenchmarkReportQuoted(b *testing.B) {
	m, id, ek, _ := tpmtest.Machine(b, 5)
	s, h, _, cred, _ := tpmInstalled(b, m, id, ek)
	now := time.Now()
	s.Now = func() time.Time { return now }
	key, err := m.ReportKey()
	if err != nil {
		b.Fatal(err)
	}
	body, _ := json.Marshal(plan.OSReport{Site: "lab", Node: "t", InstanceID: "t-0", Hostname: "node-t", Kernel: "6.1.0", CloudInit: "done"})
	attest, sig := tpmtest.QuoteReport(b, key, tpm.ReportNonce(cred, body))
	for b.Loop() {
		now = now.Add(5 * time.Minute)
		req := httptest.NewRequest("POST", plan.ReportPath, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+cred)
		req.Header.Set(HeaderTPMQuote, base64.StdEncoding.EncodeToString(attest))
		req.Header.Set(HeaderTPMSignature, base64.StdEncoding.EncodeToString(sig))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("report: %d %s", w.Code, w.Body.String())
		}
	}
}
