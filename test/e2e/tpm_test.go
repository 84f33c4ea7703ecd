//go:build e2e

package e2e

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-attestation/attest"

	"github.com/bootops/bootops/tpm"
)

// tpmLogProfile copies the firmware's TPM event log from the Micro-OS to
// the machine's disk at tpmLogOffset, where the test reads it (the image
// after it is nowhere: the test stops the VM once the copy is done).
const tpmLogProfile = "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: tpm-log\nos: {type: immutable}\n" +
	"image: {url: \"http://198.18.0.1:8081/none.raw.gz\", sha256: abababababababababababababababababababababababababababababababab, compression: gz}\n" +
	"workflow:\n" +
	"  - action: exec\n    command: [/bin/sh, -c, \"dd if=/sys/kernel/security/tpm0/binary_bios_measurements of=/dev/vda bs=1M seek=128 conv=fsync\"]\n" +
	"  - action: image-to-disk\n"

const tpmLogOffset = 128 << 20

// The lab's software TPMs: manufactured with an EK certificate from the
// lab's CA, which the TPM itself holds in NV; a UEFI VM with one boots
// the real Micro-OS, whose agent sees /dev/tpmrm0 and the firmware's event
// log; a VM without one says so. The event log the VM's firmware kept is
// copied out to its disk, parsed here, and its PCR 4 applications shown.
func TestTPMLab(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	tp, other := l.tpm("tpm-a"), l.tpm("tpm-b")

	// On the host, before any VM: the TPM holds the certificate the
	// lab's CA issued for its own EK, and the EK hash is that key's.
	got := tp.read(t, l)
	if !bytes.Equal(got.EKCertDER, tp.EKCert.Raw) {
		t.Errorf("the TPM's NV 0x01c00002 holds another certificate than swtpm_setup wrote")
	}
	der, err := x509.MarshalPKIXPublicKey(got.EK)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(der); "sha256:"+hex.EncodeToString(sum[:]) != tp.EKHash {
		t.Errorf("the TPM's EK (PKIX sha256 %x) is not the certificate's key (%s)", sum, tp.EKHash)
	}
	if tp.EKHash == other.EKHash {
		t.Errorf("two TPMs share the EK %s", tp.EKHash)
	}
	issuer, root := l.tpmCA()
	for _, c := range []*x509.Certificate{tp.EKCert, other.EKCert} {
		// What a site's tpm.ekCAs trusts: the issuer, the anchor of
		// tpm.VerifyEKCert (which takes no intermediates).
		ek, err := tpm.VerifyEKCert(c.Raw, certPool(t, issuer))
		if err != nil {
			t.Errorf("EK certificate %s does not verify against its issuer: %v", c.SerialNumber, err)
		} else if want := map[*x509.Certificate]string{tp.EKCert: tp.EKHash, other.EKCert: other.EKHash}[c]; ek.EK != want {
			t.Errorf("EK certificate %s: tpm.VerifyEKCert gives the EK %s, the lab %s", c.SerialNumber, ek.EK, want)
		}
		// The whole chain to the self-signed root (Go leaves the TPM's
		// critical subject alternative name unhandled: checked above).
		cc := *c
		cc.UnhandledCriticalExtensions = nil
		if _, err := cc.Verify(x509.VerifyOptions{Roots: certPool(t, root), Intermediates: certPool(t, issuer), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("EK certificate %s does not chain to the lab's root: %v", c.SerialNumber, err)
		}
	}

	repo := provisionRepo(t, strings.Repeat("ab", 32),
		strings.Replace(node("vm-tpm", "uuid: 01020304-0506-0708-090a-0b0c0d0e0f30"), "test-os", "tpm-log", 1),
		node("vm-notpm", "uuid: 01020304-0506-0708-090a-0b0c0d0e0f31"))
	os.WriteFile(filepath.Join(repo, "profiles/tpm-log.yaml"), []byte(tpmLogProfile), 0o644)
	l.serve(repo)

	// One VM at a time: the timings compare.
	tpmDisk := disk(t, l, "tpm")
	start := time.Now()
	v := l.uefiTPMVM("uefi-tpm", "52:54:00:e2:30:01", tp, append(withDisk(tpmDisk), "-smbios", "type=1,serial=E2E-TPM,uuid=01020304-0506-0708-090a-0b0c0d0e0f30")...)
	checkedIn(t, l, "lab/vm-tpm", v, 10*time.Minute)
	t.Logf("timing: UEFI with swtpm (tpm-tis), VM start → agent checked in: %s", time.Since(start).Round(time.Second))
	out := v.wait(t, "bootops-agent: tpm: ", time.Minute)
	m := regexp.MustCompile(`bootops-agent: tpm: /dev/tpmrm0, event log (\d+) bytes`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the agent sees no TPM, or no event log:\n%s", tail(out, 30))
	}
	size, _ := strconv.Atoi(m[1])
	waitFor(t, "vm-tpm to copy its event log", 3*time.Minute, func() bool { return strings.Contains(l.logs("lab/vm-tpm"), "done 1/2 exec") })
	v.cmd.Process.Kill()
	v.cmd.Wait()
	b, err := os.ReadFile(tpmDisk)
	if err != nil {
		t.Fatal(err)
	}
	eventLog := b[tpmLogOffset : tpmLogOffset+size]
	pcr4 := pcr4Apps(t, eventLog)
	t.Logf("event log: %d bytes; PCR 4 EV_EFI_BOOT_SERVICES_APPLICATION digests: %v", size, pcr4)
	// What they are: the Authenticode digests of what the lab boots.
	names := map[string]string{}
	for _, f := range []string{"/usr/lib/ipxe/ipxe.efi", "/usr/lib/ipxe/snponly.efi", kernel(t)} {
		names[peDigest(t, f)] = f
	}
	for _, d := range pcr4 {
		t.Logf("PCR 4 application %s: %s", d, names[d])
	}
	// OVMF measures iPXE, then the kernel iPXE starts (the initrd is
	// not measured: only a UKI binds it to PCR 4).
	for _, f := range []string{"/usr/lib/ipxe/ipxe.efi", kernel(t)} {
		if d := peDigest(t, f); !slices.Contains(pcr4, d) {
			t.Errorf("%s (%s) is not among the applications OVMF measured into PCR 4: %v", f, d, pcr4)
		}
	}

	// The same TPM after the boot: its state kept, the same EK.
	if again := tp.read(t, l); !bytes.Equal(again.EKCertDER, tp.EKCert.Raw) {
		t.Errorf("the TPM's EK certificate changed across a power cycle")
	}

	// Without a TPM: the agent says none.
	start = time.Now()
	n := l.uefiVM("uefi-notpm", "52:54:00:e2:30:02", "-smbios", "type=1,serial=E2E-NOTPM,uuid=01020304-0506-0708-090a-0b0c0d0e0f31")
	checkedIn(t, l, "lab/vm-notpm", n, 10*time.Minute)
	t.Logf("timing: UEFI without TPM, VM start → agent checked in: %s", time.Since(start).Round(time.Second))
	if out := n.wait(t, "bootops-agent: tpm: ", time.Minute); !strings.Contains(out, "bootops-agent: tpm: none") {
		t.Errorf("a VM without TPM:\n%s", tail(out, 20))
	}
	n.cmd.Process.Kill()
}

// checkedIn waits until the server's timeline of key shows the agent's
// check-in.
func checkedIn(t *testing.T, l *lab, key string, v *vm, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(l.logs(key), "agent checked in") {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no check-in after %s:\n%s", key, d, tail(mustRead(v.console), 30))
		}
		time.Sleep(time.Second)
	}
}

// pcr4Apps lists the sha256 digests of the EFI applications the firmware
// measured into PCR 4, in boot order.
func pcr4Apps(t *testing.T, log []byte) []string {
	t.Helper()
	el, err := attest.ParseEventLog(log)
	if err != nil {
		t.Fatalf("event log: %v", err)
	}
	var apps []string
	for _, e := range el.Events(attest.HashSHA256) {
		t.Logf("event log: PCR %d type %s digest %x", e.Index, e.Type, e.Digest)
		if e.Index == 4 && uint32(e.Type) == 0x80000003 { // EV_EFI_BOOT_SERVICES_APPLICATION
			apps = append(apps, "sha256:"+hex.EncodeToString(e.Digest))
		}
	}
	return apps
}

// peDigest is the Authenticode digest of the EFI application at path.
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
