package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// A certificate the server signed verifies offline with its records.pub
// and says each disk; edited, or checked with another server's key, it
// is refused (exit 1); one with a disk not erased verifies as signed but
// fails.
func TestEraseCertVerify(t *testing.T) {
	dir := t.TempDir()
	key, err := trust.RecordKey(filepath.Join(dir, "records.key"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	c := plan.EraseCertificate{Site: "lab", Node: "r1", Machine: plan.Identity{Serial: "SER-R1"}, Erase: plan.ErasePurge, Keep: []string{"DATA-1"}, Revision: "abc123", Retired: t0.Add(time.Minute),
		Disks: []plan.DiskErasure{{Disk: plan.DiskInfo{Name: "nvme0n1", Model: "QEMU NVMe Ctrl", Serial: "NV-1", Size: 64 << 20}, Method: "nvme format: crypto erase (SES=2)", Class: plan.ErasePurge,
			Start: t0, End: t0.Add(2 * time.Second), Samples: 64, Verification: "64 samples of 4096 bytes read back: 64 changed beyond recognition", Verified: true}}}
	write := func(name string, c plan.EraseCertificate) string {
		doc, _ := json.Marshal(c)
		rec, err := trust.SignRecord(key, trust.KindEraseCertificate, doc)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, rec, 0o644)
		return p
	}
	good := write("good.json", c)
	pub := filepath.Join(dir, "records.pub")
	code, out, errs := bootops(t, nil, "erase-cert", "verify", good, "--key", pub)
	if code != 0 || !strings.Contains(out, "valid: erase certificate of node lab/r1 (serial \"SER-R1\"") ||
		!strings.Contains(out, "verified nvme0n1, model \"QEMU NVMe Ctrl\", serial NV-1, 67108864 bytes: nvme format: crypto erase (SES=2), NIST purge, 2026-11-29T15:00:00Z → 2026-11-29T15:00:02Z") ||
		!strings.Contains(out, "asked: erase purge, keep DATA-1") {
		t.Fatalf("a good certificate: exit %d\n%s%s", code, out, errs)
	}
	b, _ := os.ReadFile(good)
	edited := filepath.Join(dir, "edited.json")
	os.WriteFile(edited, bytes.Replace(b, []byte("SES=2"), []byte("SES=1"), 1), 0o644)
	if code, _, errs := bootops(t, nil, "erase-cert", "verify", edited, "--key", pub); code != 1 || !strings.Contains(errs, "changed after it was signed") {
		t.Errorf("an edited certificate: exit %d %s", code, errs)
	}
	if code, _, errs := bootops(t, nil, "erase-cert", "verify", good, "--key", filepath.Join(dir, "nope.pub")); code == 0 {
		t.Errorf("a missing key file: exit 0 %s", errs)
	}
	otherDir := t.TempDir()
	if _, err := trust.RecordKey(filepath.Join(otherDir, "records.key")); err != nil {
		t.Fatal(err)
	}
	otherPub := filepath.Join(otherDir, "records.pub")
	if code, _, errs := bootops(t, nil, "erase-cert", "verify", good, "--key", otherPub); code != 1 || !strings.Contains(errs, "not by the one trusted") {
		t.Errorf("another server's key: exit %d %s", code, errs)
	}
	c.Disks[0].Verified, c.Disks[0].Error = false, "verification failed: 64 samples of 4096 bytes read back: 0 zero, 64 still holding data"
	bad := write("bad.json", c)
	if code, out, errs := bootops(t, nil, "erase-cert", "verify", bad, "--key", pub); code != 1 || !strings.Contains(out, "NOT ERASED nvme0n1") || !strings.Contains(errs, "signed, but 1 of its 1 disks were not erased") {
		t.Errorf("a certificate of a failed erase: exit %d\n%s%s", code, out, errs)
	}
}
