// Package ovmfvars reads and edits OVMF's variable store file (the
// OVMF_VARS*.fd a QEMU guest gets as its second pflash drive) before the
// guest starts: what an operator would type into the firmware's setup menu
// (an HTTPS boot URL, the CA it trusts), written the way the firmware's own
// variable driver would have written it.
//
// The file is a firmware volume (EFI_FIRMWARE_VOLUME_HEADER, file system
// gEfiSystemNvDataFvGuid) whose body starts with a variable store in the
// authenticated format (VARIABLE_STORE_HEADER, signature
// gEfiAuthenticatedVariableGuid), followed by the fault-tolerant-write
// areas, which are left alone. Variables are appended after the last one
// and a replaced variable's old copy is marked deleted, as flash allows:
// no other byte of the file changes. Both the 2 MiB (128 KiB store file)
// and the 4 MiB (528 KiB) layouts are read from their headers.
//
// It is a test-side package: the e2e lab uses it to give a VM's firmware a
// boot option and a trust anchor, since no test can type into a menu.
package ovmfvars

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf16"
)

// Variable attributes (UEFI spec, GetVariable).
const (
	AttrNonVolatile    uint32 = 0x01
	AttrBootService    uint32 = 0x02
	AttrRuntime        uint32 = 0x04
	attrTimeBasedAuth  uint32 = 0x20
	attrAuthWriteCount uint32 = 0x10
	attrAppendWrite    uint32 = 0x40
)

// Variable states (edk2 VariableFormat.h): flash bits only ever go from 1
// to 0, so each step clears bits of the one before.
const (
	stateAdded             byte = 0x3f
	stateInDeletedAndAdded byte = 0x3e // VAR_IN_DELETED_TRANSITION & VAR_ADDED
	stateDeleted           byte = 0x3c // VAR_ADDED & VAR_IN_DELETED_TRANSITION & VAR_DELETED
)

const (
	fvSignature     = "_FVH"
	fvHeaderMin     = 0x38 // up to and including the first block-map entry
	storeHeaderSize = 28   // VARIABLE_STORE_HEADER
	storeFormatted  = 0x5a
	storeHealthy    = 0xfe
	authHeaderSize  = 60 // AUTHENTICATED_VARIABLE_HEADER
	variableStartID = 0x55aa
	headerAlignment = 4
	erasedByte      = 0xff
	maxNameBytes    = 1024 // far above any real name: a bound on a corrupt header
	fvLengthOffset  = 0x20
	fvSigOffset     = 0x28
	fvHdrLenOffset  = 0x30
)

// Offsets in AUTHENTICATED_VARIABLE_HEADER: StartId, State, Reserved,
// Attributes, MonotonicCount, TimeStamp (EFI_TIME), PubKeyIndex,
// NameSize, DataSize, VendorGuid.
const (
	hdrState      = 2
	hdrAttributes = 4
	hdrNameSize   = 36
	hdrDataSize   = 40
	hdrVendor     = 44
)

// GUIDs of the formats and the variables this package writes.
var (
	systemNvDataFv        = MustParseGUID("fff12b8d-7696-4c8b-a985-2747075b4f50")
	authenticatedVariable = MustParseGUID("aaf32c78-947b-439a-a180-2e144ec37792")
	plainVariable         = MustParseGUID("ddcf3616-3275-4164-98b6-fe85707ffe7d")
)

// Variable is one variable header of the store and what follows it.
type Variable struct {
	Name       string
	Vendor     GUID
	Attributes uint32
	State      byte
	Data       []byte
	// Offset is where the header starts in the file; End is just past the
	// data (the next header starts at End rounded up to 4).
	Offset, End int
}

// Live reports whether the firmware would return this copy: added, and
// not (being) replaced. A copy in deleted transition is live only when no
// added copy of the same variable exists; Store.Get handles that.
func (v Variable) Live() bool {
	return v.State == stateAdded || v.State == stateInDeletedAndAdded
}

// Store is a parsed variable store: every variable header in order, the
// deleted copies included.
type Store struct {
	Variables []Variable
	// start is the first variable's offset; free the first byte after the
	// last variable (aligned); end the store's end.
	start, free, end int
}

// Get returns the live copy of variable name of vendor.
func (s *Store) Get(name string, vendor GUID) (Variable, bool) {
	var inTransition *Variable
	for i, v := range s.Variables {
		if v.Name != name || v.Vendor != vendor {
			continue
		}
		switch v.State {
		case stateAdded:
			return v, true
		case stateInDeletedAndAdded:
			inTransition = &s.Variables[i]
		}
	}
	if inTransition != nil {
		return *inTransition, true
	}
	return Variable{}, false
}

// Free is how many bytes are left for new variables.
func (s *Store) Free() int { return s.end - s.free }

// Parse reads a variable store file: the firmware volume header, the
// store header and every variable.
func Parse(vars []byte) (*Store, error) {
	storeAt, fvEnd, err := parseFV(vars)
	if err != nil {
		return nil, err
	}
	end, err := parseStoreHeader(vars, storeAt, fvEnd)
	if err != nil {
		return nil, err
	}
	s := &Store{start: alignUp(storeAt + storeHeaderSize), end: end}
	off := s.start
	for off+authHeaderSize <= end && binary.LittleEndian.Uint16(vars[off:]) == variableStartID {
		v, err := parseVariable(vars, off, end)
		if err != nil {
			return nil, err
		}
		s.Variables = append(s.Variables, v)
		off = alignUp(v.End)
	}
	s.free = min(off, end)
	return s, nil
}

