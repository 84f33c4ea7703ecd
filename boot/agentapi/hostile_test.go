package agentapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// A check-in of a machine new to the server is turned away past its
// source address's budget (which it shares with the script requests),
// unrecorded and before its boot token is spent; a registered node, and
// a machine the store already keeps, are never turned away.
func TestNewcomersBudget(t *testing.T) {
	p := testPlan("", "")
	p.Sites[0].Unknown.Workflow = plan.Workflow{Profile: "base", Actions: []plan.Action{{Action: "reboot", Name: "reboot"}}}
	s, mem := newServer(t, p)
	s.Limits.Newcomers = &status.Newcomers{Burst: 2, Every: time.Hour}
	h := s.Handler()
	checkIn := func(key string, tok string) (int, string) {
		return post(t, h, plan.AgentCheckInPath, tok, plan.CheckIn{Site: "lab", Machine: key})
	}
	for i := range 2 {
		key := fmt.Sprintf("mac:52:54:00:00:01:%02x", i)
		if code, b := checkIn(key, machineToken(s, "lab", key)); code != http.StatusOK {
			t.Fatalf("newcomer %d within the budget: %d %s", i, code, b)
		}
	}
	const late = "mac:52:54:00:00:00:77"
	tok := machineToken(s, "lab", late)
	rec := httptest.NewRecorder()
	b, _ := json.Marshal(plan.CheckIn{Site: "lab", Machine: late})
	req := httptest.NewRequest("POST", plan.AgentCheckInPath, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+tok)
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "10" || !strings.Contains(rec.Body.String(), "too many machines new to this server from 192.0.2.1") {
		t.Errorf("a newcomer over the budget: %d %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body.String())
	}
	if _, ok := mem.Machine(late); ok || s.Limits.Newcomers.Denied() != 1 {
		t.Errorf("the newcomer over the budget was recorded (or not counted: %d)", s.Limits.Newcomers.Denied())
	}
	// A machine already kept, and a registered node, with the budget spent.
	known := "mac:52:54:00:00:01:01"
	if code, b := checkIn(known, machineToken(s, "lab", known)); code != http.StatusOK {
		t.Errorf("a machine already kept: %d %s", code, b)
	}
	if code, b := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}}); code != http.StatusOK {
		t.Errorf("a node: %d %s", code, b)
	}
	// Its token was not spent: with budget again, it checks in.
	s.Limits.Newcomers = nil
	if code, b := checkIn(late, tok); code != http.StatusOK {
		t.Errorf("the turned-away newcomer's token afterwards: %d %s", code, b)
	}
}

// A check-in's identity goes through the script request's parsers:
// anything that is not an identifier is refused before it is stored.
func TestCheckInIdentityValidated(t *testing.T) {
	p := testPlan("", "")
	p.Sites[0].Unknown.Workflow = plan.Workflow{Profile: "base", Actions: []plan.Action{{Action: "reboot", Name: "reboot"}}}
	s, mem := newServer(t, p)
	h := s.Handler()
	for name, in := range map[string]plan.CheckIn{
		"yaml in a serial":   {Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{Serial: "X\nkind: Secret"}},
		"escape in a serial": {Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{Serial: "X\x1b[2J"}},
		"long serial":        {Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{Serial: strings.Repeat("S", 65)}},
		"not a mac":          {Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:99", "<script>"}}},
		"not a uuid":         {Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{UUID: "1234; rm -rf /"}},
		"a machine key":      {Site: "lab", Machine: "mac:52:54:00:00:00:99\nserial:x"},
		"a made-up key kind": {Site: "lab", Machine: "node:a"},
		"many nics":          {Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{MACs: make([]string, 65)}},
	} {
		tok := machineToken(s, "lab", "mac:52:54:00:00:00:99")
		if code, b := post(t, h, plan.AgentCheckInPath, tok, in); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", name, code, b)
		}
	}
	for _, m := range mem.Machines() {
		for _, e := range mem.Events(m.Key) {
			if e.Kind == status.KindAgent {
				t.Errorf("a refused check-in was recorded: %+v", e)
			}
		}
	}
	// Placeholders are dropped, as a script request drops them.
	tok := machineToken(s, "lab", "mac:52:54:00:00:00:99")
	in := plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{Serial: "To-Be-Filled-By-O.E.M.", UUID: "00000000-0000-0000-0000-000000000000", MACs: []string{"52-54-00-00-00-99"}}}
	if code, b := post(t, h, plan.AgentCheckInPath, tok, in); code != http.StatusOK {
		t.Errorf("a check-in with placeholders: %d %s", code, b)
	}
}

