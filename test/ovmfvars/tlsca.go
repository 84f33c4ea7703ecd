package ovmfvars

import (
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
)

// TLSCACertificate is EFI_TLS_CA_CERTIFICATE_GUID, the vendor of the
// TlsCaCertificate variable that edk2's HttpDxe reads for every HTTPS
// connection (TlsConfigCertificate).
var TLSCACertificate = MustParseGUID("fd2340d0-3dab-4349-a6c7-3b4f12b48eae")

// TLSCAName is the variable's name (EFI_TLS_CA_CERTIFICATE_VARIABLE).
const TLSCAName = "TlsCaCertificate"

// tlsCAAttrs are the attributes edk2's TlsAuthConfigDxe gives the variable
// when an operator enrolls a CA in the setup menu
// (TLS_AUTH_CONFIG_VAR_BASE_ATTR): non-volatile, boot services only, so
// the OS cannot change what the firmware trusts.
const tlsCAAttrs = AttrNonVolatile | AttrBootService

var (
	certX509 = MustParseGUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072") // EFI_CERT_X509_GUID
	// caOwner is the SignatureOwner of the certificates this package
	// writes; the firmware ignores it. Made up for bootops.
	caOwner = MustParseGUID("6b6f6f74-6f70-4073-8f76-6d6661727300")
)

// sigListHeader is EFI_SIGNATURE_LIST without its (empty) signature header.
const sigListHeader = 28

// SetTLSCA returns a copy of vars whose TlsCaCertificate variable holds
// exactly derCerts: one EFI_SIGNATURE_LIST of type EFI_CERT_X509_GUID per
// certificate (an X.509 list's entries share one SignatureSize, so
// certificates of different lengths need lists of their own), each entry
// the owner GUID and the DER bytes. HttpDxe sets every certificate found
// as a trusted CA of the TLS session; with the variable absent, edk2
// 2022.11 fails every HTTPS connection.
func SetTLSCA(vars []byte, derCerts ...[]byte) ([]byte, error) {
	if len(derCerts) == 0 {
		return nil, errors.New("ovmfvars: SetTLSCA needs at least one certificate")
	}
	var data []byte
	for i, der := range derCerts {
		if _, err := x509.ParseCertificate(der); err != nil {
			return nil, fmt.Errorf("ovmfvars: CA certificate %d is not DER X.509: %v", i, err)
		}
		data = append(data, signatureList(der)...)
	}
	return Set(vars, TLSCAName, TLSCACertificate, tlsCAAttrs, data)
}

// signatureList is one EFI_SIGNATURE_LIST holding one X.509 certificate.
func signatureList(der []byte) []byte {
	entry := 16 + len(der) // EFI_SIGNATURE_DATA: owner GUID, then the certificate
	b := append([]byte(nil), certX509[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(sigListHeader+entry)) // SignatureListSize
	b = binary.LittleEndian.AppendUint32(b, 0)                           // SignatureHeaderSize
	b = binary.LittleEndian.AppendUint32(b, uint32(entry))               // SignatureSize
	b = append(b, caOwner[:]...)
	return append(b, der...)
}

// TLSCAs decodes a TlsCaCertificate value into its DER certificates,
// checking it as HttpDxe does.
func TLSCAs(data []byte) ([][]byte, error) {
	var out [][]byte
	for len(data) > 0 {
		if len(data) < sigListHeader {
			return nil, errors.New("ovmfvars: truncated EFI_SIGNATURE_LIST header")
		}
		var typ GUID
		copy(typ[:], data)
		listSize := int(binary.LittleEndian.Uint32(data[16:]))
		hdrSize := int(binary.LittleEndian.Uint32(data[20:]))
		sigSize := int(binary.LittleEndian.Uint32(data[24:]))
		switch {
		case typ != certX509:
			return nil, fmt.Errorf("ovmfvars: signature list of type %s, not X.509", typ)
		case listSize < sigListHeader || listSize > len(data):
			return nil, fmt.Errorf("ovmfvars: signature list size %d does not fit %d bytes", listSize, len(data))
		case hdrSize != 0 || sigSize <= 16 || (listSize-sigListHeader)%sigSize != 0:
			return nil, fmt.Errorf("ovmfvars: signature list header %d, entry size %d, list size %d do not add up", hdrSize, sigSize, listSize)
		}
		for e := data[sigListHeader:listSize]; len(e) > 0; e = e[sigSize:] {
			out = append(out, e[16:sigSize])
		}
		data = data[listSize:]
	}
	return out, nil
}
