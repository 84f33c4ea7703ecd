package http

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// The agent API is boot/agentapi's; these tests hold the seam: the
// server mounts it, and the boot token a served script carries is the one
// its check-in spends.

func post(t testing.TB, h http.Handler, path, token string, v any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(v)
	req := httptest.NewRequest("POST", path, bytes.NewReader(b))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// script fetches a machine's script the way iPXE does and returns its boot
// token.
func script(t testing.TB, h http.Handler, query string) string {
	t.Helper()
	got := body(t, get(t, h, "/ipxe?"+query))
	tok := tokenIn(got)
	if tok == "" {
		t.Fatalf("no boot token in the script for %s:\n%s", query, got)
	}
	return tok
}

// sessionOf is the session credential of a check-in's reply.
func sessionOf(t *testing.T, body string) string {
	t.Helper()
	var r plan.CheckInReply
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Session == "" {
		t.Fatalf("no session in the check-in reply %s (%v)", body, err)
	}
	return r.Session
}

// The agent API's routes are the server's: a node's script carries a
// token of its own each time, which its check-in spends once; an unknown
// machine's is bound to the key on its kernel line.
func TestScriptTokenChecksIn(t *testing.T) {
	p := testPlan("", "")
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Node: "a", Profile: "base", Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}
	p.Sites[0].Unknown.Workflow = plan.Workflow{Profile: "base", Actions: []plan.Action{{Action: "reboot", Name: "reboot"}}}
	s, mem, _ := newServer(t, p)
	h := s.Handler()
	for _, r := range []string{"POST " + plan.AgentCheckInPath, "POST " + plan.AgentEventsPath, "POST " + plan.ReportPath, "GET " + plan.QAStreamPath} {
		if !slices.Contains(s.Patterns(), r) {
			t.Errorf("%s is not mounted: %v", r, s.Patterns())
		}
	}
	t1, t2 := script(t, h, "serial=SER-A&site=lab"), script(t, h, "serial=SER-A&site=lab")
	if t1 == t2 {
		t.Fatalf("two scripts, one token: %s", t1)
	}
	in := plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}}
	code, b := post(t, h, plan.AgentCheckInPath, t1, in)
	if code != 200 || !strings.Contains(b, `"wipe-disk"`) {
		t.Fatalf("check-in with the script's token: %d %s", code, b)
	}
	if code, b := post(t, h, plan.AgentCheckInPath, t1, in); code != 401 || !strings.Contains(b, "already used") {
		t.Errorf("the token again: %d %s", code, b)
	}
	ev := plan.EventBatch{Site: "lab", Node: "a", Events: []plan.AgentEvent{{Seq: 1, Time: time.Now(), Type: plan.AgentStarted, Step: 1, Steps: 1, Action: "wipe"}}}
	if code, b := post(t, h, plan.AgentEventsPath, sessionOf(t, b), ev); code != 200 || !strings.Contains(b, `"acked": 1`) {
		t.Errorf("events with the session: %d %s", code, b)
	}
	// An unknown machine: its script's token is bound to its key.
	tok := script(t, h, "mac=52:54:00:00:00:99&site=lab")
	code, b = post(t, h, plan.AgentCheckInPath, tok, plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:99"})
	if code != 200 || !strings.Contains(b, `"reboot"`) {
		t.Errorf("an unknown machine's check-in: %d %s", code, b)
	}
	if evs := mem.Events("mac:52:54:00:00:00:99"); len(evs) != 2 || evs[0].Kind != status.KindScript || evs[1].Kind != status.KindAgent {
		t.Errorf("the unknown machine's timeline: %+v", evs)
	}
	if f := checker.Failures(); len(f) > 0 {
		t.Errorf("contract: %v", f)
	}
}

// Machines new to the server are turned away past their source address's
// budget, unrecorded and without a token; a registered node, and a machine
// already seen, are never turned away. A check-in spends from the same
// budget.
func TestNewcomersBudget(t *testing.T) {
	p := testPlan("", "")
	p.Sites[0].Unknown.Workflow = plan.Workflow{Profile: "base", Actions: []plan.Action{{Action: "reboot", Name: "reboot"}}}
	s, mem, _ := newServer(t, p)
	s.Machines.Known = mem.Known
	s.Machines.Newcomers = &status.Newcomers{Burst: 5, Every: time.Hour}
	s.Agent.Limits.Newcomers = s.Machines.Newcomers
	h := s.Handler()
	ok, turned := 0, 0
	for i := range 50 {
		r := get(t, h, fmt.Sprintf("/ipxe?serial=FAKE%04d&site=lab", i))
		switch r.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			turned++
			if b := body(t, r); tokenIn(b) != "" || !strings.Contains(b, "too many machines new to this server") || r.Header.Get("Retry-After") == "" {
				t.Fatalf("a newcomer over budget got %q", b)
			}
		default:
			t.Fatalf("request %d: %d", i, r.StatusCode)
		}
	}
	if ok != 5 || turned != 45 || len(mem.Machines()) != 5 || s.Machines.Newcomers.Denied() != 45 {
		t.Errorf("%d answered, %d turned away, %d machines kept, %d counted; want 5, 45, 5, 45", ok, turned, len(mem.Machines()), s.Machines.Newcomers.Denied())
	}
	// A machine already seen, and a registered node, with the budget spent.
	for _, q := range []string{"serial=FAKE0003&site=lab", "serial=SER-A&site=lab", "mac=52:54:00:00:00:0b&site=lab"} {
		if r := get(t, h, "/ipxe?"+q); r.StatusCode != http.StatusOK {
			t.Errorf("%s: %d with the address's budget spent", q, r.StatusCode)
		}
	}
	// A check-in of a machine never seen, from the same address: turned
	// away before its token is spent.
	tok := s.Secret.Mint(bootGrant("unknown-mac:52:54:00:00:00:77", time.Now().Add(time.Minute)))
	code, b := post(t, h, plan.AgentCheckInPath, tok, plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:77"})
	if code != http.StatusTooManyRequests {
		t.Errorf("check-in of a newcomer over budget: %d %s", code, b)
	}
}

func bootGrant(subject string, exp time.Time) boot.Grant {
	return boot.Grant{Kind: boot.KindBoot, Site: "lab", Subject: subject, ID: boot.NewID(), Expires: exp}
}
