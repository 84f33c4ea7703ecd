package tpm_test

import (
	"errors"
	"testing"

	"github.com/bootops/bootops/tpm"
	"github.com/bootops/bootops/tpm/tpmtest"
)

// A report's quote verifies with the install's key, for its own
// credential and body only; another key of the same TPM, another
// credential, another body or a changed byte are refused.
func TestReportQuote(t *testing.T) {
	m, id, _, closeFirst := tpmtest.Machine(t, 11)
	key, err := m.ReportKey()
	if err != nil {
		t.Fatal(err)
	}
	if len(key.Public) != 2+len(id.AK.Public) || int(key.Public[0])<<8|int(key.Public[1]) != len(id.AK.Public) {
		t.Fatalf("the public blob is not a TPM2B of the AK's public area (%d bytes, AK %d)", len(key.Public), len(id.AK.Public))
	}
	body := []byte(`{"site":"lab","node":"n1"}`)
	nonce := tpm.ReportNonce("credential-1", body)
	attest, sig := tpmtest.QuoteReport(t, key, nonce)
	if err := tpm.VerifyReport(id.AK.Public, nonce, attest, sig); err != nil {
		t.Fatalf("the install's own quote: %v", err)
	}

	// The same credential and body quoted by another TPM's key.
	closeFirst()
	other, _, _, _ := tpmtest.Machine(t, 12)
	otherKey, err := other.ReportKey()
	if err != nil {
		t.Fatal(err)
	}
	otherAttest, otherSig := tpmtest.QuoteReport(t, otherKey, nonce)

	tampered := append([]byte(nil), attest...)
	tampered[len(tampered)-1] ^= 1
	for name, c := range map[string]struct{ nonce, attest, sig []byte }{
		"another body":       {tpm.ReportNonce("credential-1", []byte(`{"site":"lab","node":"n2"}`)), attest, sig},
		"another credential": {tpm.ReportNonce("credential-2", body), attest, sig},
		"another TPM's key":  {nonce, otherAttest, otherSig},
		"a changed quote":    {nonce, tampered, sig},
		"a cut signature":    {nonce, attest, sig[:len(sig)-4]},
		"no signature":       {nonce, attest, nil},
		"no quote":           {nonce, nil, sig},
	} {
		if err := tpm.VerifyReport(id.AK.Public, c.nonce, c.attest, c.sig); !errors.Is(err, tpm.ErrReportQuote) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
}
