package compiler

import "encoding/binary"

// tinyPE is the smallest PE32+ image tpm.PEDigest reads: headers, no
// section, and payload after them (so two payloads have two digests).
func tinyPE(payload string) []byte {
	b := make([]byte, 0x200, 0x200+len(payload))
	copy(b, "MZ")
	binary.LittleEndian.PutUint32(b[0x3c:], 0x40)
	copy(b[0x40:], "PE\x00\x00")
	coff := b[0x44:]
	binary.LittleEndian.PutUint16(coff[0:], 0x8664) // x86-64
	binary.LittleEndian.PutUint16(coff[16:], 240)   // SizeOfOptionalHeader
	binary.LittleEndian.PutUint16(coff[18:], 0x22)  // executable, large address aware
	opt := b[0x58:]
	binary.LittleEndian.PutUint16(opt[0:], 0x20b)   // PE32+
	binary.LittleEndian.PutUint32(opt[32:], 0x1000) // SectionAlignment
	binary.LittleEndian.PutUint32(opt[36:], 0x200)  // FileAlignment
	binary.LittleEndian.PutUint32(opt[56:], 0x1000) // SizeOfImage
	binary.LittleEndian.PutUint32(opt[60:], 0x200)  // SizeOfHeaders
	binary.LittleEndian.PutUint16(opt[68:], 10)     // Subsystem: EFI application
	binary.LittleEndian.PutUint32(opt[108:], 16)    // NumberOfRvaAndSizes
	return append(b, payload...)
}