// A session cannot outlive its node's install: presented at check-in for a
// node provisioned at its generation, it is an identity-conflict; and asking
// again never extends a session's life.
func TestSessionBounds(t *testing.T) {
	p := testPlan("", "")
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Node: "a", Profile: "base", Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}
	p.Sites[0].UnknownNodes = plan.PolicyHold
	now := time.Now()
	s, mem := newServer(t, p)
	s.Now = func() time.Time { return now }
	h := s.Handler()
	in := plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}}
	code, b := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), in)
	if code != 200 {
		t.Fatalf("check-in: %d %s", code, b)
	}
	sess := sessionOf(t, b)
	s.Provisioned = func(site, node string) (int, bool) { return 0, node == "a" }
	code, b = post(t, h, plan.AgentCheckInPath, sess, in)
	if code != http.StatusConflict || strings.Contains(b, "workflow") || !strings.Contains(b, "with a session credential") {
		t.Errorf("a provisioned node's session at check-in: %d %s", code, b)
	}
	if evs := mem.Events("lab/a"); !strings.HasPrefix(evs[len(evs)-1].Message, "identity-conflict: ") {
		t.Errorf("no identity-conflict on the node's timeline: %+v", evs[len(evs)-1])
	}

	// A held machine asks again and again, an hour apart: its session
	// ends when the first check-in said.
	held := plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:55"}
	code, b = post(t, h, plan.AgentCheckInPath, machineToken(s, "lab", "mac:52:54:00:00:00:55"), held)
	if code != 200 {
		t.Fatalf("held check-in: %d %s", code, b)
	}
	cred := sessionOf(t, b)
	first := expiryOf(t, cred)
	for range 3 {
		now = now.Add(time.Hour)
		code, b = post(t, h, plan.AgentCheckInPath, cred, held)
		if code != 200 {
			t.Fatalf("held again: %d %s", code, b)
		}
		cred = sessionOf(t, b)
		if got := expiryOf(t, cred); !got.Equal(first) {
			t.Fatalf("a check-in moved the session's end from %s to %s", first, got)
		}
	}
	now = first.Add(time.Second)
	if code, b := post(t, h, plan.AgentCheckInPath, cred, held); code != http.StatusUnauthorized || !strings.Contains(b, "expired") {
		t.Errorf("a session past its end: %d %s", code, b)
	}
}

// expiryOf reads a credential's expiry (its third field, unix seconds).
func expiryOf(t *testing.T, cred string) time.Time {
	t.Helper()
	var sec int64
	parts := strings.Split(cred, ".")
	if len(parts) != 5 {
		t.Fatalf("credential %q", cred)
	}
	fmt.Sscan(parts[2], &sec)
	return time.Unix(sec, 0)
}

// countingReader counts what the server read of a body.
type countingReader struct {
	n, size int
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= c.size {
		return 0, io.EOF
	}
	k := min(len(p), c.size-c.n)
	for i := range k {
		p[i] = ' '
	}
	c.n += k
	return k, nil
}

// Credentials are checked before a body is read, and a body is read only
// up to its route's bound.
func TestBodiesBounded(t *testing.T) {
	s, _ := newServer(t, testPlan("", ""))
	h := s.Handler()
	send := func(path, token string, size int) (int, int) {
		body := &countingReader{size: size}
		req := httptest.NewRequest("POST", path, body)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, body.n
	}
	future := time.Now().Add(time.Hour).Unix()
	forged := fmt.Sprintf("s1.0.%d.0123456789abcdef.%s", future, strings.Repeat("0", 43))
	for _, c := range []struct {
		name, path, token string
		code, maxRead     int
	}{
		{"events without a credential", plan.AgentEventsPath, "", 401, 0},
		{"events with a boot token", plan.AgentEventsPath, strings.Replace(forged, "s1", "b1", 1), 401, 0},
		{"events with an expired session", plan.AgentEventsPath, "s1.0.1.0123456789abcdef.x", 401, 0},
		{"check-in without a credential", plan.AgentCheckInPath, "", 401, 0},
		{"report without a credential", plan.ReportPath, "", 401, 0},
		{"events, a credential's shape, 8 MiB", plan.AgentEventsPath, forged, 413, maxEventsBody + 64<<10},
		{"check-in, a credential's shape, 8 MiB", plan.AgentCheckInPath, strings.Replace(forged, "s1", "b1", 1), 413, maxCheckInBody + 64<<10},
	} {
		code, read := send(c.path, c.token, 8<<20)
		if code != c.code || read > c.maxRead {
			t.Errorf("%s: %d after reading %d bytes; want %d after at most %d", c.name, code, read, c.code, c.maxRead)
		}
	}
}

