package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/bootops/bootops/plan"
)

// encryptedImageToDisk is image-to-disk for an encrypted install: keys
// first (nothing is written without a TPM to seal to), the image through
// a cryptWriter, then the boot configuration that unlocks it, then the
// escrow event.
func (r *Runner) encryptedImageToDisk(ctx context.Context, s *step, f *os.File, disk string) error {
	enc := s.a.Encrypt
	keys, err := r.newCryptKeys(enc)
	if err != nil {
		return err
	}
	if err := r.closeCrypt(ctx); err != nil { // an earlier attempt's
		return err
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("size of %s: %w", disk, err)
	}
	if r.Swarm != nil {
		s.log("an encrypted install fetches its image from its URL: what it writes is ciphertext, nothing the other machines can use")
	}
	l := &luks{r: r, s: s, enc: enc, keys: keys, dev: plan.PartitionDevice(disk, enc.Partition)}
	w := &cryptWriter{ctx: ctx, l: l, disk: f, diskPath: disk, size: size, sector: sectorSize(disk)}
	_, err = r.imageFromURL(ctx, s, w, disk)
	if err == nil {
		err = w.Close()
	} else {
		w.abort()
	}
	if l.mapped != "" {
		r.crypt.mapped[enc.Partition] = l.mapped
	}
	if err != nil {
		return errors.Join(err, r.closeCrypt(ctx))
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("sync %s: %w", disk, err)
	}
	if err := r.bootUnlocks(s, w.table, disk, l); err != nil {
		return errors.Join(err, r.closeCrypt(ctx))
	}
	s.emit(plan.AgentEvent{Type: plan.AgentEscrow,
		Message: fmt.Sprintf("recovery key of partition %d (LUKS2 %s) encrypted to %d recipients", enc.Partition, l.uuid, len(enc.Recipients)),
		Escrow:  &plan.Escrow{Partition: enc.Partition, LUKSUUID: l.uuid, Recipients: enc.Recipients, Ciphertext: keys.escrow}})
	return nil
}

// closeCrypt closes the mappings an encrypted install opened (before the
// machine reboots, or before a retry makes the container anew).
func (r *Runner) closeCrypt(ctx context.Context) error {
	if r.crypt == nil {
		return nil
	}
	var errs []error
	for n, dev := range r.crypt.mapped {
		if out, err := r.Cryptsetup(ctx, nil, "close", filepath.Base(dev)); err != nil {
			errs = append(errs, fmt.Errorf("cryptsetup close %s: %w: %s", dev, err, strings.TrimSpace(string(out))))
			continue
		}
		delete(r.crypt.mapped, n)
	}
	return errors.Join(errs...)
}

// EncryptionState is what the agent leaves in the new system for its
// report script (FirstBootState): the container to seal anew at first
// boot, the PCRs to seal to, and the first-boot key's keyslot to remove.
type EncryptionState struct {
	Device        string `json:"device"` // /dev/disk/by-partuuid/…
	LUKSUUID      string `json:"luksUUID"`
	PCRs          []int  `json:"pcrs"`
	FirstBootSlot int    `json:"firstBootSlot"`
}

// FirstBootState is where EncryptionState is, in the new system.
const FirstBootState = "/var/lib/bootops/encryption.json"

