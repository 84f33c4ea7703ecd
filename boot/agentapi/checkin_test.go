package agentapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

func TestAgentCheckIn(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Node: "a", Profile: "base", Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}
	p.Sites[0].Unknown.Workflow = plan.Workflow{Profile: "base", Actions: []plan.Action{{Action: "reboot", Name: "reboot"}}}
	s, mem := newServer(t, p)
	counts := map[string]int{}
	s.Count = func(r string) { counts[r]++ }
	h := s.Handler()
	id := plan.Identity{Serial: "SER-A", UUID: "01020304-0506-0708-090a-0b0c0d0e0f10", MACs: []string{"52:54:00:00:00:0a"}}
	tokA := func() string { return nodeToken(s, "lab", "a") }
	tokB := nodeToken(s, "lab", "b")
	tokUnknown := machineToken(s, "lab", "mac:52:54:00:00:00:99")
	tokOther := machineToken(s, "lab", "mac:52:54:00:00:00:98")

	for _, tc := range []struct {
		name, token string
		in          plan.CheckIn
		code        int
		want        string
	}{
		{"node", tokA(), plan.CheckIn{Site: "lab", Node: "a", Identity: id}, 200, `"workflow":{"node":"a","profile":"base","actions":[{"action":"wipe-disk"`},
		// Refused before the body is read: it names no node yet.
		{"no token", "", plan.CheckIn{Site: "lab", Node: "a", Identity: id}, 401, "check-in: wrong or missing credential"},
		{"a token that is none", "b1.x", plan.CheckIn{Site: "lab", Node: "a", Identity: id}, 401, "check-in: wrong or missing credential"},
		{"another node's token", tokB, plan.CheckIn{Site: "lab", Node: "a", Identity: id}, 401, "wrong or missing credential"},
		{"wrong serial", tokA(), plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-X"}}, 409,
			`node a is registered with serial SER-A (a.yaml:1), the machine reports serial "SER-X"`},
		{"another node's mac", tokA(), plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A", MACs: []string{"52:54:00:00:00:0b"}}}, 409,
			"mac 52:54:00:00:00:0b is registered to node b (b.yaml:1)"},
		{"unknown", tokUnknown, plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{Serial: "NEW"}}, 200, `"actions":[{"action":"reboot"`},
		{"unknown, token of another machine", tokOther, plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:99"}, 401, "the unknown machine mac:52:54:00:00:00:99: wrong or missing credential"},
		{"no such site", tokB, plan.CheckIn{Site: "nope", Node: "a"}, 404, `no site "nope"`},
	} {
		code, body := post(t, h, plan.AgentCheckInPath, tc.token, tc.in)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s\nwant %d and %q", tc.name, code, body, tc.code, tc.want)
		}
		if code == 200 {
			// The session is for this machine's events, and no one else's.
			sess := sessionOf(t, body)
			subj := boot.Subject(tc.in.Node, tc.in.Machine)
			if _, err := testSecret.Verify(sess, boot.KindSession, "lab", subj, time.Now()); err != nil {
				t.Errorf("%s: session %q: %v", tc.name, sess, err)
			}
		}
	}
	if counts[ResultUnauthorized] != 4 || counts[ResultMismatch] != 2 || counts[ResultOK] != 2 {
		t.Errorf("counts: %v", counts)
	}
	evs := mem.Events("lab/a")
	var states []string
	for _, e := range evs {
		states = append(states, e.State)
	}
	if len(evs) < 3 || !slices.Contains(states, status.StateMicroOS) || evs[len(evs)-1].State != status.StateMismatch {
		t.Errorf("node a's timeline: %+v", evs)
	}
	if evs := mem.Events("mac:52:54:00:00:00:99"); len(evs) != 1 || !strings.Contains(evs[0].Message, "default profile base") {
		t.Errorf("unknown machine's timeline: %+v", evs)
	}

	// Hold: the agent is told to wait, with a session it checks in with
	// again (its boot token is spent).
	p.Sites[0].UnknownNodes = plan.PolicyHold
	in := plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:00:00:97"}
	code, body := post(t, h, plan.AgentCheckInPath, machineToken(s, "lab", "mac:52:54:00:00:00:97"), in)
	if code != 200 || !strings.Contains(body, `"hold":`) || strings.Contains(body, `"workflow"`) {
		t.Fatalf("hold: %d %s", code, body)
	}
	code, body = post(t, h, plan.AgentCheckInPath, sessionOf(t, body), in)
	if code != 200 || !strings.Contains(body, `"hold":`) {
		t.Errorf("held, again with the session: %d %s", code, body)
	}
	// Released by policy: the same session now gets the workflow.
	p.Sites[0].UnknownNodes = plan.PolicyProvision
	code, body = post(t, h, plan.AgentCheckInPath, sessionOf(t, body), in)
	if code != 200 || !strings.Contains(body, `"workflow"`) {
		t.Errorf("released: %d %s", code, body)
	}
}

