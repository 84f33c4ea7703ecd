package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/api"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// The contract attacks itself: every operation of api/openapi.json is
// sent, by a real daemon, requests with each class of credential an
// attacker on the LAN may hold (none, a malformed one, an unknown
// machine's session, another node's, a node's previous install's, a spent
// boot token, a reader's operator token) and bodies mutated from the
// operation's schema (as documented, wrong types, oversized, control
// characters, another node's names). After each operation the harness
// checks what no request without its proof may change: the installed
// node's state, install and its ID, its identity, its kept provisioned
// event; the node that installed nothing stays so; no answer carries a
// secret. An operation added to the document is attacked with no test
// written for it.
func TestAPIAttacksItself(t *testing.T) {
	testutil.Slow(t)
	h := newHarness(t)
	ops := h.operations()
	if len(ops) < 25 {
		t.Fatalf("%d operations in api/openapi.json: the harness reads it wrong", len(ops))
	}
	sent := 0
	for _, op := range ops {
		for _, cred := range h.creds {
			for _, body := range h.bodies(op) {
				h.send(op, cred, body)
				sent++
			}
		}
		h.check(op.id)
	}
	t.Logf("attack harness: %d operations, %d credential classes, %d requests", len(ops), len(h.creds), sent)
}

// FuzzAPIAttack drives the same harness beyond make test (go test
// ./daemon -fuzz FuzzAPIAttack): an operation, a credential class and a
// body from the fuzzer; the invariants after each.
func FuzzAPIAttack(f *testing.F) {
	f.Add(uint8(0), uint8(0), []byte(`{}`))
	f.Add(uint8(7), uint8(3), []byte(`{"site":"lab","node":"vm-serial","install":"0f0f"}`))
	f.Add(uint8(12), uint8(5), []byte("\x1b[2J\t\n"))
	h := newHarness(f)
	f.Fuzz(func(t *testing.T, op, cred uint8, body []byte) {
		h.t = t
		ops := h.operations()
		o := ops[int(op)%len(ops)]
		h.send(o, h.creds[int(cred)%len(h.creds)], body)
		h.check(o.id)
	})
}

// harness is a real daemon on the demo repository with one node
// installed and running by the real flow, the credentials an attacker may
// hold, and what must not change.
type harness struct {
	t      testing.TB
	base   string
	creds  []credential
	secret []string // what no answer may carry
	want   nodeFacts
	client *http.Client
}

type credential struct {
	name, header string
}

// nodeFacts are what the status API says of the installed node, and of the
// node that installed nothing.
type nodeFacts struct {
	state, install, installID, mac, uuid, serial string
	otherState, otherInstall                     string
	// lifecycle: what only a retirement's or a held node's QA session
	// sets (erasures, an erase certificate, commissioned), on either node;
	// "" in the demo, which retires and holds none.
	lifecycle string
}

type operation struct {
	id, method, path string
	params           []struct{ In, Name string }
	schema           map[string]any // the JSON body's schema, resolved
}

