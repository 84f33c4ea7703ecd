package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/plan"
)

// An install's recovery key escrow, end to end in a real daemon (its
// durable store, its operators, the API's contract): the agent posts the
// ciphertext with its session; an operator with the operate role gets it
// back exactly, and it decrypts with the recipient's identity; a reader
// gets 403, no credential 401, no such node 404. The status says the node
// is encrypted and escrowed, then sealed once its OS reports so; no read
// a reader may make carries the ciphertext.
func TestRecoveryKeyEscrow(t *testing.T) {
	h := &harness{t: t, base: startDaemon(t), client: &http.Client{Timeout: 5 * time.Second}}
	const reader, operator = "Bearer reader-token-0123456789", "Bearer operator-token"
	_, r, report := h.checkIn("serial=DEMO-0001", plan.CheckIn{Site: "lab", Node: "vm-serial", Identity: plan.Identity{Serial: "DEMO-0001"}})

	id, _ := age.GenerateX25519Identity()
	var ct bytes.Buffer
	aw := armor.NewWriter(&ct)
	w, _ := age.Encrypt(aw, id.Recipient())
	io.WriteString(w, "the-recovery-key-of-vm-serial")
	w.Close()
	aw.Close()
	ciphertext := ct.String()

	steps := len(r.Workflow.Actions)
	evs := []plan.AgentEvent{{Seq: 1, Time: time.Now(), Type: plan.AgentEscrow, Step: 1, Steps: steps,
		Escrow: &plan.Escrow{Partition: 1, LUKSUUID: "5d1f0c1e-0000-4000-8000-0123456789ab", Recipients: []string{id.Recipient().String()}, Ciphertext: ciphertext}}}
	for i, a := range r.Workflow.Actions {
		if plan.IsPowerAction(a.Action) {
			break
		}
		evs = append(evs, plan.AgentEvent{Seq: uint64(len(evs) + 1), Time: time.Now(), Type: plan.AgentActionDone, Step: i + 1, Steps: steps, Action: a.Action})
	}
	evs = append(evs, plan.AgentEvent{Seq: uint64(len(evs) + 1), Time: time.Now(), Type: plan.AgentProvisioned})
	if code, body := h.do("POST", plan.AgentEventsPath, "Bearer "+r.Session, plan.EventBatch{Site: "lab", Node: "vm-serial", Events: evs}); code != 200 {
		t.Fatalf("the escrow and the install: %d %s", code, body)
	}

	code, body := h.do("GET", "/api/v1/recovery-keys/lab/vm-serial", operator, nil)
	var rk bhttp.RecoveryKeys
	if err := json.Unmarshal([]byte(body), &rk); code != 200 || err != nil || len(rk.Escrows) != 1 || rk.Escrows[0].Ciphertext != ciphertext {
		t.Fatalf("the operator's recovery keys: %d %v %.500s", code, err, body)
	}
	if d, err := age.Decrypt(armor.NewReader(strings.NewReader(rk.Escrows[0].Ciphertext)), id); err != nil {
		t.Errorf("the escrow served does not decrypt: %v", err)
	} else if b, _ := io.ReadAll(d); string(b) != "the-recovery-key-of-vm-serial" {
		t.Errorf("the escrow served decrypts to %q", b)
	}
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/api/v1/recovery-keys/lab/vm-serial", reader, 403},
		{"/api/v1/recovery-keys/lab/vm-serial", "", 401},
		{"/api/v1/recovery-keys/lab/nobody", operator, 404},
		{"/api/v1/recovery-keys/lab/vm-mac", operator, 200},
	} {
		if code, body := h.do("GET", c.path, c.auth, nil); code != c.want || strings.Contains(body, ciphertext[40:80]) {
			t.Errorf("GET %s (%q): %d %.300s, want %d", c.path, c.auth, code, body, c.want)
		}
	}
	if code, body := h.do("POST", plan.ReportPath, "Bearer "+report, plan.OSReport{Site: "lab", Node: "vm-serial", InstanceID: "vm-serial-0",
		Install: h.installOf("vm-serial"), Encryption: &plan.EncryptionReport{Device: "/dev/vda1", Sealed: true, PCRs: []int{7}}}); code != 200 {
		t.Fatalf("the installed OS's report: %d %s", code, body)
	}
	for _, path := range []string{"/api/v1/status", "/api/v1/events?site=lab&node=vm-serial", "/api/v1/report?site=lab"} {
		code, body := h.do("GET", path, reader, nil)
		if code != 200 || strings.Contains(body, ciphertext[40:80]) || !strings.Contains(body, "sealed to PCRs 7") {
			t.Errorf("GET %s as a reader: %d, the ciphertext in it or no seal: %.500s", path, code, body)
		}
	}
	if f := checker.Failures(); len(f) > 0 {
		t.Errorf("contract: %v", f)
	}
}
