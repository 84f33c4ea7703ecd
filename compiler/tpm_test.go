package compiler

import (
	"bytes"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/bootops/bootops/tpm"
	"github.com/bootops/bootops/tpm/tpmtest"
)

// A Micro-OS that nodes must attest gets the Authenticode digest of the
// file its chain boots; the others get none; a file that is no PE image
// is a positioned error.
func TestPEDigest(t *testing.T) {
	fsys := goldenFS(t, readTxtar(t, "testdata/_base.txtar"), "testdata/tpm")
	fsys["profiles/attested.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: attested\nos: {type: immutable}\n" +
		"image: {url: http://198.18.0.1/i.raw, sha256: 3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c}\nmicroOS: local\n")}
	fsys["microos/local.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: local\n" +
		"kernel: {path: microos/vmlinuz}\ninitrd: {path: microos/initrd}\n")}
	fsys["microos/vmlinuz"] = &fstest.MapFile{Data: tpmtest.PE("kernel")}
	fsys["microos/initrd"] = &fstest.MapFile{Data: []byte("initrd")}
	fsys["sites/s1/nodes/n3.yaml"].Data = append(fsys["sites/s1/nodes/n3.yaml"].Data, "profile: attested\n"...)
	p, err := newCompiler(t).Compile(fsys)
	if err != nil {
		t.Fatal(err)
	}
	k := tpmtest.PE("kernel")
	want, err := tpm.PEDigest(bytes.NewReader(k), int64(len(k)))
	if err != nil {
		t.Fatal(err)
	}
	if m := p.MicroOSNamed("local"); m.PEDigest != want {
		t.Errorf("micro-os local: PEDigest %q, want %s", m.PEDigest, want)
	}
	if m := p.MicroOSNamed("default"); m.PEDigest != "" {
		t.Errorf("micro-os default, which no node attests: PEDigest %q", m.PEDigest)
	}
	if n := p.Node("s1", "n3"); n.Attestation == nil || !n.Attestation.Require {
		t.Errorf("node n3 (profile attested, at a site requiring it): attestation %+v, want required", n.Attestation)
	}
	if n := p.Node("s1", "n1"); n.Attestation != nil {
		t.Errorf("node n1 (its profile turns it off): attestation %+v, want none", n.Attestation)
	}

	fsys["microos/vmlinuz"] = &fstest.MapFile{Data: []byte("not a PE\n")}
	_, err = newCompiler(t).Compile(fsys)
	prefix := "microos/local.yaml:4:10: kernel.path: \"microos/vmlinuz\": attestation needs its PE digest: tpm: PE digest: "
	if err == nil || !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("a kernel that is no PE image: got %v, want %s…", err, prefix)
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
