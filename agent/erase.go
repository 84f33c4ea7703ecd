package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootops/bootops/plan"
)

// A retired node's disks are erased with the strongest method each offers
// for the class asked for (plan.Retire), then verified by reading samples
// across the disk back:
//
//   - purge: an NVMe namespace is formatted with a crypto erase (SES=2) when
//     its controller says it can, else a user-data erase (SES=1); an ATA
//     disk gets a security erase (enhanced when it has one). Both are NIST
//     Purge: they reach what the host cannot address. A disk that offers
//     neither, or refuses, is cleared instead, and its record says so.
//   - clear: the whole disk is written with zeroes, by the kernel's write
//     zeroes (BLKZEROOUT, which a device may do without the data crossing
//     the bus), else by writing them.
//
// The tools are Debian's: nvme-cli and hdparm, in the Micro-OS.
type eraser struct {
	// Exec runs a tool (nvme, hdparm) and gives its output.
	Exec func(ctx context.Context, argv ...string) ([]byte, error)
	// ZeroOut writes zeroes over [off, off+n) of f with BLKZEROOUT; an
	// error (a file, an old kernel) falls back to writing them.
	ZeroOut func(f *os.File, off, n int64) error
	Now     func() time.Time
	// Progress is told how far an overwrite is (may be nil).
	Progress func(done, total int64)
}

// eraseSamples is how many blocks of sampleSize are read back across a
// disk, before and after.
const (
	eraseSamples = 64
	sampleSize   = 4096
)

