//go:build e2e

package e2e

import (
	"bytes"
	"debug/pe"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/tpm"
)

// The trusted boot chains, in VMs with Secure Boot enforced: the signed
// UKI by UEFI HTTP boot (own keys: OVMF's snakeoil db), and Debian's shim
// → GRUB → signed kernel (the Microsoft keys machines leave the factory
// with), both with TLS from the Micro-OS on.

const snakeoilCert = "/usr/share/ovmf/PkKek-1-snakeoil.pem"

// httpBootOnly turns OVMF's PXE off, so its network boot is UEFI HTTP
// boot (OVMF's runtime configuration, opt/org.tianocore/*).
var httpBootOnly = []string{"-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n", "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n",
	"-fw_cfg", "name=opt/org.tianocore/IPv6Support,string=n"}

// trustedLab is a lab whose bootops serves HTTPS with a CA of its own
// (bootops ca init), and records the bridge's traffic; withDHCP: with the
// site's own DHCP server (proxy mode).
func trustedLab(t *testing.T, withDHCP bool) (l *lab, state, pcap string) {
	l = newLab(t, withDHCP)
	state = filepath.Join(l.dir, "state")
	run(t, bootops, "ca", "init", "--host", "198.18.0.1", "--state-dir", state)
	pcap = filepath.Join(l.dir, "bridge.pcap")
	l.start("tcpdump", "ip", "netns", "exec", l.lan, "tcpdump", "-U", "-i", "br0", "-n", "-w", pcap)
	return l, state, pcap
}

// noSecretsOnTheWire reads the bridge's capture: nothing that authorizes
// an agent, and no user-data, crossed it in clear.
func noSecretsOnTheWire(t *testing.T, l *lab, pcap string, userData string) {
	t.Helper()
	time.Sleep(2 * time.Second) // tcpdump -U writes each packet as it goes
	b, err := os.ReadFile(pcap)
	if err != nil || len(b) < 100000 {
		t.Fatalf("the capture %s is missing or nearly empty (%d bytes, %v)", pcap, len(b), err)
	}
	for _, secret := range []string{"Bearer ", "bootops.token=", "#cloud-config", userData, "/api/v1/agent/"} {
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("the bridge carried %q in clear", secret)
		}
	}
	// And the agent's traffic did cross it, encrypted: TLS records to 8443.
	if !bytes.Contains(b, []byte{0x16, 0x03, 0x01}) {
		t.Errorf("no TLS handshake in the capture")
	}
}

