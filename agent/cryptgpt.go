package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The GPT work of an encrypted install. The image's last partition goes
// into LUKS2, whose header (16 MiB) comes before the data: the partition
// must grow by at least that much, so it is grown to the end of the disk
// in the image's own table, in the bytes streaming past, before anything
// reaches the disk. The image's backup table, which lies after that
// partition, is never written (it would land in the encrypted data): a
// new one goes to the disk's end.

// gptPart is one partition of a GPT, with its GUIDs in their usual text
// form.
type gptPart struct {
	Index       int // 1-based, as the kernel numbers partitions
	Type, GUID  string
	First, Last uint64 // LBAs, inclusive
}

// espType is the EFI system partition's type GUID.
const espType = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"

// guidString reads a GPT's mixed-endian GUID.
func guidString(b []byte) string {
	le := binary.LittleEndian
	return fmt.Sprintf("%08X-%04X-%04X-%X-%X", le.Uint32(b), le.Uint16(b[4:]), le.Uint16(b[6:]), b[8:10], b[10:16])
}

// gptTable is a primary GPT as found in the first bytes of an image.
type gptTable struct {
	head          []byte // the image's first bytes, header and entries inside
	sector        int64
	hdr           []byte // the header's sector, within head
	hsize         int64
	entriesOff    int64 // byte offset of the entries
	count, esize  int64
	parts         []gptPart
	lastPartition int // the index of the partition that ends last
}

// readGPT reads the primary GPT out of head, the image's first bytes.
func readGPT(head []byte, sector int64) (*gptTable, error) {
	if int64(len(head)) < 2*sector || string(head[sector:sector+8]) != gptSignature {
		return nil, errors.New("the image has no GPT (an encrypted install needs one)")
	}
	le := binary.LittleEndian
	t := &gptTable{head: head, sector: sector, hdr: head[sector : 2*sector]}
	t.hsize = int64(le.Uint32(t.hdr[12:]))
	if t.hsize < gptMinHdrSize || t.hsize > sector || headerCRC(t.hdr[:t.hsize]) != le.Uint32(t.hdr[gptHeaderCRC:]) {
		return nil, errors.New("the image's GPT header is damaged (size or CRC)")
	}
	t.entriesOff = int64(le.Uint64(t.hdr[gptEntriesLBA:])) * sector
	t.count, t.esize = int64(le.Uint32(t.hdr[gptEntryCount:])), int64(le.Uint32(t.hdr[gptEntrySize:]))
	if t.esize < 128 || t.count > 1024 || t.entriesOff+t.count*t.esize > int64(len(head)) {
		return nil, fmt.Errorf("the image's GPT entries (%d of %d bytes at %d) are not within its first %d bytes", t.count, t.esize, t.entriesOff, len(head))
	}
	entries := t.entries()
	if crc32.ChecksumIEEE(entries) != le.Uint32(t.hdr[gptEntriesCRC:]) {
		return nil, errors.New("the image's GPT entries are damaged (CRC)")
	}
	var end uint64
	for i := range t.count {
		e := entries[i*t.esize : (i+1)*t.esize]
		if isZero(e[:16]) {
			continue
		}
		p := gptPart{Index: int(i) + 1, Type: guidString(e[:16]), GUID: guidString(e[16:32]), First: le.Uint64(e[32:]), Last: le.Uint64(e[40:])}
		t.parts = append(t.parts, p)
		if p.Last >= end {
			end, t.lastPartition = p.Last, p.Index
		}
	}
	return t, nil
}

func (t *gptTable) entries() []byte { return t.head[t.entriesOff : t.entriesOff+t.count*t.esize] }

func (t *gptTable) part(index int) (gptPart, bool) {
	for _, p := range t.parts {
		if p.Index == index {
			return p, true
		}
	}
	return gptPart{}, false
}

// growToEnd makes partition index end where a disk of size bytes lets it,
// in head (the primary header and entries), and returns the backup
// entries and header to write at the disk's end, and their offset.
func (t *gptTable) growToEnd(index int, size int64) (backup []byte, at int64, err error) {
	le := binary.LittleEndian
	last := uint64(size/t.sector) - 1
	entriesSectors := (t.count*t.esize + t.sector - 1) / t.sector
	backupEntries := last - uint64(entriesSectors)
	lastUsable := backupEntries - 1
	p, ok := t.part(index)
	if !ok {
		return nil, 0, fmt.Errorf("the image has no partition %d", index)
	}
	if p.Last > lastUsable {
		return nil, 0, fmt.Errorf("partition %d ends at sector %d, past the disk's last usable one (%d): the disk is smaller than the image", index, p.Last, lastUsable)
	}
	entries := t.entries()
	le.PutUint64(entries[int64(index-1)*t.esize+40:], lastUsable)
	le.PutUint32(t.hdr[gptEntriesCRC:], crc32.ChecksumIEEE(entries))
	le.PutUint64(t.hdr[gptAlternate:], last)
	le.PutUint64(t.hdr[gptLastUsable:], lastUsable)
	le.PutUint32(t.hdr[gptHeaderCRC:], headerCRC(t.hdr[:t.hsize]))

	backup = make([]byte, (entriesSectors+1)*t.sector)
	copy(backup, entries)
	bh := backup[entriesSectors*t.sector:]
	copy(bh, t.hdr)
	le.PutUint64(bh[gptMyLBA:], last)
	le.PutUint64(bh[gptAlternate:], 1)
	le.PutUint64(bh[gptEntriesLBA:], backupEntries)
	le.PutUint32(bh[gptHeaderCRC:], headerCRC(bh[:t.hsize]))

	// The protective MBR covers the whole disk (or what 32 bits say).
	if mbr := t.head[:512]; mbr[510] == 0x55 && mbr[511] == 0xAA && mbr[mbrPartition0+4] == mbrTypeGPTProt {
		le.PutUint32(mbr[mbrPartition0+12:], uint32(min(last, 0xFFFFFFFF)))
	}
	return backup, int64(backupEntries) * t.sector, nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
