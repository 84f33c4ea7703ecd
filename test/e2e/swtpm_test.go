//go:build e2e

package e2e

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"

	"github.com/bootops/bootops/internal/testutil"
)

// A lab's VMs can have TPMs of their own: swtpm (Debian's swtpm and
// swtpm-tools) behind QEMU's tpm-tis device. Each is manufactured once by
// swtpm_setup, its RSA EK certified by swtpm_localca, which plays the TPM
// maker's CA; the CA and every TPM's state live in the lab's folder, so
// nothing is written to /etc or /var/lib/swtpm-localca.

// Where swtpm_setup leaves the RSA EK: the persistent handle and the NV
// index of its certificate (TCG EK Credential Profile), where an agent
// (go-attestation) looks for them.
const (
	ekHandle      = tpmutil.Handle(0x81010001)
	ekCertNVIndex = tpmutil.Handle(0x01c00002)
)

// swTPM is one machine's software TPM. Its state folder outlives the
// machine's power cycles (the same TPM, the same EK, each boot); another
// machine gets another one.
type swTPM struct {
	name  string
	state string
	// EKCert is the RSA EK's certificate, issued by the lab's CA.
	EKCert *x509.Certificate
	// EKHash is what a node's identity.tpm.ek holds: sha256:<hex> of
	// the EK public key's PKIX DER (the certificate's SubjectPublicKeyInfo).
	EKHash string
	// on is the swtpm of the machine's current boot.
	on *exec.Cmd
}

// tpmCADir is the folder of the lab's TPM maker (swtpm_localca's state).
func (l *lab) tpmCADir() string { return filepath.Join(l.dir, "tpm-ca") }

// tpmCA gives the PEM files of the lab's TPM maker, once a TPM exists:
// issuer signed every EK certificate (the certificate a site's tpm.ekCAs
// trusts directly), root signed issuer.
func (l *lab) tpmCA() (issuer, root string) {
	return filepath.Join(l.tpmCADir(), "issuercert.pem"), filepath.Join(l.tpmCADir(), "swtpm-localca-rootca-cert.pem")
}

// tpm gives machine name's TPM, manufacturing it the first time: a TPM
// 2.0 with a sha256 PCR bank, RSA and ECC EKs with certificates in NV
// and a platform certificate.
func (l *lab) tpm(name string) *swTPM {
	l.t.Helper()
	for _, bin := range []string{"swtpm", "swtpm_setup", "swtpm_localca"} {
		if _, err := exec.LookPath(bin); err != nil {
			l.t.Fatalf("%s is missing: run `make lab-deps` (Debian packages swtpm, swtpm-tools)", bin)
		}
	}
	tp := &swTPM{name: name, state: filepath.Join(l.dir, "tpm-"+name)}
	certs := filepath.Join(tp.state, "ek-certs")
	if _, err := os.Stat(certs); err != nil {
		ca := l.tpmCADir()
		conf := filepath.Join(l.dir, "swtpm_setup.conf")
		files := map[string]string{
			filepath.Join(l.dir, "swtpm-localca.conf"):    fmt.Sprintf("statedir = %[1]s\nsigningkey = %[1]s/signkey.pem\nissuercert = %[1]s/issuercert.pem\ncertserial = %[1]s/certserial\n", ca),
			filepath.Join(l.dir, "swtpm-localca.options"): "--platform-manufacturer bootops-e2e\n--platform-version 2.1\n--platform-model QEMU\n",
			conf: fmt.Sprintf("create_certs_tool = /usr/bin/swtpm_localca\ncreate_certs_tool_config = %[1]s/swtpm-localca.conf\ncreate_certs_tool_options = %[1]s/swtpm-localca.options\nactive_pcr_banks = sha256\n", l.dir),
		}
		for p, body := range files {
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				l.t.Fatal(err)
			}
		}
		for _, d := range []string{ca, certs} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				l.t.Fatal(err)
			}
		}
		run(l.t, "swtpm_setup", "--tpm2", "--create-ek-cert", "--create-platform-cert", "--tpmstate", tp.state,
			"--config", conf, "--write-ek-cert-files", certs, "--logfile", filepath.Join(l.dir, "swtpm_setup-"+name+".log"))
	}
	der, err := os.ReadFile(filepath.Join(certs, "ek-rsa2048.crt"))
	if err != nil {
		l.t.Fatalf("TPM %s: swtpm_setup wrote no RSA EK certificate: %v", name, err)
	}
	if tp.EKCert, err = x509.ParseCertificate(der); err != nil {
		l.t.Fatalf("TPM %s: EK certificate: %v", name, err)
	}
	sum := sha256.Sum256(tp.EKCert.RawSubjectPublicKeyInfo)
	tp.EKHash = "sha256:" + hex.EncodeToString(sum[:])
	return tp
}

