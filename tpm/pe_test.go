package tpm

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestPEDigestMatchesOsslsigncode compares PEDigest with the digest
// osslsigncode computes for Debian's signed shim fallback (its "Calculated
// message digest"), an independent Authenticode implementation, and checks
// that the signature the digest skips is really skipped: the unsigned
// binary from the same build has the same digest. make test installs
// shim-signed and osslsigncode (test/deps.sh).
func TestPEDigestMatchesOsslsigncode(t *testing.T) {
	const signed, unsigned = "/usr/lib/shim/fbx64.efi.signed", "/usr/lib/shim/fbx64.efi"
	out, err := exec.Command("osslsigncode", "verify", "-in", signed).CombinedOutput()
	m := regexp.MustCompile(`Calculated message digest\s*:\s*([0-9A-F]{64})`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("osslsigncode verify -in %s (%v) printed no calculated digest (install: bash test/deps.sh shim-signed osslsigncode):\n%s", signed, err, out)
	}
	want := "sha256:" + strings.ToLower(string(m[1]))
	for _, path := range []string{signed, unsigned} {
		if got := peDigestFile(t, path); got != want {
			t.Errorf("PEDigest(%s) = %s, osslsigncode says %s", path, got, want)
		}
	}
}

func TestPEDigestRefusesNonPE(t *testing.T) {
	r := strings.NewReader("MZ this is not a PE image")
	if d, err := PEDigest(r, r.Size()); err == nil {
		t.Fatalf("PEDigest of a non-PE = %s, want an error", d)
	}
}

func peDigestFile(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	d, err := PEDigest(f, st.Size())
	if err != nil {
		t.Fatalf("PEDigest(%s): %v", path, err)
	}
	return d
}
