package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
)

// markedDisk is a 4 MiB disk image filled with a marker pattern.
func markedDisk(t *testing.T, name string) (string, plan.DiskInfo) {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	b := bytes.Repeat([]byte("bootops-erase-marker "), (4<<20)/21+1)[:4<<20]
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, plan.DiskInfo{Name: name, Serial: "SER-" + name, Model: "QEMU", Size: 4 << 20}
}

// tools fakes nvme and hdparm: each call is logged; answers by the
// first words.
type tools struct {
	calls   []string
	answers map[string]func(argv []string) ([]byte, error)
}

func (f *tools) exec(_ context.Context, argv ...string) ([]byte, error) {
	line := strings.Join(argv, " ")
	f.calls = append(f.calls, line)
	for prefix, answer := range f.answers {
		if strings.HasPrefix(line, prefix) {
			return answer(argv)
		}
	}
	return []byte("unexpected call"), errors.New("exit status 1")
}

func testEraser(f *tools) eraser {
	return eraser{Exec: f.exec, Now: time.Now}
}

func noisy(path string) error {
	b := make([]byte, 4<<20)
	rand.Read(b)
	return os.WriteFile(path, b, 0o644)
}

func allZero(t *testing.T, path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte{0}) == len(b)
}

// clear overwrites the whole disk and reads it back as zeroes; a purge
// of a disk that offers no sanitize (virtio) clears it and says so.
func TestEraseClear(t *testing.T) {
	for _, class := range []string{plan.EraseClear, plan.ErasePurge} {
		path, d := markedDisk(t, "vdb")
		d.Transport = "virtio"
		rec := testEraser(&tools{}).erase(context.Background(), d, path, class)
		if rec.Error != "" || rec.Method != "overwrite with zeroes" || rec.Class != plan.EraseClear || !rec.Verified || rec.Samples != eraseSamples {
			t.Fatalf("%s: %+v", class, rec)
		}
		if !allZero(t, path) {
			t.Errorf("%s: the disk still holds data", class)
		}
		if want := "purge not available: a virtio offers no sanitize of its own; cleared instead"; class == plan.ErasePurge && rec.Note != want {
			t.Errorf("purge of a virtio disk: note %q, want %q", rec.Note, want)
		}
		if !strings.Contains(rec.Verification, "64 samples of 4096 bytes read back: 64 zero") || rec.End.Before(rec.Start) {
			t.Errorf("%s: verification %q, %s → %s", class, rec.Verification, rec.Start, rec.End)
		}
	}
}

// An NVMe namespace whose controller offers crypto erase gets one (the
// fake leaves noise, as a crypto erase does); one that offers only Format
// NVM a user-data erase; one whose format fails is cleared with why.
func TestEraseNVMe(t *testing.T) {
	for _, c := range []struct {
		name, idCtrl string
		format       func(path string) error
		method, note string
		class        string
	}{
		{name: "crypto", idCtrl: `{"oacs":6,"fna":4}`, format: noisy, method: "nvme format: crypto erase (SES=2)", class: plan.ErasePurge},
		{name: "user data", idCtrl: `{"oacs":2,"fna":0}`, format: func(p string) error { return os.WriteFile(p, make([]byte, 4<<20), 0o644) },
			method: "nvme format: user-data erase (SES=1)", class: plan.ErasePurge},
		{name: "no format", idCtrl: `{"oacs":0}`, method: "overwrite with zeroes", class: plan.EraseClear,
			note: "purge not available: the controller does not support Format NVM; cleared instead"},
		{name: "format fails", idCtrl: `{"oacs":2,"fna":4}`, format: func(string) error { return errors.New("NVMe status: INVALID_FORMAT") },
			method: "overwrite with zeroes", class: plan.EraseClear, note: "purge not available: nvme format --ses=2: NVMe status: INVALID_FORMAT (exit status 1); cleared instead"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, d := markedDisk(t, "nvme0n1")
			d.Transport = "nvme"
			f := &tools{answers: map[string]func([]string) ([]byte, error){
				"nvme id-ctrl " + filepath.Join(filepath.Dir(path), "nvme0") + " --output-format=json": func([]string) ([]byte, error) { return []byte(c.idCtrl), nil },
				"nvme format " + path + " --ses=": func([]string) ([]byte, error) {
					if err := c.format(path); err != nil {
						return []byte(err.Error()), errors.New("exit status 1")
					}
					return []byte("Success formatting namespace:1"), nil
				},
			}}
			rec := testEraser(f).erase(context.Background(), d, path, plan.ErasePurge)
			if rec.Error != "" || rec.Method != c.method || rec.Class != c.class || rec.Note != c.note || !rec.Verified {
				t.Fatalf("%+v\ncalls: %q", rec, f.calls)
			}
			if c.name == "crypto" && !strings.Contains(rec.Verification, "64 changed beyond recognition") {
				t.Errorf("crypto erase verified as %q", rec.Verification)
			}
		})
	}
}

