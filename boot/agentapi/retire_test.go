package agentapi

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// retirePlan: node r (serial SER-R) at site lab, retired by Git when
// retire is set (purge, keeping disk DATA-1).
func retirePlan(retire *plan.Retire) *plan.Plan {
	p := testPlan("", "")
	lab := p.Sites[0]
	lab.Nodes = []*plan.Node{{Name: "r", Site: "lab", Profile: "base", Source: "r.yaml:1", Identity: plan.Identity{Serial: "SER-R"}, Retire: retire,
		Artifacts: plan.Artifacts{Workflow: plan.Workflow{Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}, {Action: "reboot", Name: "reboot"}}}}}}
	return p
}

// disksOf is an inventory with these disks.
func disksOf(ds ...plan.DiskInfo) *plan.Inventory { return &plan.Inventory{Disks: ds} }

// A node Git retires, whose inventory is on record: it is given the
// erase of its disks not kept, then a poweroff; the erased disks and
// "retired" are taken from its session only, and it is retired; booted
// again it is only told to power off. A machine whose disks are not the
// record's, or a node with no record, is held and erases nothing.
func TestRetire(t *testing.T) {
	nv := plan.DiskInfo{Name: "nvme0n1", Serial: "NV-1", Size: 64 << 20, Transport: "nvme"}
	sa := plan.DiskInfo{Name: "sda", Serial: "SA-1", Size: 64 << 20, Transport: "sata"}
	data := plan.DiskInfo{Name: "vdb", Serial: "DATA-1", Size: 64 << 20, Transport: "virtio"}
	s, mem := newServer(t, retirePlan(nil))
	_, signer, _ := ed25519.GenerateKey(rand.Reader)
	s.Certify = func(doc []byte) (string, error) {
		b, err := trust.SignRecord(signer, trust.KindEraseCertificate, doc)
		return string(b), err
	}
	h := s.Handler()
	checkIn := func(inv *plan.Inventory) plan.CheckInReply {
		t.Helper()
		code, body := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "r"), plan.CheckIn{Site: "lab", Node: "r", Identity: plan.Identity{Serial: "SER-R"}, Inventory: inv})
		if code != 200 {
			t.Fatalf("check-in: %d %s", code, body)
		}
		return reply(t, body)
	}
	live := s.Plans.(*boot.Live)

	// Retired before any inventory is on record: held, nothing erased,
	// and what it says now is not taken as the record.
	live.Swap(retirePlan(&plan.Retire{Erase: plan.ErasePurge, Keep: []string{"DATA-1"}}))
	if r := checkIn(disksOf(nv, sa, data)); r.Workflow != nil || !strings.Contains(r.Hold, "retire: no inventory on record for node r") {
		t.Fatalf("no record: %+v", r)
	}
	if m, _ := mem.Machine("lab/r"); m.Inventory != nil {
		t.Fatalf("the retirement's check-in became the record: %+v", m.Inventory)
	}
	// The record: a check-in while Git still installs it. Installed since
	// at its generation: a retirement reaches it all the same.
	live.Swap(retirePlan(nil))
	checkIn(disksOf(nv, sa, data))
	s.Provisioned = func(site, node string) (int, bool) { return 0, node == "r" }
	live.Swap(retirePlan(&plan.Retire{Erase: plan.ErasePurge, Keep: []string{"DATA-1"}}))

	// Another disk in the machine: held, the record as it was.
	other := plan.DiskInfo{Name: "sda", Serial: "SA-2", Size: 64 << 20, Transport: "sata"}
	if r := checkIn(disksOf(nv, other, data)); r.Workflow != nil || r.Hold != "retire: nothing erased: disk sda (serial SA-2, 67108864 bytes) is not in the node's inventory on record" {
		t.Fatalf("a swapped disk: %+v", r)
	}
	if m, _ := mem.Machine("lab/r"); len(m.Inventory.Disks) != 3 || m.Inventory.Disks[1].Serial != "SA-1" {
		t.Fatalf("the record changed: %+v", m.Inventory.Disks)
	}

	// The machine on record: the erase of nvme0n1 and sda, then poweroff.
	code, body := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "r"), plan.CheckIn{Site: "lab", Node: "r", Identity: plan.Identity{Serial: "SER-R"}, Inventory: disksOf(nv, sa, data)})
	r := reply(t, body)
	if code != 200 || r.Workflow == nil || !r.Workflow.Retire || len(r.Workflow.Actions) != 2 {
		t.Fatalf("retirement: %d %s", code, body)
	}
	a := r.Workflow.Actions[0]
	if a.Action != plan.ActionEraseDisks || a.Erase != plan.ErasePurge || len(a.Disks) != 2 || a.Disks[0].Serial != "NV-1" || a.Disks[1].Serial != "SA-1" || a.Keep[0] != "DATA-1" ||
		r.Workflow.Actions[1].Action != "poweroff" || r.CloudInit != nil {
		t.Fatalf("retirement's workflow: %+v", r.Workflow)
	}
	sess := r.Session
	now := time.Now()
	ev := func(seq uint64, typ string, step int) plan.AgentEvent {
		return plan.AgentEvent{Seq: seq, Time: now, Type: typ, Step: step, Steps: 2, Action: plan.ActionEraseDisks}
	}
	erased := func(seq uint64, d plan.DiskInfo, method string) plan.AgentEvent {
		e := ev(seq, plan.AgentErased, 1)
		e.Erasure = &plan.DiskErasure{Disk: d, Method: method, Class: plan.ErasePurge, Start: now, End: now.Add(time.Second), Samples: 64, Verification: "64 samples of 4096 bytes read back: 64 zero", Verified: true}
		return e
	}
	batch := func(evs ...plan.AgentEvent) plan.EventBatch {
		return plan.EventBatch{Site: "lab", Node: "r", Events: evs}
	}
	// provisioned is not a retirement's word.
	if code, body := post(t, h, plan.AgentEventsPath, sess, batch(ev(1, plan.AgentStarted, 1), ev(2, plan.AgentActionDone, 1), ev(3, plan.AgentProvisioned, 0))); code != 409 || !strings.Contains(body, "provisioned reported by a retirement's workflow") {
		t.Fatalf("provisioned in a retirement: %d %s", code, body)
	}
	if code, body := post(t, h, plan.AgentEventsPath, sess, batch(ev(1, plan.AgentStarted, 1), erased(2, nv, "nvme format: crypto erase (SES=2)"),
		erased(3, sa, "ata security erase (enhanced)"), ev(4, plan.AgentActionDone, 1), ev(5, plan.AgentRetired, 0))); code != 200 {
		t.Fatalf("the retirement's events: %d %s", code, body)
	}
	m, _ := mem.Machine("lab/r")
	cert, err := trust.VerifyRecord([]byte(m.EraseCertificate), trust.KindEraseCertificate, signer.Public().(ed25519.PublicKey))
	var c plan.EraseCertificate
	if err != nil || json.Unmarshal(cert, &c) != nil || c.Node != "r" || c.Erase != plan.ErasePurge || c.Keep[0] != "DATA-1" || len(c.Disks) != 2 ||
		c.Disks[0].Disk.Serial != "NV-1" || c.Disks[0].Method != "nvme format: crypto erase (SES=2)" || c.Machine.Serial != "SER-R" {
		t.Fatalf("the erase certificate: %v\n%s", err, m.EraseCertificate)
	}
	if m.State != status.StateRetired || m.Erasures == nil || len(m.Erasures.Disks) != 2 || m.Erasures.Disks[1].Method != "ata security erase (enhanced)" {
		t.Fatalf("retired: state %q, erasures %+v", m.State, m.Erasures)
	}
	var lines []string
	for _, e := range mem.Events("lab/r") {
		lines = append(lines, e.Message)
	}
	if all := strings.Join(lines, "\n"); !strings.Contains(all, "1/2 erase-disks: erased sda (, serial SA-1, 67108864 bytes): ata security erase (enhanced), NIST purge") ||
		!strings.Contains(all, "retired: every disk not kept erased and verified") {
		t.Errorf("the timeline:\n%s", all)
	}

	// Booted again (the script server says booting first): told to power
	// off, nothing else, and it stays retired.
	mem.Record(status.Event{Kind: status.KindScript, Site: "lab", Node: "r", State: status.StateBooting, Message: "served the Micro-OS script"})
	if r := checkIn(disksOf(nv, sa, data)); r.Workflow == nil || len(r.Workflow.Actions) != 1 || r.Workflow.Actions[0].Action != "poweroff" || !r.Workflow.Retire {
		t.Fatalf("a retired node booted again: %+v", r)
	}
	if m, _ := mem.Machine("lab/r"); m.State != status.StateRetired || m.EraseCertificate == "" {
		t.Errorf("booted again: state %q, certificate kept %v", m.State, m.EraseCertificate != "")
	}
}