// A batch of more events than the bound is refused whole; a long message
// is kept cut, saying how much went.
func TestEventBounds(t *testing.T) {
	p := testPlan("", "")
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Node: "a", Profile: "base", Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}
	s, mem := newServer(t, p)
	h := s.Handler()
	code, b := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}})
	if code != 200 {
		t.Fatal(code, b)
	}
	sess := sessionOf(t, b)
	many := make([]plan.AgentEvent, plan.MaxEventBatch+1)
	for i := range many {
		many[i] = plan.AgentEvent{Seq: uint64(i + 1), Type: plan.AgentLog, Message: "x"}
	}
	if code, b := post(t, h, plan.AgentEventsPath, sess, plan.EventBatch{Site: "lab", Node: "a", Events: many}); code != 413 {
		t.Errorf("%d events in a batch: %d %s", len(many), code, b)
	}
	long := plan.AgentEvent{Seq: 1, Type: plan.AgentLog, Message: strings.Repeat("y", 100<<10)}
	if code, b := post(t, h, plan.AgentEventsPath, sess, plan.EventBatch{Site: "lab", Node: "a", Events: []plan.AgentEvent{long}}); code != 200 {
		t.Fatalf("a long message: %d %s", code, b)
	}
	evs := mem.Events("lab/a")
	if m := evs[len(evs)-1].Message; len(m) > status.MaxMessage+64 || !strings.HasSuffix(m, "more bytes]") {
		t.Errorf("a 100 KiB message stored as %d bytes", len(m))
	}
}

// Anonymous check-ins over TLS that name a provisioned node (anyone can
// send its serial) are answered "boot from its disk", and cost the node
// no more than its budget of boot-plane events: its provisioned install
// stays on its timeline. What they say of how they booted is checked.
func TestAnonymousCheckInsBudgeted(t *testing.T) {
	testutil.Slow(t)
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	s, _ := newServer(t, p)
	store, err := status.Open(filepath.Join(t.TempDir(), "status.db"), status.Options{NodeTrafficBurst: 20, NodeTrafficEvery: time.Hour, PerMachine: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s.Store = store
	s.Provisioned = func(site, node string) (int, bool) { return 0, node == "a" }
	in := plan.Install{Digest: strings.Repeat("cd", 32)}
	if err := store.RecordSync(status.Event{Kind: status.KindAgent, Site: "lab", Node: "a", State: status.StateProvisioned, Install: &in, InstallID: "s1", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	c := plan.CheckIn{Site: "lab", Identity: plan.Identity{Serial: "SER-A"}, Boot: plan.BootInfo{Firmware: "uefi", Chain: plan.ChainUKI, TLS: true}}
	for i := range 300 {
		if code, body := postOverTLS(t, h, plan.AgentCheckInPath, "", c); code != 200 || !strings.Contains(body, "boot from its disk") {
			t.Fatalf("check-in %d: %d %s", i, code, body)
		}
	}
	for _, bad := range []plan.BootInfo{{Firmware: strings.Repeat("x", 10000)}, {Firmware: "uefi", Chain: "uki\tin sync"}} {
		c.Boot = bad
		if code, body := postOverTLS(t, h, plan.AgentCheckInPath, "", c); code != 400 || len(body) > 300 {
			t.Errorf("a check-in with boot %.40q: %d %.300s", bad.Firmware+bad.Chain, code, body)
		}
	}
	store.RecordSync() // what was queued is in
	evs := store.Events("lab/a")
	if len(evs) > 25 || evs[0].State != status.StateProvisioned {
		t.Errorf("node a's timeline after 300 anonymous check-ins: %d events, first %+v", len(evs), evs[0])
	}
	if m, _ := store.Machine("lab/a"); m.State != status.StateProvisioned || m.Installed == nil || m.Installed.Digest != in.Digest {
		t.Errorf("node a: %s %+v", m.State, m.Installed)
	}
}

// A session cannot name actions its workflow does not have (a QA
// verdict is kept by its action's name).
func TestEventsNameTheWorkflowsActions(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Node: "a", Actions: []plan.Action{{Action: "qa-disk"}, {Action: "reboot"}}}
	s, mem := newServer(t, p)
	h := s.Handler()
	code, body := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}})
	if code != 200 {
		t.Fatalf("check-in: %d %s", code, body)
	}
	sess := sessionOf(t, body)
	b := plan.EventBatch{Site: "lab", Node: "a", Events: []plan.AgentEvent{{Seq: 1, Type: plan.AgentLog, Step: 1, Steps: 2, Action: "qa-memory", Message: "pass"}}}
	if code, body := post(t, h, plan.AgentEventsPath, sess, b); code != 409 || !strings.Contains(body, `"qa-memory" at step 1; the workflow's is qa-disk`) {
		t.Errorf("an action the workflow does not have: %d %s", code, body)
	}
	if evs := mem.Events("lab/a"); !strings.HasPrefix(evs[len(evs)-1].Message, "agent events refused: ") || !evs[len(evs)-1].Error {
		t.Errorf("the refused batch is not on the node's timeline: %+v", evs[len(evs)-1])
	}
	b.Events[0].Action = "qa-disk"
	if code, body := post(t, h, plan.AgentEventsPath, sess, b); code != 200 {
		t.Errorf("the workflow's own action: %d %s", code, body)
	}
}