// A sanitize that reports success and leaves the data is caught by the
// samples read back.
func TestEraseVerificationCatchesALie(t *testing.T) {
	path, d := markedDisk(t, "nvme0n1")
	d.Transport = "nvme"
	f := &tools{answers: map[string]func([]string) ([]byte, error){
		"nvme id-ctrl": func([]string) ([]byte, error) { return []byte(`{"oacs":2,"fna":4}`), nil },
		"nvme format":  func([]string) ([]byte, error) { return []byte("Success formatting namespace:1"), nil },
	}}
	rec := testEraser(f).erase(context.Background(), d, path, plan.ErasePurge)
	if rec.Verified || !strings.Contains(rec.Error, "verification failed: 64 samples of 4096 bytes read back: 0 zero, 64 still holding data") {
		t.Fatalf("a format that did nothing: %+v", rec)
	}
}

const hdparmI = `
/dev/sda:

ATA device, with non-removable media
	Model Number:       QEMU HARDDISK
Security: 
	Master password revision code = 65534
		supported
	not	enabled
	not	locked
	%s	frozen
	not	expired: security count
		supported: enhanced erase
	2min for SECURITY ERASE UNIT. 2min for ENHANCED SECURITY ERASE UNIT.
Logical Unit WWN Device Identifier: 5000000000000000
`

// An ATA disk with the security feature set gets an enhanced security
// erase (password set, then erase); a frozen one is cleared with why, no
// password set.
func TestEraseATA(t *testing.T) {
	for _, frozen := range []bool{false, true} {
		path, d := markedDisk(t, "sda")
		d.Transport = "sata"
		state := "not"
		if frozen {
			state = "\t"
		}
		f := &tools{answers: map[string]func([]string) ([]byte, error){
			"hdparm -I " + path: func([]string) ([]byte, error) { return []byte(strings.Replace(hdparmI, "%s", state, 1)), nil },
			"hdparm --user-master u --security-set-pass bootops-erase " + path: func([]string) ([]byte, error) { return nil, nil },
			"hdparm --user-master u --security-erase-enhanced bootops-erase " + path: func([]string) ([]byte, error) {
				return nil, os.WriteFile(path, make([]byte, 4<<20), 0o644)
			},
		}}
		rec := testEraser(f).erase(context.Background(), d, path, plan.ErasePurge)
		switch {
		case !frozen && (rec.Method != "ata security erase (enhanced)" || rec.Class != plan.ErasePurge || !rec.Verified):
			t.Errorf("not frozen: %+v\ncalls %q", rec, f.calls)
		case frozen && (rec.Class != plan.EraseClear || !strings.Contains(rec.Note, "frozen") || slices.ContainsFunc(f.calls, func(c string) bool { return strings.Contains(c, "set-pass") })):
			t.Errorf("frozen: %+v\ncalls %q", rec, f.calls)
		}
	}
	if got := ataSecurity(strings.Replace(hdparmI, "%s", "not", 1)); !got["supported"] || got["frozen"] || got["enabled"] || !got["enhanced erase"] {
		t.Errorf("ataSecurity: %v", got)
	}
}

func TestNVMeController(t *testing.T) {
	for in, want := range map[string]string{"/dev/nvme0n1": "/dev/nvme0", "/dev/nvme10n2": "/dev/nvme10", "/dev/sda": "/dev/sda"} {
		if got := nvmeController(in); got != want {
			t.Errorf("nvmeController(%s) = %s, want %s", in, got, want)
		}
	}
}

