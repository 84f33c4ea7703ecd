package ovmfvars

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"math/big"
	"slices"
	"testing"
	"time"
)

// template builds a store file in the layout of Debian's OVMF_VARS_4M.fd
// (with fvLen 0x84000 and storeSize 0x3ffb8: a volume of 4 KiB blocks, its
// first 0x40000 bytes the variable store), holding vars, laid out as the
// firmware lays them out.
func template(t testing.TB, fvLen, storeSize int, vars ...[]byte) []byte {
	t.Helper()
	const hdrLen = 0x48
	b := bytes.Repeat([]byte{erasedByte}, fvLen)
	clear(b[:hdrLen])
	copy(b[0x10:], systemNvDataFv[:])
	binary.LittleEndian.PutUint64(b[fvLengthOffset:], uint64(fvLen))
	copy(b[fvSigOffset:], fvSignature)
	binary.LittleEndian.PutUint32(b[0x2c:], 0x0004feff)
	binary.LittleEndian.PutUint16(b[fvHdrLenOffset:], hdrLen)
	b[0x37] = 2                                                   // revision
	binary.LittleEndian.PutUint32(b[0x38:], uint32(fvLen/0x1000)) // block map: blocks
	binary.LittleEndian.PutUint32(b[0x3c:], 0x1000)               // of 4 KiB, then {0, 0}
	binary.LittleEndian.PutUint16(b[0x32:], -checksum16(b[:hdrLen]))
	copy(b[hdrLen:], authenticatedVariable[:])
	binary.LittleEndian.PutUint32(b[hdrLen+16:], uint32(storeSize))
	b[hdrLen+20], b[hdrLen+21] = storeFormatted, storeHealthy
	clear(b[hdrLen+22 : hdrLen+storeHeaderSize])
	off := hdrLen + storeHeaderSize
	for _, v := range vars {
		copy(b[off:], v)
		off = alignUp(off + len(v))
	}
	return b
}

// authVar is a variable with time-based authentication as the firmware
// stores PK or db: a non-zero time stamp and monotonic count that a
// rewrite would lose.
func authVar(name string, vendor GUID, state byte, data []byte) []byte {
	v := encodeVariable(name, vendor, AttrNonVolatile|AttrBootService|AttrRuntime, data)
	v[hdrState] = state
	binary.LittleEndian.PutUint32(v[hdrAttributes:], AttrNonVolatile|AttrBootService|AttrRuntime|attrTimeBasedAuth)
	binary.LittleEndian.PutUint64(v[8:], 7)     // monotonic count
	binary.LittleEndian.PutUint16(v[16:], 2023) // EFI_TIME year
	v[18], v[19], v[32] = 5, 17, 3              // month, day, public key index
	return v
}

var testVendor = MustParseGUID("d9bee56e-75dc-49d9-b4d7-b534210f637a")

// fixture is a store with what real ones hold: a deleted copy, a
// time-authenticated variable, a boot option and a BootOrder.
func fixture(t testing.TB) []byte {
	return template(t, 0x84000, 0x3ffb8, fixtureVars()...)
}

func fixtureVars() [][]byte {
	boot0 := LoadOption{Attributes: LoadOptionActive, Description: "UiApp", FilePath: []byte{dpEnd, dpEndEntire, 4, 0}}
	return [][]byte{
		authVar("CustomMode", MustParseGUID("c076ec0c-7028-4399-a072-71ee5c448b9f"), stateDeleted, []byte{0}),
		authVar("certdb", testVendor, stateAdded, []byte{4, 0, 0, 0}),
		encodeVariable("Boot0000", GlobalVariable, bootAttrs, boot0.Marshal()),
		encodeVariable("BootOrder", GlobalVariable, bootAttrs, encodeOrder([]uint16{0})),
	}
}

