package http

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// armored stands for an escrow's ciphertext (boot/agentapi checks it is
// age; this package serves it as the store keeps it).
const armored = "-----BEGIN AGE ENCRYPTED FILE-----\nYWdlLWVuY3J5cHRpb24ub3JnL3YxCi0+IFgyNTUxOSBzdGFuemEK\n-----END AGE ENCRYPTED FILE-----\n"

// GET /api/v1/recovery-keys/{site}/{node} serves a node's escrows, as
// kept, to the operate role only: 401 without a credential, 403 with a
// reader's, 404 for no such node, an empty list for a node with none. The
// status document, the timeline and the delivery record say where the
// node's encryption stands, and carry no ciphertext.
func TestRecoveryKeys(t *testing.T) {
	s, mem, _ := newServer(t, testPlan("", ""))
	ops, err := ParseOperators("ops", "read reader-token-0123456789\noperate operator-token-0123456789\n")
	if err != nil {
		t.Fatal(err)
	}
	s.Authorize = func(r *http.Request, role Role) bool { got, _ := ops.RoleOf(r); return got >= role }
	h := s.Handler()
	for _, e := range []status.Event{
		{Kind: status.KindAgent, Site: "lab", Node: "a", Installing: true, State: status.StateMicroOS, Message: "workflow"},
		{Kind: status.KindAgent, Site: "lab", Node: "a", Seq: 1, Message: "recovery key escrowed (partition 2, LUKS 1111, to 1 recipient)",
			Escrow: &status.Escrow{Generation: 0, InstallID: "i1", Partition: 2, LUKSUUID: "1111", Recipients: []string{"age1qqq"}, Ciphertext: armored, Time: time.Now()}},
		{Kind: status.KindAgent, Site: "lab", Node: "a", Seq: 2, State: status.StateProvisioned, InstallID: "i1", Install: &plan.Install{Digest: "d1"}, Message: "provisioned (generation 0)"},
	} {
		mem.Record(e)
	}
	const operator, reader = "Bearer operator-token-0123456789", "Bearer reader-token-0123456789"

	r := get(t, h, "/api/v1/recovery-keys/lab/a", "Authorization", operator)
	var rk RecoveryKeys
	if err := json.NewDecoder(r.Body).Decode(&rk); err != nil || r.StatusCode != 200 || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("operate: %d %v", r.StatusCode, err)
	}
	if len(rk.Escrows) != 1 || rk.Escrows[0].Ciphertext != armored || rk.Escrows[0].LUKSUUID != "1111" || rk.Site != "lab" || rk.Node != "a" {
		t.Errorf("escrows served: %+v", rk)
	}
	for _, c := range []struct {
		path, auth string
		code       int
		want       string
	}{
		{"/api/v1/recovery-keys/lab/a", "", 401, ""},
		{"/api/v1/recovery-keys/lab/a", reader, 403, ""},
		{"/api/v1/recovery-keys/lab/nobody", operator, 404, "no node"},
		{"/api/v1/recovery-keys/quiet/a", operator, 404, "no node"},
		{"/api/v1/recovery-keys/lab/b", operator, 200, `"escrows": []`},
	} {
		r := get(t, h, c.path, "Authorization", c.auth)
		if b := body(t, r); r.StatusCode != c.code || !strings.Contains(b, c.want) || strings.Contains(b, "YWdlLWVu") {
			t.Errorf("GET %s (%q): %d %s, want %d", c.path, c.auth, r.StatusCode, b, c.code)
		}
	}

	// Where the node's encryption stands, to readers: no ciphertext.
	var doc StatusDoc
	st := body(t, get(t, h, "/api/v1/status", "Authorization", reader))
	if err := json.Unmarshal([]byte(st), &doc); err != nil || strings.Contains(st, "YWdlLWVu") {
		t.Fatalf("status: %v, or it carries the ciphertext", err)
	}
	for _, n := range doc.Nodes {
		if n.Node == "a" && n.Encryption != "encrypted, not sealed yet (first boot pending), recovery escrowed" {
			t.Errorf("node a's encryption in the status: %q", n.Encryption)
		}
	}
	ev := body(t, get(t, h, "/api/v1/events?site=lab&node=a", "Authorization", reader))
	if strings.Contains(ev, "YWdlLWVu") || !strings.Contains(ev, "recovery key escrowed (partition 2") || !strings.Contains(ev, "recovery key escrows read by an operator") {
		t.Errorf("the timeline: %.2000s", ev)
	}
	var recs []DeliveryRecord
	if err := json.NewDecoder(get(t, h, "/api/v1/report?site=lab", "Authorization", reader).Body).Decode(&recs); err != nil || len(recs) != 1 ||
		recs[0].Encryption != "encrypted, not sealed yet (first boot pending), recovery escrowed" {
		t.Errorf("delivery record: %+v %v", recs, err)
	}
	if csv := body(t, get(t, h, "/api/v1/report?site=lab&format=csv", "Authorization", reader)); !strings.Contains(csv, ",running,encryption,") ||
		!strings.Contains(csv, `"encrypted, not sealed yet (first boot pending), recovery escrowed"`) {
		t.Errorf("the delivery record's CSV: %s", csv)
	}
}
