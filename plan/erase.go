package plan

import (
	"fmt"
	"slices"
	"time"
)

// Retire is a node taken out of service in Git (a Node's retire): booted
// into the Micro-OS, every disk not kept is erased and verified, the
// machine powers off, and it is never installed while Git says so.
type Retire struct {
	// Erase is the strength asked for: EraseClear, ErasePurge, or
	// EraseNone (retired without touching its disks).
	Erase string `json:"erase"`
	// Keep are the serials of disks left as they are (data disks).
	Keep []string `json:"keep,omitempty"`
}

// ActionEraseDisks is a retirement's erase: never in a profile's workflow,
// only in the one the server gives a node Git retires.
const ActionEraseDisks = "erase-disks"

// What a retirement's erase asks for, and a disk's erase achieved: NIST SP
// 800-88's classes. Clear overwrites what the host can address; purge also
// what it cannot (spare blocks, remapped sectors) by the device's own
// sanitize: a crypto erase, an NVMe format or sanitize, an ATA security
// erase.
const (
	EraseNone  = "none"
	EraseClear = "clear"
	ErasePurge = "purge"
)

// DiskErasure is what the erase of one disk did, for its certificate.
type DiskErasure struct {
	// The disk, as the agent reads it (and the node's inventory had it).
	Disk DiskInfo `json:"disk"`
	// Method is what was done ("nvme format: crypto erase (SES=2)",
	// "ata security erase (enhanced)", "write zeroes (BLKZEROOUT)",
	// "overwrite with zeroes"); Class its NIST class (clear or purge).
	Method string `json:"method"`
	Class  string `json:"class"`
	// Note says why the method is weaker than asked for, or what was
	// tried first and failed ("" when none).
	Note  string    `json:"note,omitempty"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Verification: how many samples across the disk were read back
	// after the erase, and what they showed; Verified when every sample
	// reads as erased (zeroes, or changed from what it held before for
	// a crypto erase).
	Samples      int    `json:"samples"`
	Verification string `json:"verification"`
	Verified     bool   `json:"verified"`
	// Error is why the erase did not complete ("" when it did).
	Error string `json:"error,omitempty"`
}

// Line is the erase of one disk in a line, for timelines and consoles.
func (e DiskErasure) Line() string {
	d := e.Disk
	if e.Error != "" {
		return fmt.Sprintf("%s (%s, serial %s): not erased: %s", d.Name, d.Model, d.Serial, e.Error)
	}
	line := fmt.Sprintf("%s (%s, serial %s, %d bytes): %s, NIST %s, %s in %s", d.Name, d.Model, d.Serial, d.Size, e.Method, e.Class,
		e.Verification, e.End.Sub(e.Start).Round(time.Millisecond))
	if e.Note != "" {
		line += " (" + e.Note + ")"
	}
	return line
}

// EraseCertificate is what a retired node's erase did, as the site's
// server signs it (trust.Record of kind trust.KindEraseCertificate): the
// node and the machine Git says it is, what Git asked, each disk's record.
type EraseCertificate struct {
	Site    string   `json:"site"`
	Node    string   `json:"node"`
	Machine Identity `json:"machine"`
	// Erase and Keep are the retirement Git asked for; Revision the Git
	// revision the server served then.
	Erase    string        `json:"erase"`
	Keep     []string      `json:"keep,omitempty"`
	Revision string        `json:"revision,omitempty"`
	Disks    []DiskErasure `json:"disks"`
	// Retired is when the agent said every disk was erased and verified.
	Retired time.Time `json:"retired"`
}

// DisksDiffer says how the disks a machine has differ from a node's
// inventory on record, kept serials aside: a disk it has that the record
// lacks (by serial and size), or one the record has that it lacks; ""
// when they do not. A retirement erases nothing then.
func DisksDiffer(record, have []DiskInfo, keep []string) string {
	key := func(d DiskInfo) string { return fmt.Sprintf("%s/%d", d.Serial, d.Size) }
	index := func(ds []DiskInfo) map[string]bool {
		out := map[string]bool{}
		for _, d := range ds {
			out[key(d)] = true
		}
		return out
	}
	kept := func(d DiskInfo) bool { return d.Serial != "" && slices.Contains(keep, d.Serial) }
	was, now := index(record), index(have)
	for _, d := range have {
		if !kept(d) && !was[key(d)] {
			return fmt.Sprintf("disk %s (serial %s, %d bytes) is not in the node's inventory on record", d.Name, d.Serial, d.Size)
		}
	}
	for _, d := range record {
		if !kept(d) && !now[key(d)] {
			return fmt.Sprintf("disk %s (serial %s) of the node's inventory on record is not in this machine", d.Name, d.Serial)
		}
	}
	return ""
}
