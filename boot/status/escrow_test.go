package status

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
)

// testCiphertext stands for an armored age file (this package keeps it as
// it came, and checks nothing of it: boot/agentapi does).
const testCiphertext = "-----BEGIN AGE ENCRYPTED FILE-----\nYWdlLWVuY3J5cHRpb24ub3JnL3YxCi0+IFgyNTUxOSBzdGFuemEK\n-----END AGE ENCRYPTED FILE-----\n"

// escrowEvent is the agent's escrow event of install id on node n, for
// container uuid.
func escrowEvent(n string, seq uint64, id, uuid string) Event {
	return Event{Kind: KindAgent, Site: "lab", Node: n, Seq: seq, Message: "recovery key escrowed",
		Escrow: &Escrow{Site: "forged", Node: "other", Generation: 3, Install: "sha256:abc", InstallID: id, Partition: 2, LUKSUUID: uuid,
			Recipients: []string{"age1qqq"}, Ciphertext: testCiphertext, Time: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)}}
}

// installEvents are an install's start (a workflow handed out), its
// escrow, and its "provisioned".
func installEvents(n string, seq uint64, id, uuid string) []Event {
	return []Event{
		{Kind: KindAgent, Site: "lab", Node: n, State: StateMicroOS, Installing: true, Message: "workflow"},
		escrowEvent(n, seq, id, uuid),
		{Kind: KindAgent, Site: "lab", Node: n, Seq: seq + 1, State: StateProvisioned, Generation: 3, InstallID: id,
			Install: &plan.Install{Digest: "sha256:abc"}, Message: "provisioned (generation 3)"},
	}
}