// tpmArgs starts name's TPM for one boot of its machine and gives the QEMU
// arguments that attach it (tpm-tis, which OVMF and Debian's kernel
// drive). swtpm ends when QEMU lets go of it, or with the lab.
func (l *lab) tpmArgs(tp *swTPM) []string {
	l.t.Helper()
	sock := filepath.Join(l.dir, "swtpm-"+tp.name+".sock")
	if tp.on != nil {
		// The previous boot's swtpm ends when its QEMU lets go; its
		// state folder is locked until then.
		done := make(chan struct{})
		go func() { tp.on.Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			tp.on.Process.Kill()
			<-done
		}
	}
	os.Remove(sock)
	tp.on = l.start("swtpm-"+tp.name, "swtpm", "socket", "--tpm2", "--terminate", "--tpmstate", "dir="+tp.state,
		"--ctrl", "type=unixio,path="+sock, "--log", "level=1")
	waitSocket(l.t, sock)
	id := "tpm-" + tp.name
	return []string{"-chardev", "socket,id=" + id + ",path=" + sock, "-tpmdev", "emulator,id=" + id + ",chardev=" + id,
		"-device", "tpm-tis,tpmdev=" + id}
}

// tpmQEMU is a QEMU for a BMC that starts QEMU again at will
// (redfishvmd -qemu): at each start it waits for the last boot's swtpm to
// end, starts tp's swtpm for this boot (QEMU tells swtpm to end when it
// quits) and runs QEMU with it attached. It gives the wrapper's path.
func (l *lab) tpmQEMU(tp *swTPM) string {
	l.t.Helper()
	sock := filepath.Join(l.dir, "swtpm-"+tp.name+".sock")
	pid := filepath.Join(l.dir, "swtpm-"+tp.name+".pid")
	id := "tpm-" + tp.name
	script := fmt.Sprintf(`#!/bin/sh
# Wrapper of QEMU for the test's BMC: a fresh swtpm for each power-on.
if [ -f %[3]s ]; then
  for i in $(seq 100); do kill -0 "$(cat %[3]s)" 2>/dev/null || break; sleep 0.1; done
fi
rm -f %[2]s
swtpm socket --tpm2 --terminate --tpmstate dir=%[1]s --ctrl type=unixio,path=%[2]s --log level=1,file=%[4]s &
echo $! > %[3]s
for i in $(seq 100); do [ -S %[2]s ] && break; sleep 0.05; done
exec qemu-system-x86_64 "$@" -chardev socket,id=%[5]s,path=%[2]s -tpmdev emulator,id=%[5]s,chardev=%[5]s -device tpm-tis,tpmdev=%[5]s
`, tp.state, sock, pid, filepath.Join(l.dir, "swtpm-"+tp.name+".log"), id)
	path := filepath.Join(l.dir, "qemu-"+tp.name)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		l.t.Fatal(err)
	}
	if tp.on != nil { // the last direct boot's swtpm
		tp.on.Process.Kill()
		tp.on.Wait()
		tp.on = nil
	}
	return path
}

