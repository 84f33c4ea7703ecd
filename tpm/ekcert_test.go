package tpm

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"
)

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T, name string) ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return ca{cert, key, pool}
}

// tpmSAN is the subject alternative name of the TCG EK Credential Profile:
// one directoryName with the TPM's manufacturer, model and version, plus
// extra attributes if given.
func tpmSAN(t *testing.T, extra ...pkix.AttributeTypeAndValue) []byte {
	t.Helper()
	name, err := asn1.Marshal(pkix.RDNSequence{append([]pkix.AttributeTypeAndValue{
		{Type: oidTPMManufacturer, Value: "id:00001014"},
		{Type: oidTPMModel, Value: "swtpm"},
		{Type: oidTPMVersion, Value: "id:20191023"},
	}, extra...)})
	if err != nil {
		t.Fatal(err)
	}
	san, err := asn1.Marshal([]asn1.RawValue{{Class: asn1.ClassContextSpecific, Tag: 4, IsCompound: true, Bytes: name}})
	if err != nil {
		t.Fatal(err)
	}
	return san
}

// ekCert issues an EK certificate for ek, with an empty subject and a
// critical SAN as manufacturers (and swtpm_localca) do.
func (c ca) ekCert(t *testing.T, ek crypto.PublicKey, ext ...pkix.Extension) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:    big.NewInt(2),
		NotBefore:       time.Now().Add(-time.Hour),
		NotAfter:        time.Now().Add(time.Hour),
		KeyUsage:        x509.KeyUsageKeyEncipherment,
		ExtraExtensions: ext,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, ek, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestVerifyEKCert(t *testing.T) {
	maker, other := newCA(t, "TPM manufacturer CA"), newCA(t, "another CA")
	ek, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	san := pkix.Extension{Id: oidSAN, Critical: true, Value: tpmSAN(t)}
	good := maker.ekCert(t, &ek.PublicKey, san)
	got, err := VerifyEKCert(good, maker.pool)
	if err != nil {
		t.Fatalf("VerifyEKCert: %v", err)
	}
	wantEK, _ := EKHash(&ek.PublicKey)
	if got.EK != wantEK || got.Manufacturer != "id:00001014" || got.Model != "swtpm" || got.Version != "id:20191023" {
		t.Errorf("VerifyEKCert = EK %s, %q %q %q; want EK %s, id:00001014 swtpm id:20191023", got.EK, got.Manufacturer, got.Model, got.Version, wantEK)
	}
	// The TCG NV wrapping (0x10 0x01 0x00, length) is accepted too.
	wrapped := append([]byte{0x10, 0x01, 0x00, byte(len(good) >> 8), byte(len(good))}, good...)
	if _, err := VerifyEKCert(wrapped, maker.pool); err != nil {
		t.Errorf("VerifyEKCert(NV-wrapped): %v", err)
	}

	for name, tc := range map[string]struct {
		der   []byte
		roots *x509.CertPool
		want  error
		text  string
	}{
		"another manufacturer": {good, other.pool, ErrUntrustedEK, "unknown authority"},
		"unknown critical extension": {
			maker.ekCert(t, &ek.PublicKey, san, pkix.Extension{Id: asn1.ObjectIdentifier{1, 2, 3, 4}, Critical: true, Value: []byte{5, 0}}),
			maker.pool, ErrUntrustedEK, "unhandled critical extensions [1.2.3.4]",
		},
		"critical SAN with another attribute": {
			maker.ekCert(t, &ek.PublicKey, pkix.Extension{Id: oidSAN, Critical: true, Value: tpmSAN(t, pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "cn"})}),
			maker.pool, ErrUntrustedEK, "names other than the TPM's",
		},
		"not a certificate": {[]byte("garbage"), maker.pool, ErrMalformed, "EK certificate"},
	} {
		_, err := VerifyEKCert(tc.der, tc.roots)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: VerifyEKCert = %v, want %v with %q", name, err, tc.want, tc.text)
		}
	}
}

// The machine reads its EK certificate from NV index 0x01c00002 (where
// swtpm_setup --create-ek-cert and manufacturers put the RSA one), and the
// server refuses a certificate for another key.
func TestIdentityReadsTheEKCertificate(t *testing.T) {
	sim := openSim(t, 1)
	first, err := openMachine(t, sim).Identity()
	if err != nil {
		t.Fatal(err)
	}
	ek, hash, err := ParseEK(first.EK)
	if err != nil {
		t.Fatal(err)
	}
	maker := newCA(t, "TPM manufacturer CA")
	der := maker.ekCert(t, ek, pkix.Extension{Id: oidSAN, Critical: true, Value: tpmSAN(t)})
	const index = tpmutil.Handle(0x01c00002)
	if err := tpm2.NVDefineSpace(sim, tpm2.HandleOwner, index, "", "", nil,
		tpm2.AttrOwnerWrite|tpm2.AttrOwnerRead|tpm2.AttrAuthRead|tpm2.AttrNoDA, uint16(len(der))); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(der); off += 1024 {
		if err := tpm2.NVWrite(sim, tpm2.HandleOwner, index, "", der[off:min(off+1024, len(der))], uint16(off)); err != nil {
			t.Fatal(err)
		}
	}

	m := openMachine(t, sim)
	id, err := m.Identity()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(id.EKCert, der) || !bytes.Equal(id.EK, first.EK) {
		t.Fatalf("Identity: EK certificate %d bytes (want the %d in NV), same EK %v", len(id.EKCert), len(der), bytes.Equal(id.EK, first.EK))
	}
	c, err := VerifyEKCert(id.EKCert, maker.pool)
	if err != nil || c.EK != hash {
		t.Fatalf("VerifyEKCert = EK %s, %v; want %s", c.EK, err, hash)
	}
	ch, exp, err := NewChallenge(id, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Prove(ch, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(exp, p, Policy{}); err != nil {
		t.Fatalf("Verify: %v", err)
	}

	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	id.EKCert = maker.ekCert(t, &otherKey.PublicKey)
	if _, _, err := NewChallenge(id, rand.Reader); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "for another key") {
		t.Errorf("NewChallenge(EK certificate of another key) = %v, want ErrMalformed", err)
	}
}
