package tpm

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/google/go-attestation/attest"
)

// The errors Verify and NewChallenge wrap, so the server can tell a machine
// that sent garbage from one that is not the registered TPM from one whose
// boot is not the one in Git. Test with errors.Is.
var (
	// ErrMalformed: the identity, challenge or proof cannot be parsed, or
	// is inconsistent in itself (an AK the TPM did not certify, an EK
	// certificate for another key).
	ErrMalformed = errors.New("tpm: malformed attestation")
	// ErrWrongTPM: the credential activation did not return the secret:
	// the machine does not hold the EK it claimed (or replayed an old
	// proof).
	ErrWrongTPM = errors.New("tpm: not the TPM the check-in claimed")
	// ErrMeasuredBoot: the quote or the event log does not verify, or the
	// boot it shows is not what the policy requires.
	ErrMeasuredBoot = errors.New("tpm: measured boot refused")
	// ErrUntrustedEK: the EK certificate does not chain to a trusted
	// manufacturer CA.
	ErrUntrustedEK = errors.New("tpm: EK certificate not trusted")
)

// EKHash is the identifier of a TPM that operators register in Git
// (identity: {tpm: {ek: sha256:…}}): "sha256:" and the lower-case hex of the
// SHA-256 of the EK public key's PKIX SubjectPublicKeyInfo DER encoding, as
// x509.MarshalPKIXPublicKey (and OpenSSL) encode it. The same value comes
// from the EK certificate with
//
//	openssl x509 -in ek.pem -noout -pubkey | openssl pkey -pubin -outform der | sha256sum
//
// or from the TPM with tpm2_readpublic -c 0x81010001 -f der -o ek.der.
// It hashes the key, not the certificate: a TPM without certificate has one
// too, and re-issuing the certificate does not change it.
func EKHash(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("tpm: EK hash: %w", err)
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// ParseEK parses an Identity's EK and returns it with its EKHash. The key is
// re-encoded before hashing, so a non-canonical DER gives the same hash.
func ParseEK(der []byte) (crypto.PublicKey, string, error) {
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, "", fmt.Errorf("%w: EK public key: %v", ErrMalformed, err)
	}
	switch pub.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey:
	default:
		return nil, "", fmt.Errorf("%w: EK public key is a %T, want RSA or ECDSA", ErrMalformed, pub)
	}
	h, err := EKHash(pub)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return pub, h, nil
}

// NewChallenge checks that the identity's AK was created by a TPM as a
// restricted, non-exportable signing key (its creation certified by
// itself) and seals a fresh secret to the EK and the AK's name with
// TPM2_MakeCredential. Only the TPM holding that EK, with that AK loaded,
// can recover the secret. It does not decide whether the EK is the one
// registered in Git: compare Expected.EK (or verify id.EKCert) for that.
// random nil means crypto/rand.
func NewChallenge(id Identity, random io.Reader) (Challenge, Expected, error) {
	ek, hash, err := ParseEK(id.EK)
	if err != nil {
		return Challenge{}, Expected{}, err
	}
	if len(id.EKCert) > 0 {
		cert, err := attest.ParseEKCertificate(id.EKCert)
		if err != nil {
			return Challenge{}, Expected{}, fmt.Errorf("%w: EK certificate: %v", ErrMalformed, err)
		}
		certHash, err := EKHash(cert.PublicKey)
		if err != nil || certHash != hash {
			return Challenge{}, Expected{}, fmt.Errorf("%w: the EK certificate is for another key (%s, EK %s)", ErrMalformed, certHash, hash)
		}
	}
	ap := attest.ActivationParameters{
		EK: ek,
		AK: attest.AttestationParameters{
			Public:            id.AK.Public,
			CreateData:        id.AK.CreateData,
			CreateAttestation: id.AK.CreateAttestation,
			CreateSignature:   id.AK.CreateSignature,
		},
		Rand: random,
	}
	if err := ap.CheckAKParameters(); err != nil {
		return Challenge{}, Expected{}, fmt.Errorf("%w: attestation key: %v", ErrMalformed, err)
	}
	secret, enc, err := ap.Generate()
	if err != nil {
		return Challenge{}, Expected{}, fmt.Errorf("%w: make credential: %v", ErrMalformed, err)
	}
	nonce := make([]byte, 32)
	if _, err := io.ReadFull(randOrDefault(random), nonce); err != nil {
		return Challenge{}, Expected{}, fmt.Errorf("tpm: nonce: %w", err)
	}
	ch := Challenge{Credential: enc.Credential, EncryptedSecret: enc.Secret, Nonce: nonce}
	exp := Expected{EK: hash, AK: bytes.Clone(id.AK.Public), Secret: secret, Nonce: nonce}
	return ch, exp, nil
}

// Verify checks a proof against what NewChallenge expected: the activated
// secret (compared in constant time) and, when the policy asks for measured
// boot, the quote and its event log (see verifyBoot). The Result says what
// was established; the error wraps ErrWrongTPM, ErrMeasuredBoot or
// ErrMalformed.
func Verify(exp Expected, p Proof, policy Policy) (Result, error) {
	if len(exp.Secret) == 0 {
		return Result{}, fmt.Errorf("%w: no expected secret", ErrMalformed)
	}
	if subtle.ConstantTimeCompare(exp.Secret, p.Secret) != 1 {
		return Result{}, fmt.Errorf("%w: the activated credential is not the challenge's secret (the machine does not hold EK %s)", ErrWrongTPM, exp.EK)
	}
	r := Result{EK: exp.EK}
	if !policy.MeasuredBoot {
		return r, nil
	}
	if p.Quote == nil {
		return r, fmt.Errorf("%w: measured boot required but the machine sent no quote", ErrMeasuredBoot)
	}
	if err := verifyBoot(exp, *p.Quote, policy, &r); err != nil {
		return r, err
	}
	return r, nil
}

func randOrDefault(r io.Reader) io.Reader {
	if r == nil {
		return rand.Reader
	}
	return r
}