func newHarness(t testing.TB) *harness {
	base := startDaemon(t)
	h := &harness{t: t, base: base, client: &http.Client{Timeout: 5 * time.Second}}
	const reader = "reader-token-0123456789"

	// vm-serial: a first check-in it abandons (its session and report
	// credential become a previous install's), then a second that
	// installs, then its installed OS's report: running.
	_, sess1, report1 := h.checkIn("serial=DEMO-0001", plan.CheckIn{Site: "lab", Node: "vm-serial", Identity: plan.Identity{Serial: "DEMO-0001"}})
	spent, sess2, report2 := h.checkIn("serial=DEMO-0001", plan.CheckIn{Site: "lab", Node: "vm-serial", Identity: plan.Identity{Serial: "DEMO-0001"}})
	h.install("vm-serial", sess2.Session, *sess2.Workflow)
	if code, body := h.do("POST", plan.ReportPath, "Bearer "+report2, plan.OSReport{Site: "lab", Node: "vm-serial", InstanceID: "vm-serial-0", Install: h.installOf("vm-serial")}); code != 200 {
		t.Fatalf("the installed OS's report: %d %s", code, body)
	}
	// vm-mac checks in and installs nothing: another node's credentials.
	macTok, macSess, macReport := h.checkIn("mac=52:54:00:de:00:03", plan.CheckIn{Site: "lab", Node: "vm-mac", Identity: plan.Identity{MACs: []string{"52:54:00:de:00:03"}}})
	// An unknown machine's session.
	_, unknown, _ := h.checkIn("mac=52:54:00:66:66:66", plan.CheckIn{Site: "lab", Machine: "mac:52:54:00:66:66:66", Identity: plan.Identity{MACs: []string{"52:54:00:66:66:66"}}})

	h.creds = []credential{
		{"none", ""},
		{"malformed", "Bearer s1.0.99999999999.zz.not-a-tag"},
		{"an unknown machine's session", "Bearer " + unknown.Session},
		{"another node's session", "Bearer " + macSess.Session},
		{"another node's boot token", "Bearer " + macTok},
		{"another node's report credential", "Bearer " + macReport},
		{"the previous install's session", "Bearer " + sess1.Session},
		{"the previous install's report credential", "Bearer " + report1},
		{"a spent boot token", "Bearer " + spent},
		{"a reader's operator token", "Bearer " + reader},
	}
	// The webhook secret and the dashboard token of startDaemon are words
	// the document itself uses: the reader token, the installed node's
	// current credentials and its user-data stand for every secret.
	h.secret = []string{reader, sess2.Session, report2, "/etc/bootops-demo"}
	h.want = h.facts()
	if h.want.state != "running" || h.want.install == "" || h.want.installID == "" || h.want.otherInstall != "" {
		t.Fatalf("the harness's fleet is not as set up: %+v", h.want)
	}
	return h
}

// checkIn boots a machine (its script's boot token) and checks it in: the
// token, the reply, and its report credential ("" for none).
func (h *harness) checkIn(query string, c plan.CheckIn) (string, plan.CheckInReply, string) {
	h.t.Helper()
	_, script := h.do("GET", "/ipxe?"+query, "", nil)
	m := regexp.MustCompile(`bootops\.token=([A-Za-z0-9.]+)`).FindStringSubmatch(script)
	if m == nil {
		h.t.Fatalf("no boot token in the script for %s:\n%s", query, script)
	}
	code, body := h.do("POST", plan.AgentCheckInPath, "Bearer "+m[1], c)
	var r plan.CheckInReply
	if err := json.Unmarshal([]byte(body), &r); code != 200 || err != nil || r.Session == "" {
		h.t.Fatalf("check-in (%s): %d %s", query, code, body)
	}
	report := ""
	if r.CloudInit != nil {
		if m := regexp.MustCompile(`url, token, site, node, ca, install = "[^"]*", "([^"]+)"`).FindStringSubmatch(r.CloudInit.Report); m != nil {
			report = m[1]
		}
	}
	return m[1], r, report
}

// install is the agent's part of an install: each action before the
// first power action done, then provisioned.
func (h *harness) install(node, session string, wf plan.Workflow) {
	h.t.Helper()
	var evs []plan.AgentEvent
	seq := uint64(0)
	for i, a := range wf.Actions {
		if plan.IsPowerAction(a.Action) {
			break
		}
		seq++
		evs = append(evs, plan.AgentEvent{Seq: seq, Time: time.Now(), Type: plan.AgentActionDone, Step: i + 1, Steps: len(wf.Actions), Action: a.Action})
	}
	seq++
	evs = append(evs, plan.AgentEvent{Seq: seq, Time: time.Now(), Type: plan.AgentProvisioned})
	if code, body := h.do("POST", plan.AgentEventsPath, "Bearer "+session, plan.EventBatch{Site: "lab", Node: node, Events: evs}); code != 200 {
		h.t.Fatalf("install of %s: %d %s", node, code, body)
	}
}

func (h *harness) installOf(node string) string {
	for _, m := range h.status() {
		if m["node"] == node {
			if in, ok := m["installed"].(map[string]any); ok {
				return fmt.Sprint(in["digest"])
			}
		}
	}
	return ""
}

// status is the nodes the status API shows, to an operator.
func (h *harness) status() []map[string]any {
	h.t.Helper()
	code, body := h.do("GET", "/api/v1/status", "Bearer operator-token", nil)
	var doc struct{ Nodes []map[string]any }
	if err := json.Unmarshal([]byte(body), &doc); code != 200 || err != nil {
		h.t.Fatalf("status: %d %v %.300s", code, err, body)
	}
	return doc.Nodes
}