// A boot token is good until its expiry, for the generation it was
// minted at (boot/http's tests check that each script carries its own).
func TestBootTokenExpiry(t *testing.T) {
	p := testPlan("", "")
	s, _ := newServer(t, p)
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	s.Now = func() time.Time { return now }
	h := s.Handler()
	in := plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}}
	t1 := nodeToken(s, "lab", "a")
	now = now.Add(bootTokenTTL + time.Second)
	if code, body := post(t, h, plan.AgentCheckInPath, t1, in); code != 401 || !strings.Contains(body, "expired") {
		t.Errorf("expired token: %d %s", code, body)
	}
	t3 := nodeToken(s, "lab", "a")
	if code, body := post(t, h, plan.AgentCheckInPath, t3, in); code != 200 {
		t.Fatalf("fresh token: %d %s", code, body)
	}
	// The node's generation moved on since its script: told to reboot.
	t4 := nodeToken(s, "lab", "b")
	p.Sites[0].Nodes[1].Reprovision = 3
	code, body := post(t, h, plan.AgentCheckInPath, t4, plan.CheckIn{Site: "lab", Node: "b", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:0b"}}})
	if code != 200 || !strings.Contains(body, "reprovision generation is 3, this machine booted for 2: reboot it") || strings.Contains(body, "workflow") {
		t.Errorf("stale generation: %d %s", code, body)
	}
}

// The hostile look (issue 16, item 8): with a node's script, a check-in
// and one posted event, anyone on the LAN used to take over a node's
// provisioning. Each step now fails, and is seen.
func TestAgentTakeoverRefused(t *testing.T) {
	p := testPlan("", "")
	wf := plan.Workflow{Node: "a", Profile: "base", Actions: []plan.Action{
		{Action: "wipe-disk", Name: "wipe"}, {Action: "image-to-disk", Name: "image"}, {Action: "cloud-init", Name: "seed"}, {Action: "reboot", Name: "reboot"}}}
	p.Sites[0].Nodes[0].Artifacts.Workflow = wf
	p.Sites[0].Nodes[0].Install = plan.InstallOf(p.Sites[0].Nodes[0])
	s, mem := newServer(t, p)
	counts := map[string]int{}
	s.Count = func(r string) { counts[r]++ }
	h := s.Handler()
	in := plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}}
	provisioned := func() bool {
		for _, e := range mem.Events("lab/a") {
			if e.State == status.StateProvisioned {
				return true
			}
		}
		return false
	}
	conflicts := func() int {
		n := 0
		for _, e := range mem.Events("lab/a") {
			if e.Error && strings.HasPrefix(e.Message, "identity-conflict: ") {
				n++
			}
		}
		return n
	}
	ev := func(seq uint64, typ string, step int) plan.AgentEvent {
		e := plan.AgentEvent{Seq: seq, Time: time.Now(), Type: typ, Step: step}
		if step > 0 {
			e.Steps, e.Action = 4, wf.Actions[step-1].Action
		}
		return e
	}
	batch := func(evs ...plan.AgentEvent) plan.EventBatch {
		return plan.EventBatch{Site: "lab", Node: "a", Events: evs}
	}

	// The real machine boots and checks in.
	boot := nodeToken(s, "lab", "a")
	code, body := post(t, h, plan.AgentCheckInPath, boot, in)
	if code != 200 {
		t.Fatalf("check-in: %d %s", code, body)
	}
	real := sessionOf(t, body)

	// 1. The token read off the wire, presented again: refused, and an
	// identity-conflict on the node's timeline.
	if code, body := post(t, h, plan.AgentCheckInPath, boot, in); code != 401 || !strings.Contains(body, "already used") || strings.Contains(body, "workflow") {
		t.Errorf("token reuse: %d %s", code, body)
	}
	if conflicts() != 1 || counts[ResultConflict] != 1 {
		t.Errorf("token reuse: %d identity-conflict events, counts %v", conflicts(), counts)
	}
	// 2. An event without a session: the boot token, or nothing.
	for _, tok := range []string{boot, "", "s1.0.99999999999.0123456789abcdef.00000000000000000000000000000000"} {
		if code, body := post(t, h, plan.AgentEventsPath, tok, batch(ev(1, plan.AgentProvisioned, 0))); code != 401 {
			t.Errorf("event with %q: %d %s", tok, code, body)
		}
	}
	// 3. A jump to provisioned, even with a session: refused.
	if code, body := post(t, h, plan.AgentEventsPath, real, batch(ev(1, plan.AgentProvisioned, 0))); code != 409 || !strings.Contains(body, "after 0 of the 3 actions") {
		t.Errorf("jump to provisioned: %d %s", code, body)
	}
	// Actions out of order: refused.
	if code, body := post(t, h, plan.AgentEventsPath, real, batch(ev(2, plan.AgentActionDone, 2))); code != 409 || !strings.Contains(body, "action 2 reported done while action 1 of 4 is the one running") {
		t.Errorf("done out of order: %d %s", code, body)
	}
	if provisioned() {
		t.Fatal("the node was marked provisioned")
	}

	// The real machine's workflow, in order: wipe and image done.
	code, body = post(t, h, plan.AgentEventsPath, real, batch(ev(10, plan.AgentStarted, 1), ev(11, plan.AgentActionDone, 1), ev(12, plan.AgentStarted, 2), ev(13, plan.AgentActionDone, 2)))
	if code != 200 || !strings.Contains(body, `"acked":13`) {
		t.Fatalf("the workflow's events: %d %s", code, body)
	}
	// Resent after a lost acknowledgement: acknowledged again.
	if code, body := post(t, h, plan.AgentEventsPath, real, batch(ev(12, plan.AgentStarted, 2), ev(13, plan.AgentActionDone, 2))); code != 200 {
		t.Errorf("resend: %d %s", code, body)
	}
	// Still one action short of provisioned.
	if code, body := post(t, h, plan.AgentEventsPath, real, batch(ev(14, plan.AgentProvisioned, 0))); code != 409 {
		t.Errorf("provisioned one action early: %d %s", code, body)
	}

	// 4. A second machine claims the node with a fresh script of its own
	// (the residual risk: it can answer PXE as the serial). Its check-in
	// is seen as an identity-conflict, and replaces the first session...
	code, body = post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), in)
	if code != 200 {
		t.Fatalf("second claim: %d %s", code, body)
	}
	second := sessionOf(t, body)
	if conflicts() != 2 || !strings.Contains(mem.Events("lab/a")[len(mem.Events("lab/a"))-2].Message, "(2 of 4 actions done): the newer check-in replaces it") {
		t.Errorf("second claim: %d conflicts: %+v", conflicts(), mem.Events("lab/a"))
	}
	// ... so the first machine's events are refused (visible on it), and
	// the second starts from the first action.
	if code, body := post(t, h, plan.AgentEventsPath, real, batch(ev(15, plan.AgentActionDone, 3))); code != 401 || !strings.Contains(body, "replaced by a newer check-in") {
		t.Errorf("superseded session: %d %s", code, body)
	}
	if code, _ := post(t, h, plan.AgentEventsPath, second, batch(ev(20, plan.AgentProvisioned, 0))); code != 409 || provisioned() {
		t.Errorf("second claim jumps to provisioned: %d, provisioned %v", code, provisioned())
	}
	var all []plan.AgentEvent
	for i := 1; i <= 3; i++ {
		all = append(all, ev(uint64(30+2*i), plan.AgentStarted, i), ev(uint64(31+2*i), plan.AgentActionDone, i))
	}
	all = append(all, ev(40, plan.AgentProvisioned, 0), ev(41, plan.AgentStarted, 4))
	if code, body := post(t, h, plan.AgentEventsPath, second, batch(all...)); code != 200 || !provisioned() {
		t.Errorf("a whole workflow: %d %s, provisioned %v", code, body, provisioned())
	}
	// The node's disk holds what the session's workflow installed: the
	// install the check-in handed out, not anything the agent said.
	for _, m := range mem.Machines() {
		if want := p.Sites[0].Nodes[0].Install; m.Key == "lab/a" && (m.Installed == nil || *m.Installed != want) {
			t.Errorf("installed %+v, want %+v", m.Installed, want)
		}
	}
	if counts[ResultRefused] != 4 {
		t.Errorf("refused batches: %v", counts)
	}

	// 5. Once provisioned, an unused token minted earlier claims the node:
	// refused, and an identity-conflict.
	s.Provisioned = func(site, node string) (int, bool) { return 0, node == "a" }
	late := s.Secret.Mint(bootGrant("a", time.Now().Add(time.Minute)))
	code, body = post(t, h, plan.AgentCheckInPath, late, in)
	if code != 409 || !strings.Contains(body, "node a is provisioned (generation 0)") || strings.Contains(body, "workflow") {
		t.Errorf("claim of a provisioned node: %d %s", code, body)
	}
}

