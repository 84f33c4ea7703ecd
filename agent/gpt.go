package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// An image smaller than the disk leaves its GPT's backup header and
// entries where the image ended, not at the disk's last sector: the OS
// (and sfdisk: "The backup GPT table is not on the end of the device")
// sees a broken table and cannot grow its root partition into the rest.
// moveBackupGPT puts them at the end, as `sgdisk -e` does, and extends
// the last usable sector and the protective MBR to match.

// gptHeader is the part of a GPT header moveBackupGPT uses (UEFI spec
// 2.10, 5.3.2), at its byte offsets.
const (
	gptSignature   = "EFI PART"
	gptHeaderCRC   = 16
	gptMyLBA       = 24
	gptAlternate   = 32
	gptLastUsable  = 48
	gptEntriesLBA  = 72
	gptEntryCount  = 80
	gptEntrySize   = 84
	gptEntriesCRC  = 88
	gptMinHdrSize  = 92
	mbrPartition0  = 446
	mbrTypeGPTProt = 0xEE
)

// moveBackupGPT relocates the backup GPT of the disk rw (size bytes, in
// sectors of sector bytes) to its end. It reports whether it moved one;
// a disk without a GPT, or with one already at the end, is left alone.
func moveBackupGPT(rw interface {
	io.ReaderAt
	io.WriterAt
}, size, sector int64) (bool, error) {
	hdr := make([]byte, sector)
	if _, err := rw.ReadAt(hdr, sector); err != nil {
		return false, fmt.Errorf("gpt: read header: %w", err)
	}
	if string(hdr[:8]) != gptSignature {
		return false, nil // not a GPT disk
	}
	le := binary.LittleEndian
	hsize := int64(le.Uint32(hdr[12:]))
	if hsize < gptMinHdrSize || hsize > sector {
		return false, fmt.Errorf("gpt: header size %d", hsize)
	}
	if headerCRC(hdr[:hsize]) != le.Uint32(hdr[gptHeaderCRC:]) {
		return false, errors.New("gpt: the primary header's CRC does not match: not touching it")
	}
	last := uint64(size/sector) - 1
	alt := le.Uint64(hdr[gptAlternate:])
	if alt == last {
		return false, nil
	}
	if alt > last {
		return false, fmt.Errorf("gpt: the backup header is at sector %d, past the disk's end (%d): the image is larger than the disk", alt, last)
	}
	n, esz := int64(le.Uint32(hdr[gptEntryCount:])), int64(le.Uint32(hdr[gptEntrySize:]))
	entriesSectors := (n*esz + sector - 1) / sector
	entries := make([]byte, entriesSectors*sector)
	if _, err := rw.ReadAt(entries, int64(le.Uint64(hdr[gptEntriesLBA:]))*sector); err != nil {
		return false, fmt.Errorf("gpt: read entries: %w", err)
	}
	if crc32.ChecksumIEEE(entries[:n*esz]) != le.Uint32(hdr[gptEntriesCRC:]) {
		return false, errors.New("gpt: the partition entries' CRC does not match: not touching them")
	}
	backupEntries := last - uint64(entriesSectors)

	primary := bytes.Clone(hdr)
	le.PutUint64(primary[gptAlternate:], last)
	le.PutUint64(primary[gptLastUsable:], backupEntries-1)
	le.PutUint32(primary[gptHeaderCRC:], headerCRC(primary[:hsize]))
	backup := bytes.Clone(primary)
	le.PutUint64(backup[gptMyLBA:], last)
	le.PutUint64(backup[gptAlternate:], 1)
	le.PutUint64(backup[gptEntriesLBA:], backupEntries)
	le.PutUint32(backup[gptHeaderCRC:], headerCRC(backup[:hsize]))

	// The new backup first, then the primary that points at it, then the
	// old backup header erased: a crash in between leaves a valid table.
	for _, w := range []struct {
		data []byte
		at   int64
	}{
		{entries, int64(backupEntries) * sector},
		{backup, int64(last) * sector},
		{primary, sector},
		{make([]byte, sector), int64(alt) * sector},
	} {
		if _, err := rw.WriteAt(w.data, w.at); err != nil {
			return false, fmt.Errorf("gpt: %w", err)
		}
	}
	// The protective MBR covers the whole disk (or as much as 32 bits say).
	mbr := make([]byte, 512)
	if _, err := rw.ReadAt(mbr, 0); err == nil && mbr[510] == 0x55 && mbr[511] == 0xAA && mbr[mbrPartition0+4] == mbrTypeGPTProt {
		le.PutUint32(mbr[mbrPartition0+12:], uint32(min(last, 0xFFFFFFFF)))
		if _, err := rw.WriteAt(mbr, 0); err != nil {
			return false, fmt.Errorf("gpt: protective MBR: %w", err)
		}
	}
	return true, nil
}

// headerCRC is a GPT header's CRC32, its own field counted as zero.
func headerCRC(h []byte) uint32 {
	c := bytes.Clone(h)
	binary.LittleEndian.PutUint32(c[gptHeaderCRC:], 0)
	return crc32.ChecksumIEEE(c)
}