// UEFI HTTP boot of a signed UKI with Secure Boot on (own keys): one VM
// fetches it by HTTPS boot (its firmware given the site CA) and provisions
// over TLS; one, by plain HTTP boot, whose profile's image is on a rogue HTTPS
// server (a self-signed certificate, another image) ends failed with the
// reason and installs nothing; one whose UKI has a flipped byte in its
// initramfs is refused by the firmware and never checks in.
func TestSecureBootUKI(t *testing.T) {
	t.Parallel()
	l, state, pcap := trustedLab(t, true)
	l.vms(3) // the tampered UKI's VM first, alone; then the other three
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")
	// The rogue: on the LAN at 198.18.0.3, HTTPS with its own certificate,
	// serving another image under the same name.
	rogueDir := t.TempDir()
	os.WriteFile(filepath.Join(rogueDir, "test.raw.gz"), []byte("not the image"), 0o644)
	run(t, "ip", "-n", l.dhc, "addr", "add", "198.18.0.3/24", "dev", "eth0")
	l.start("rogue", "ip", "netns", "exec", l.dhc, imageServer, "-dir", rogueDir, "-addr", "198.18.0.3:8443", "-tls-self-signed")

	// The signed UKI, the agent's server and the site CA inside it.
	dir := filepath.Join(t.TempDir(), "repo")
	key := filepath.Join(l.dir, "db.key")
	run(t, "openssl", "pkey", "-in", "/usr/share/ovmf/PkKek-1-snakeoil.key", "-passin", "pass:snakeoil", "-out", key)
	os.Chmod(key, 0o600)
	run(t, bootops, "microos", "build", "--kernel", kernel(t), "--agent", agentBin, "--uki", "--server", "https://198.18.0.1:8443", "--site", "lab",
		"--ca", filepath.Join(state, "tls/ca.pem"), "--cmdline", "console=ttyS0,115200 panic=-1 no_timer_check", "--sign-key", key, "--sign-cert", snakeoilCert,
		"-o", filepath.Join(dir, "microos"))
	run(t, "sbverify", "--cert", snakeoilCert, filepath.Join(dir, "microos/bootops.efi"))
	flipInitrdByte(t, filepath.Join(dir, "microos/bootops.efi"), filepath.Join(dir, "microos/tampered.efi"))
	// Another Micro-OS, signed by the same key (the firmware lets it run),
	// that Git does not name for any node: a machine booting it from its
	// own media is refused by the server, from its TPM's measurements.
	other := filepath.Join(t.TempDir(), "other")
	run(t, bootops, "microos", "build", "--kernel", kernel(t), "--agent", agentBin, "--uki", "--server", "https://198.18.0.1:8443", "--site", "lab",
		"--ca", filepath.Join(state, "tls/ca.pem"), "--cmdline", "console=ttyS0,115200 panic=-1 no_timer_check bootops.other=1", "--sign-key", key, "--sign-cert", snakeoilCert,
		"-o", other)

	writeRepo(t, dir, vars{"ImageSHA": gzSHA}, "secureboot-uki")
	l.serve(dir, "--https-addr", "198.18.0.1:8443")

	// The firmware's TLS trusts the site CA (an EFI signature list): vm-sb
	// fetches its UKI by HTTPS boot, the others by plain HTTP boot.
	esl := filepath.Join(l.dir, "ca.esl")
	run(t, "cert-to-efi-sig-list", filepath.Join(state, "tls/ca.pem"), esl)
	fw := append([]string{"-fw_cfg", "name=etc/edk2/https/cacerts,file=" + esl}, httpBootOnly...)
	code, vars := "/usr/share/OVMF/OVMF_CODE_4M.snakeoil.fd", "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd"
	sbDisk, rogueDisk := disk(t, l, "sb"), disk(t, l, "rogue")
	tampered := l.secureVM("tampered", "52:54:00:e2:30:03", code, vars, fw...)
	tampered.wait(t, "Access Denied", 5*time.Minute)
	tampered.cmd.Process.Kill()
	start := time.Now()
	// vm-sb and vm-other have TPMs; sb-os requires attestation.
	sb := l.secureVM("sb", "52:54:00:e2:30:01", code, vars, append(append(withDisk(sbDisk), fw...), l.tpmArgs(l.tpm("sb"))...)...)
	otherVM := l.secureVM("other", "52:54:00:e2:30:04", code, vars, append(l.tpmArgs(l.tpm("other")),
		"-kernel", filepath.Join(other, "bootops.efi"), "-append", "console=ttyS0,115200 panic=-1 no_timer_check bootops.other=1")...)
	rogue := l.secureVM("rogue", "52:54:00:e2:30:02", code, vars, append(withDisk(rogueDisk), fw...)...)

	out := sb.wait(t, "secureboot: Secure boot enabled", 8*time.Minute)
	if !strings.Contains(out, "bootops-agent") {
		sb.wait(t, "bootops-agent", 3*time.Minute)
	}
	t.Logf("timing: uki chain under TCG, VM start → agent running: %s", time.Since(start).Round(time.Second))
	waitState(t, l, "lab/vm-sb", "provisioned", 8*time.Minute)
	t.Logf("timing: uki chain under TCG, VM start → provisioned: %s", time.Since(start).Round(time.Second))
	checkDisk(t, sbDisk, rawSHA)
	if m, _ := l.machine("lab/vm-sb"); m.Boot != "uefi, secure boot, uki, tls" {
		t.Errorf("vm-sb's boot: %q, want uefi, secure boot, uki, tls", m.Boot)
	}
	if log := l.logs("lab/vm-sb"); !strings.Contains(log, "https://198.18.0.1:8443/artifacts/microos/signed/uki") {
		t.Errorf("vm-sb was not offered its UKI by HTTPS:\n%s", log)
	}
	if !strings.Contains(mustRead(sb.console), "URI: https://198.18.0.1:8443/artifacts/microos/signed/uki") {
		t.Errorf("vm-sb's firmware did not boot from the https URI:\n%s", testutil.Tail(mustRead(sb.console), 40))
	}

	msg := waitState(t, l, "lab/vm-rogue", "failed", 6*time.Minute)
	if !strings.Contains(msg, "certificate") {
		t.Errorf("vm-rogue failed with %q, want the certificate refusal", msg)
	}
	if b, _ := os.ReadFile(rogueDisk); bytes.Contains(b, []byte("not the image")) {
		t.Error("the rogue's image reached vm-rogue's disk")
	}
	waitVMs(2*time.Minute, sb, rogue)

	// The tampered UKI: refused by the firmware, so no agent ever asked.
	m, ok := l.machine("lab/vm-tampered")
	if !ok {
		t.Fatal("vm-tampered is not in the status at all: its DHCP request should be there")
	}
	switch m.State {
	case "microos", "provisioning", "provisioned", "failed":
		t.Errorf("vm-tampered's state is %v: its agent ran", m.State)
	}
	if log := l.logs("lab/vm-tampered"); strings.Contains(log, "agent") || !strings.Contains(log, "/artifacts/microos/tampered/uki") {
		t.Errorf("vm-tampered's timeline should show the UKI offered and no agent:\n%s", log)
	}
	// Measured boot: vm-sb's quote shows Secure Boot and the UKI Git
	// names; vm-other's, a UKI Git does not name for it.
	want := "tpm: ek " + l.tpm("sb").EKHash + ", attested, secure boot, micro-os digest ok"
	if m, _ := l.machine("lab/vm-sb"); m.TPM != want {
		t.Errorf("vm-sb's identity proof: %q, want %q", m.TPM, want)
	}
	refusal := "booted a Micro-OS that is not in Git: PCR 4 has " + peDigest(t, filepath.Join(other, "bootops.efi")) +
		" (want " + peDigest(t, filepath.Join(dir, "microos/bootops.efi")) + ")"
	waitFor(t, "vm-other's refusal", 8*time.Minute, func() bool { return strings.Contains(l.logs("lab/vm-other"), refusal) })
	out = mustRead(otherVM.console)
	otherVM.cmd.Process.Kill()
	otherVM.cmd.Wait()
	if !strings.Contains(out, "secureboot: Secure boot enabled") || !strings.Contains(out, "PCRs quoted") {
		t.Errorf("vm-other should run its signed Micro-OS under Secure Boot and quote its PCRs:\n%s", testutil.Tail(out, 30))
	}
	if log := l.logs("lab/vm-other"); strings.Contains(log, "agent checked in") {
		t.Errorf("vm-other got its workflow:\n%s", log)
	}
	noSecretsOnTheWire(t, l, pcap, "E2E-USERDATA-SECRET")
}