// bootUnlocks makes the new system unlock its root: the kernel command
// line in the boot loader's configuration on the ESP (cryptopts= for
// cryptsetup-initramfs, root= to the mapping), /etc/fstab and
// /etc/crypttab in the root, and the state its first boot seals with.
func (r *Runner) bootUnlocks(s *step, t *gptTable, disk string, l *luks) error {
	p, _ := t.part(l.enc.Partition)
	partuuid := strings.ToLower(p.GUID)
	i := slices.IndexFunc(t.parts, func(p gptPart) bool { return p.Type == espType })
	if i < 0 {
		return permanentf("encryption: the image has no EFI system partition, where bootops sets the kernel command line that unlocks the root")
	}
	espDev := plan.PartitionDevice(disk, t.parts[i].Index)
	err := r.onDevice(espDev, "vfat", func(dir string) error {
		n, err := editBootConfigs(dir, partuuid)
		if err == nil && n == 0 {
			err = permanentf("encryption: no boot loader configuration on the ESP (grub.cfg, syslinux.cfg, extlinux.conf, loader/entries/*.conf) names root=: the image's initramfs would not know to unlock it")
		}
		if err == nil {
			s.log(fmt.Sprintf("set the kernel command line to unlock %s (PARTUUID %s) as %s in %d boot loader files on %s", l.dev, partuuid, plan.CryptName, n, espDev))
		}
		return err
	})
	if err != nil {
		return err
	}
	state, err := json.MarshalIndent(EncryptionState{Device: "/dev/disk/by-partuuid/" + partuuid, LUKSUUID: l.uuid, PCRs: l.enc.PCRs, FirstBootSlot: firstBootSlot}, "", "  ")
	if err != nil {
		return err
	}
	return r.onDevice(l.mapped, "ext4", func(dir string) error {
		fstab, err := os.ReadFile(filepath.Join(dir, "etc/fstab"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := writeIn(dir, "/etc/fstab", []byte(cryptFstab(string(fstab), partuuid)), 0o644); err != nil {
			return err
		}
		crypttab, err := os.ReadFile(filepath.Join(dir, "etc/crypttab"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := writeIn(dir, "/etc/crypttab", []byte(cryptCrypttab(string(crypttab), partuuid)), 0o644); err != nil {
			return err
		}
		return writeIn(dir, FirstBootState, append(state, '\n'), 0o600)
	})
}

// onDevice mounts dev (fstype) on a fresh folder, runs fn with that
// folder and unmounts it, also when fn fails.
func (r *Runner) onDevice(dev, fstype string, fn func(dir string) error) (err error) {
	dir, err := os.MkdirTemp("", "bootops-target-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := r.Mount(dev, fstype, dir); err != nil {
		return fmt.Errorf("mount %s (%s): %w", dev, fstype, err)
	}
	defer func() {
		if uerr := r.Unmount(dir); uerr != nil {
			err = errors.Join(err, fmt.Errorf("unmount %s: %w", dev, uerr))
		}
	}()
	return fn(dir)
}

// editBootConfigs rewrites the kernel command lines of the boot loader
// files under dir and says how many it changed.
func editBootConfigs(dir, partuuid string) (int, error) {
	dir, err := filepath.EvalSymlinks(dir) // walked from its real folder
	if err != nil {
		return 0, err
	}
	changed := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := strings.ToLower(d.Name())
		rel, _ := filepath.Rel(dir, p)
		isEntry := strings.HasPrefix(strings.ToLower(filepath.ToSlash(rel)), "loader/entries/") && strings.HasSuffix(name, ".conf")
		if name != "grub.cfg" && name != "syslinux.cfg" && name != "extlinux.conf" && !isEntry {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out, n := cryptCmdlines(string(b), partuuid)
		if n == 0 {
			return nil
		}
		changed++
		return writeIn(dir, "/"+filepath.ToSlash(rel), []byte(out), 0o644)
	})
	return changed, err
}

// cryptCmdlines rewrites every kernel command line in a boot loader file
// (a line with a root= word): a root= naming the partition itself
// (PARTUUID=, /dev/disk/by-partuuid/) becomes the mapping, one naming
// the filesystem inside (UUID=, LABEL=) stays, and cryptopts= tells
// cryptsetup-initramfs what to unlock. It says how many lines it changed.
func cryptCmdlines(text, partuuid string) (string, int) {
	lines := strings.SplitAfter(text, "\n")
	n := 0
	opts := "cryptopts=target=" + plan.CryptName + ",source=PARTUUID=" + partuuid + ",luks,discard"
	for i, line := range lines {
		words := strings.Fields(line)
		at := slices.IndexFunc(words, func(w string) bool { return strings.HasPrefix(w, "root=") })
		if at < 0 || slices.Contains(words, opts) {
			continue
		}
		v := strings.ToLower(strings.TrimPrefix(words[at], "root="))
		root := words[at]
		if v == "partuuid="+partuuid || v == "/dev/disk/by-partuuid/"+partuuid {
			root = "root=/dev/mapper/" + plan.CryptName
		}
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		end := line[len(strings.TrimRight(line, "\r\n")):]
		words = slices.Replace(words, at, at+1, root, opts)
		lines[i] = indent + strings.Join(words, " ") + end
		n++
	}
	return strings.Join(lines, ""), n
}

// cryptFstab points the fstab lines that mount the partition itself at
// the mapping.
func cryptFstab(text, partuuid string) string {
	lines := strings.SplitAfter(text, "\n")
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if v := strings.ToLower(f[0]); v == "partuuid="+partuuid || v == "/dev/disk/by-partuuid/"+partuuid {
			lines[i] = strings.Replace(line, f[0], "/dev/mapper/"+plan.CryptName, 1)
		}
	}
	return strings.Join(lines, "")
}

// cryptCrypttab names the container in /etc/crypttab (replacing an older
// line of the same name), so the OS's own initramfs builds keep it.
func cryptCrypttab(text, partuuid string) string {
	var out []string
	for _, line := range strings.SplitAfter(text, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == plan.CryptName {
			continue
		}
		if line != "" {
			out = append(out, line)
		}
	}
	if len(out) > 0 && !strings.HasSuffix(out[len(out)-1], "\n") {
		out[len(out)-1] += "\n"
	}
	out = append(out, fmt.Sprintf("%s PARTUUID=%s none luks,discard\n", plan.CryptName, partuuid))
	return strings.Join(out, "")
}
