//go:build swtpm

package tpm

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bootops/bootops/test/swtpmsim"
)

// TestSwtpm runs a check-in against swtpm, the TPM the end-to-end VMs get
// (make test installs swtpm and swtpm-tools): manufactured by swtpm_setup
// with an EK certificate from swtpm_localca standing for the manufacturer,
// as `swtpm_setup --create-ek-cert` does for QEMU. It needs the swtpm tag:
//
//	go test -tags swtpm ./tpm
func TestSwtpm(t *testing.T) {
	for _, tool := range []string{"swtpm", "swtpm_setup", "swtpm_localca"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (bash test/deps.sh swtpm swtpm-tools): %v", tool, err)
		}
	}
	dir := t.TempDir()
	state, ca := filepath.Join(dir, "state"), filepath.Join(dir, "ca")
	for _, d := range []string{state, ca} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// A private CA, not the system's /var/lib/swtpm-localca.
	write(t, filepath.Join(dir, "localca.conf"), "statedir = "+ca+"\nsigningkey = "+ca+"/signkey.pem\nissuercert = "+ca+"/issuercert.pem\ncertserial = "+ca+"/certserial\n")
	write(t, filepath.Join(dir, "localca.options"), "--platform-manufacturer bootops\n--platform-version 1\n--platform-model test\n")
	write(t, filepath.Join(dir, "setup.conf"), "create_certs_tool = /usr/bin/swtpm_localca\ncreate_certs_tool_config = "+dir+"/localca.conf\ncreate_certs_tool_options = "+dir+"/localca.options\nactive_pcr_banks = sha256\n")
	run(t, "swtpm_setup", "--tpm2", "--tpmstate", state, "--create-ek-cert", "--config", filepath.Join(dir, "setup.conf"))

	_, conn := swtpmsim.Start(t, state)

	start := time.Now()
	m, err := Open(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	id, err := m.Identity()
	if err != nil {
		t.Fatal(err)
	}
	if len(id.EKCert) == 0 {
		t.Fatal("Identity: no EK certificate (swtpm_setup --create-ek-cert writes it to NV 0x01c00002)")
	}
	// The EK certificate chains to swtpm_localca's root through its
	// issuer; both are what a site lists as ekCAs.
	roots := x509.NewCertPool()
	for _, f := range []string{"swtpm-localca-rootca-cert.pem", "issuercert.pem"} {
		b, err := os.ReadFile(filepath.Join(ca, f))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		roots.AddCert(c)
	}
	c, err := VerifyEKCert(id.EKCert, roots)
	if err != nil {
		t.Fatalf("VerifyEKCert(swtpm's EK certificate): %v", err)
	}
	t.Logf("EK certificate: issuer %q, subject %q, manufacturer %q, model %q, version %q, valid until %s, critical unhandled %v",
		c.Cert.Issuer, c.Cert.Subject, c.Manufacturer, c.Model, c.Version, c.Cert.NotAfter, c.Cert.UnhandledCriticalExtensions)

	log := boot(t, conn, bootEvents(testCert(t), true, ipxe, microOS))
	ch, exp, err := NewChallenge(id, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if exp.EK != c.EK {
		t.Errorf("EK hash %s, from the certificate %s", exp.EK, c.EK)
	}
	p, err := m.Prove(ch, log, DefaultPCRs())
	if err != nil {
		t.Fatal(err)
	}
	r, err := Verify(exp, p, Policy{MeasuredBoot: true, SecureBoot: true, MicroOSDigests: []string{digest(microOS)}})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	t.Logf("%s in %s", r, time.Since(start).Round(time.Millisecond))
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}
