package media

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/pe"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"hash/crc32"
	"math/big"
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

// spec is a medium for node n1 of a remote site, with a static network,
// over a kernel and an initrd of random bytes.
func spec(t *testing.T) Spec {
	t.Helper()
	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	for _, f := range []string{kernel, initrd} {
		b := make([]byte, 1<<20)
		rand.Read(b)
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	site := &plan.Site{Name: "s1", Network: plan.Network{ServerAddress: "198.18.0.1", HTTPSPort: 8443},
		Remote: &plan.Remote{URL: "https://boot.example.net:8443"}}
	node := &plan.Node{Name: "n1", Site: "s1", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:01"}},
		Network: &plan.NodeNetwork{Address: "198.19.7.10/24", Gateway: "198.19.7.1", DNS: []string{"198.19.7.1"}, VLAN: 20}}
	return Spec{Site: site, Node: node, MicroOS: &plan.MicroOS{Name: "default", Cmdline: "console=ttyS0,115200"},
		Kernel: kernel, Initrd: initrd, CA: testCA(t), Epoch: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
}

func testCA(t *testing.T) string {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestSettings: the agent's settings name the site's remote URL, the site
// and its CA, and the node's static network; nothing secret.
func TestSettings(t *testing.T) {
	sp := spec(t)
	b, err := sp.Settings(plan.ChainMedia)
	if err != nil {
		t.Fatal(err)
	}
	var cfg trust.Config
	if err := json.Unmarshal([]byte(testutil.CPIOFile(string(b), strings.TrimPrefix(trust.ConfigPath, "/"))), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://boot.example.net:8443" || cfg.Site != "s1" || cfg.CA != sp.CA || cfg.Chain != plan.ChainMedia {
		t.Errorf("settings: %+v", cfg)
	}
	net := testutil.CPIOFile(string(b), strings.TrimPrefix(NetworkPath, "/"))
	for _, w := range []string{"BOOTOPS_NET_ADDRESS='198.19.7.10/24'", "BOOTOPS_NET_GATEWAY='198.19.7.1'", "BOOTOPS_NET_VLAN='20'", "BOOTOPS_NET_MAC='52:54:00:00:00:01'"} {
		if !strings.Contains(net, w+"\n") {
			t.Errorf("network: no %s in\n%s", w, net)
		}
	}
	sp.Node = nil
	b, _ = sp.Settings(plan.ChainMedia)
	if testutil.CPIOFile(string(b), strings.TrimPrefix(NetworkPath, "/")) != "" {
		t.Error("a site's generic medium carries a node's network")
	}
	sp.CA = ""
	if _, err := sp.Settings(plan.ChainMedia); err == nil || !strings.Contains(err.Error(), "site CA") {
		t.Errorf("no CA: %v", err)
	}
	sp.CA, sp.Site.Remote, sp.Site.Network.HTTPSPort = testCA(t), nil, 0
	if _, err := sp.Settings(plan.ChainMedia); err == nil || !strings.Contains(err.Error(), "httpsPort") {
		t.Errorf("no https: %v", err)
	}
}

// TestUSB: the USB image is a valid GPT disk (both headers, their CRCs,
// one EFI system partition at 1 MiB) whose FAT file system holds shim,
// GRUB with the medium's config, the Micro-OS and its settings; built
// twice, the bytes are the same.
func TestUSB(t *testing.T) {
	sp := spec(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img")
	if err := USB(sp, a); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a clock that leaked in would show
	if err := USB(sp, b); err != nil {
		t.Fatal(err)
	}
	img, _ := os.ReadFile(a)
	if other, _ := os.ReadFile(b); !bytes.Equal(img, other) {
		t.Error("two builds of one medium differ")
	}
	checkGPT(t, img)
	if out, err := exec.Command("sfdisk", "--verify", a).CombinedOutput(); err != nil || !strings.Contains(string(out), "No errors detected") {
		t.Errorf("sfdisk --verify: %v\n%s", err, out)
	}
	at := a + "@@" + "1M"
	for f, want := range map[string]string{
		"::/EFI/BOOT/BOOTX64.EFI": "", "::/EFI/BOOT/grubx64.efi": "", "::/bootops/vmlinuz": "", "::/bootops/initrd": "",
		"::/EFI/BOOT/grub.cfg": "initrd ($root)/bootops/initrd ($root)/bootops/media.img", "::/EFI/debian/grub.cfg": "search --no-floppy --file --set=root /bootops/id-",
	} {
		out, err := exec.Command("mtype", "-i", at, f).Output()
		if err != nil || len(out) == 0 || !strings.Contains(string(out), want) {
			t.Errorf("%s: %v, %d bytes, want %q in it", f, err, len(out), want)
		}
	}
	shim, _ := os.ReadFile(Shim.path)
	if out, _ := exec.Command("mtype", "-i", at, "::/EFI/BOOT/BOOTX64.EFI").Output(); !bytes.Equal(out, shim) {
		t.Error("BOOTX64.EFI is not Debian's signed shim")
	}
}

// checkGPT checks a disk image's GPT: headers, CRCs, the ESP entry.
func checkGPT(t *testing.T, img []byte) {
	t.Helper()
	if img[510] != 0x55 || img[511] != 0xaa || img[446+4] != 0xee {
		t.Fatal("no protective MBR")
	}
	total := uint64(len(img) / sector)
	for _, lba := range []uint64{1, total - 1} {
		h := append([]byte(nil), img[lba*sector:lba*sector+92]...)
		if string(h[:8]) != "EFI PART" {
			t.Fatalf("LBA %d: no GPT header", lba)
		}
		want := binary.LittleEndian.Uint32(h[16:])
		binary.LittleEndian.PutUint32(h[16:], 0)
		if crc32.ChecksumIEEE(h) != want {
			t.Errorf("LBA %d: header CRC", lba)
		}
		if my := binary.LittleEndian.Uint64(h[24:]); my != lba {
			t.Errorf("LBA %d: header says it is at %d", lba, my)
		}
		el := binary.LittleEndian.Uint64(h[72:])
		entries := img[el*sector : el*sector+gptEntries*entrySize]
		if crc32.ChecksumIEEE(entries) != binary.LittleEndian.Uint32(h[88:]) {
			t.Errorf("LBA %d: entries CRC", lba)
		}
		if !bytes.Equal(entries[:16], espType[:]) || binary.LittleEndian.Uint64(entries[32:]) != espStart {
			t.Errorf("LBA %d: first entry is not an ESP at 1 MiB", lba)
		}
		if end := binary.LittleEndian.Uint64(entries[40:]); end > binary.LittleEndian.Uint64(h[48:]) {
			t.Errorf("LBA %d: the ESP ends at %d, past the last usable sector", lba, end)
		}
	}
}

// TestISO: the ISO has El Torito entries for BIOS and UEFI and is hybrid;
// its files are the Micro-OS, ISOLINUX's config and the settings; built
// twice, the bytes are the same.
func TestISO(t *testing.T) {
	sp := spec(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.iso"), filepath.Join(dir, "b.iso")
	if err := ISO(sp, a); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if err := ISO(sp, b); err != nil {
		t.Fatal(err)
	}
	x, _ := os.ReadFile(a)
	if y, _ := os.ReadFile(b); !bytes.Equal(x, y) {
		t.Error("two builds of one medium differ")
	}
	out, err := exec.Command("xorriso", "-indev", a, "-report_el_torito", "plain").CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso: %v\n%s", err, out)
	}
	for _, w := range []string{"El Torito boot img :   1  BIOS", "El Torito boot img :   2  UEFI"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("no %q in\n%s", w, out)
		}
	}
	if x[510] != 0x55 || x[511] != 0xaa {
		t.Error("not hybrid: no MBR")
	}
	ex := filepath.Join(dir, "x")
	out, err = exec.Command("xorriso", "-osirrox", "on", "-indev", a, "-extract", "/", ex).CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso extract: %v\n%s", err, out)
	}
	cfg, _ := os.ReadFile(filepath.Join(ex, "isolinux/isolinux.cfg"))
	if !strings.Contains(string(cfg), "INITRD /bootops/initrd,/bootops/media.img") || !strings.Contains(string(cfg), "APPEND console=ttyS0,115200") {
		t.Errorf("isolinux.cfg:\n%s", cfg)
	}
	settings, _ := os.ReadFile(filepath.Join(ex, "bootops/media.img"))
	if want, _ := sp.Settings(plan.ChainMedia); !bytes.Equal(settings, want) {
		t.Error("bootops/media.img is not the medium's settings")
	}
	kernel, _ := os.ReadFile(filepath.Join(ex, "bootops/vmlinuz"))
	if want, _ := os.ReadFile(sp.Kernel); !bytes.Equal(kernel, want) {
		t.Error("bootops/vmlinuz is not the Micro-OS's kernel")
	}
}

// TestUKI: the HTTPS boot URL's UKI holds the kernel, the Micro-OS's
// initrd with the settings (chain uki) appended at a 4-byte boundary, and
// the command line.
func TestUKI(t *testing.T) {
	sp := spec(t)
	out := filepath.Join(t.TempDir(), "boot.efi")
	if err := UKI(sp, out); err != nil {
		t.Fatal(err)
	}
	f, err := pe.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := func(name string) []byte {
		s := f.Section(name)
		if s == nil {
			t.Fatalf("no section %s", name)
		}
		b, _ := s.Data()
		return b[:min(len(b), int(s.VirtualSize))]
	}
	initrd, _ := os.ReadFile(sp.Initrd)
	settings, _ := sp.Settings(plan.ChainUKI)
	got := data(".initrd")
	if !bytes.HasPrefix(got, initrd) || !bytes.HasSuffix(got, settings) || (len(got)-len(settings))%4 != 0 {
		t.Errorf(".initrd: %d bytes, want the initrd (%d) then the settings (%d) at a 4-byte boundary", len(got), len(initrd), len(settings))
	}
	if !strings.Contains(testutil.CPIOFile(string(settings), strings.TrimPrefix(trust.ConfigPath, "/")), `"chain": "uki"`) {
		t.Error("the UKI's settings do not say chain uki")
	}
	if c := string(bytes.TrimRight(data(".cmdline"), "\x00")); c != "console=ttyS0,115200" {
		t.Errorf(".cmdline %q", c)
	}
}
