//go:build e2e

package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// retireDisk is one disk of TestRetire's VM: its serial, size and bus.
type retireDisk struct {
	serial, bus string
	size        int64
	kept        bool
}

// A machine's whole retirement on one VM with an NVMe disk, a SATA disk
// behind AHCI, a virtio disk and a kept virtio data disk, each filled with
// a marker pattern. Held by Git (install: hold) it records its inventory;
// retired with its NVMe disk's serial not the record's, it erases nothing
// and says why; as recorded, it erases every disk not kept, verifies and
// powers off. From the host: no marker left on an erased disk, the kept
// one byte for byte as it was. The certificate names each disk, its method
// and class, and verifies offline with records.pub; an edited one does
// not. Booted again, it powers off and is not installed.
func TestRetire(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	l.vms(1)
	began := time.Now()
	const mac = "52:54:00:e2:72:01"
	disks := []retireDisk{
		{serial: "RV-OS", bus: "virtio", size: 256 << 20},
		{serial: "RN-1", bus: "nvme", size: 256 << 20},
		{serial: "RS-1", bus: "sata", size: 128 << 20},
		{serial: "RK-KEEP", bus: "virtio", size: 64 << 20, kept: true},
	}
	if eraseBench {
		for i := range disks {
			if !disks[i].kept {
				disks[i].size = 2 << 30
			}
		}
	}
	files := map[string]string{}
	sums := map[string][32]byte{}
	for _, d := range disks {
		files[d.serial] = filepath.Join(l.dir, d.serial+".disk")
		sums[d.serial] = fillMarked(t, files[d.serial], d.serial, d.size)
	}
	// The VM with its disks; nvmeSerial is what its NVMe controller says.
	machine := func(name, nvmeSerial string) *vm {
		args := []string{"-m", "768", "-device", "ahci,id=ahci0"}
		for i, d := range disks {
			id := fmt.Sprintf("d%d", i)
			args = append(args, "-drive", "file="+files[d.serial]+",if=none,id="+id+",format=raw")
			switch d.bus {
			case "nvme":
				args = append(args, "-device", "nvme,drive="+id+",serial="+nvmeSerial)
			case "sata":
				args = append(args, "-device", "ide-hd,bus=ahci0.0,drive="+id+",serial="+d.serial)
			default:
				args = append(args, "-device", "virtio-blk-pci,drive="+id+",serial="+d.serial)
			}
		}
		return l.vm(name, mac, args...)
	}
	repo := provisionRepo(t, images4, strings.Repeat("ab", 32), "retire", vars{"Retire": ""})
	l.serve(repo)
	status := func() string {
		return run(t, "ip", "netns", "exec", l.lan, bootops, "status", "--server", "http://198.18.0.1:8080")
	}

	// 1. Held by Git: its inventory recorded, four disks with serials.
	v := machine("r-held", "RN-1")
	waitFor(t, "r-1 held by Git with its inventory", 8*time.Minute, func() bool {
		m, _ := l.machine("lab/r-1")
		return m.State == "held" && m.Inventory != nil && len(m.Inventory.Disks) == len(disks)
	})
	m, _ := l.machine("lab/r-1")
	var inv []string
	for _, d := range m.Inventory.Disks {
		inv = append(inv, fmt.Sprintf("%s %s %s %d", d.Name, d.Transport, d.Serial, d.Size))
	}
	t.Logf("r-1's disks: %s", strings.Join(inv, "; "))
	for _, d := range disks {
		if !strings.Contains(strings.Join(inv, ";"), " "+d.serial+" "+fmt.Sprint(d.size)) {
			t.Errorf("the inventory lacks disk %s of %d bytes: %v", d.serial, d.size, inv)
		}
	}
	v.cmd.Process.Kill()
	waitVMs(time.Minute, v)

	// 2. Retired, its NVMe disk not the recorded one: held, nothing erased.
	served := l.status().Plan
	retire := "retire: {erase: purge, keep: [RK-KEEP]}"
	writeRepo(t, repo, vars{"Images": images4, "ImageSHA": strings.Repeat("ab", 32), "Retire": retire}, "base-provision", "retire")
	waitFor(t, "the commit that retires r-1 served", 2*time.Minute, func() bool { return l.status().Plan != served })
	v = machine("r-other", "RN-OTHER")
	waitFor(t, "r-1 held with another NVMe disk", 8*time.Minute, func() bool {
		m, _ := l.machine("lab/r-1")
		return m.State == "held" && strings.Contains(m.Held, "nothing erased")
	})
	m, _ = l.machine("lab/r-1")
	t.Logf("another disk: %s", m.Held)
	if !strings.Contains(m.Held, "RN-OTHER") && !strings.Contains(m.Held, "RN-1") {
		t.Errorf("the hold does not name the disk that differs: %s", m.Held)
	}
	if out := status(); !strings.Contains(out, m.Held) {
		t.Errorf("bootops status does not say why r-1 is held:\n%s", out)
	}
	time.Sleep(5 * time.Second) // had it been told to erase, it would be erasing now
	v.cmd.Process.Kill()
	waitVMs(time.Minute, v)
	for _, d := range disks {
		if sha256File(t, files[d.serial]) != sums[d.serial] {
			t.Errorf("disk %s was written to though the machine's disks were not the record's", d.serial)
		}
	}

	// 3. The machine as recorded: erased, verified, powered off.
	start := time.Now()
	v = machine("r-1", "RN-1")
	if !v.exit(15 * time.Minute) {
		t.Fatalf("r-1 did not erase its disks and power off in 15 min; console:\n%s\ntimeline:\n%s",
			testutil.Tail(mustRead(v.console), 40), l.logs("lab/r-1"))
	}
	t.Logf("timing: r-1 power-on → disks erased, verified, powered off: %s", time.Since(start).Round(time.Second))
	waitState(t, l, "lab/r-1", "retired", time.Minute)
	for _, d := range disks {
		b, err := os.ReadFile(files[d.serial])
		if err != nil {
			t.Fatal(err)
		}
		switch n := bytes.Count(b, []byte("bootops e2e retire: ")); {
		case d.kept && sha256.Sum256(b) != sums[d.serial]:
			t.Errorf("kept disk %s changed (%d markers left)", d.serial, n)
		case !d.kept && n > 0:
			t.Errorf("erased disk %s still holds %d markers", d.serial, n)
		}
	}

	if eraseBench {
		referenceZeroes(t, disks, files)
	}

	// 4. The certificate: each erased disk, its method and class; valid
	// offline; refused once edited.
	cert := filepath.Join(l.dir, "r-1.erase.json")
	run(t, "ip", "netns", "exec", l.lan, bootops, "erase-cert", "get", "lab/r-1", "-o", cert, "--server", "http://198.18.0.1:8080")
	pub := filepath.Join(l.dir, "state", "records.pub")
	out := run(t, bootops, "erase-cert", "verify", cert, "--key", pub)
	t.Logf("bootops erase-cert verify:\n%s", out)
	key, err := trust.ReadPublicKeyFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	signed, _ := os.ReadFile(cert)
	doc, err := trust.VerifyRecord(signed, trust.KindEraseCertificate, key)
	if err != nil {
		t.Fatal(err)
	}
	var c plan.EraseCertificate
	if err := json.Unmarshal(doc, &c); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"RV-OS": plan.EraseClear, "RN-1": plan.ErasePurge, "RS-1": plan.EraseClear}
	if c.Node != "r-1" || c.Erase != plan.ErasePurge || strings.Join(c.Keep, ",") != "RK-KEEP" || len(c.Disks) != len(want) {
		t.Errorf("certificate: node %s, erase %s, keep %v, %d disks", c.Node, c.Erase, c.Keep, len(c.Disks))
	}
	for _, d := range c.Disks {
		t.Logf("erase: %s (%s, %d MiB): %s, NIST %s, in %s; %s", d.Disk.Name, d.Disk.Transport, d.Disk.Size>>20, d.Method,
			d.Class, d.End.Sub(d.Start).Round(10*time.Millisecond), d.Verification)
		if class, ok := want[d.Disk.Serial]; !ok || d.Class != class || !d.Verified || d.Error != "" || d.Samples != 64 || d.Method == "" || d.End.Before(d.Start) {
			t.Errorf("disk %s in the certificate: %+v", d.Disk.Serial, d)
		}
		if !strings.Contains(out, "verified "+d.Disk.Name+",") || !strings.Contains(out, "serial "+d.Disk.Serial) {
			t.Errorf("erase-cert verify does not name disk %s", d.Disk.Serial)
		}
	}
	edited := bytes.Replace(signed, []byte(`RS-1`), []byte(`RS-2`), 1)
	if bytes.Equal(edited, signed) {
		t.Fatalf("the certificate does not hold RS-1 as text:\n%s", signed)
	}
	os.WriteFile(cert+".edited", edited, 0o644)
	if out, err := exec.Command(bootops, "erase-cert", "verify", cert+".edited", "--key", pub).CombinedOutput(); err == nil || !strings.Contains(string(out), "changed after it was signed") {
		t.Errorf("an edited certificate: %v\n%s", err, out)
	}

	// 5. Booted again while Git retires it: told to power off, nothing
	// installed, the kept disk as it was.
	v = machine("r-again", "RN-1")
	if !v.exit(8 * time.Minute) {
		t.Fatalf("the retired r-1 did not power off when booted again; console:\n%s", testutil.Tail(mustRead(v.console), 30))
	}
	if m, _ := l.machine("lab/r-1"); m.State != "retired" || !strings.Contains(l.logs("lab/r-1"), "retired node booted again: told to power off") {
		t.Errorf("booted again: state %s\n%s", m.State, testutil.Tail(l.logs("lab/r-1"), 10))
	}
	if sha256File(t, files["RK-KEEP"]) != sums["RK-KEEP"] {
		t.Error("the kept disk changed when the retired machine booted again")
	}
	t.Logf("timing: TestRetire %s", time.Since(began).Round(time.Second))
}

