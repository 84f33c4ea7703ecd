package agent

import (
	"bytes"
	"context"
	"crypto/aes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"filippo.io/age"
	"filippo.io/age/armor"
	"golang.org/x/crypto/xts"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/tpm"
)

// cryptImage makes a GPT image with sfdisk: an ESP (2 MiB) and a root (4
// MiB) whose every sector carries a marker, and the same image's sizes.
func cryptImage(t *testing.T, marker string) (img []byte, espFirst, rootFirst, rootSectors int64) {
	t.Helper()
	if _, err := exec.LookPath("sfdisk"); err != nil {
		t.Fatal("sfdisk (Debian package fdisk) is needed: make test installs it")
	}
	p := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(p, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sfdisk", "-q", p)
	cmd.Stdin = strings.NewReader("label: gpt\nstart=2048, size=4096, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, uuid=11111111-2222-3333-4444-555555555555\n" +
		"start=6144, size=8192, uuid=5D3F0C64-1C1E-4B7A-9D2E-7E2A0F1B0002\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	img, _ = os.ReadFile(p)
	for off := 6144 * 512; off < (6144+8192)*512; off += 512 {
		copy(img[off:], marker)
	}
	copy(img[2048*512:], "ESP CONTENT")
	return img, 2048, 6144, 8192
}

// fakeCrypt stands in for cryptsetup: it records the calls (with the
// key files' content, read while they exist) and "opens" a container as
// a regular file in the mapper folder.
type fakeCrypt struct {
	mu        sync.Mutex
	mapperDir string
	calls     []string
	keys      map[string]string // key-file content by the option that named it
	token     []byte
}

func (f *fakeCrypt) run(_ context.Context, stdin []byte, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, args[0])
	if i := slices.Index(args, "--volume-key-file"); i >= 0 {
		b, err := os.ReadFile(args[i+1])
		if err != nil {
			return nil, err
		}
		f.keys["volume"] = string(b)
	}
	if i := slices.Index(args, "--key-file"); i >= 0 {
		b, err := os.ReadFile(args[i+1])
		if err != nil {
			return nil, err
		}
		f.keys[args[0]] = string(b)
	}
	switch args[0] {
	case "luksAddKey":
		b, err := os.ReadFile(args[len(args)-1])
		if err != nil {
			return nil, err
		}
		f.keys["new"] = string(b)
	case "token":
		f.token = stdin
	case "open":
		return nil, os.WriteFile(filepath.Join(f.mapperDir, args[len(args)-1]), nil, 0o600)
	}
	return nil, nil
}

func TestEncryptedImageToDisk(t *testing.T) {
	const marker = "PLAINTEXT-MARKER"
	img, _, rootFirst, rootSectors := cryptImage(t, marker)
	r, rec, url := startImage(t, &imageServer{file: img})
	disk := newDisk(t, 64<<20)
	id, _ := age.GenerateX25519Identity()
	fc := &fakeCrypt{mapperDir: t.TempDir(), keys: map[string]string{}}
	r.Cryptsetup, r.MapperDir = fc.run, fc.mapperDir
	var sealed []byte
	r.SealFirstBoot = func(secret []byte) (tpm.ClevisJWE, error) {
		sealed = secret
		return tpm.ClevisJWE{Protected: "hdr", IV: "iv", Ciphertext: "ct", Tag: "tag"}, nil
	}
	esp, root := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(esp, "EFI/debian"), 0o755)
	os.WriteFile(filepath.Join(esp, "EFI/debian/grub.cfg"), []byte("menuentry x {\n\tlinux /vmlinuz root=PARTUUID=5d3f0c64-1c1e-4b7a-9d2e-7e2a0f1b0002 ro console=ttyS0\n}\n"), 0o644)
	os.WriteFile(filepath.Join(esp, "syslinux.cfg"), []byte("LABEL x\n  APPEND root=UUID=abcd ro\n"), 0o644)
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/fstab"), []byte("PARTUUID=5D3F0C64-1C1E-4B7A-9D2E-7E2A0F1B0002 / ext4 errors=remount-ro 0 1\n"), 0o644)
	mapped := filepath.Join(fc.mapperDir, plan.CryptName)
	m := &fakeMounts{roots: map[string]string{disk + "1": esp, mapped: root}}
	r.Mount, r.Unmount = m.mount, m.unmount
	r.Power = func(string) error { return nil }

	enc := &plan.Encryption{Partition: 2, PCRs: []int{7}, Recipients: []string{id.Recipient().String()}, Unlock: "clevis"}
	err := r.Run(t.Context(), wf(
		plan.Action{Action: "image-to-disk", Disk: disk, URL: url, SHA256: digest(img), Timeout: "1m", Encrypt: enc},
		plan.Action{Action: "write-file", Disk: disk, Partition: 2, Path: "/etc/hello", Content: "hi\n", Timeout: "1m"},
		plan.Action{Action: "reboot", Timeout: "1m"}))
	if err != nil {
		t.Fatal(err)
	}

	// The disk: the ESP as the image has it, the root partition nothing
	// of the image (the fake writes no LUKS header: zeros or the disk's
	// old bytes), the table grown and valid at both ends.
	got, _ := os.ReadFile(disk)
	if !bytes.Contains(got[2048*512:], []byte("ESP CONTENT")) {
		t.Error("the ESP is not on the disk")
	}
	if bytes.Contains(got, []byte(marker)) {
		t.Error("the root partition's plaintext reached the disk")
	}
	if out, err := exec.Command("sfdisk", "--verify", disk).CombinedOutput(); err != nil || strings.Contains(string(out), "not on the end") {
		t.Errorf("sfdisk --verify: %v\n%s", err, out)
	}
	dump, _ := exec.Command("sfdisk", "-d", disk).Output()
	if wantSize := fmt.Sprintf("start=        %d, size=      %d", rootFirst, (64<<20)/512-33-rootFirst); !strings.Contains(string(dump), wantSize) {
		t.Errorf("root partition not grown to the disk's end (%s):\n%s", wantSize, dump)
	}
	// The data area, 16 MiB into the partition, decrypts with the volume
	// key luksFormat was given (aes-xts-plain64, 512-byte sectors) to the
	// image's root partition.
	if len(fc.keys["volume"]) != 64 {
		t.Fatalf("volume key of %d bytes", len(fc.keys["volume"]))
	}
	c, err := xts.NewCipher(aes.NewCipher, []byte(fc.keys["volume"]))
	if err != nil {
		t.Fatal(err)
	}
	data := got[rootFirst*512+16<<20 : rootFirst*512+16<<20+rootSectors*512]
	plain := make([]byte, len(data))
	for i := 0; i < len(data); i += 512 {
		c.Decrypt(plain[i:i+512], data[i:i+512], uint64(i/512))
	}
	if !bytes.Equal(plain, img[rootFirst*512:(rootFirst+rootSectors)*512]) {
		t.Error("the data area does not decrypt to the image's root partition")
	}
	if want := []string{"close", "luksFormat", "luksAddKey", "token", "open", "close"}; !slices.Equal(fc.calls[len(fc.calls)-len(want)+1:], want[1:]) {
		t.Errorf("cryptsetup calls %v, want %v", fc.calls, want[1:])
	}
	if fc.keys["open"] != string(sealed) || fc.keys["new"] != string(sealed) || fc.keys["luksFormat"] == string(sealed) {
		t.Errorf("keys: format %q, added %q, opened with %q; sealed %q", fc.keys["luksFormat"], fc.keys["new"], fc.keys["open"], sealed)
	}
	var tok struct {
		Type     string   `json:"type"`
		Keyslots []string `json:"keyslots"`
	}
	if json.Unmarshal(fc.token, &tok); tok.Type != "clevis" || !slices.Equal(tok.Keyslots, []string{"1"}) {
		t.Errorf("token %s", fc.token)
	}

	// The escrow: the recovery key luksFormat got, readable with the
	// recipient's identity only.
	esc := rec.of(plan.AgentEscrow)
	if len(esc) != 1 || esc[0].Escrow == nil {
		t.Fatalf("escrow events %+v", esc)
	}
	if strings.Contains(esc[0].Message, fc.keys["luksFormat"]) || strings.Contains(esc[0].Escrow.Ciphertext, fc.keys["luksFormat"]) {
		t.Fatal("the recovery key left the node in the clear")
	}
	rd, err := age.Decrypt(armor.NewReader(strings.NewReader(esc[0].Escrow.Ciphertext)), id)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(rd); string(b) != fc.keys["luksFormat"] || len(b) != 8*6+7 {
		t.Errorf("escrowed %q, luksFormat got %q", b, fc.keys["luksFormat"])
	}
	if slices.Index(rec.types(), plan.AgentEscrow) > slices.Index(rec.types(), plan.AgentProvisioned) {
		t.Errorf("escrow after provisioned: %v", rec.types())
	}

	// The boot: grub.cfg's root is the mapping, syslinux's (the
	// filesystem's UUID) stays; both say what to unlock.
	grub, _ := os.ReadFile(filepath.Join(esp, "EFI/debian/grub.cfg"))
	opts := "cryptopts=target=bootops-root,source=PARTUUID=5d3f0c64-1c1e-4b7a-9d2e-7e2a0f1b0002,luks,discard"
	if want := "\tlinux /vmlinuz root=/dev/mapper/bootops-root " + opts + " ro console=ttyS0\n"; !strings.Contains(string(grub), want) {
		t.Errorf("grub.cfg:\n%s\nwant the line %q", grub, want)
	}
	if sl, _ := os.ReadFile(filepath.Join(esp, "syslinux.cfg")); !strings.Contains(string(sl), "  APPEND root=UUID=abcd "+opts+" ro\n") {
		t.Errorf("syslinux.cfg:\n%s", sl)
	}
	for name, want := range map[string]string{
		"etc/fstab":                       "/dev/mapper/bootops-root / ext4 errors=remount-ro 0 1\n",
		"etc/crypttab":                    "bootops-root PARTUUID=5d3f0c64-1c1e-4b7a-9d2e-7e2a0f1b0002 none luks,discard\n",
		"etc/hello":                       "hi\n",
		"var/lib/bootops/encryption.json": `"device": "/dev/disk/by-partuuid/5d3f0c64-1c1e-4b7a-9d2e-7e2a0f1b0002"`,
	} {
		if b, _ := os.ReadFile(filepath.Join(root, name)); !strings.Contains(string(b), want) {
			t.Errorf("%s: %q, want %q in it", name, b, want)
		}
	}
}

