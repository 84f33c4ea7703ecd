package http

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// The delivery record: a node's serial, MACs, hardware, expectations, the
// QA results of its last install, what it installed and from which
// revision, when it was provisioned and running; as CSV a cell that a
// spreadsheet would evaluate stays text.
func TestDeliveryRecord(t *testing.T) {
	p := testPlan("", "")
	a := p.Sites[0].Nodes[0]
	a.Expect = &plan.Expect{Memory: ">=1Gi"}
	s, mem, _ := newServer(t, p)
	t0 := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	in := &plan.Install{Digest: strings.Repeat("d", 64), Image: strings.Repeat("1", 64)}
	inv := inventoryOf(2 << 30)
	inv.System.Serial = "=HYPERLINK(\"x\")"
	for i, e := range []status.Event{
		{Kind: status.KindAgent, State: status.StateMicroOS, Installing: true, Inventory: inv, Message: "agent checked in"},
		{Kind: status.KindAgent, Action: "qa-memory", Message: "qa-memory: 100 MiB at 900 MB/s: pass"},
		{Kind: status.KindAgent, Action: "qa-disk", State: status.StateProvisioning, Message: "started 2/4 qa-disk"},
		{Kind: status.KindAgent, Action: "qa-disk", Message: "qa-disk: read 256 MiB at 812.4 MB/s (O_DIRECT, min 200): pass"},
		{Kind: status.KindAgent, Action: "qa-disk", State: status.StateProvisioning, Message: "done 2/4 qa-disk"},
		{Kind: status.KindAgent, State: status.StateProvisioned, Install: in, Revision: "3f0b9c2"},
		{Kind: status.KindReport, State: status.StateRunning, Install: &plan.Install{Digest: in.Digest}},
	} {
		e.Site, e.Node, e.Time = "lab", "a", t0.Add(time.Duration(i)*time.Minute)
		mem.Record(e)
	}
	recs := s.DeliveryRecords("lab", time.Time{})
	if len(recs) != 1 {
		t.Fatalf("records: %+v", recs)
	}
	r := recs[0]
	if r.Node != "a" || r.Serial != inv.System.Serial || strings.Join(r.MACs, " ") != "52:54:00:00:00:0A 52:54:00:00:00:0c" && strings.Join(r.MACs, " ") != "52:54:00:00:00:0a 52:54:00:00:00:0c" ||
		r.Expectations != "met" || r.Image != in.Image || r.Install != in.Digest || r.Revision != "3f0b9c2" ||
		!r.Provisioned.Equal(t0.Add(5*time.Minute)) || !r.Running.Equal(t0.Add(6*time.Minute)) {
		t.Errorf("record: %+v", r)
	}
	if len(r.QA) != 2 || !r.QA[0].Pass || !r.QA[1].Pass || !strings.Contains(r.QA[1].Result, "812.4 MB/s") {
		t.Errorf("QA: %+v", r.QA)
	}
	// A failed QA action is a failure, with its value.
	qa, _, _ := lastInstall([]status.Event{{Kind: status.KindAgent, Action: "qa-disk", State: status.StateFailed, Error: true, Message: "2/4 qa-disk failed: qa-disk: read 256 MiB at 95.1 MB/s, below minReadMBps 200"}})
	if len(qa) != 1 || qa[0].Pass || !strings.Contains(qa[0].Result, "95.1 MB/s") {
		t.Errorf("a failed QA action: %+v", qa)
	}
	if got := s.DeliveryRecords("lab", t0.Add(time.Hour)); len(got) != 0 {
		t.Errorf("since after its install: %+v", got)
	}
	var b bytes.Buffer
	WriteDeliveryCSV(&b, recs)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "site,node,serial,macs,") || !strings.Contains(lines[1], `'=HYPERLINK`) || !strings.Contains(lines[1], "qa-disk pass: ") {
		t.Errorf("CSV:\n%s", b.String())
	}
}

// A retired node's record: when it was retired, a line per disk erased,
// its signed certificate; as CSV too. A since after its install but
// before its retirement keeps it.
func TestDeliveryRecordOfARetirement(t *testing.T) {
	p := testPlan("", "")
	s, mem, _ := newServer(t, p)
	t0 := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	d := plan.DiskErasure{Disk: plan.DiskInfo{Name: "nvme0n1", Model: "QEMU NVMe Ctrl", Serial: "RN-1", Size: 256 << 20}, Method: "nvme format: user data erase (SES=1)",
		Class: plan.ErasePurge, Start: t0.Add(61 * time.Minute), End: t0.Add(62 * time.Minute), Samples: 64, Verification: "64 samples of 4096 bytes read back: 64 zero", Verified: true}
	for i, e := range []status.Event{
		{Kind: status.KindAgent, State: status.StateProvisioned, Install: &plan.Install{Digest: strings.Repeat("d", 64)}},
		{Kind: status.KindAgent, State: status.StateMicroOS, Retiring: true, Message: "retiring: purge erase of 1 disks (RN-1)"},
		{Kind: status.KindAgent, Action: plan.ActionEraseDisks, Erasure: &d, Message: d.Line()},
		{Kind: status.KindAgent, Certificate: `{"signed":"x"}`, Message: "erase certificate signed: 1 disks"},
		{Kind: status.KindAgent, State: status.StateRetired, Message: "retired"},
	} {
		e.Site, e.Node, e.Time = "lab", "a", t0.Add(time.Duration(i)*time.Hour)
		mem.Record(e)
	}
	recs := s.DeliveryRecords("lab", t0.Add(90*time.Minute))
	if len(recs) != 1 {
		t.Fatalf("records since after its install, before its retirement: %+v", recs)
	}
	r := recs[0]
	if r.State != status.StateRetired || !r.Retired.Equal(t0.Add(4*time.Hour)) || len(r.Erased) != 1 || !strings.Contains(r.Erased[0], "serial RN-1") ||
		!strings.Contains(r.Erased[0], "NIST purge") || r.EraseCertificate != `{"signed":"x"}` {
		t.Errorf("record: %+v", r)
	}
	var b bytes.Buffer
	WriteDeliveryCSV(&b, recs)
	if out := b.String(); !strings.Contains(out, ",retired,erased,erase_certificate\n") || !strings.Contains(out, "2026-11-25T12:00:00Z,") || !strings.Contains(out, `"{""signed"":""x""}"`) {
		t.Errorf("CSV:\n%s", out)
	}
}
