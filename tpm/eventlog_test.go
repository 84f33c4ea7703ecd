package tpm

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"math/big"
	"testing"
	"time"
	"unicode/utf16"
)

// A synthetic firmware event log in the TCG crypto-agile format (PC Client
// Platform Firmware Profile 10.2), SHA-256 only, shaped like OVMF's: a spec
// ID header, the Secure Boot variables in PCR 7, separators in PCRs 0–7,
// and the EFI applications started from the boot option in PCR 4.

type event struct {
	pcr    int
	typ    uint32
	data   []byte
	digest [32]byte
}

const (
	evNoAction          = 0x00000003
	evTypeSeparator     = 0x00000004
	evSCRTMVersion      = 0x00000008
	evVariableConfig    = 0x80000001
	evBootServicesApp   = 0x80000003
	evEFIAction         = 0x80000007
	evVariableAuthority = 0x800000e0
)

type guid struct {
	d1     uint32
	d2, d3 uint16
	d4     [8]byte
}

var (
	efiGlobalVariable  = guid{0x8be4df61, 0x93ca, 0x11d2, [8]byte{0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c}}
	efiImageSecurityDB = guid{0xd719b2cb, 0x3d3a, 0x4596, [8]byte{0xa3, 0xbc, 0xda, 0xd0, 0x0e, 0x67, 0x65, 0x6f}}
	efiCertX509        = guid{0xa5c059a1, 0x94e4, 0x4aa7, [8]byte{0x87, 0xb5, 0xab, 0x15, 0x5c, 0x2b, 0xf0, 0x72}}
	testOwner          = guid{0x11111111, 0x2222, 0x3333, [8]byte{4, 4, 5, 5, 6, 6, 7, 7}}
)

func (g guid) bytes() []byte {
	b := binary.LittleEndian.AppendUint32(nil, g.d1)
	b = binary.LittleEndian.AppendUint16(b, g.d2)
	b = binary.LittleEndian.AppendUint16(b, g.d3)
	return append(b, g.d4[:]...)
}

// measured is an event whose digest is the SHA-256 of its data.
func measured(pcr int, typ uint32, data []byte) event {
	return event{pcr: pcr, typ: typ, data: data, digest: sha256.Sum256(data)}
}

// variable is a UEFI_VARIABLE_DATA event.
func variable(typ uint32, vendor guid, name string, value []byte) event {
	u := utf16.Encode([]rune(name))
	b := vendor.bytes()
	b = binary.LittleEndian.AppendUint64(b, uint64(len(u)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(value)))
	for _, c := range u {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	return measured(7, typ, append(b, value...))
}

// x509List is an EFI_SIGNATURE_LIST holding one certificate.
func x509List(cert []byte) []byte {
	b := efiCertX509.bytes()
	b = binary.LittleEndian.AppendUint32(b, uint32(28+16+len(cert)))
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(16+len(cert)))
	return append(append(b, testOwner.bytes()...), cert...)
}

// bootEvents is a boot of the given EFI applications (Authenticode
// digests, in order) with Secure Boot on or off; cert (testCert) stands
// for all the platform's Secure Boot keys.
func bootEvents(cert []byte, secureBoot bool, apps ...[32]byte) []event {
	sep := []byte{0, 0, 0, 0}
	ev := []event{measured(0, evSCRTMVersion, []byte("bootops test firmware\x00"))}
	var sb byte
	if secureBoot {
		sb = 1
	}
	ev = append(ev,
		variable(evVariableConfig, efiGlobalVariable, "SecureBoot", []byte{sb}),
		variable(evVariableConfig, efiGlobalVariable, "PK", x509List(cert)),
		variable(evVariableConfig, efiGlobalVariable, "KEK", x509List(cert)),
		variable(evVariableConfig, efiImageSecurityDB, "db", x509List(cert)),
		variable(evVariableConfig, efiImageSecurityDB, "dbx", nil),
		measured(4, evEFIAction, []byte("Calling EFI Application from Boot Option")),
	)
	for pcr := range 8 {
		ev = append(ev, measured(pcr, evTypeSeparator, sep))
	}
	if secureBoot {
		ev = append(ev, variable(evVariableAuthority, efiImageSecurityDB, "db", append(testOwner.bytes(), cert...)))
	}
	for i, d := range apps {
		// The data (an UEFI_IMAGE_LOAD_EVENT) is not what is hashed: the
		// digest is the image's Authenticode hash.
		ev = append(ev, event{pcr: 4, typ: evBootServicesApp, data: []byte{byte(i), 0, 0, 0}, digest: d})
	}
	return ev
}

// encodeLog writes events as a crypto-agile log.
func encodeLog(events []event) []byte {
	var b bytes.Buffer
	le := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	// The spec ID event, in the old SHA-1 format.
	var spec bytes.Buffer
	spec.WriteString("Spec ID Event03\x00")
	binary.Write(&spec, binary.LittleEndian, struct {
		PlatformClass                   uint32
		Minor, Major, Errata, UintnSize uint8
		NumAlgs                         uint32
		AlgID, DigestSize               uint16
		VendorInfoSize                  uint8
	}{0, 0, 2, 0, 2, 1, 0x000b, 32, 0})
	le(uint32(0))
	le(uint32(evNoAction))
	le([20]byte{})
	le(uint32(spec.Len()))
	b.Write(spec.Bytes())
	for _, e := range events {
		le(uint32(e.pcr))
		le(e.typ)
		le(uint32(1))
		le(uint16(0x000b))
		le(e.digest)
		le(uint32(len(e.data)))
		b.Write(e.data)
	}
	return b.Bytes()
}

// testCert is a self-signed certificate standing for the platform's
// Secure Boot keys.
func testCert(t testing.TB) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "bootops test Secure Boot key"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
