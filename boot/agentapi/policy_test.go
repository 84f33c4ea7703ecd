package agentapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// policyPlan is testPlan with workflows: node a (serial SER-A) installs,
// node b (MAC …:0b, generation 2) has one too, node m expects 2 GiB of
// memory, node c is held at a TLS site's; unknown machines provision at
// lab, are held at "hold".
func policyPlan() *plan.Plan {
	p := testPlan("", "")
	lab := p.Sites[0]
	for _, n := range lab.Nodes {
		n.Artifacts.Workflow = plan.Workflow{Node: n.Name, Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}
	}
	m := &plan.Node{Name: "m", Site: "lab", Profile: "base", Source: "m.yaml:1", Identity: plan.Identity{Serial: "SER-M"}, Expect: &plan.Expect{Memory: ">=2Gi"}}
	lab.Nodes = append(lab.Nodes, m)
	lab.Unknown.Workflow = plan.Workflow{Profile: "base", Actions: []plan.Action{{Action: "reboot", Name: "reboot"}}}
	lab.Peers = &plan.Peers{PerMachine: 2}
	hold := &plan.Site{Name: "hold", UnknownNodes: plan.PolicyHold, Nodes: []*plan.Node{}}
	wf := plan.Workflow{Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}
	edge := &plan.Site{Name: "edge", UnknownNodes: plan.PolicyHold, Remote: &plan.Remote{URL: "https://boot.example.net:8443"}, Nodes: []*plan.Node{
		{Name: "e", Site: "edge", Profile: "base", Source: "e.yaml:1", Identity: plan.Identity{Serial: "SER-E"}, Artifacts: plan.Artifacts{Workflow: wf}},
		{Name: "t", Site: "edge", Profile: "base", Source: "t.yaml:1", Identity: plan.Identity{Serial: "SER-T", TPM: &plan.TPMIdentity{EK: "sha256:" + strings.Repeat("ab", 32)}}, Artifacts: plan.Artifacts{Workflow: wf}},
	}}
	p.Sites = append(p.Sites, hold, edge)
	return p
}

