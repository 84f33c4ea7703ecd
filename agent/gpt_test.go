package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// An image made by sfdisk, written to a bigger disk: sfdisk finds its
// backup table misplaced; after moveBackupGPT it finds nothing to say,
// the partitions are the same, and the last usable sector is the disk's.
func TestMoveBackupGPT(t *testing.T) {
	if _, err := exec.LookPath("sfdisk"); err != nil {
		t.Fatal("sfdisk (Debian package fdisk) is needed: make test installs it")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "disk")
	f, _ := os.Create(img)
	f.Truncate(8 << 20)
	f.Close()
	cmd := exec.Command("sfdisk", "-q", img)
	cmd.Stdin = strings.NewReader("label: gpt\nstart=2048, size=4096, name=efi\nstart=6144, size=8192, name=root\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	before, _ := exec.Command("sfdisk", "-d", img).Output()
	// The disk is four times the image.
	os.Truncate(img, 32<<20)
	if out, _ := exec.Command("sfdisk", "--verify", img).CombinedOutput(); !strings.Contains(string(out), "backup GPT table is not on the end") {
		t.Fatalf("the test image's table was already at the end:\n%s", out)
	}
	f, _ = os.OpenFile(img, os.O_RDWR, 0)
	moved, err := moveBackupGPT(f, 32<<20, 512)
	f.Close()
	if err != nil || !moved {
		t.Fatalf("moved %v, %v", moved, err)
	}
	out, err := exec.Command("sfdisk", "--verify", img).CombinedOutput()
	if err != nil || strings.Contains(string(out), "not on the end") || !strings.Contains(string(out), "No errors detected") {
		t.Errorf("after the move, sfdisk --verify: %v\n%s", err, out)
	}
	after, _ := exec.Command("sfdisk", "-d", img).Output()
	if !strings.Contains(string(after), "last-lba: 65502") {
		t.Errorf("last usable sector not the disk's:\n%s", after)
	}
	partsOf := func(b []byte) string {
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "start=") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	if partsOf(before) != partsOf(after) {
		t.Errorf("partitions changed:\n%s\n---\n%s", partsOf(before), partsOf(after))
	}
	// Again: nothing to do.
	f, _ = os.OpenFile(img, os.O_RDWR, 0)
	defer f.Close()
	if moved, err := moveBackupGPT(f, 32<<20, 512); moved || err != nil {
		t.Errorf("second run: moved %v, %v", moved, err)
	}
	// Not a GPT disk: left alone.
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, make([]byte, 1<<20), 0o644)
	p, _ := os.OpenFile(plain, os.O_RDWR, 0)
	defer p.Close()
	if moved, err := moveBackupGPT(p, 1<<20, 512); moved || err != nil {
		t.Errorf("a blank disk: moved %v, %v", moved, err)
	}
}