// An escrow the store acknowledged is on the node's record, ciphertext
// and all, and outlives a restart; the node's timeline, its summary's
// last event and its JSON never carry the ciphertext; the outbox sends
// it whole, to the hub. A reinstall's escrow goes first, and the one
// before it stays (its disk may still hold that install).
func TestDurableKeepsEscrows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.db")
	d, err := Open(path, Options{Outbox: true, Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.RecordSync(installEvents("a", 1, "i1", "1111")...); err != nil {
		t.Fatal(err)
	}
	m, _ := d.Machine("lab/a")
	es := m.Escrows()
	if len(es) != 1 || es[0].Ciphertext != testCiphertext || es[0].InstallID != "i1" || es[0].Site != "lab" || es[0].Node != "a" {
		t.Fatalf("escrows after the install: %+v", es)
	}
	if want := "encrypted, not sealed yet (first boot pending), recovery escrowed"; m.Encryption != want {
		t.Errorf("encryption %q, want %q", m.Encryption, want)
	}
	noCiphertext(t, "the timeline", d.Events("lab/a"))
	noCiphertext(t, "the machine", d.Machines())
	out, err := d.Pending(0, 10)
	if err != nil || len(out) != 3 {
		t.Fatalf("outbox: %d %v", len(out), err)
	}
	var sent Event
	if json.Unmarshal(out[1].JSON, &sent); sent.Escrow == nil || sent.Escrow.Ciphertext != testCiphertext {
		t.Errorf("the outbox's escrow event: %s", out[1].JSON)
	}

	// A reinstall, then another: the newest two are kept, newest first.
	d.RecordSync(installEvents("a", 10, "i2", "2222")...)
	d.RecordSync(installEvents("a", 20, "i3", "3333")...)
	d.RecordSync(escrowEvent("a", 30, "i3", "3333")) // the same container's again: it replaces, it does not push one out
	d.Close()
	d, err = Open(path, Options{Outbox: true, Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m, _ = d.Machine("lab/a")
	if got := uuids(m.Escrows()); got != "3333 2222" || m.Escrows()[1].Ciphertext != testCiphertext {
		t.Errorf("after a restart, escrows %s, want 3333 2222", got)
	}
	if !m.Escrowed() || m.Encryption == "" {
		t.Errorf("after a restart: escrowed %v, encryption %q", m.Escrowed(), m.Encryption)
	}
}

func uuids(es []Escrow) string {
	var s []string
	for _, e := range es {
		s = append(s, e.LUKSUUID)
	}
	return strings.Join(s, " ")
}

// noCiphertext fails when v's JSON holds the test's ciphertext, or any
// armored age at all.
func noCiphertext(t *testing.T, what string, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if strings.Contains(string(b), "BEGIN AGE") || strings.Contains(string(b), "YWdlLWVu") {
		t.Errorf("%s carries the ciphertext: %.300s", what, b)
	}
}

// The memory store (the hub's view, tests) keeps escrows the same way,
// within its byte bound, and its timelines without the ciphertext.
func TestMemoryKeepsEscrows(t *testing.T) {
	m := &Memory{MaxBytes: 64 << 10, Now: tick()}
	for i := range 6 {
		for _, e := range installEvents("a", uint64(10*i+1), fmt.Sprint("i", i), fmt.Sprintf("%d%d%d", i, i, i)) {
			m.Record(e)
		}
		m.Record(Event{Kind: KindAgent, Site: "lab", Node: "b", Message: strings.Repeat("x", 4000)})
		checkBytes(t, m)
	}
	a, _ := m.Machine("lab/a")
	if got := uuids(a.Escrows()); got != "555 444" || a.Escrows()[0].Ciphertext != testCiphertext {
		t.Errorf("escrows %s, want 555 444", got)
	}
	noCiphertext(t, "the timeline", m.Events("lab/a"))
	noCiphertext(t, "the machines", m.Machines())
	if e := (Event{Escrow: &Escrow{Ciphertext: "abc"}}); e.Size() != eventOverhead+escrowOverhead+3 {
		t.Errorf("an escrow's event: Size %d, want %d", e.Size(), eventOverhead+escrowOverhead+3)
	}
}

// Where a node's encrypted root stands: the installed OS's word, read
// only from a report that proves the recorded install, and whether that
// install's recovery key is escrowed; a reinstall starts it over.
func TestEncryptionSummary(t *testing.T) {
	m := &Memory{Now: tick()}
	for _, e := range installEvents("a", 1, "i1", "1111") {
		m.Record(e)
	}
	report := func(id string, r *plan.EncryptionReport) string {
		m.Record(Event{Kind: KindReport, Site: "lab", Node: "a", State: StateRunning, InstallID: id, Encryption: r, Message: "running"})
		a, _ := m.Machine("lab/a")
		return a.Encryption
	}
	for _, c := range []struct {
		name, id string
		r        *plan.EncryptionReport
		want     string
	}{
		{"sealed", "i1", &plan.EncryptionReport{Device: "/dev/sda2", Sealed: true, PCRs: []int{7}},
			"encrypted, sealed to PCRs 7, recovery escrowed"},
		{"another install's report", "i0", &plan.EncryptionReport{Error: "forged"},
			"encrypted, sealed to PCRs 7, recovery escrowed"},
		{"seal failed", "i1", &plan.EncryptionReport{Device: "/dev/sda2", Error: "tpm2: no such device, giving up"},
			"encrypted, recovery escrowed, seal failed: tpm2: no such device, giving up"},
		{"a report that says nothing of it", "i1", nil,
			"encrypted, recovery escrowed, seal failed: tpm2: no such device, giving up"},
		{"sealed to two", "i1", &plan.EncryptionReport{Sealed: true, PCRs: []int{7, 11}},
			"encrypted, sealed to PCRs 7,11, recovery escrowed"},
	} {
		if got := report(c.id, c.r); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// A reinstall whose agent escrows nothing: not known to be encrypted
	// until its OS says so, and then without a recovery key.
	m.Record(Event{Kind: KindAgent, Site: "lab", Node: "a", Installing: true, State: StateMicroOS})
	m.Record(Event{Kind: KindAgent, Site: "lab", Node: "a", Seq: 50, State: StateProvisioned, InstallID: "i2", Install: &plan.Install{Digest: "sha256:abc"}})
	if a, _ := m.Machine("lab/a"); a.Encryption != "" || a.Seal != nil || len(a.Escrows()) != 1 {
		t.Errorf("after a reinstall without an escrow: %q %+v, %d escrows", a.Encryption, a.Seal, len(a.Escrows()))
	}
	if got, want := report("i2", &plan.EncryptionReport{Sealed: true, PCRs: []int{7}}), "encrypted, sealed to PCRs 7, no recovery key escrowed"; got != want {
		t.Errorf("sealed, no escrow: %q, want %q", got, want)
	}
	if got, want := EncryptionSummary(nil, true, true), "encrypted, its OS has not said whether it is sealed, recovery escrowed"; got != want {
		t.Errorf("booted, no word: %q", got)
	}
}