// An erased event outside a retirement, or an erasure on another event,
// is refused.
func TestErasedOnlyInARetirement(t *testing.T) {
	s, _ := newServer(t, retirePlan(nil))
	h := s.Handler()
	_, body := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "r"), plan.CheckIn{Site: "lab", Node: "r", Identity: plan.Identity{Serial: "SER-R"}})
	sess := reply(t, body).Session
	e := plan.AgentEvent{Seq: 1, Time: time.Now(), Type: plan.AgentErased, Step: 1, Steps: 2, Action: "wipe",
		Erasure: &plan.DiskErasure{Disk: plan.DiskInfo{Name: "vda", Serial: "X"}, Class: plan.EraseClear}}
	if code, body := post(t, h, plan.AgentEventsPath, sess, plan.EventBatch{Site: "lab", Node: "r", Events: []plan.AgentEvent{e}}); code != 409 || !strings.Contains(body, "an erased disk reported by a workflow that erases none") {
		t.Errorf("erased in an install: %d %s", code, body)
	}
	e.Type = plan.AgentLog
	if code, body := post(t, h, plan.AgentEventsPath, sess, plan.EventBatch{Site: "lab", Node: "r", Events: []plan.AgentEvent{e}}); code != 400 || !strings.Contains(body, "carries an erasure") {
		t.Errorf("an erasure on a log event: %d %s", code, body)
	}
}