// erase erases disk d at path, as class asks (plan.ErasePurge or
// plan.EraseClear), and says what it did.
func (e eraser) erase(ctx context.Context, d plan.DiskInfo, path, class string) (rec plan.DiskErasure) {
	rec = plan.DiskErasure{Disk: d, Start: e.Now().UTC()}
	defer func() { rec.End = e.Now().UTC() }()
	before, err := samples(path, d.Size)
	if err != nil {
		rec.Error = "read the disk before erasing it: " + err.Error()
		return rec
	}
	var notes []string
	done := false
	if class == plan.ErasePurge {
		var how, why string
		switch {
		case d.Transport == "nvme" || strings.HasPrefix(filepath.Base(path), "nvme"):
			how, why = e.nvmeFormat(ctx, path)
		case d.Transport == "sata" || d.Transport == "ata" || d.Transport == "sas":
			how, why = e.ataSecurityErase(ctx, path)
		default:
			why = "a " + or(d.Transport, "disk") + " offers no sanitize of its own"
		}
		if how != "" {
			rec.Method, rec.Class, done = how, plan.ErasePurge, true
		} else {
			notes = append(notes, "purge not available: "+why+"; cleared instead")
		}
	}
	if !done {
		how, err := e.zero(path, d.Size)
		if err != nil {
			rec.Error = err.Error()
			rec.Note = strings.Join(notes, "; ")
			return rec
		}
		rec.Method, rec.Class = how, plan.EraseClear
	}
	rec.Note = strings.Join(notes, "; ")
	after, err := samples(path, d.Size)
	if err != nil {
		rec.Error = "read the disk back: " + err.Error()
		return rec
	}
	rec.Samples = len(after)
	rec.Verification, rec.Verified = verifyErased(before, after, rec.Class == plan.ErasePurge)
	if !rec.Verified {
		rec.Error = "verification failed: " + rec.Verification
	}
	return rec
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// sample is one block read from a disk: where, its hash, whether zero.
type sample struct {
	off  int64
	sum  [32]byte
	zero bool
}

// samples reads eraseSamples blocks spread across the disk's size (the
// first and the last included), past the page cache where the disk
// allows it.
func samples(path string, size int64) ([]sample, error) {
	f, _, err := openDirect(path, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dropCache(f, size)
	blocks := size / sampleSize
	if blocks <= 0 {
		return nil, fmt.Errorf("%s: %d bytes, too small to erase", path, size)
	}
	n := min(int64(eraseSamples), blocks)
	buf := alignedBuffer(sampleSize)
	zero := make([]byte, sampleSize)
	var out []sample
	for i := range n {
		blk := int64(0)
		if n > 1 {
			blk = i * (blocks - 1) / (n - 1)
		}
		off := blk * sampleSize
		if _, err := f.ReadAt(buf, off); err != nil {
			return nil, fmt.Errorf("read %s at %d: %w", path, off, err)
		}
		out = append(out, sample{off: off, sum: sha256.Sum256(buf), zero: bytes.Equal(buf, zero)})
	}
	return out, nil
}

// verifyErased compares the samples after an erase with those before: each
// must read as zeroes, or — after a purge, whose crypto erase leaves
// noise — differ from what it held. A sample that held data and still
// does fails it.
func verifyErased(before, after []sample, purge bool) (string, bool) {
	zero, changed, kept := 0, 0, 0
	for i, a := range after {
		switch {
		case a.zero:
			zero++
		case purge && i < len(before) && a.sum != before[i].sum:
			changed++
		default:
			kept++
		}
	}
	s := fmt.Sprintf("%d samples of %d bytes read back: %d zero", len(after), sampleSize, zero)
	if changed > 0 {
		s += fmt.Sprintf(", %d changed beyond recognition", changed)
	}
	if kept > 0 {
		s += fmt.Sprintf(", %d still holding data", kept)
	}
	return s, kept == 0 && len(after) > 0
}

// zero writes zeroes over the whole disk: BLKZEROOUT, else plain writes;
// fdatasync at the end.
func (e eraser) zero(path string, size int64) (string, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if e.ZeroOut != nil && e.ZeroOut(f, 0, size) == nil {
		return "write zeroes (BLKZEROOUT)", f.Sync()
	}
	buf := make([]byte, diskChunk)
	for off := int64(0); off < size; off += int64(len(buf)) {
		n := min(int64(len(buf)), size-off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return "", fmt.Errorf("overwrite %s at %d: %w", path, off, err)
		}
		if e.Progress != nil {
			e.Progress(off+n, size)
		}
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("overwrite %s: %w", path, err)
	}
	return "overwrite with zeroes", nil
}

// nvmeFormat formats namespace path (/dev/nvme0n1) with a crypto erase if
// its controller offers one (Format NVM attributes, bit 2), else a
// user-data erase; "" and why when it cannot.
func (e eraser) nvmeFormat(ctx context.Context, path string) (how, why string) {
	ctrl := nvmeController(path)
	out, err := e.Exec(ctx, "nvme", "id-ctrl", ctrl, "--output-format=json")
	if err != nil {
		return "", "nvme id-ctrl " + ctrl + ": " + firstLine(err, out)
	}
	var id struct {
		OACS int `json:"oacs"`
		FNA  int `json:"fna"`
	}
	if err := json.Unmarshal(out, &id); err != nil {
		return "", "nvme id-ctrl " + ctrl + ": " + err.Error()
	}
	if id.OACS&0x2 == 0 {
		return "", "the controller does not support Format NVM"
	}
	ses, what := "1", "user-data erase (SES=1)"
	if id.FNA&0x4 != 0 {
		ses, what = "2", "crypto erase (SES=2)"
	}
	if out, err := e.Exec(ctx, "nvme", "format", path, "--ses="+ses, "--force"); err != nil {
		return "", "nvme format --ses=" + ses + ": " + firstLine(err, out)
	}
	return "nvme format: " + what, ""
}

// nvmeController is the controller of namespace path: /dev/nvme0n1 →
// /dev/nvme0.
func nvmeController(path string) string {
	base := filepath.Base(path)
	if i := strings.LastIndexByte(base, 'n'); i > len("nvme") {
		return filepath.Join(filepath.Dir(path), base[:i])
	}
	return path
}

// ataSecurityErase erases an ATA disk with its security erase (hdparm):
// enhanced when offered. The disk must offer the feature set and not be
// frozen (firmware freezes it at boot: a suspend and resume thaws it).
func (e eraser) ataSecurityErase(ctx context.Context, path string) (how, why string) {
	out, err := e.Exec(ctx, "hdparm", "-I", path)
	if err != nil {
		return "", "hdparm -I: " + firstLine(err, out)
	}
	sec := ataSecurity(string(out))
	switch {
	case !sec["supported"]:
		return "", "the disk does not offer the ATA security feature set"
	case sec["frozen"]:
		return "", "the disk's security is frozen (the firmware froze it at boot)"
	case sec["enabled"] || sec["locked"]:
		return "", "the disk has a security password set already"
	}
	const pass = "bootops-erase"
	if out, err := e.Exec(ctx, "hdparm", "--user-master", "u", "--security-set-pass", pass, path); err != nil {
		return "", "hdparm --security-set-pass: " + firstLine(err, out)
	}
	flag, what := "--security-erase", "ata security erase"
	if sec["enhanced erase"] {
		flag, what = "--security-erase-enhanced", "ata security erase (enhanced)"
	}
	if out, err := e.Exec(ctx, "hdparm", "--user-master", "u", flag, pass, path); err != nil {
		// Not left locked with our password.
		e.Exec(ctx, "hdparm", "--user-master", "u", "--security-disable", pass, path)
		return "", "hdparm " + flag + ": " + firstLine(err, out)
	}
	return what, ""
}

// ataSecurity reads the Security section of hdparm -I: which of
// supported, enabled, locked, frozen and "enhanced erase" it says (a
// "not" before a word says it is not).
func ataSecurity(out string) map[string]bool {
	got := map[string]bool{}
	_, sec, ok := strings.Cut(out, "\nSecurity:")
	if !ok {
		return got
	}
	for _, line := range strings.Split(sec, "\n")[1:] {
		t := strings.TrimSpace(line)
		if t == "" || !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " ") {
			break // the next section
		}
		f := strings.Fields(t)
		switch {
		case len(f) == 2 && f[0] == "not":
			got[f[1]] = false
		case len(f) == 1:
			got[f[0]] = true
		case strings.HasPrefix(t, "supported: enhanced erase"):
			got["enhanced erase"] = true
		}
	}
	return got
}

// firstLine is an error and the first line of a tool's output.
func firstLine(err error, out []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if line == "" {
		return err.Error()
	}
	var ee interface{ ExitCode() int }
	if errors.As(err, &ee) {
		return fmt.Sprintf("%s (exit %d)", line, ee.ExitCode())
	}
	return line + " (" + err.Error() + ")"
}

// eraseDisks is the erase-disks action: the machine's disks must be the
// action's (as the node's inventory on record has them: serial, size)
// besides the kept ones, or nothing is erased; then each is erased and
// verified in turn, its record reported (an erased event). A disk whose
// erase fails fails the action once the others are done.
func (r *Runner) eraseDisks(ctx context.Context, s *step) error {
	list := r.DiskInventory
	if list == nil {
		list = defaultDiskInventory
	}
	have, paths, err := list()
	if err != nil {
		return permanentf("list the disks: %v", err)
	}
	todo, why := eraseTargets(have, s.a.Disks, s.a.Keep)
	if why != "" {
		return permanentf("nothing erased: %s", why)
	}
	tools := r.Tools
	if tools == nil {
		tools = runTool
	}
	e := eraser{Exec: tools, ZeroOut: zeroOut, Now: r.Now}
	var failed []string
	for _, d := range todo {
		began := r.Now()
		e.Progress = func(done, total int64) { s.progress(began, done, total, done == total) }
		rec := e.erase(ctx, d, paths[d.Name], s.a.Erase)
		s.emit(plan.AgentEvent{Type: plan.AgentErased, Erasure: &rec, Message: rec.Line()})
		if rec.Error != "" {
			failed = append(failed, d.Name+": "+rec.Error)
		}
	}
	if len(failed) > 0 {
		return permanentf("%s", strings.Join(failed, "; "))
	}
	return nil
}

// eraseTargets checks the machine's disks (have) against the action's
// (want, from the inventory on record) and the kept serials: it gives the
// disks to erase, or why none may be. A kept disk is never one; every disk
// not kept must be one the record has, with its serial and size; every
// disk the record has must be here; a kept serial must be here too (a
// machine without its data disk may be another machine).
func eraseTargets(have, want []plan.DiskInfo, keep []string) ([]plan.DiskInfo, string) {
	kept := map[string]bool{}
	for _, k := range keep {
		kept[k] = true
	}
	for _, d := range want {
		if kept[d.Serial] && d.Serial != "" {
			return nil, fmt.Sprintf("disk %s (serial %s) is both kept and to erase", d.Name, d.Serial)
		}
	}
	if why := plan.DisksDiffer(want, have, keep); why != "" {
		return nil, why
	}
	found := map[string]bool{}
	var todo []plan.DiskInfo
	for _, d := range have {
		switch {
		case d.Serial != "" && kept[d.Serial]:
			found["keep:"+d.Serial] = true
		case d.Serial == "":
			return nil, fmt.Sprintf("disk %s has no serial: it cannot be matched to the node's inventory", d.Name)
		default:
			todo = append(todo, d)
		}
	}
	for _, k := range keep {
		if !found["keep:"+k] {
			return nil, fmt.Sprintf("kept disk %s is not in this machine: is it the node's?", k)
		}
	}
	return todo, ""
}

// defaultDiskInventory is the machine's disks as its inventory reads them,
// each at /dev/<name>.
func defaultDiskInventory() ([]plan.DiskInfo, map[string]string, error) {
	inv, err := Inventory("/")
	if err != nil {
		return nil, nil, err
	}
	paths := map[string]string{}
	for _, d := range inv.Disks {
		paths[d.Name] = "/dev/" + d.Name
	}
	return inv.Disks, paths, nil
}

// runTool runs a tool of the Micro-OS (nvme, hdparm) and gives what it
// printed.
func runTool(ctx context.Context, argv ...string) ([]byte, error) {
	return exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
}