func mustParse(t *testing.T, b []byte) *Store {
	t.Helper()
	s, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParse(t *testing.T) {
	s := mustParse(t, fixture(t))
	var names []string
	for _, v := range s.Variables {
		names = append(names, v.Name)
	}
	if want := []string{"CustomMode", "certdb", "Boot0000", "BootOrder"}; !slices.Equal(names, want) {
		t.Fatalf("variables %q, want %q", names, want)
	}
	if _, ok := s.Get("CustomMode", MustParseGUID("c076ec0c-7028-4399-a072-71ee5c448b9f")); ok {
		t.Error("a deleted variable is returned as live")
	}
	v, ok := s.Get("certdb", testVendor)
	if !ok || !bytes.Equal(v.Data, []byte{4, 0, 0, 0}) || v.Attributes&attrTimeBasedAuth == 0 {
		t.Errorf("certdb = %+v, %v", v, ok)
	}
	if s.start != 0x64 || s.Variables[1].Offset != 0xb8 {
		t.Errorf("first variables at %#x and %#x, want 0x64 and 0xb8 (Debian's OVMF_VARS_4M.ms.fd layout)", s.start, s.Variables[1].Offset)
	}
}

// changedRanges lists where a and b differ, as [from, to) pairs.
func changedRanges(a, b []byte) [][2]int {
	var out [][2]int
	for i := 0; i < len(a); i++ {
		if a[i] == b[i] {
			continue
		}
		j := i
		for j < len(a) && a[j] != b[j] {
			j++
		}
		out = append(out, [2]int{i, j})
		i = j
	}
	return out
}

func TestSetBootURI(t *testing.T) {
	orig := fixture(t)
	before := mustParse(t, orig)
	const uri = "https://198.18.40.1:8443/boot/mmx64.efi"
	out, err := SetBootURI(orig, "bootops HTTPS", uri)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(orig) {
		t.Fatalf("file grew from %d to %d bytes", len(orig), len(out))
	}
	// Every byte before the old free space is kept: the existing variables
	// byte for byte, deleted ones included. BootOrder's old copy changes
	// its state byte only.
	oldOrder := before.Variables[3]
	for _, r := range changedRanges(orig, out) {
		if r[0] < before.free && r != [2]int{oldOrder.Offset + hdrState, oldOrder.Offset + hdrState + 1} {
			t.Errorf("bytes %#x-%#x changed inside the existing variables", r[0], r[1])
		}
	}
	s := mustParse(t, out)
	if got := s.Variables[3].State; got != stateDeleted {
		t.Errorf("the replaced BootOrder's state is %#x, want deleted (%#x)", got, stateDeleted)
	}
	v, ok := s.Get("Boot0001", GlobalVariable)
	if !ok {
		t.Fatal("no Boot0001 after SetBootURI")
	}
	if v.Attributes != AttrNonVolatile|AttrBootService|AttrRuntime || v.Offset != before.free {
		t.Errorf("Boot0001 attributes %#x at %#x, want 0x7 at the old free space %#x", v.Attributes, v.Offset, before.free)
	}
	opt, err := ParseLoadOption(v.Data)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := PathURI(opt.FilePath)
	if opt.Attributes != LoadOptionActive || opt.Description != "bootops HTTPS" || got != uri || len(opt.OptionalData) != 0 {
		t.Errorf("Boot0001 = %+v (URI %q)", opt, got)
	}
	order, _ := s.Get("BootOrder", GlobalVariable)
	if o := BootOrder(order.Data); !slices.Equal(o, []uint16{1, 0}) {
		t.Errorf("BootOrder %v, want [1 0]", o)
	}
}

func TestURIDevicePathBytes(t *testing.T) {
	want := []byte{0x03, 0x18, 0x0f, 0x00, 'h', 't', 't', 'p', 's', ':', '/', '/', 'a', '/', 'b', 0x7f, 0xff, 0x04, 0x00}
	if got := URIDevicePath("https://a/b"); !bytes.Equal(got, want) {
		t.Errorf("URIDevicePath = % x, want % x", got, want)
	}
}

func TestSetBootURIReplaces(t *testing.T) {
	out, err := SetBootURI(fixture(t), "bootops HTTPS", "https://198.18.40.1/a.efi")
	if err != nil {
		t.Fatal(err)
	}
	first := mustParse(t, out)
	out, err = SetBootURI(out, "bootops HTTPS", "https://198.18.40.1/b.efi")
	if err != nil {
		t.Fatal(err)
	}
	s := mustParse(t, out)
	live := 0
	for _, v := range s.Variables {
		if v.Name == "Boot0001" && v.Live() {
			live++
		}
	}
	v, _ := s.Get("Boot0001", GlobalVariable)
	opt, _ := ParseLoadOption(v.Data)
	if uri, _ := PathURI(opt.FilePath); live != 1 || uri != "https://198.18.40.1/b.efi" {
		t.Errorf("%d live Boot0001, URI %q; want 1, the new one", live, uri)
	}
	// BootOrder was already right: no new copy of it.
	if len(s.Variables) != len(first.Variables)+1 {
		t.Errorf("%d variables after the replace, want %d (the new Boot0001 only)", len(s.Variables), len(first.Variables)+1)
	}
	again, err := SetBootURI(out, "bootops HTTPS", "https://198.18.40.1/b.efi")
	if err != nil || !bytes.Equal(again, out) {
		t.Errorf("setting the same option again changed the store (err %v)", err)
	}
}

func selfSigned(t testing.TB, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestSetTLSCA(t *testing.T) {
	a, b := selfSigned(t, "a"), selfSigned(t, "a longer common name")
	out, err := SetTLSCA(fixture(t), a, b)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := mustParse(t, out).Get(TLSCAName, TLSCACertificate)
	if !ok || v.Attributes != AttrNonVolatile|AttrBootService {
		t.Fatalf("TlsCaCertificate %v, attributes %#x; want present with 0x3", ok, v.Attributes)
	}
	certs, err := TLSCAs(v.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(certs) != 2 || !bytes.Equal(certs[0], a) || !bytes.Equal(certs[1], b) {
		t.Errorf("TlsCaCertificate holds %d certificates, want a and b in order", len(certs))
	}
	if got := binary.LittleEndian.Uint32(v.Data[16:]); int(got) != sigListHeader+16+len(a) {
		t.Errorf("first SignatureListSize %d, want %d", got, sigListHeader+16+len(a))
	}
	if _, err := SetTLSCA(fixture(t), []byte("not DER")); err == nil {
		t.Error("SetTLSCA took bytes that are not a certificate")
	}
}

func TestFull(t *testing.T) {
	orig := fixture(t)
	small := template(t, 0x1000, 0x200, encodeVariable("Boot0000", GlobalVariable, bootAttrs, []byte{1, 0, 0, 0, 4, 0, 0, 0, 0x7f, 0xff, 4, 0}))
	_, err := SetTLSCA(small, selfSigned(t, "too big for 0x200 bytes"))
	if !errors.Is(err, ErrFull) {
		t.Errorf("a certificate into a 0x200-byte store: %v, want ErrFull", err)
	}
	if _, err := SetBootURI(orig, "x", "ftp://198.18.40.1/x"); err == nil {
		t.Error("SetBootURI took an ftp:// URI")
	}
}

func TestSetRefuses(t *testing.T) {
	for _, attrs := range []uint32{AttrBootService, AttrNonVolatile, bootAttrs | attrTimeBasedAuth, bootAttrs | 0x100} {
		if _, err := Set(fixture(t), "X", testVendor, attrs, []byte{1}); err == nil {
			t.Errorf("Set took attributes %#x", attrs)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	cases := map[string]func(b []byte){
		"no FV signature":   func(b []byte) { b[fvSigOffset] = 'x' },
		"bad checksum":      func(b []byte) { b[0x2c]++ },
		"other file system": func(b []byte) { b[0x10]++ },
		"plain store":       func(b []byte) { copy(b[0x48:], plainVariable[:]) },
		"store overruns":    func(b []byte) { binary.LittleEndian.PutUint32(b[0x48+16:], 0x90000) },
		"not healthy":       func(b []byte) { b[0x48+21] = 0xff },
		"data overruns":     func(b []byte) { binary.LittleEndian.PutUint32(b[0x64+hdrDataSize:], 0x7fffffff) },
		"short":             func(b []byte) {},
	}
	for name, corrupt := range cases {
		b := fixture(t)
		corrupt(b)
		if name == "short" {
			b = b[:0x30]
		}
		if _, err := Parse(b); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestGUID(t *testing.T) {
	const s = "fd2340d0-3dab-4349-a6c7-3b4f12b48eae"
	g := MustParseGUID(s)
	if g.String() != s || g[0] != 0xd0 || g[4] != 0xab || g[8] != 0xa6 {
		t.Errorf("GUID %s bytes % x", g, g[:])
	}
	if _, err := ParseGUID("fd2340d0-3dab-4349-a6c7"); err == nil {
		t.Error("parsed a short GUID")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(template(f, 0x1000, 0x1000-0x48, fixtureVars()...))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			return
		}
		for _, v := range s.Variables {
			if v.Offset < s.start || v.End > s.end {
				t.Fatalf("variable %q at %#x-%#x outside the store %#x-%#x", v.Name, v.Offset, v.End, s.start, s.end)
			}
		}
	})
}
