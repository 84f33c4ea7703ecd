//go:build e2e

package e2e

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/tpm"
)

// Machines that prove who they are with their TPM (swtpm behind QEMU's
// tpm-tis, OVMF, the iPXE chain). vm-a is registered in Git by its MAC,
// serial, UUID and its TPM's EK; vm-c by its MAC alone, at a site that
// trusts the lab's TPM maker (tpm.ekCAs). An impostor with vm-a's MAC,
// serial and UUID and a TPM of its own is refused, and none of vm-a's
// workflow or user-data crosses; then vm-a and vm-c prove their TPMs and
// install.
func TestTPMIdentity(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	l.vms(2)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")
	tpA, tpB, tpC := l.tpm("a"), l.tpm("b"), l.tpm("c")

	// On the host, before any VM: the TPM holds, in NV, the certificate
	// the lab's CA issued for its own EK, and its EK hash is that key's.
	got := tpA.read(t, l)
	if !bytes.Equal(got.EKCertDER, tpA.EKCert.Raw) {
		t.Errorf("the TPM's NV 0x01c00002 holds another certificate than swtpm_setup wrote")
	}
	der, err := x509.MarshalPKIXPublicKey(got.EK)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(der); "sha256:"+hex.EncodeToString(sum[:]) != tpA.EKHash {
		t.Errorf("the TPM's EK (PKIX sha256 %x) is not the certificate's key (%s)", sum, tpA.EKHash)
	}
	if tpA.EKHash == tpB.EKHash || tpA.EKHash == tpC.EKHash {
		t.Fatalf("two TPMs share an EK: %s %s %s", tpA.EKHash, tpB.EKHash, tpC.EKHash)
	}
	issuer, _ := l.tpmCA()
	if ek, err := tpm.VerifyEKCert(tpC.EKCert.Raw, certPool(t, issuer)); err != nil || ek.EK != tpC.EKHash {
		t.Fatalf("vm-c's EK certificate against the lab's TPM maker: %v (EK %s, want %s)", err, ek.EK, tpC.EKHash)
	}

	const smbiosA = "type=1,serial=E2E-TPM-A,uuid=01020304-0506-0708-090a-0b0c0d0e0f41"
	repo := provisionRepo(t, images4, gzSHA, "tpm-identity", vars{"EK": tpA.EKHash})
	const secret = "E2E-TPM-USERDATA-SECRET" // in tpm-identity.txtar's user-data
	ca, _ := os.ReadFile(issuer)
	testutil.WriteFile(t, repo, "ca/tpm-maker.pem", string(ca))
	run(t, bootops, "validate", repo)
	l.serve(repo)

	// The impostor: vm-a's MAC, serial and UUID, its own TPM.
	start := time.Now()
	b := l.uefiTPMVM("uefi-b", "52:54:00:e2:31:01", tpB, "-smbios", smbiosA)
	want := "identity-conflict: node vm-a is registered with TPM ek " + tpA.EKHash + "; this machine holds ek " + tpB.EKHash
	waitFor(t, "the impostor's refusal", 10*time.Minute, func() bool { return strings.Contains(l.logs("lab/vm-a"), want) })
	t.Logf("timing: impostor VM start → refused by its TPM: %s", time.Since(start).Round(time.Second))
	out := b.wait(t, "identity-conflict", 2*time.Minute)
	b.cmd.Process.Kill()
	b.cmd.Wait()
	if !strings.Contains(out, "bootops-agent: tpm: /dev/tpmrm0") {
		t.Errorf("the impostor's agent saw no TPM:\n%s", testutil.Tail(out, 30))
	}
	log := l.logs("lab/vm-a")
	if strings.Contains(out, secret) || strings.Contains(log, "agent checked in") {
		t.Errorf("the impostor got vm-a's workflow or user-data:\nconsole:\n%s\ntimeline:\n%s", testutil.Tail(out, 30), log)
	}

	// The real machines: vm-a by the EK Git names, vm-c by its EK
	// certificate from the site's TPM maker.
	aDisk, cDisk := disk(t, l, "a"), disk(t, l, "c")
	start = time.Now()
	a := l.uefiTPMVM("uefi-a", "52:54:00:e2:31:01", tpA, append(withDisk(aDisk), "-smbios", smbiosA)...)
	c := l.uefiTPMVM("uefi-c", "52:54:00:e2:31:03", tpC, withDisk(cDisk)...)
	waitState(t, l, "lab/vm-a", "provisioned", 12*time.Minute)
	waitState(t, l, "lab/vm-c", "provisioned", 12*time.Minute)
	t.Logf("timing: two TPM machines at once, VM start → provisioned: %s", time.Since(start).Round(time.Second))
	waitVMs(2*time.Minute, a, c)
	checkDisk(t, aDisk, rawSHA)
	checkDisk(t, cDisk, rawSHA)
	for key, ek := range map[string]string{"lab/vm-a": tpA.EKHash, "lab/vm-c": tpC.EKHash} {
		m, _ := l.machine(key)
		if m.EK != ek || !strings.HasPrefix(m.TPM, "tpm: ek "+ek+", activated") {
			t.Errorf("%s: ek %q, tpm %q in the status, want %s", key, m.EK, m.TPM, ek)
		}
		if log := l.logs(key); !strings.Contains(log, "tpm: ek "+ek) {
			t.Errorf("%s: the proof is not on its timeline:\n%s", key, log)
		}
	}
	if out := mustRead(a.console); !strings.Contains(out, "bootops-agent: tpm: credential activated") {
		t.Errorf("vm-a's agent did not say it proved its TPM:\n%s", testutil.Tail(out, 30))
	}
}
