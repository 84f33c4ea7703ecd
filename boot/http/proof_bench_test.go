package http

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
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
	s, _, _ := newServer(b, p)
	now := time.Now()
	s.Now = func() time.Time { return now }
	saved := checkRoutes
	checkRoutes = nil
	h := s.Handler()
	checkRoutes = saved
	code, body := post(b, h, plan.AgentCheckInPath, script(b, h, "serial=SER-A&site=lab"), plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}})
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
