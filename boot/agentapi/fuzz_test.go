package agentapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/plan"
)

// fuzzServer is a fresh server for one fuzz input: node a's workflow has
// four actions, unknown machines are provisioned. Fuzzing runs without
// the contract check (it judges documents, not the server's parsers).
func fuzzServer(t *testing.T) (*Server, http.Handler) {
	p := testPlan("", "")
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Node: "a", Actions: []plan.Action{{Action: "wipe-disk"}, {Action: "image-to-disk"}, {Action: "qa-disk"}, {Action: "reboot"}}}
	p.Sites[0].Unknown.Workflow = plan.Workflow{Profile: "base", Actions: []plan.Action{{Action: "reboot"}}}
	s, _ := newServer(t, p)
	mux := http.NewServeMux()
	for _, r := range s.Routes() {
		mux.Handle(r.Pattern, r.Handler)
	}
	return s, mux
}

func send(h http.Handler, path, token string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// checkInSeeds are the bodies the tests send.
func checkInSeeds() []plan.CheckIn {
	return []plan.CheckIn{
		{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}},
		{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A", UUID: "01020304-0506-0708-090a-0b0c0d0e0f10", MACs: []string{"52:54:00:00:00:0a"}}},
		{Site: "lab", Node: "b", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:0b"}}},
		{Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{Serial: "NEW"}},
		{Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{Serial: "To-Be-Filled-By-O.E.M.", UUID: "00000000-0000-0000-0000-000000000000", MACs: []string{"52-54-00-00-00-99"}}},
		{Site: "lab", Machine: "mac:52:54:00:00:00:99", Identity: plan.Identity{Serial: "X\nkind: Secret"}},
		{Site: "lab", Machine: "node:a"},
		{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}, Inventory: &plan.Inventory{Memory: plan.MemoryInfo{Total: 1 << 30},
			NICs: []plan.NICInfo{{Name: "eth0", MAC: "52:54:00:00:00:0A"}}, System: plan.SystemInfo{Product: "Standard PC\x1b[2J"}}},
		{Site: "lab", Identity: plan.Identity{Serial: "SER-A"}, Boot: plan.BootInfo{Firmware: "uefi", Chain: plan.ChainUKI, TLS: true}},
		{Site: "nope", Node: "a"},
	}
}

// FuzzCheckinBody sends what the fuzzer makes as a check-in's body, with
// the boot token of the machine it names, through the real handler. A
// body parseCheckIn refuses is answered 400 with the reason; one it
// takes is kept as a fixed point (re-encoded, taken again the same); no body
// makes the server fail (5xx), and every answer is a reply or a reason.
func FuzzCheckinBody(f *testing.F) {
	for _, c := range checkInSeeds() {
		b, _ := json.Marshal(c)
		f.Add(b)
	}
	f.Add([]byte(`{"site":"lab","node":"a","identity":{"macs":[]}}`))
	f.Add([]byte(`{"site":"lab","node":"a","identity":{"serial":"SER-A"},"tpm":{"ek":"AAAA"}}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, h := fuzzServer(t)
		c, _, err := parseCheckIn(body)
		token := nodeToken(s, "lab", "a")
		if err == nil {
			// What was kept is a fixed point: taken again, kept the same.
			again, _ := json.Marshal(c)
			c2, _, err2 := parseCheckIn(again)
			twice, _ := json.Marshal(c2)
			if err2 != nil || !bytes.Equal(again, twice) {
				t.Fatalf("taken as %s, then as %s (%v)", again, twice, err2)
			}
			token = s.Secret.Mint(boot.Grant{Kind: boot.KindBoot, Site: c.Site, Subject: boot.Subject(c.Node, c.Machine), ID: boot.NewID(), Expires: time.Now().Add(time.Hour)})
		}
		rec := send(h, plan.AgentCheckInPath, token, body)
		got := rec.Body.String()
		switch {
		case err != nil:
			if rec.Code != http.StatusBadRequest || !strings.HasPrefix(got, "check-in: ") {
				t.Fatalf("a body parseCheckIn refuses (%v): %d %q", err, rec.Code, got)
			}
		case rec.Code == http.StatusOK:
			var r plan.CheckInReply
			if json.Unmarshal(rec.Body.Bytes(), &r) != nil || r.Workflow == nil && r.Hold == "" && r.Challenge == nil {
				t.Fatalf("200 with %q", got)
			}
		case rec.Code >= 500 || rec.Code < 400 || strings.TrimSpace(got) == "":
			t.Fatalf("%d %q for %q", rec.Code, got, body)
		}
	})
}

// FuzzEventsBody sends what the fuzzer makes as a batch of events, with
// node a's session, through the real handler. A body parseBatch refuses
// is answered 400 (413 for too many events) with the reason; a batch it
// takes is acknowledged up to its highest number, or refused as out of
// the workflow's order (409, on the node's timeline); never a 5xx.
func FuzzEventsBody(f *testing.F) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ev := func(seq uint64, typ string, step int, action string) plan.AgentEvent {
		return plan.AgentEvent{Seq: seq, Time: now, Type: typ, Step: step, Steps: 4, Action: action}
	}
	for _, b := range []plan.EventBatch{
		{Site: "lab", Node: "a", Events: []plan.AgentEvent{ev(1, plan.AgentStarted, 1, "wipe-disk"), ev(2, plan.AgentActionDone, 1, "wipe-disk")}},
		{Site: "lab", Node: "a", Events: []plan.AgentEvent{ev(1, plan.AgentActionDone, 1, "wipe-disk"), ev(2, plan.AgentStarted, 2, "image-to-disk"),
			{Seq: 3, Time: now, Type: plan.AgentProgress, Action: "image-to-disk", Step: 2, Steps: 4, Bytes: 50e6, Total: 200e6, Rate: 25e6},
			{Seq: 4, Time: now, Type: plan.AgentFailed, Action: "image-to-disk", Step: 2, Steps: 4, Message: "sha256 mismatch"}}},
		{Site: "lab", Node: "a", Events: []plan.AgentEvent{{Seq: 1, Type: plan.AgentProvisioned}}},
		{Site: "lab", Node: "a", Events: []plan.AgentEvent{{Seq: 1, Type: plan.AgentLog, Step: 1, Steps: 4, Action: "qa-memory", Message: "pass"}}},
		{Site: "lab", Node: "a", Events: []plan.AgentEvent{{Seq: 1, Type: plan.AgentLog, Message: strings.Repeat("y", 5000)}}},
		{Site: "lab", Node: "b", Events: []plan.AgentEvent{ev(1, plan.AgentStarted, 1, "wipe-disk")}},
	} {
		body, _ := json.Marshal(b)
		f.Add(body)
	}
	f.Add([]byte(`{"site":"lab","node":"a","events":[{"seq":18446744073709551615,"type":"done","step":-1}]}`))
	f.Add([]byte(`{"events":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, h := fuzzServer(t)
		in, _ := json.Marshal(plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}})
		rec := send(h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), in)
		var r plan.CheckInReply
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &r) != nil || r.Session == "" {
			t.Fatalf("check-in: %d %s", rec.Code, rec.Body.String())
		}
		b, code, err := parseBatch(body)
		rec = send(h, plan.AgentEventsPath, r.Session, body)
		got := rec.Body.String()
		switch {
		case err != nil:
			if rec.Code != code || !strings.HasPrefix(got, "events: ") {
				t.Fatalf("a batch parseBatch refuses (%d %v): %d %q", code, err, rec.Code, got)
			}
		case rec.Code == http.StatusOK:
			var ack plan.EventAck
			var want uint64
			for _, e := range b.Events {
				want = max(want, e.Seq)
			}
			if json.Unmarshal(rec.Body.Bytes(), &ack) != nil || ack.Acked != want {
				t.Fatalf("acknowledged %q, want up to %d", got, want)
			}
		case rec.Code == http.StatusConflict:
			if !strings.HasPrefix(got, "events refused: ") {
				t.Fatalf("409 %q", got)
			}
		case rec.Code != http.StatusUnauthorized || !strings.HasPrefix(got, "events: "):
			// 401: the batch names another machine than the session's.
			t.Fatalf("%d %q for %q", rec.Code, got, body)
		}
	})
}