func TestEncryptedImageRefusals(t *testing.T) {
	img, _, _, _ := cryptImage(t, "M")
	id, _ := age.GenerateX25519Identity()
	for _, c := range []struct {
		name string
		enc  plan.Encryption
		seal error
		want string
	}{
		{"no TPM", plan.Encryption{Partition: 2, PCRs: []int{7}, Recipients: []string{id.Recipient().String()}}, fmt.Errorf("open /dev/tpmrm0: no such file"), "needs this machine's TPM"},
		{"not the last", plan.Encryption{Partition: 1, PCRs: []int{7}, Recipients: []string{id.Recipient().String()}}, nil, "partition 1 is not the image's last"},
		{"bad recipient", plan.Encryption{Partition: 2, PCRs: []int{7}, Recipients: []string{"age1nope"}}, nil, `recipient "age1nope"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, rec, url := startImage(t, &imageServer{file: img})
			disk := newDisk(t, 64<<20)
			fc := &fakeCrypt{mapperDir: t.TempDir(), keys: map[string]string{}}
			r.Cryptsetup, r.MapperDir = fc.run, fc.mapperDir
			r.SealFirstBoot = func([]byte) (tpm.ClevisJWE, error) { return tpm.ClevisJWE{}, c.seal }
			err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Disk: disk, URL: url, SHA256: digest(img), Timeout: "1m", Retries: 2, Encrypt: &c.enc}))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if n := len(rec.of(plan.AgentRetry)); n != 0 {
				t.Errorf("retried %d times: a refusal is for good", n)
			}
			got, _ := os.ReadFile(disk)
			if !bytes.Equal(got, bytes.Repeat([]byte{0xee}, len(got))) && c.name != "not the last" {
				t.Error("the disk was written")
			}
			if slices.Contains(fc.calls, "luksFormat") {
				t.Errorf("cryptsetup %v", fc.calls)
			}
		})
	}
}

// An attempt that fails after the partition was opened closes it: the
// next attempt re-reads the disk's partition table, which the kernel
// refuses while a partition of it is open.
func TestEncryptedAttemptClosesItsPartition(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "part")
	if err != nil {
		t.Fatal(err)
	}
	w := &cryptWriter{part: &offsetFile{f, 0}}
	w.abort()
	if w.part != nil {
		t.Fatal("the partition is still the writer's")
	}
	if _, err := f.Write([]byte("x")); err == nil {
		t.Error("the partition is still open after a failed attempt")
	}
	w.abort() // twice: nothing left to close
}