// TestPolicy calls the check-in's policy directly: each credential path
// (a node's boot token, an unknown machine's, a held machine's session, a
// check-in by identity over TLS) and each refusal, with what the machine
// is told when it is admitted.
func TestPolicy(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	mint := func(kind, site, subject string, gen int, id string, exp time.Time) string {
		return testSecret.Mint(boot.Grant{Kind: kind, Site: site, Subject: subject, Generation: gen, ID: id, Expires: exp})
	}
	later := now.Add(time.Hour)
	tokA := mint(boot.KindBoot, "lab", "a", 0, "t-a", later)
	tokB2 := mint(boot.KindBoot, "lab", "b", 2, "t-b", later)
	tokB1 := mint(boot.KindBoot, "lab", "b", 1, "t-b1", later)
	tokM := mint(boot.KindBoot, "lab", "m", 0, "t-m", later)
	tok99 := mint(boot.KindBoot, "lab", "unknown-mac:52:54:00:00:00:99", 0, "t-99", later)
	expired := mint(boot.KindBoot, "lab", "a", 0, "t-old", now.Add(-time.Second))
	held := mint(boot.KindSession, "hold", "unknown-mac:52:54:00:00:00:97", 0, "s-97", later)
	replaced := mint(boot.KindSession, "hold", "unknown-mac:52:54:00:00:00:96", 0, "s-old", later)
	sessA := mint(boot.KindSession, "lab", "a", 0, "s-a", later)
	mediaE := mint(boot.KindMedia, "edge", "e", 0, "m-e", later)
	mediaOld := mint(boot.KindMedia, "edge", "e", 0, "m-old", now.Add(-time.Second))
	sessE := mint(boot.KindSession, "edge", "e", 0, "s-e", later)
	sessions := map[string]status.Session{
		"edge/e":                             {ID: "s-e", Expires: later, Unproven: true},
		"hold/unknown-mac:52:54:00:00:00:97": {ID: "s-97", Expires: later},
		"hold/unknown-mac:52:54:00:00:00:96": {ID: "s-new", Expires: later},
		"lab/a":                              {ID: "s-a", Expires: later},
	}
	serialA := plan.Identity{Serial: "SER-A"}
	small := &plan.Inventory{Memory: plan.MemoryInfo{Total: 1 << 30}}

	for _, c := range []struct {
		name        string
		req         request
		noPlan      bool
		provisioned string // a node provisioned at its generation
		swarm       bool
		// A refusal: its status, words in its answer, its note on the
		// timeline ("" for none).
		status       int
		reason, note string
		// Admitted: words of what it is told, its session's subject, and
		// whether it goes on with a session.
		told, subject string
		resumed       bool
	}{
		// What a node's boot token proves.
		{name: "node, its boot token", req: request{credential: tokA, body: plan.CheckIn{Site: "lab", Node: "a", Identity: serialA}},
			told: "workflow", subject: "a"},
		{name: "node, peers shared", req: request{credential: tokA, body: plan.CheckIn{Site: "lab", Node: "a", Identity: serialA}}, swarm: true,
			told: "peers", subject: "a"},
		{name: "node, booted for an older generation", req: request{credential: tokB1, body: plan.CheckIn{Site: "lab", Node: "b", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:0b"}}}},
			told: "reprovision generation is 2, this machine booted for 1: reboot it", subject: "b"},
		{name: "node, expectations not met", req: request{credential: tokM, body: plan.CheckIn{Site: "lab", Node: "m", Identity: plan.Identity{Serial: "SER-M"}, Inventory: small}},
			told: "expectations not met: memory: expected >=2Gi, found 1Gi", subject: "m"},
		// An unknown machine's token, bound to its key.
		{name: "unknown machine, its boot token", req: request{credential: tok99, body: plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:99"}},
			told: "workflow", subject: "unknown-mac:52:54:00:00:00:99"},
		// A held machine asks again with its session.
		{name: "held machine, its session", req: request{credential: held, body: plan.CheckIn{Site: "hold", Machine: "mac:52:54:00:00:00:97"}},
			told: "is held", subject: "unknown-mac:52:54:00:00:00:97", resumed: true},
		// Over TLS, no credential: found by what it reports.
		{name: "by identity, a node", req: request{tls: true, body: plan.CheckIn{Site: "lab", Identity: serialA}},
			told: "workflow", subject: "a"},
		{name: "by identity, an unknown machine", req: request{tls: true, body: plan.CheckIn{Site: "lab", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:42"}}}},
			told: "workflow", subject: "unknown-mac:52:54:00:00:00:42"},
		{name: "by identity, a provisioned node: its disk", req: request{tls: true, body: plan.CheckIn{Site: "lab", Identity: serialA}}, provisioned: "a",
			told: "node a is provisioned (generation 0): boot from its disk"},

		// A remote site: over the Internet, what a machine reports proves
		// nothing; a media credential (or a TPM, which gate checks) does.
		{name: "remote, by identity: held", req: request{tls: true, body: plan.CheckIn{Site: "edge", Identity: plan.Identity{Serial: "SER-E"}}},
			told: "over the Internet a serial, a UUID or a MAC proves nothing", subject: "e"},
		{name: "remote, asking again with the session that held it", req: request{tls: true, credential: sessE, body: plan.CheckIn{Site: "edge", Node: "e", Identity: plan.Identity{Serial: "SER-E"}}},
			told: "proves nothing", subject: "e", resumed: true},
		{name: "remote, a media credential", req: request{tls: true, credential: mediaE, body: plan.CheckIn{Site: "edge", Node: "e", Identity: plan.Identity{Serial: "SER-E"}}},
			told: "workflow", subject: "e"},
		{name: "remote, by identity with a TPM in Git: gate asks its proof", req: request{tls: true, body: plan.CheckIn{Site: "edge", Identity: plan.Identity{Serial: "SER-T"}}},
			told: "workflow", subject: "t"},

		// Refusals.
		{name: "a media credential of another node", req: request{tls: true, credential: mediaE, body: plan.CheckIn{Site: "edge", Node: "t", Identity: plan.Identity{Serial: "SER-T"}}},
			status: http.StatusUnauthorized, reason: "node t: wrong or missing credential"},
		{name: "a media credential expired", req: request{tls: true, credential: mediaOld, body: plan.CheckIn{Site: "edge", Node: "e", Identity: plan.Identity{Serial: "SER-E"}}},
			status: http.StatusUnauthorized, reason: "the credential expired"},
		{name: "no plan yet", req: request{credential: tokA, body: plan.CheckIn{Site: "lab", Node: "a"}}, noPlan: true,
			status: http.StatusServiceUnavailable, reason: "no plan loaded yet"},
		{name: "no such site", req: request{credential: tokA, body: plan.CheckIn{Site: "nope", Node: "a"}},
			status: http.StatusNotFound, reason: `no site "nope"`},
		{name: "no such node", req: request{credential: tokA, body: plan.CheckIn{Site: "lab", Node: "z"}},
			status: http.StatusUnauthorized, reason: "no node z on site lab"},
		{name: "no credential over plain HTTP", req: request{body: plan.CheckIn{Site: "lab", Node: "a", Identity: serialA}},
			status: http.StatusUnauthorized, reason: "check-in: node a: wrong or missing credential"},
		{name: "another node's token", req: request{credential: tokB2, body: plan.CheckIn{Site: "lab", Node: "a", Identity: serialA}},
			status: http.StatusUnauthorized, reason: "node a: wrong or missing credential"},
		{name: "another machine's token", req: request{credential: tok99, body: plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:98"}},
			status: http.StatusUnauthorized, reason: "the unknown machine mac:52:54:00:00:00:98: wrong or missing credential"},
		{name: "an expired token", req: request{credential: expired, body: plan.CheckIn{Site: "lab", Node: "a", Identity: serialA}},
			status: http.StatusUnauthorized, reason: "the credential expired"},
		{name: "a session replaced by a newer check-in", req: request{credential: replaced, body: plan.CheckIn{Site: "hold", Machine: "mac:52:54:00:00:00:96"}},
			status: http.StatusUnauthorized, reason: "replaced by a newer check-in"},
		{name: "an arm64 agent, an x86_64 node", req: request{credential: tokA, body: plan.CheckIn{Site: "lab", Node: "a", Identity: serialA, Arch: "arm64"}},
			status: http.StatusConflict, reason: "check-in refused: the agent runs on arm64 (arm64) and node a is registered x86_64 (profile base, os.arch)", note: "agent refused: the agent runs on arm64"},
		{name: "an amd64 agent, an x86_64 node", req: request{credential: tokA, body: plan.CheckIn{Site: "lab", Node: "a", Identity: serialA, Arch: "amd64"}},
			told: "workflow", subject: "a"},
		{name: "not the node's serial", req: request{credential: tokA, body: plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-X"}}},
			status: http.StatusConflict, reason: `check-in refused: node a is registered with serial SER-A (a.yaml:1), the machine reports serial "SER-X"`, note: "agent refused: node a is registered"},
		{name: "another node's MAC", req: request{credential: tokA, body: plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A", MACs: []string{"52:54:00:00:00:0b"}}}},
			status: http.StatusConflict, reason: "mac 52:54:00:00:00:0b is registered to node b", note: "agent refused: "},
		{name: "by identity, two nodes' identifiers", req: request{tls: true, body: plan.CheckIn{Site: "lab", Identity: plan.Identity{Serial: "SER-A", MACs: []string{"52:54:00:00:00:0b"}}}},
			status: http.StatusConflict, reason: "check-in refused: ", note: "agent refused: "},
		{name: "by identity, nothing to tell it by", req: request{tls: true, body: plan.CheckIn{Site: "lab"}},
			status: http.StatusConflict, reason: "it reports no MAC, UUID or serial", note: "agent refused: "},
		{name: "a provisioned node, a token minted before", req: request{credential: tokA, ip: "198.18.0.9", body: plan.CheckIn{Site: "lab", Node: "a", Identity: serialA}}, provisioned: "a",
			status: http.StatusConflict, reason: "node a is provisioned (generation 0), yet a machine at 198.18.0.9 checks in as it with a token minted before", note: "identity-conflict: node a is provisioned"},
		{name: "a provisioned node, a session credential", req: request{credential: sessA, body: plan.CheckIn{Site: "lab", Node: "a", Identity: serialA}}, provisioned: "a",
			status: http.StatusConflict, reason: "with a session credential", note: "identity-conflict: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := facts{plan: policyPlan(), now: now, secret: testSecret, swarm: c.swarm,
				session:     func(key string) (status.Session, bool) { s, ok := sessions[key]; return s, ok },
				provisioned: func(site, node string) (int, bool) { return 0, node == c.provisioned },
			}
			if c.noPlan {
				f.plan = nil
			}
			v := policy(f, c.req)
			if c.status != 0 {
				r := v.refusal
				if r == nil || r.status != c.status || !strings.Contains(r.reason, c.reason) || (c.note == "") != (r.note == "") || !strings.HasPrefix(r.note, c.note) {
					t.Fatalf("refusal %+v, want %d %q, note %q", r, c.status, c.reason, c.note)
				}
				if (r.status == http.StatusServiceUnavailable) != (r.result == "") {
					t.Errorf("counted as %q", r.result)
				}
				return
			}
			if v.refusal != nil {
				t.Fatalf("refused: %+v", v.refusal)
			}
			if v.final != nil {
				if !strings.Contains(v.final.Hold, c.told) || v.final.Workflow != nil {
					t.Errorf("final answer %+v, want %q", v.final, c.told)
				}
				return
			}
			d := v.decision
			got := d.reply.Hold
			switch {
			case d.reply.Workflow != nil && d.reply.Peers != nil:
				got = "workflow, peers"
			case d.reply.Workflow != nil:
				got = "workflow"
			case d.state == status.StateHeld:
				got += " (is held)"
			}
			if !strings.Contains(got, c.told) || v.who.subject != c.subject || (v.who.resumed != nil) != c.resumed {
				t.Errorf("told %q (subject %q, resumed %v), want %q (%q, %v)", got, v.who.subject, v.who.resumed != nil, c.told, c.subject, c.resumed)
			}
			if v.event.Kind != status.KindAgent || v.event.Site != c.req.body.Site {
				t.Errorf("event %+v", v.event)
			}
		})
	}
}

// The policy writes nothing: the same check-in judged twice is judged
// alike, and a node's install (its session's) is what Git says now.
func TestPolicyIsPure(t *testing.T) {
	p := policyPlan()
	tok := testSecret.Mint(boot.Grant{Kind: boot.KindBoot, Site: "lab", Subject: "a", ID: "t", Expires: time.Now().Add(time.Hour)})
	f := facts{plan: p, now: time.Now(), secret: testSecret,
		session:     func(string) (status.Session, bool) { return status.Session{}, false },
		provisioned: func(string, string) (int, bool) { return 0, false }}
	req := request{credential: tok, body: plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}}}
	v1, v2 := policy(f, req), policy(f, req)
	if v1.refusal != nil || v1.decision.install == nil || *v1.decision.install != p.Sites[0].Nodes[0].Install || !v1.decision.installing {
		t.Fatalf("verdict %+v", v1)
	}
	if v1.decision.message != v2.decision.message || v1.who.key != v2.who.key || v1.who.grant != v2.who.grant {
		t.Errorf("two verdicts on one check-in: %+v\n%+v", v1, v2)
	}
}