// The machine's disks must be the record's, besides the kept ones: a disk
// the record lacks, one it has that is gone, a kept disk missing, a disk
// with no serial — nothing is erased, and why.
func TestEraseTargets(t *testing.T) {
	a := plan.DiskInfo{Name: "nvme0n1", Serial: "NVME-A", Size: 4 << 20}
	b := plan.DiskInfo{Name: "sda", Serial: "SATA-B", Size: 4 << 20}
	k := plan.DiskInfo{Name: "vdb", Serial: "DATA-K", Size: 8 << 20}
	for _, c := range []struct {
		name       string
		have, want []plan.DiskInfo
		keep       []string
		todo       []string
		why        string
	}{
		{name: "as recorded", have: []plan.DiskInfo{a, b, k}, want: []plan.DiskInfo{a, b}, keep: []string{"DATA-K"}, todo: []string{"nvme0n1", "sda"}},
		{name: "a disk swapped", have: []plan.DiskInfo{a, {Name: "sda", Serial: "OTHER", Size: 4 << 20}, k}, want: []plan.DiskInfo{a, b}, keep: []string{"DATA-K"},
			why: "disk sda (serial OTHER, 4194304 bytes) is not in the node's inventory on record"},
		{name: "a disk gone", have: []plan.DiskInfo{a, k}, want: []plan.DiskInfo{a, b}, keep: []string{"DATA-K"},
			why: "disk sda (serial SATA-B) of the node's inventory on record is not in this machine"},
		{name: "the kept disk gone", have: []plan.DiskInfo{a, b}, want: []plan.DiskInfo{a, b}, keep: []string{"DATA-K"},
			why: "kept disk DATA-K is not in this machine: is it the node's?"},
		{name: "another size", have: []plan.DiskInfo{a, {Name: "sda", Serial: "SATA-B", Size: 8 << 20}}, want: []plan.DiskInfo{a, b},
			why: "disk sda (serial SATA-B, 8388608 bytes) is not in the node's inventory on record"},
		{name: "no serial", have: []plan.DiskInfo{{Name: "vda", Size: 1 << 20}}, want: []plan.DiskInfo{{Name: "vda", Size: 1 << 20}},
			why: "disk vda has no serial: it cannot be matched to the node's inventory"},
		{name: "kept and to erase", have: []plan.DiskInfo{a}, want: []plan.DiskInfo{a}, keep: []string{"NVME-A"},
			why: "disk nvme0n1 (serial NVME-A) is both kept and to erase"},
	} {
		todo, why := eraseTargets(c.have, c.want, c.keep)
		var names []string
		for _, d := range todo {
			names = append(names, d.Name)
		}
		if why != c.why || strings.Join(names, " ") != strings.Join(c.todo, " ") || (why != "" && todo != nil) {
			t.Errorf("%s: %v %q, want %v %q", c.name, names, why, c.todo, c.why)
		}
	}
}

// A retirement's workflow: erase-disks erases the disks that are not
// kept, each reported with its record, the kept one untouched; then the
// agent reports the node retired (not provisioned) before it powers off.
func TestRunRetire(t *testing.T) {
	vda, a := markedDisk(t, "vda")
	vdb, k := markedDisk(t, "vdb")
	a.Transport, k.Transport = "virtio", "virtio"
	rec := &recorder{}
	var powered []string
	r := &Runner{Report: rec, Now: time.Now,
		DiskInventory: func() ([]plan.DiskInfo, map[string]string, error) {
			return []plan.DiskInfo{a, k}, map[string]string{"vda": vda, "vdb": vdb}, nil
		},
		Power: func(action string) error { powered = append(powered, action); return nil }}
	wf := plan.Workflow{Retire: true, Actions: []plan.Action{
		{Action: plan.ActionEraseDisks, Name: "erase", Erase: plan.ErasePurge, Keep: []string{k.Serial}, Disks: []plan.DiskInfo{a}},
		{Action: "poweroff", Name: "poweroff"}}}
	if err := r.Run(context.Background(), wf); err != nil {
		t.Fatal(err)
	}
	erased := rec.of(plan.AgentErased)
	if len(erased) != 1 || erased[0].Erasure == nil || erased[0].Erasure.Disk.Serial != a.Serial || !erased[0].Erasure.Verified {
		t.Fatalf("erased events: %+v", erased)
	}
	if !allZero(t, vda) || allZero(t, vdb) {
		t.Errorf("vda erased %v (want true), kept vdb erased %v (want false)", allZero(t, vda), allZero(t, vdb))
	}
	if got := strings.Join(rec.types(), " "); !strings.Contains(got, "retired") || strings.Contains(got, "provisioned") || !slices.Equal(powered, []string{"poweroff"}) {
		t.Errorf("events %s, power %v", got, powered)
	}
	// The machine is not the one on record: nothing erased, the action
	// fails for good.
	vdc, c := markedDisk(t, "vdc")
	r.DiskInventory = func() ([]plan.DiskInfo, map[string]string, error) {
		return []plan.DiskInfo{c, k}, map[string]string{"vdc": vdc, "vdb": vdb}, nil
	}
	err := r.Run(context.Background(), wf)
	if err == nil || !strings.Contains(err.Error(), "nothing erased: disk vdc (serial SER-vdc, 4194304 bytes) is not in the node's inventory on record") || allZero(t, vdc) {
		t.Errorf("another machine's disks: %v (vdc erased: %v)", err, allZero(t, vdc))
	}
}