// peDigest is the Authenticode digest of the EFI application at path, as
// firmware measures it into PCR 4.
func peDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	d, err := tpm.PEDigest(f, fi.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// flipInitrdByte copies a UKI with one byte in the middle of its .initrd
// section changed.
func flipInitrdByte(t *testing.T, src, dst string) {
	t.Helper()
	f, err := pe.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".initrd")
	f.Close()
	if s == nil {
		t.Fatalf("%s has no .initrd section", src)
	}
	b, _ := os.ReadFile(src)
	b[s.Offset+s.Size/2] ^= 0x01
	os.WriteFile(dst, b, 0o644)
}

// Debian's signed shim → signed GRUB → Debian's signed kernel, Secure
// Boot on with only the Microsoft keys, bootops the LAN's DHCP server
// (reservation mode, a pool for what DHCP cannot tell: a serial-only
// node). The Micro-OS is generic and gets its server and CA from the
// signed site overlay; GRUB finds the node's config by its SMBIOS serial.
// A kernel whose signature was removed is refused by shim.
func TestSecureBootShim(t *testing.T) {
	t.Parallel()
	l, state, pcap := trustedLab(t, false)
	l.vms(2)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")

	dir := filepath.Join(t.TempDir(), "repo")
	run(t, bootops, "microos", "build", "--kernel", kernel(t), "--agent", agentBin, "--overlay-key", filepath.Join(state, "tls/overlay.pub"),
		"-o", filepath.Join(dir, "microos"))
	stripped := filepath.Join(dir, "microos/vmlinuz-unsigned")
	run(t, "sbattach", "--remove", filepath.Join(dir, "microos/vmlinuz"))
	os.Rename(filepath.Join(dir, "microos/vmlinuz"), stripped)
	run(t, "cp", kernel(t), filepath.Join(dir, "microos/vmlinuz"))
	if out, _ := exec.Command("sbverify", "--list", stripped).CombinedOutput(); !strings.Contains(string(out), "No signature table") {
		t.Fatalf("the stripped kernel still has a signature:\n%s", out)
	}
	writeRepo(t, dir, vars{"ImageSHA": gzSHA}, "secureboot-shim")
	l.serve(dir, "--https-addr", "198.18.0.1:8443")

	code, vars := "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd", "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
	shimDisk := disk(t, l, "shim")
	start := time.Now()
	shim := l.secureVM("shim", "52:54:00:e2:31:01", code, vars, append(withDisk(shimDisk), "-smbios", "type=1,serial=E2E-SHIM")...)
	strippedVM := l.secureVM("stripped", "52:54:00:e2:31:02", code, vars)

	out := shim.wait(t, "secureboot: Secure boot enabled", 8*time.Minute)
	if !strings.Contains(out, "bootops: node vm-shim") {
		t.Errorf("GRUB did not run vm-shim's own config (found by its SMBIOS serial):\n%s", testutil.Tail(out, 30))
	}
	shim.wait(t, "signed site overlay", 4*time.Minute)
	t.Logf("timing: shim chain under TCG, VM start → agent running: %s", time.Since(start).Round(time.Second))
	strippedVM.wait(t, "bad shim signature", 5*time.Minute)
	strippedVM.cmd.Process.Kill()
	waitState(t, l, "lab/vm-shim", "provisioned", 8*time.Minute)
	t.Logf("timing: shim chain under TCG, VM start → provisioned: %s", time.Since(start).Round(time.Second))
	checkDisk(t, shimDisk, rawSHA)
	if m, _ := l.machine("lab/vm-shim"); m.Boot != "uefi, secure boot, shim, tls" {
		t.Errorf("vm-shim's boot: %q, want uefi, secure boot, shim, tls", m.Boot)
	}
	if s, _ := nodeState(l, "lab/vm-stripped"); s == "microos" || s == "provisioning" || s == "provisioned" {
		t.Errorf("vm-stripped reached %s with an unsigned kernel", s)
	}
	waitVMs(2*time.Minute, shim)
	noSecretsOnTheWire(t, l, pcap, "E2E-SHIM-SECRET")
}