// referenceZeroes zeroes each erased disk's image from the host, as the
// benchmark's reference: dd writing zeroes with O_DIRECT, and blkdiscard
// -z (the kernel's write-zeroes, as the agent's clear) on a loop device.
func referenceZeroes(t *testing.T, disks []retireDisk, files map[string]string) {
	t.Helper()
	for _, d := range disks {
		if d.kept {
			continue
		}
		f := files[d.serial]
		start := time.Now()
		run(t, "dd", "if=/dev/zero", "of="+f, "bs=4M", fmt.Sprintf("count=%d", d.size>>22), "oflag=direct", "conv=notrunc,fsync", "status=none")
		t.Logf("timing: reference, host dd of zeroes (O_DIRECT) over %s's %d MiB image: %s", d.serial, d.size>>20, time.Since(start).Round(10*time.Millisecond))
		loop := strings.TrimSpace(run(t, "losetup", "--find", "--show", f))
		start = time.Now()
		run(t, "blkdiscard", "-z", loop)
		t.Logf("timing: reference, host blkdiscard -z on a loop device of %s's %d MiB image: %s", d.serial, d.size>>20, time.Since(start).Round(10*time.Millisecond))
		run(t, "losetup", "-d", loop)
	}
}

// fillMarked writes a disk image of size bytes whose every 4 KiB block
// says whose and which it is (each block differs), and returns its hash.
func fillMarked(t *testing.T, path, serial string, size int64) [32]byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	block := make([]byte, 4096)
	chunk := make([]byte, 0, 1<<20)
	for off := int64(0); off < size; off += int64(len(block)) {
		line := fmt.Sprintf("bootops e2e retire: disk %s block %d\n", serial, off/4096)
		for i := 0; i < len(block); i += len(line) {
			copy(block[i:], line)
		}
		chunk = append(chunk, block...)
		if len(chunk) == cap(chunk) || off+int64(len(block)) >= size {
			f.Write(chunk)
			h.Write(chunk)
			chunk = chunk[:0]
		}
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

func sha256File(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
