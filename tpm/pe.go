package tpm

import (
	"crypto/sha256"
	"debug/pe"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
)

// PEDigest is the Authenticode SHA-256 digest of a PE/COFF image
// ("sha256:<hex>"): what UEFI firmware measures into PCR 4 when it starts
// an EFI application (EV_EFI_BOOT_SERVICES_APPLICATION), and what a
// signature on it signs. Per the Authenticode specification it hashes the
// headers without the checksum field and the certificate table's data
// directory entry, then the sections in file order, then any data after
// them except the certificate table (the signatures) itself; so signing an
// image does not change its digest.
func PEDigest(r io.ReaderAt, size int64) (string, error) {
	f, err := pe.NewFile(r)
	if err != nil {
		return "", fmt.Errorf("tpm: PE digest: %w", err)
	}
	defer f.Close()
	// The optional header starts after the DOS stub, the "PE\0\0" signature
	// and the COFF file header.
	var lfanew [4]byte
	if _, err := r.ReadAt(lfanew[:], 0x3c); err != nil {
		return "", fmt.Errorf("tpm: PE digest: %w", err)
	}
	opt := int64(binary.LittleEndian.Uint32(lfanew[:])) + 4 + 20
	var headers int64
	var certDir pe.DataDirectory
	var certEntry int64 // offset of the certificate table's data directory entry
	switch h := f.OptionalHeader.(type) {
	case *pe.OptionalHeader64:
		headers = int64(h.SizeOfHeaders)
		certEntry = opt + 112 + 8*pe.IMAGE_DIRECTORY_ENTRY_SECURITY
		if h.NumberOfRvaAndSizes > pe.IMAGE_DIRECTORY_ENTRY_SECURITY {
			certDir = h.DataDirectory[pe.IMAGE_DIRECTORY_ENTRY_SECURITY]
		}
	case *pe.OptionalHeader32:
		headers = int64(h.SizeOfHeaders)
		certEntry = opt + 96 + 8*pe.IMAGE_DIRECTORY_ENTRY_SECURITY
		if h.NumberOfRvaAndSizes > pe.IMAGE_DIRECTORY_ENTRY_SECURITY {
			certDir = h.DataDirectory[pe.IMAGE_DIRECTORY_ENTRY_SECURITY]
		}
	default:
		return "", fmt.Errorf("tpm: PE digest: no optional header")
	}
	checksum := opt + 64
	if headers > size || certEntry+8 > headers {
		return "", fmt.Errorf("tpm: PE digest: headers (%d bytes) beyond the file (%d bytes)", headers, size)
	}
	h := sha256.New()
	hash := func(from, to int64) error {
		if from < 0 || to > size || from > to {
			return fmt.Errorf("range %d–%d outside the file (%d bytes)", from, to, size)
		}
		_, err := io.Copy(h, io.NewSectionReader(r, from, to-from))
		return err
	}
	for _, span := range [][2]int64{{0, checksum}, {checksum + 4, certEntry}, {certEntry + 8, headers}} {
		if err := hash(span[0], span[1]); err != nil {
			return "", fmt.Errorf("tpm: PE digest: headers: %w", err)
		}
	}
	sections := slices.Clone(f.Sections)
	slices.SortFunc(sections, func(a, b *pe.Section) int { return int(a.Offset) - int(b.Offset) })
	hashed := headers
	for _, s := range sections {
		if s.Size == 0 {
			continue
		}
		if err := hash(int64(s.Offset), int64(s.Offset)+int64(s.Size)); err != nil {
			return "", fmt.Errorf("tpm: PE digest: section %s: %w", s.Name, err)
		}
		hashed += int64(s.Size)
	}
	// Data after the sections (but not the signatures) is hashed too.
	if end := size - int64(certDir.Size); end > hashed {
		if err := hash(hashed, end); err != nil {
			return "", fmt.Errorf("tpm: PE digest: trailing data: %w", err)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
