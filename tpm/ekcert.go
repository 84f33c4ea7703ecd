package tpm

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"slices"

	"github.com/google/go-attestation/attest"
	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// EKCert is an EK certificate that VerifyEKCert accepted.
type EKCert struct {
	Cert *x509.Certificate
	EK   string // EKHash of the certified key
	// From the subject alternative name (TCG EK Credential Profile 3.2.9):
	// the TPM manufacturer ("id:" and the vendor's hex code), model and
	// firmware version; empty when absent.
	Manufacturer, Model, Version string
}

// OIDs of the TCG EK Credential Profile.
var (
	oidSAN             = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidSubjectDirAttrs = asn1.ObjectIdentifier{2, 5, 29, 9}
	oidTPMManufacturer = asn1.ObjectIdentifier{2, 23, 133, 2, 1}
	oidTPMModel        = asn1.ObjectIdentifier{2, 23, 133, 2, 2}
	oidTPMVersion      = asn1.ObjectIdentifier{2, 23, 133, 2, 3}
	sanDirectoryName   = cbasn1.Tag(4).Constructed().ContextSpecific()
)

// VerifyEKCert checks that an EK certificate (DER, or in the TCG NV
// wrapping) chains to one of roots, the manufacturer CAs a site trusts. A
// CA in roots need not be self-signed: trusting a manufacturer's
// intermediate CA alone works.
//
// EK certificates carry what Go's x509 does not handle, and it is accepted
// as follows: a critical subject alternative name whose only names are
// directoryNames of the TPM manufacturer, model and version attributes
// (2.23.133.2.1–3), as the TCG profile requires when the subject is empty;
// a critical subject directory attributes extension (2.5.29.9, the TPM
// specification the TPM implements). Any other critical extension Go does
// not know refuses the certificate. The extended key usage is not checked
// (the profile's tcg-kp-EKCertificate is optional and CAs differ), nor is
// revocation; validity is checked at the current time, and a CA
// certificate is refused as an EK.
func VerifyEKCert(der []byte, roots *x509.CertPool) (EKCert, error) {
	cert, err := attest.ParseEKCertificate(der)
	if err != nil {
		return EKCert{}, fmt.Errorf("%w: EK certificate: %v", ErrMalformed, err)
	}
	out := EKCert{Cert: cert}
	if i := slices.IndexFunc(cert.Extensions, func(x pkix.Extension) bool { return x.Id.Equal(oidSAN) }); i >= 0 {
		// A SAN Go handled may have other names; one it left unhandled is
		// accepted only if it holds the TPM's attributes and nothing else.
		if err := out.parseSAN(cert.Extensions[i].Value); err != nil && slices.ContainsFunc(cert.UnhandledCriticalExtensions, oidSAN.Equal) {
			return EKCert{}, fmt.Errorf("%w: EK certificate %q: %v", ErrUntrustedEK, cert.Subject, err)
		}
	}
	var unhandled []asn1.ObjectIdentifier
	for _, oid := range cert.UnhandledCriticalExtensions {
		if !oid.Equal(oidSAN) && !oid.Equal(oidSubjectDirAttrs) {
			unhandled = append(unhandled, oid)
		}
	}
	if len(unhandled) > 0 {
		return EKCert{}, fmt.Errorf("%w: EK certificate %q: unhandled critical extensions %v", ErrUntrustedEK, cert.Subject, unhandled)
	}
	if cert.IsCA {
		return EKCert{}, fmt.Errorf("%w: EK certificate %q is a CA certificate", ErrUntrustedEK, cert.Subject)
	}
	// Verify would refuse the extensions accepted above: check a copy
	// without them.
	c := *cert
	c.UnhandledCriticalExtensions = nil
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return EKCert{}, fmt.Errorf("%w: EK certificate %q: %v", ErrUntrustedEK, cert.Subject, err)
	}
	if out.EK, err = EKHash(cert.PublicKey); err != nil {
		return EKCert{}, fmt.Errorf("%w: EK certificate %q: %v", ErrMalformed, cert.Subject, err)
	}
	return out, nil
}

// parseSAN reads the TPM attributes from the subject alternative name and
// fails if it has any other name.
func (e *EKCert) parseSAN(ext []byte) error {
	val := cryptobyte.String(ext)
	var names cryptobyte.String
	if !val.ReadASN1(&names, cbasn1.SEQUENCE) || !val.Empty() {
		return errors.New("malformed subject alternative name")
	}
	for !names.Empty() {
		var name cryptobyte.String
		var tag cbasn1.Tag
		if !names.ReadAnyASN1(&name, &tag) {
			return errors.New("malformed subject alternative name")
		}
		if tag != sanDirectoryName {
			return errors.New("subject alternative name has names other than the TPM's manufacturer, model and version")
		}
		var rdns pkix.RDNSequence
		if rest, err := asn1.Unmarshal(name, &rdns); err != nil || len(rest) > 0 {
			return errors.New("malformed directoryName in subject alternative name")
		}
		for _, rdn := range rdns {
			for _, atv := range rdn {
				s, ok := atv.Value.(string)
				switch {
				case !ok:
					return fmt.Errorf("subject alternative name: %v is not a string", atv.Type)
				case atv.Type.Equal(oidTPMManufacturer):
					e.Manufacturer = s
				case atv.Type.Equal(oidTPMModel):
					e.Model = s
				case atv.Type.Equal(oidTPMVersion):
					e.Version = s
				default:
					return errors.New("subject alternative name has names other than the TPM's manufacturer, model and version")
				}
			}
		}
	}
	return nil
}