func (h *harness) facts() nodeFacts {
	var f nodeFacts
	str := func(m map[string]any, k string) string {
		if v, ok := m[k].(string); ok {
			return v
		}
		return ""
	}
	for _, m := range h.status() {
		for _, k := range []string{"erasures", "eraseCertificate", "commissioned"} {
			if v, ok := m[k]; ok {
				f.lifecycle += fmt.Sprintf("%s %s: %.80v; ", m["node"], k, v)
			}
		}
		switch m["node"] {
		case "vm-serial":
			f.state, f.installID, f.mac, f.uuid, f.serial = str(m, "state"), str(m, "installId"), str(m, "mac"), str(m, "uuid"), str(m, "serial")
			if in, ok := m["installed"].(map[string]any); ok {
				f.install = fmt.Sprint(in["digest"])
			}
		case "vm-mac":
			f.otherState = str(m, "state")
			if in, ok := m["installed"].(map[string]any); ok {
				f.otherInstall = fmt.Sprint(in["digest"])
			}
		}
	}
	return f
}

// check holds the invariants after an operation's requests.
func (h *harness) check(op string) {
	h.t.Helper()
	if got := h.facts(); got.state != h.want.state || got.install != h.want.install || got.installID != h.want.installID ||
		got.mac != h.want.mac || got.uuid != h.want.uuid || got.serial != h.want.serial || got.otherInstall != "" || got.otherState == "running" || got.otherState == "provisioned" ||
		got.lifecycle != "" || got.state == "retired" || got.otherState == "retired" {
		h.t.Fatalf("after %s: the nodes' facts changed without their proof:\n got %+v\nwant %+v", op, got, h.want)
	}
	code, body := h.do("GET", "/api/v1/events?site=lab&node=vm-serial", "Bearer operator-token", nil)
	if code != 200 || !strings.Contains(body, `"provisioned (generation 0)"`) {
		h.t.Fatalf("after %s: vm-serial's kept timeline lost its install: %d %.300s", op, code, body)
	}
}

// send is one request; no answer may carry a secret.
func (h *harness) send(op operation, cred credential, body []byte) {
	h.t.Helper()
	path := op.path
	for _, p := range op.params {
		if p.In == "path" {
			path = strings.Replace(path, "{"+p.Name+"}", paramValue(p.Name), 1)
		}
	}
	var q url.Values = map[string][]string{}
	for _, p := range op.params {
		if p.In == "query" {
			q.Set(p.Name, paramValue(p.Name))
		}
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	code, answer := h.raw(op.method, path, cred.header, body)
	for _, s := range h.secret {
		if s != "" && strings.Contains(answer, s) {
			h.t.Errorf("%s %s with %s: the answer (%d) carries a secret %.12q…", op.method, path, cred.name, code, s)
		}
	}
	if code >= 500 && code != 502 && code != 503 && code != 504 {
		h.t.Errorf("%s %s with %s: %d %.200s", op.method, path, cred.name, code, answer)
	}
}

// paramValue is what a path or query parameter is set to: the installed
// node's names, so a request that is not refused aims at it.
func paramValue(name string) string {
	switch name {
	case "site":
		return "lab"
	case "node":
		return "vm-serial"
	case "key":
		return "lab/vm-serial"
	case "seconds":
		return "1"
	case "bytes":
		return "1024"
	}
	return "0"
}

// bodies are what each request carries: for an operation with a JSON
// body, one built from its schema, then mutations of it; else none.
func (h *harness) bodies(op operation) [][]byte {
	if op.schema == nil {
		return [][]byte{nil}
	}
	good := example(op.schema, 0)
	b, _ := json.Marshal(good)
	out := [][]byte{b}
	for _, mutate := range []func(any) any{
		func(v any) any { return retype(v) },
		func(v any) any { return restring(v, "\x1b]52;c;cGFzdGU=\x07\tin sync\n\u202e") },
		func(v any) any { // past every route's body limit (512 KiB at most)
			if o, ok := v.(map[string]any); ok {
				o["padding"] = strings.Repeat("A", 600<<10)
			}
			return v
		},
		func(v any) any { return restring(v, "vm-mac") },
	} {
		b, _ := json.Marshal(mutate(example(op.schema, 0)))
		out = append(out, b)
	}
	return append(out, []byte("{"), []byte(`[]`))
}

// example builds a value of schema: objects with every property, strings
// naming the installed node, numbers 1.
func example(s map[string]any, depth int) any {
	if depth > 6 {
		return nil
	}
	typ, _ := s["type"].(string)
	if ts, ok := s["type"].([]any); ok && len(ts) > 0 {
		typ, _ = ts[0].(string)
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	switch typ {
	case "object":
		o := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		for k, p := range props {
			if ps, ok := p.(map[string]any); ok {
				o[k] = exampleNamed(k, ps, depth+1)
			}
		}
		return o
	case "array":
		if it, ok := s["items"].(map[string]any); ok {
			return []any{example(it, depth+1)}
		}
		return []any{}
	case "integer", "number":
		return 1
	case "boolean":
		return true
	case "string":
		return "vm-serial"
	}
	return nil
}

func exampleNamed(name string, s map[string]any, depth int) any {
	switch name {
	case "site":
		return "lab"
	case "node":
		return "vm-serial"
	case "install":
		return strings.Repeat("0f", 32)
	case "instanceId":
		return "vm-serial-0"
	}
	return example(s, depth)
}

// retype puts a value of another type in each place: strings become
// numbers, numbers strings, objects arrays.
func retype(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = retype(e)
		}
		return x
	case []any:
		return map[string]any{"not": "an array"}
	case string:
		return 12345
	case int, float64:
		return "not a number"
	case bool:
		return "yes"
	}
	return v
}

