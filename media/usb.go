package media

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"unicode/utf16"

	"github.com/bootops/bootops/plan"
)

// The USB image: a GPT disk with one EFI system partition that holds the
// UEFI chain (shim, GRUB), the Micro-OS and its settings. Written whole
// with dd or any image writer; it boots on UEFI machines, with Secure Boot
// on or off. (BIOS machines boot the ISO, which is hybrid.)

const (
	sector     = 512
	espStart   = 2048 // LBA: 1 MiB, where partitioning tools align
	gptEntries = 128
	entrySize  = 128
	tailLBAs   = 33 // the backup entries (32 sectors) and header
)

// espType is the EFI system partition's type GUID
// (C12A7328-F81F-11D2-BA4B-00A0C93EC93B) as it is stored.
var espType = [16]byte{0x28, 0x73, 0x2a, 0xc1, 0x1f, 0xf8, 0xd2, 0x11, 0xba, 0x4b, 0x00, 0xa0, 0xc9, 0x3e, 0xc9, 0x3b}

// USB writes sp's USB disk image to out.
func USB(sp Spec, out string) error {
	if err := need([]loader{Shim, GRUB, MokManager}, "mformat", "mcopy", "mmd"); err != nil {
		return err
	}
	b, done, err := sp.scratch(out, plan.ChainMedia)
	if err != nil {
		return err
	}
	defer done()
	dir, all, mid := b.dir, b.all, b.mid
	files := uefiFiles()
	for _, p := range []string{"bootops/vmlinuz", "bootops/initrd", "bootops/media.img", "bootops/id-" + mid,
		"bootops/README.txt", "bootops/credential.txt", "EFI/BOOT/grub.cfg", "EFI/debian/grub.cfg"} {
		files[p] = all[p]
	}
	n, err := treeSize(files)
	if err != nil {
		return err
	}
	// Room for the file system's own tables and a credential, in MiB.
	espBytes := (n + n/16 + 16<<20 + 1<<20 - 1) &^ (1<<20 - 1)
	esp := filepath.Join(dir, "esp.img")
	if err := fatImage(esp, espBytes, files, serial(mid), sp.Epoch); err != nil {
		return err
	}
	return writeGPT(out, esp, espBytes, mid)
}

// serial is the FAT volume serial of a medium, from its marker.
func serial(mid string) uint32 {
	s := sha256.Sum256([]byte("fat\x00" + mid))
	return binary.LittleEndian.Uint32(s[:4])
}

// guid is a version-4-shaped GUID derived from seed, in its stored byte
// order: the same medium gets the same disk and partition GUIDs.
func guid(seed string) [16]byte {
	s := sha256.Sum256([]byte(seed))
	var g [16]byte
	copy(g[:], s[:16])
	g[7] = g[7]&0x0f | 0x40
	g[8] = g[8]&0x3f | 0x80
	return g
}

// ESPOffset is where the EFI system partition starts in a USB image
// (bootops media credential writes into it there).
const ESPOffset = espStart * sector

// writeGPT writes out: a protective MBR, the GPT, the partition esp
// (espBytes) and the backup GPT at the end.
func writeGPT(out, esp string, espBytes int64, mid string) error {
	espLBAs := uint64(espBytes / sector)
	total := espStart + espLBAs + 2048 // 1 MiB after the partition: room for the backup GPT
	last := total - 1
	entries := make([]byte, gptEntries*entrySize)
	copy(entries[0:16], espType[:])
	pg := guid("partition\x00" + mid)
	copy(entries[16:32], pg[:])
	binary.LittleEndian.PutUint64(entries[32:], espStart)
	binary.LittleEndian.PutUint64(entries[40:], espStart+espLBAs-1)
	for i, r := range utf16.Encode([]rune("EFI system partition")) {
		binary.LittleEndian.PutUint16(entries[56+2*i:], r)
	}
	dg := guid("disk\x00" + mid)
	primary := gptHeader(1, last, 2, last-tailLBAs, dg, entries)
	backup := gptHeader(last, 1, last-tailLBAs+1, last-tailLBAs, dg, entries)

	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("media: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(int64(total * sector)); err != nil {
		return err
	}
	writes := []struct {
		at uint64
		b  []byte
	}{{0, protectiveMBR(total)}, {1, primary}, {2, entries}, {last - tailLBAs + 1, entries}, {last, backup}}
	for _, w := range writes {
		if _, err := f.WriteAt(w.b, int64(w.at*sector)); err != nil {
			return fmt.Errorf("media: %w", err)
		}
	}
	src, err := os.Open(esp)
	if err != nil {
		return err
	}
	defer src.Close()
	if _, err := io.Copy(io.NewOffsetWriter(f, ESPOffset), src); err != nil {
		return fmt.Errorf("media: %w", err)
	}
	return f.Close()
}

// gptHeader is a GPT header at LBA my, its twin at alt, its entries at
// entriesAt, usable sectors up to lastUsable (UEFI 2.10, 5.3.2).
func gptHeader(my, alt, entriesAt, lastUsable uint64, disk [16]byte, entries []byte) []byte {
	h := make([]byte, sector)
	copy(h, "EFI PART")
	binary.LittleEndian.PutUint32(h[8:], 0x00010000)
	binary.LittleEndian.PutUint32(h[12:], 92)
	binary.LittleEndian.PutUint64(h[24:], my)
	binary.LittleEndian.PutUint64(h[32:], alt)
	binary.LittleEndian.PutUint64(h[40:], 34)
	binary.LittleEndian.PutUint64(h[48:], lastUsable)
	copy(h[56:72], disk[:])
	binary.LittleEndian.PutUint64(h[72:], entriesAt)
	binary.LittleEndian.PutUint32(h[80:], gptEntries)
	binary.LittleEndian.PutUint32(h[84:], entrySize)
	binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(entries))
	binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))
	return h
}

// protectiveMBR covers the disk with one partition of type 0xEE, so tools
// that know only MBR see it in use.
func protectiveMBR(total uint64) []byte {
	m := make([]byte, sector)
	e := m[446:]
	e[1], e[2], e[3] = 0x00, 0x02, 0x00 // CHS of LBA 1
	e[4] = 0xee
	e[5], e[6], e[7] = 0xff, 0xff, 0xff
	binary.LittleEndian.PutUint32(e[8:], 1)
	binary.LittleEndian.PutUint32(e[12:], uint32(min(total-1, 0xffffffff)))
	m[510], m[511] = 0x55, 0xaa
	return m
}

// AddCredential writes node's media credential into the EFI partition of
// a USB image made by USB, as bootops/credential.cfg: GRUB reads it and
// puts it on the Micro-OS's kernel command line. Any earlier one is
// replaced.
func AddCredential(img, node, credential string) error {
	if err := need(nil, "mcopy"); err != nil {
		return err
	}
	for _, s := range []string{node, credential} {
		if strings.ContainsAny(s, "\"'$\\ \n;") {
			return fmt.Errorf("media: %q cannot go into a GRUB config", s)
		}
	}
	f, err := os.CreateTemp("", "credential-*.cfg")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	fmt.Fprintf(f, "# media credential of node %s: single-use, expiring\nset bootops_credential=\"bootops.node=%s bootops.token=%s\"\n", node, node, credential)
	if err := f.Close(); err != nil {
		return err
	}
	cmd := exec.Command("mcopy", "-o", "-i", fmt.Sprintf("%s@@%d", img, ESPOffset), f.Name(), "::/bootops/credential.cfg")
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("media: writing the credential into %s: %v: %s (is it an image made by bootops media usb?)", img, err, b)
	}
	return nil
}