// uefiTPMVM boots a UEFI VM (uefiVM) with tp as its TPM.
func (l *lab) uefiTPMVM(name, mac string, tp *swTPM, extra ...string) *vm {
	return l.uefiVM(name, mac, append(l.tpmArgs(tp), extra...)...)
}

func waitSocket(t *testing.T, path string) {
	t.Helper()
	if !testutil.Poll(10*time.Second, 50*time.Millisecond, func() bool { _, err := os.Stat(path); return err == nil }) {
		t.Fatalf("swtpm did not open %s", path)
	}
}

// tpmContents is what the TPM holds, read through the TPM itself.
type tpmContents struct {
	EKCertDER []byte           // NV index 0x01c00002
	EK        crypto.PublicKey // the key at 0x81010001
}

// read asks the TPM (powered on by a swtpm of its own, while no VM runs
// with it: a state folder serves one swtpm at a time) for its RSA EK and
// that EK's certificate in NV, as the agent will.
func (tp *swTPM) read(t *testing.T, l *lab) tpmContents {
	t.Helper()
	dir, err := os.MkdirTemp(l.dir, "swtpm-read-")
	if err != nil {
		t.Fatal(err)
	}
	sock, ctrl := filepath.Join(dir, "data.sock"), filepath.Join(dir, "ctrl.sock")
	cmd := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+tp.state, "--server", "type=unixio,path="+sock,
		"--ctrl", "type=unixio,path="+ctrl, "--flags", "not-need-init,startup-clear")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	waitSocket(t, sock)
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("TPM %s: %v\n%s", tp.name, err, out.String())
	}
	defer conn.Close()
	var c tpmContents
	if c.EKCertDER, err = tpm2.NVReadEx(conn, ekCertNVIndex, tpm2.HandleOwner, "", 0); err != nil {
		t.Fatalf("TPM %s: read the EK certificate from NV %#x: %v", tp.name, ekCertNVIndex, err)
	}
	pub, _, _, err := tpm2.ReadPublic(conn, ekHandle)
	if err != nil {
		t.Fatalf("TPM %s: read the EK at %#x: %v", tp.name, ekHandle, err)
	}
	if c.EK, err = pub.Key(); err != nil {
		t.Fatalf("TPM %s: EK: %v", tp.name, err)
	}
	return c
}

// certPool reads PEM certificates into a pool.
func certPool(t *testing.T, files ...string) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM", f)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		pool.AddCert(c)
	}
	return pool
}

// tpmLikeHardware sets tp's dictionary-attack parameters to what hardware
// TPMs ship with (32 tries, one forgiven a minute) instead of swtpm's 3:
// every VM the tests kill is a power cut, which the TPM counts as a
// failed try at its next start-up, and a key under a DA-protected parent
// (Clevis's storage key) is refused in lockout.
func (l *lab) tpmLikeHardware(tp *swTPM) {
	l.t.Helper()
	sock := filepath.Join(l.dir, "swtpm-"+tp.name+"-setup.sock")
	sw := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+tp.state, "--server", "type=unixio,path="+sock,
		"--ctrl", "type=unixio,path="+sock+".ctrl", "--flags", "not-need-init,startup-clear")
	if err := sw.Start(); err != nil {
		l.t.Fatalf("swtpm: %v", err)
	}
	defer func() { sw.Process.Kill(); sw.Wait() }()
	waitSocket(l.t, sock)
	cmd := exec.Command("tpm2_dictionarylockout", "--setup-parameters", "--max-tries=32", "--recovery-time=60", "--lockout-recovery-time=60")
	cmd.Env = append(os.Environ(), "TPM2TOOLS_TCTI=swtpm:path="+sock)
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("tpm2_dictionarylockout (tpm2-tools): %v\n%s", err, out)
	}
}
