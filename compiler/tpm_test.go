package compiler

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

// A Micro-OS that nodes must attest gets the digest peDigest computes of
// the file its chain boots; the others get none; a file it cannot digest
// is a positioned error.
func TestPEDigestHook(t *testing.T) {
	old := peDigest
	defer func() { peDigest = old }()
	var digested []string
	peDigest = func(pe []byte) (string, error) {
		digested = append(digested, string(pe))
		if string(pe) == "not a PE\n" {
			return "", errors.New("no MZ header")
		}
		sum := sha256.Sum256(pe) // stands in for the Authenticode hash
		return hex.EncodeToString(sum[:]), nil
	}
	fsys := goldenFS(t, readTxtar(t, "testdata/_base.txtar"), "testdata/tpm")
	p, err := newCompiler(t).Compile(fsys)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("kernel\n"))
	if m := p.MicroOSNamed("local"); m.PEDigest != hex.EncodeToString(sum[:]) {
		t.Errorf("micro-os local: PEDigest %q, want the digest of microos/vmlinuz", m.PEDigest)
	}
	if m := p.MicroOSNamed("default"); m.PEDigest != "" {
		t.Errorf("micro-os default, which no node attests: PEDigest %q", m.PEDigest)
	}
	if len(digested) != 1 {
		t.Errorf("digested %d files, want 1 (each Micro-OS once): %q", len(digested), digested)
	}
	if n := p.Node("s1", "n3"); n.Attestation == nil || !n.Attestation.Require {
		t.Errorf("node n3 (profile attested): attestation %+v, want required", n.Attestation)
	}
	if n := p.Node("s1", "n1"); n.Attestation != nil {
		t.Errorf("node n1 (its profile turns it off): attestation %+v, want none", n.Attestation)
	}

	fsys["microos/vmlinuz"] = &fstest.MapFile{Data: []byte("not a PE\n")}
	_, err = newCompiler(t).Compile(fsys)
	want := "microos/local.yaml:4:10: kernel.path: \"microos/vmlinuz\": attestation needs its PE digest: no MZ header"
	if err == nil || err.Error() != want {
		t.Errorf("a kernel that is no PE image: got %v, want %s", err, want)
	}
}

// The Plan carries the EK CA files themselves: editing one changes the
// Plan, through a full compilation or one told only that file changed.
func TestEKCAChangeChangesPlan(t *testing.T) {
	fsys := goldenFS(t, readTxtar(t, "testdata/_base.txtar"), "testdata/tpm")
	c := newCompiler(t)
	p1, err := c.Compile(fsys)
	if err != nil {
		t.Fatal(err)
	}
	ca := p1.Site("s1").TPM.EKCAs[0]
	if ca.Path != "ca/vendor.pem" || !strings.Contains(ca.PEM, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("site s1's EK CA: %+v", ca)
	}
	fsys["ca/vendor.pem"] = &fstest.MapFile{Data: append([]byte("# rotated\n"), fsys["ca/vendor.pem"].Data...)}
	p2, err := c.CompileChanged(fsys, []string{"ca/vendor.pem"})
	if err != nil {
		t.Fatal(err)
	}
	ca2 := p2.Site("s1").TPM.EKCAs[0]
	if p2.Hash == p1.Hash || ca2.SHA256 == ca.SHA256 || !strings.HasPrefix(ca2.PEM, "# rotated\n") {
		t.Errorf("after editing ca/vendor.pem: plan %s (was %s), CA sha256 %s (was %s)", p2.Hash[:12], p1.Hash[:12], ca2.SHA256[:12], ca.SHA256[:12])
	}
}
