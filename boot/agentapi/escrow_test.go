package agentapi

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// The installing agent's escrow event: the server keeps the ciphertext as
// it came, as the escrow of the install the session runs, and the
// timeline says what was escrowed; an escrow that is no armored age, to
// no one, too big, or on another kind of event is refused (400), and
// kept nowhere. Then the installed OS's report says its root is sealed:
// the node's status says so. Neither the plaintext nor the ciphertext
// is in the log or on the timeline.
func TestEscrowEvent(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	n := p.Sites[0].Nodes[0]
	n.Artifacts.UserData, n.Artifacts.MetaData = "#cloud-config\n", "instance-id: a\n"
	n.Artifacts.Workflow = plan.Workflow{Node: "a", Actions: []plan.Action{{Action: "image-to-disk", Name: "image"}, {Action: "reboot"}}}
	n.Install = plan.InstallOf(n)
	s, mem := newServer(t, p)
	var log bytes.Buffer
	s.Log = slog.New(slog.NewTextHandler(&log, nil))
	h := s.Handler()
	code, body := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}})
	r := reply(t, body)
	if code != 200 || r.CloudInit == nil {
		t.Fatalf("check-in: %d %s", code, body)
	}
	report := regexp.MustCompile(`url, token, site, node, ca, install = "[^"]*", "([^"]+)"`).FindStringSubmatch(r.CloudInit.Report)[1]

	const key = "correct-horse-battery-staple-0123456789"
	id, _ := age.GenerateX25519Identity()
	ciphertext := testutil.AgeArmor(t, id.Recipient(), key)
	const uuid = "0c5ae3a1-7f0e-4a7c-9d1e-2b1f5c4d3e2f"
	escrow := func(e plan.Escrow) plan.AgentEvent {
		return plan.AgentEvent{Seq: 1, Time: time.Now(), Type: plan.AgentEscrow, Action: "image", Step: 1, Steps: 2, Escrow: &e}
	}
	good := plan.Escrow{Partition: 2, LUKSUUID: uuid, Recipients: []string{id.Recipient().String()}, Ciphertext: ciphertext}
	bad := func(f func(*plan.Escrow)) plan.AgentEvent {
		e := good
		f(&e)
		return escrow(e)
	}
	for _, c := range []struct {
		name string
		ev   plan.AgentEvent
		why  string
	}{
		{"a plaintext key", bad(func(e *plan.Escrow) { e.Ciphertext = key }), "not armored age"},
		{"no recipients", bad(func(e *plan.Escrow) { e.Recipients = nil }), "no recipients"},
		{"a plaintext under the armor's header", bad(func(e *plan.Escrow) {
			e.Ciphertext = armor.Header + "\n" + key + "\n-----END AGE ENCRYPTED FILE-----\n"
		}), "armor"},
		{"over MaxEscrow", bad(func(e *plan.Escrow) { e.Ciphertext = armor.Header + strings.Repeat("A", plan.MaxEscrow) }), "at most"},
		{"a LUKS UUID that is none", bad(func(e *plan.Escrow) { e.LUKSUUID = "'; rm -rf /" }), "LUKS UUID"},
		{"no partition", bad(func(e *plan.Escrow) { e.Partition = 0 }), "partition 0"},
		{"a recipient with a newline", bad(func(e *plan.Escrow) { e.Recipients = []string{"age1\nforged"} }), "recipient 1"},
		{"an escrow event without its escrow", plan.AgentEvent{Seq: 1, Type: plan.AgentEscrow, Step: 1, Steps: 2}, "without its escrow"},
		{"an escrow on a log line", plan.AgentEvent{Seq: 1, Type: plan.AgentLog, Step: 1, Steps: 2, Message: "x", Escrow: &good}, "only an escrow event"},
	} {
		code, body := post(t, h, plan.AgentEventsPath, r.Session, plan.EventBatch{Site: "lab", Node: "a", Events: []plan.AgentEvent{c.ev}})
		if code != 400 || !strings.Contains(body, c.why) || strings.Contains(body, key) {
			t.Errorf("%s: %d %s, want 400 saying %q", c.name, code, body, c.why)
		}
	}
	if m, _ := mem.Machine("lab/a"); len(m.Escrows()) != 0 {
		t.Fatalf("refused escrows kept: %+v", m.Escrows())
	}

	batch := plan.EventBatch{Site: "lab", Node: "a", Events: []plan.AgentEvent{escrow(good),
		{Seq: 2, Time: time.Now(), Type: plan.AgentActionDone, Action: "image", Step: 1, Steps: 2},
		{Seq: 3, Time: time.Now(), Type: plan.AgentProvisioned}}}
	if code, body := post(t, h, plan.AgentEventsPath, r.Session, batch); code != 200 || body != `{"acked":3}` {
		t.Fatalf("the escrow and the install: %d %s", code, body)
	}
	m, _ := mem.Machine("lab/a")
	es := m.Escrows()
	if len(es) != 1 || es[0].Ciphertext != ciphertext || es[0].InstallID != m.InstallID || m.InstallID == "" || es[0].Install != n.Install.Digest ||
		es[0].Partition != 2 || es[0].LUKSUUID != uuid || len(es[0].Recipients) != 1 || es[0].Time.IsZero() {
		t.Fatalf("the escrow kept: %+v (the node's install %s)", es, m.InstallID)
	}
	if got, err := age.Decrypt(armor.NewReader(strings.NewReader(es[0].Ciphertext)), id); err != nil {
		t.Errorf("the kept ciphertext does not decrypt: %v", err)
	} else if b, _ := io.ReadAll(got); string(b) != key {
		t.Errorf("the kept ciphertext decrypts to %q", b)
	}
	timeline, _ := json.Marshal(mem.Events("lab/a"))
	if !strings.Contains(string(timeline), "1/2 image: recovery key escrowed (partition 2, LUKS "+uuid+", to 1 recipient)") {
		t.Errorf("the timeline does not say what was escrowed: %s", timeline)
	}

	// The installed OS's first boot sealed the root to PCR 7.
	rep := plan.OSReport{Site: "lab", Node: "a", InstanceID: "a-0", Hostname: "node-a", Kernel: "6.12",
		Encryption: &plan.EncryptionReport{Device: "/dev/vda2", Sealed: true, PCRs: []int{7, 7, 99}}}
	if code, body := post(t, h, plan.ReportPath, report, rep); code != 200 {
		t.Fatalf("report: %d %s", code, body)
	}
	m, _ = mem.Machine("lab/a")
	if want := "encrypted, sealed to PCRs 7, recovery escrowed"; m.Encryption != want || !strings.Contains(m.Last.Message, "root encrypted and sealed to PCRs 7") {
		t.Errorf("after the report: %q (%s), want %q", m.Encryption, m.Last.Message, want)
	}
	rep.Encryption = &plan.EncryptionReport{Device: "/dev/vda2", Error: "clevis luks regen: \x1b[31mno TPM\n"}
	if code, body := post(t, h, plan.ReportPath, report, rep); code != 200 {
		t.Fatalf("report: %d %s", code, body)
	}
	m, _ = mem.Machine("lab/a")
	if want := `encrypted, recovery escrowed, seal failed: clevis luks regen: \x1b[31mno TPM`; m.Encryption != want || !m.Last.Error {
		t.Errorf("after a failed seal: %q, want %q", m.Encryption, want)
	}

	all, _ := json.Marshal(mem.Events("lab/a"))
	// The key, and the ciphertext's first line of base64.
	for _, secret := range []string{key, strings.Split(ciphertext, "\n")[1]} {
		if strings.Contains(log.String(), secret) || strings.Contains(string(all), secret) {
			t.Errorf("%.20q… is in the log or on the timeline", secret)
		}
	}
}
