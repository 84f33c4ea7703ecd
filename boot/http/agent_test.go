package http

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

func post(t *testing.T, h http.Handler, path, token string, v any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(v)
	req := httptest.NewRequest("POST", path, bytes.NewReader(b))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var c bytes.Buffer
	if json.Compact(&c, rec.Body.Bytes()) == nil {
		return rec.Code, c.String()
	}
	return rec.Code, rec.Body.String()
}

func TestAgentCheckIn(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Node: "a", Profile: "base", Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}
	p.Sites[0].Unknown.Workflow = plan.Workflow{Profile: "base", Actions: []plan.Action{{Action: "reboot", Name: "reboot"}}}
	s, mem, _ := newServer(t, p)
	counts := map[string]int{}
	s.AgentCount = func(r string) { counts[r]++ }
	h := s.Handler()
	id := plan.Identity{Serial: "SER-A", UUID: "01020304-0506-0708-090a-0b0c0d0e0f10", MACs: []string{"52:54:00:00:00:0a"}}

	for _, tc := range []struct {
		name, token string
		in          plan.CheckIn
		code        int
		want        string
	}{
		{"node", "tok-lab-a", plan.CheckIn{Site: "lab", Node: "a", Identity: id}, 200, `"workflow":{"node":"a","profile":"base","actions":[{"action":"wipe-disk"`},
		{"no token", "", plan.CheckIn{Site: "lab", Node: "a", Identity: id}, 401, "wrong or missing token for node a"},
		{"another node's token", "tok-lab-b", plan.CheckIn{Site: "lab", Node: "a", Identity: id}, 401, "wrong or missing token"},
		{"wrong serial", "tok-lab-a", plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-X"}}, 409,
			`node a is registered with serial SER-A (a.yaml:1), the machine reports serial "SER-X"`},
		{"another node's mac", "tok-lab-a", plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A", MACs: []string{"52:54:00:00:00:0b"}}}, 409,
			"mac 52:54:00:00:00:0b is registered to node b (b.yaml:1)"},
		{"unknown", "tok-lab-unknown-mac:52:54:00:00:00:99", plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{Serial: "NEW"}}, 200, `"actions":[{"action":"reboot"`},
		{"unknown, token of another machine", "tok-lab-unknown-mac:52:54:00:00:00:98", plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:99"}, 401, "wrong or missing token for the unknown machine"},
		{"no such site", "x", plan.CheckIn{Site: "nope", Node: "a"}, 404, `no site "nope"`},
	} {
		code, body := post(t, h, plan.AgentCheckInPath, tc.token, tc.in)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s\nwant %d and %q", tc.name, code, body, tc.code, tc.want)
		}
	}
	if counts[AgentUnauthorized] != 3 || counts[AgentMismatch] != 2 || counts[AgentOK] != 2 {
		t.Errorf("counts: %v", counts)
	}
	evs := mem.Events("lab/a")
	if len(evs) < 3 || evs[0].State != status.StateMicroOS || evs[len(evs)-1].State != status.StateMismatch {
		t.Errorf("node a's timeline: %+v", evs)
	}
	if evs := mem.Events("mac:52:54:00:00:00:99"); len(evs) != 1 || !strings.Contains(evs[0].Message, "default profile base") {
		t.Errorf("unknown machine's timeline: %+v", evs)
	}

	// Hold: the agent is told to wait.
	p.Sites[0].UnknownNodes = plan.PolicyHold
	code, body := post(t, h, plan.AgentCheckInPath, "tok-lab-unknown-mac:52:54:00:00:00:99", plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:99"})
	if code != 200 || !strings.Contains(body, `"hold":`) || strings.Contains(body, `"workflow"`) {
		t.Errorf("hold: %d %s", code, body)
	}
}

// fakeStore is a durable store for the test: it fails when told to.
type fakeStore struct {
	events []status.Event
	fail   bool
}

func (f *fakeStore) RecordSync(evs ...status.Event) error {
	if f.fail {
		return errDisk
	}
	f.events = append(f.events, evs...)
	return nil
}

var errDisk = &json.UnsupportedValueError{Str: "disk full"}

func TestAgentEvents(t *testing.T) {
	s, _, _ := newServer(t, testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32)))
	store := &fakeStore{}
	s.Store = store
	h := s.Handler()
	now := time.Now()
	batch := plan.EventBatch{Site: "lab", Node: "a", Events: []plan.AgentEvent{
		{Seq: 1, Time: now, Type: plan.AgentStarted, Action: "image", Step: 2, Steps: 4},
		{Seq: 2, Time: now, Type: plan.AgentProgress, Action: "image", Step: 2, Steps: 4, Bytes: 50e6, Total: 200e6, Rate: 25e6},
		{Seq: 3, Time: now, Type: plan.AgentFailed, Action: "image", Step: 2, Steps: 4, Message: "sha256 mismatch"},
	}}
	if code, body := post(t, h, plan.AgentEventsPath, "tok-lab-b", batch); code != 401 {
		t.Errorf("wrong token: %d %s", code, body)
	}
	code, body := post(t, h, plan.AgentEventsPath, "tok-lab-a", batch)
	if code != 200 || strings.TrimSpace(body) != `{"acked":3}` {
		t.Fatalf("events: %d %s", code, body)
	}
	want := []struct{ state, msg string }{
		{status.StateProvisioning, "started 2/4 image"},
		{status.StateProvisioning, "2/4 image: 50.0 MB of 200.0 MB (25%), 25.0 MB/s"},
		{status.StateFailed, "2/4 image failed: sha256 mismatch"},
	}
	if len(store.events) != 3 {
		t.Fatalf("stored %d events", len(store.events))
	}
	for i, w := range want {
		if e := store.events[i]; e.State != w.state || e.Message != w.msg || e.Key() != "lab/a" {
			t.Errorf("event %d: %+v, want %s %q", i, e, w.state, w.msg)
		}
	}
	// Nothing is acknowledged that was not stored.
	store.fail = true
	if code, body := post(t, h, plan.AgentEventsPath, "tok-lab-a", batch); code != http.StatusServiceUnavailable || strings.Contains(body, "acked") {
		t.Errorf("store failing: %d %s", code, body)
	}
}
