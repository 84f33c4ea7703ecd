package ovmfvars

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrFull is returned when a variable does not fit the store's free space.
// The firmware would reclaim the deleted copies first; this package does
// not rewrite the store, so start again from a fresh template.
var ErrFull = errors.New("ovmfvars: variable store is full")

// Set returns a copy of vars in which variable name of vendor holds data
// with attrs: a new variable appended after the last one, and the live
// copy it replaces (if any) marked deleted. Nothing else changes. attrs
// must be non-volatile and boot-service accessible (runtime optional):
// the store holds only non-volatile variables, and the authenticated
// kinds need signed payloads this package does not make.
func Set(vars []byte, name string, vendor GUID, attrs uint32, data []byte) ([]byte, error) {
	if err := checkAttrs(name, attrs); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, errors.New("ovmfvars: a variable needs a name")
	}
	s, err := Parse(vars)
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(vars)
	old, replacing := s.Get(name, vendor)
	if replacing && old.Attributes == attrs && bytes.Equal(old.Data, data) {
		return out, nil // already so: leave the store as it is
	}
	v := encodeVariable(name, vendor, attrs, data)
	if len(v) > s.Free() {
		return nil, fmt.Errorf("%w: %s needs %d bytes, %d are free", ErrFull, name, len(v), s.Free())
	}
	if !allErased(out[s.free : s.free+len(v)]) {
		return nil, fmt.Errorf("ovmfvars: the free space at %#x after the last variable is not erased flash", s.free)
	}
	copy(out[s.free:], v)
	if replacing {
		markDeleted(out, s, name, vendor)
	}
	return out, nil
}

// checkAttrs refuses what this package cannot write honestly.
func checkAttrs(name string, attrs uint32) error {
	if attrs&(attrTimeBasedAuth|attrAuthWriteCount|attrAppendWrite) != 0 {
		return fmt.Errorf("ovmfvars: %s: authenticated or append writes (attributes %#x) are not supported", name, attrs)
	}
	if attrs&^(AttrNonVolatile|AttrBootService|AttrRuntime) != 0 {
		return fmt.Errorf("ovmfvars: %s: unknown attributes %#x", name, attrs)
	}
	if attrs&AttrNonVolatile == 0 || attrs&AttrBootService == 0 {
		return fmt.Errorf("ovmfvars: %s: attributes %#x: a stored variable is non-volatile and boot-service accessible", name, attrs)
	}
	return nil
}

// encodeVariable lays out an authenticated-format variable: the header
// (monotonic count, time stamp and public key index zero, as the variable
// driver writes them for a variable without time-based authentication),
// the name, the data.
func encodeVariable(name string, vendor GUID, attrs uint32, data []byte) []byte {
	n := encodeName(name)
	h := make([]byte, authHeaderSize, authHeaderSize+len(n)+len(data))
	binary.LittleEndian.PutUint16(h, variableStartID)
	h[hdrState] = stateAdded
	binary.LittleEndian.PutUint32(h[hdrAttributes:], attrs)
	binary.LittleEndian.PutUint32(h[hdrNameSize:], uint32(len(n)))
	binary.LittleEndian.PutUint32(h[hdrDataSize:], uint32(len(data)))
	copy(h[hdrVendor:], vendor[:])
	return append(append(h, n...), data...)
}

// markDeleted clears the state bits of every live copy of the variable,
// the last step of the firmware's own replace.
func markDeleted(b []byte, s *Store, name string, vendor GUID) {
	for _, v := range s.Variables {
		if v.Name == name && v.Vendor == vendor && v.Live() {
			b[v.Offset+hdrState] &= stateDeleted
		}
	}
}

func allErased(b []byte) bool {
	for _, c := range b {
		if c != erasedByte {
			return false
		}
	}
	return true
}