func bootGrant(node string, exp time.Time) boot.Grant {
	return boot.Grant{Kind: boot.KindBoot, Site: "lab", Subject: node, ID: boot.NewID(), Expires: exp}
}

// fakeStore is a durable store for the test: it keeps what it was given
// durably, and fails when told to.
type fakeStore struct {
	memStore
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
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Actions: []plan.Action{{Action: "wipe"}, {Action: "image"}, {Action: "qa-disk"}, {Action: "reboot"}}}
	s, mem := newServer(t, p)
	store := &fakeStore{memStore: memStore{Memory: mem, MemorySessions: &status.MemorySessions{}}}
	s.Store = store
	h := s.Handler()
	now := time.Now()
	_, reply := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}})
	sess := sessionOf(t, reply)
	store.events = nil
	batch := plan.EventBatch{Site: "lab", Node: "a", Events: []plan.AgentEvent{
		{Seq: 1, Time: now, Type: plan.AgentActionDone, Action: "wipe", Step: 1, Steps: 4},
		{Seq: 2, Time: now, Type: plan.AgentStarted, Action: "image", Step: 2, Steps: 4},
		{Seq: 3, Time: now, Type: plan.AgentProgress, Action: "image", Step: 2, Steps: 4, Bytes: 50e6, Total: 200e6, Rate: 25e6},
		{Seq: 4, Time: now, Type: plan.AgentFailed, Action: "image", Step: 2, Steps: 4, Message: "sha256 mismatch"},
	}}
	if code, body := post(t, h, plan.AgentEventsPath, nodeToken(s, "lab", "b"), batch); code != 401 {
		t.Errorf("wrong token: %d %s", code, body)
	}
	code, body := post(t, h, plan.AgentEventsPath, sess, batch)
	if code != 200 || strings.TrimSpace(body) != `{"acked":4}` {
		t.Fatalf("events: %d %s", code, body)
	}
	want := []struct{ state, msg string }{
		{status.StateProvisioning, "done 1/4 wipe"},
		{status.StateProvisioning, "started 2/4 image"},
		{status.StateProvisioning, "2/4 image: 50.0 MB of 200.0 MB (25%), 25.0 MB/s"},
		{status.StateFailed, "2/4 image failed: sha256 mismatch"},
	}
	if len(store.events) != 4 {
		t.Fatalf("stored %d events", len(store.events))
	}
	for i, w := range want {
		if e := store.events[i]; e.State != w.state || e.Message != w.msg || e.Key() != "lab/a" {
			t.Errorf("event %d: %+v, want %s %q", i, e, w.state, w.msg)
		}
	}
	// Nothing is acknowledged that was not stored.
	store.fail = true
	if code, body := post(t, h, plan.AgentEventsPath, sess, batch); code != http.StatusServiceUnavailable || strings.Contains(body, "acked") {
		t.Errorf("store failing: %d %s", code, body)
	}
}
