package tpm

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/go-tpm/legacy/tpm2"
)

// The installed OS's reports, bound to the TPM. The attestation key a
// check-in proved lives in the machine's TPM (credential activation)
// stays with the install it opened: the agent writes the key's blobs
// into the new system (ReportKey), and the OS's report script loads it
// under the storage root key and quotes with it, its qualifying data
// ReportNonce(credential, body). The server, which kept the key's public
// area with the install, checks the quote (VerifyReport): a report
// credential copied off the disk or the wire is useless without the TPM
// that holds the key, and a report's body cannot be changed under it.
//
// With tpm2-tools, as the report script does it (the private blob is
// wrapped by the SRK: only this TPM can load it):
//
//	tpm2_load -C 0x81000002 -u report-key.pub -r report-key.priv -c key.ctx
//	tpm2_quote -c key.ctx -l sha256:0 -q <ReportNonce, hex> -m quote.msg -s quote.sig -g sha256

// SRKHandle is the persistent handle of the storage root key the AK was
// created under (tpm2_load -C).
const SRKHandle = 0x81000002

// ReportKey is the attestation key's blobs as tpm2-tools reads them: its
// public area (TPM2B_PUBLIC, tpm2_load -u) and its private part wrapped by
// the storage root key (TPM2B_PRIVATE, tpm2_load -r).
type ReportKey struct {
	Public  []byte
	Private []byte
}

// ReportKey gives the blobs of the attestation key Identity created, for
// the installed OS to sign its reports with. Call it after the check-in
// proved the key (the server keeps the key's public area with the
// install).
func (m *Machine) ReportKey() (ReportKey, error) {
	if m.ak == nil {
		return ReportKey{}, errors.New("tpm: report key: Identity was not called")
	}
	b, err := m.ak.Marshal()
	if err != nil {
		return ReportKey{}, fmt.Errorf("tpm: report key: %w", err)
	}
	// go-attestation's encoding of a TPM 2.0 key: its TPMT_PUBLIC and the
	// TPM2B_PRIVATE's content, as TPM2_Create returned them.
	var k struct {
		Public []byte
		Blob   []byte `json:"KeyBlob"`
	}
	if err := json.Unmarshal(b, &k); err != nil {
		return ReportKey{}, fmt.Errorf("tpm: report key: %w", err)
	}
	if len(k.Blob) == 0 || !bytes.Equal(k.Public, m.ak.AttestationParameters().Public) {
		return ReportKey{}, errors.New("tpm: report key: the attestation key's blob is not in the form expected (go-attestation changed?)")
	}
	return ReportKey{Public: sized(k.Public), Private: sized(k.Blob)}, nil
}

// sized is b as a TPM2B: a big-endian 16-bit size, then b.
func sized(b []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
}

// ReportNonce is the qualifying data of a report's quote: it binds the
// quote to the credential the report carries and to its body.
func ReportNonce(credential string, body []byte) []byte {
	sum := sha256.Sum256(body)
	h := sha256.New()
	h.Write([]byte("bootops report v1\x00"))
	h.Write([]byte(credential))
	h.Write([]byte{0})
	h.Write(sum[:])
	return h.Sum(nil)
}

// ErrReportQuote is what VerifyReport's errors wrap.
var ErrReportQuote = errors.New("tpm: report quote refused")

// VerifyReport checks a report's quote: attest (TPMS_ATTEST, tpm2_quote
// -m) is a quote whose qualifying data is nonce, and sig (TPMT_SIGNATURE,
// tpm2_quote -s) its signature by the key whose TPMT_PUBLIC is ak.
func VerifyReport(ak, nonce, attest, sig []byte) error {
	pub, err := tpm2.DecodePublic(ak)
	if err != nil {
		return fmt.Errorf("%w: the recorded key: %v", ErrReportQuote, err)
	}
	key, err := pub.Key()
	if err != nil {
		return fmt.Errorf("%w: the recorded key: %v", ErrReportQuote, err)
	}
	ad, err := tpm2.DecodeAttestationData(attest)
	switch {
	case err != nil:
		return fmt.Errorf("%w: not a TPMS_ATTEST: %v", ErrReportQuote, err)
	case ad.Magic != 0xff544347 || ad.Type != tpm2.TagAttestQuote:
		return fmt.Errorf("%w: not a quote made by a TPM (magic %#x, type %#x)", ErrReportQuote, ad.Magic, ad.Type)
	case subtle.ConstantTimeCompare(ad.ExtraData, nonce) != 1:
		return fmt.Errorf("%w: it quotes other data than this report's credential and body", ErrReportQuote)
	}
	s, err := tpm2.DecodeSignature(bytes.NewBuffer(sig))
	if err != nil {
		return fmt.Errorf("%w: signature: %v", ErrReportQuote, err)
	}
	digest := sha256.Sum256(attest)
	switch k := key.(type) {
	case *ecdsa.PublicKey:
		if s.Alg != tpm2.AlgECDSA || s.ECC == nil || s.ECC.HashAlg != tpm2.AlgSHA256 ||
			!ecdsa.Verify(k, digest[:], s.ECC.R, s.ECC.S) {
			return fmt.Errorf("%w: the signature is not the install's key's", ErrReportQuote)
		}
	case *rsa.PublicKey:
		if s.Alg != tpm2.AlgRSASSA || s.RSA == nil || s.RSA.HashAlg != tpm2.AlgSHA256 ||
			rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], s.RSA.Signature) != nil {
			return fmt.Errorf("%w: the signature is not the install's key's", ErrReportQuote)
		}
	default:
		return fmt.Errorf("%w: the recorded key is a %T", ErrReportQuote, key)
	}
	return nil
}
