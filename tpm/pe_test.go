package tpm

import (
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
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

// TestPEDigestMatchesTheSignedDigest compares PEDigest of Debian's shim
// (signed twice by Microsoft's UEFI CA, which osslsigncode does not read)
// with the digest each Authenticode signature signs: the messageDigest of
// its SpcIndirectDataContent.
func TestPEDigestMatchesTheSignedDigest(t *testing.T) {
	const path = "/usr/lib/shim/shimx64.efi.signed"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (install: bash test/deps.sh shim-signed)", err)
	}
	got := peDigestFile(t, path)
	sigs := signedDigests(t, b)
	if len(sigs) == 0 {
		t.Fatalf("%s: no signatures", path)
	}
	for i, want := range sigs {
		if got != want {
			t.Errorf("PEDigest(%s) = %s, signature %d signs %s", path, got, i, want)
		}
	}
}

// signedDigests reads the SHA-256 digests the Authenticode signatures in
// a PE's certificate table sign (WIN_CERTIFICATE entries of PKCS#7
// SignedData over an SpcIndirectDataContent).
func signedDigests(t *testing.T, b []byte) []string {
	t.Helper()
	pe := int(binary.LittleEndian.Uint32(b[0x3c:]))
	entry := pe + 24 + 112 + 8*4 // PE32+ optional header, data directory 4
	if binary.LittleEndian.Uint16(b[pe+24:]) != 0x20b {
		t.Fatal("not a PE32+ image")
	}
	off := int(binary.LittleEndian.Uint32(b[entry:]))
	end := off + int(binary.LittleEndian.Uint32(b[entry+4:]))
	var out []string
	for off < end {
		n := int(binary.LittleEndian.Uint32(b[off:]))
		var ci struct {
			Type   asn1.ObjectIdentifier
			Signed struct {
				Version int
				Algs    asn1.RawValue
				Content struct {
					Type     asn1.ObjectIdentifier
					Indirect struct {
						Data   asn1.RawValue
						Digest struct {
							Alg    pkix.AlgorithmIdentifier
							Digest []byte
						}
					} `asn1:"explicit,tag:0"`
				}
				Rest asn1.RawValue `asn1:"optional"`
			} `asn1:"explicit,tag:0"`
		}
		if _, err := asn1.UnmarshalWithParams(b[off+8:off+n], &ci, ""); err != nil {
			t.Fatalf("signature at %#x: %v", off, err)
		}
		out = append(out, "sha256:"+hex.EncodeToString(ci.Signed.Content.Indirect.Digest.Digest))
		off += (n + 7) &^ 7
	}
	return out
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
