package ovmfvars

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
)

// GUID is an EFI_GUID in its in-memory byte order: the first three
// groups little-endian, the last two as written.
type GUID [16]byte

// ParseGUID reads the registry form, 8-4-4-4-12 hex digits.
func ParseGUID(s string) (GUID, error) {
	var g GUID
	parts := strings.Split(s, "-")
	if len(parts) != 5 || len(parts[0]) != 8 || len(parts[1]) != 4 || len(parts[2]) != 4 || len(parts[3]) != 4 || len(parts[4]) != 12 {
		return g, fmt.Errorf("ovmfvars: %q is not a GUID (8-4-4-4-12 hex digits)", s)
	}
	raw, err := hex.DecodeString(strings.Join(parts, ""))
	if err != nil {
		return g, fmt.Errorf("ovmfvars: GUID %q: %v", s, err)
	}
	binary.LittleEndian.PutUint32(g[0:], binary.BigEndian.Uint32(raw[0:]))
	binary.LittleEndian.PutUint16(g[4:], binary.BigEndian.Uint16(raw[4:]))
	binary.LittleEndian.PutUint16(g[6:], binary.BigEndian.Uint16(raw[6:]))
	copy(g[8:], raw[8:])
	return g, nil
}

// MustParseGUID is ParseGUID for constants.
func MustParseGUID(s string) GUID {
	g, err := ParseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

func (g GUID) String() string {
	return fmt.Sprintf("%08x-%04x-%04x-%x-%x",
		binary.LittleEndian.Uint32(g[0:]), binary.LittleEndian.Uint16(g[4:]), binary.LittleEndian.Uint16(g[6:]), g[8:10], g[10:])
}