// parseFV checks the firmware volume header and returns where its body
// (the variable store) starts and where the volume ends.
func parseFV(b []byte) (body, end int, err error) {
	if len(b) < fvHeaderMin {
		return 0, 0, fmt.Errorf("ovmfvars: %d bytes is too short for a firmware volume header", len(b))
	}
	if string(b[fvSigOffset:fvSigOffset+4]) != fvSignature {
		return 0, 0, fmt.Errorf("ovmfvars: no firmware volume signature %q at offset %#x", fvSignature, fvSigOffset)
	}
	var fs GUID
	copy(fs[:], b[0x10:0x20])
	if fs != systemNvDataFv {
		return 0, 0, fmt.Errorf("ovmfvars: firmware volume of file system %s, not the NV data volume %s", fs, systemNvDataFv)
	}
	length := binary.LittleEndian.Uint64(b[fvLengthOffset:])
	hdrLen := int(binary.LittleEndian.Uint16(b[fvHdrLenOffset:]))
	if length > uint64(len(b)) || hdrLen < fvHeaderMin || hdrLen > int(length) {
		return 0, 0, fmt.Errorf("ovmfvars: firmware volume of %#x bytes with a %#x-byte header does not fit the %#x-byte file", length, hdrLen, len(b))
	}
	if sum := checksum16(b[:hdrLen]); sum != 0 {
		return 0, 0, fmt.Errorf("ovmfvars: firmware volume header checksum is off by %#04x", sum)
	}
	return hdrLen, int(length), nil
}

// parseStoreHeader checks the variable store header at off and returns
// where the store ends.
func parseStoreHeader(b []byte, off, fvEnd int) (int, error) {
	if off+storeHeaderSize > fvEnd {
		return 0, fmt.Errorf("ovmfvars: no room for a variable store header at %#x", off)
	}
	var sig GUID
	copy(sig[:], b[off:off+16])
	switch sig {
	case authenticatedVariable:
	case plainVariable:
		return 0, fmt.Errorf("ovmfvars: the store at %#x is in the non-authenticated format, which this package does not write", off)
	default:
		return 0, fmt.Errorf("ovmfvars: unknown variable store signature %s at %#x", sig, off)
	}
	size := int(binary.LittleEndian.Uint32(b[off+16:]))
	if format, state := b[off+20], b[off+21]; format != storeFormatted || state != storeHealthy {
		return 0, fmt.Errorf("ovmfvars: variable store at %#x is not formatted and healthy (format %#02x, state %#02x)", off, format, state)
	}
	if size < storeHeaderSize || off+size > fvEnd {
		return 0, fmt.Errorf("ovmfvars: variable store of %#x bytes at %#x overruns the volume's end %#x", size, off, fvEnd)
	}
	return off + size, nil
}

// parseVariable reads the authenticated variable header at off.
func parseVariable(b []byte, off, end int) (Variable, error) {
	h := b[off : off+authHeaderSize]
	nameSize := int(binary.LittleEndian.Uint32(h[hdrNameSize:]))
	dataSize := int(binary.LittleEndian.Uint32(h[hdrDataSize:]))
	nameAt := off + authHeaderSize
	if nameSize < 2 || nameSize%2 != 0 || nameSize > maxNameBytes || dataSize < 0 || dataSize > end-nameAt-nameSize {
		return Variable{}, fmt.Errorf("ovmfvars: variable at %#x: name of %d bytes and data of %d bytes do not fit the store", off, nameSize, dataSize)
	}
	v := Variable{
		Name:       decodeName(b[nameAt : nameAt+nameSize]),
		Attributes: binary.LittleEndian.Uint32(h[hdrAttributes:]),
		State:      h[hdrState],
		Data:       bytes.Clone(b[nameAt+nameSize : nameAt+nameSize+dataSize]),
		Offset:     off,
		End:        nameAt + nameSize + dataSize,
	}
	copy(v.Vendor[:], h[hdrVendor:])
	return v, nil
}

// decodeName turns a NUL-terminated UCS-2 name into a string.
func decodeName(b []byte) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := binary.LittleEndian.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}

// encodeName is name as UCS-2 with its terminating NUL, as the header's
// NameSize counts it.
func encodeName(name string) []byte {
	u := utf16.Encode([]rune(name))
	b := make([]byte, 0, 2*len(u)+2)
	for _, c := range u {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	return append(b, 0, 0)
}

func alignUp(off int) int {
	return (off + headerAlignment - 1) &^ (headerAlignment - 1)
}

// checksum16 sums b as little-endian 16-bit words: 0 for a good firmware
// volume header.
func checksum16(b []byte) uint16 {
	var sum uint16
	for i := 0; i+1 < len(b); i += 2 {
		sum += binary.LittleEndian.Uint16(b[i:])
	}
	return sum
}