// restring replaces every string (not the site) with s.
func restring(v any, s string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k != "site" {
				x[k] = restring(e, s)
			}
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = restring(e, s)
		}
		return x
	case string:
		return s
	}
	return v
}

// operations are every operation of api/openapi.json, in a fixed order,
// their JSON bodies' schemas resolved.
func (h *harness) operations() []operation {
	var doc struct {
		Paths      map[string]map[string]json.RawMessage
		Components struct{ Schemas map[string]any }
	}
	if err := json.Unmarshal(api.Document(), &doc); err != nil {
		h.t.Fatal(err)
	}
	var ops []operation
	for path, item := range doc.Paths {
		for method, raw := range item {
			var o struct {
				OperationID string `json:"operationId"`
				Parameters  []struct{ In, Name string }
				RequestBody struct {
					Content map[string]struct{ Schema map[string]any }
				} `json:"requestBody"`
			}
			if json.Unmarshal(raw, &o) != nil || o.OperationID == "" {
				continue
			}
			if strings.HasPrefix(path, "/debug/pprof") {
				continue // served on --pprof-addr only (loopback), not on the listeners machines reach
			}
			op := operation{id: o.OperationID, method: strings.ToUpper(method), path: path, params: o.Parameters}
			if c, ok := o.RequestBody.Content["application/json"]; ok {
				op.schema = resolve(c.Schema, doc.Components.Schemas, 0)
			}
			ops = append(ops, op)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].id < ops[j].id })
	return slices.Clip(ops)
}

// resolve inlines $refs (to a depth: the schemas are not recursive).
func resolve(s map[string]any, defs map[string]any, depth int) map[string]any {
	if depth > 8 || s == nil {
		return s
	}
	if ref, ok := s["$ref"].(string); ok {
		d, _ := defs[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
		return resolve(d, defs, depth+1)
	}
	out := map[string]any{}
	for k, v := range s {
		switch x := v.(type) {
		case map[string]any:
			if k == "properties" {
				props := map[string]any{}
				for pk, pv := range x {
					if pm, ok := pv.(map[string]any); ok {
						props[pk] = resolve(pm, defs, depth+1)
					}
				}
				out[k] = props
			} else {
				out[k] = resolve(x, defs, depth+1)
			}
		default:
			out[k] = v
		}
	}
	return out
}

func (h *harness) do(method, path, auth string, v any) (int, string) {
	var b []byte
	if v != nil {
		b, _ = json.Marshal(v)
	}
	return h.raw(method, path, auth, b)
}

// raw sends one request and reads at most 1 MiB of its answer; a stream
// is cut after its first read.
func (h *harness) raw(method, path, auth string, body []byte) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	limit := int64(1 << 20)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || strings.HasPrefix(resp.Header.Get("Content-Type"), "application/octet-stream") {
		limit = 4096
	}
	got, _ := io.ReadAll(io.LimitReader(resp.Body, limit))
	return resp.StatusCode, string(got)
}
