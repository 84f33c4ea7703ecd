package media

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"

	"github.com/bootops/bootops/plan"
)

// The ISO: ISO 9660 with Rock Ridge, bootable by El Torito both ways —
// ISOLINUX for BIOS, an EFI system partition image (shim, GRUB) for UEFI —
// and hybrid (an MBR and a GPT besides), so the same file boots from a CD,
// a BMC's virtual media or written to a USB stick.

// ISO writes sp's ISO image to out.
func ISO(sp Spec, out string) error {
	if err := need([]loader{Shim, GRUB, MokManager, ISOLINUX, ISOHybrid, LDLinux}, "xorriso", "mformat", "mcopy", "mmd"); err != nil {
		return err
	}
	b, done, err := sp.scratch(out, plan.ChainMedia)
	if err != nil {
		return err
	}
	defer done()
	dir, all := b.dir, b.all
	// The UEFI chain in its own FAT image (El Torito's EFI entry); GRUB
	// finds the kernel on the ISO 9660 side by the medium's marker.
	efi := uefiFiles()
	efi["EFI/BOOT/grub.cfg"] = all["EFI/BOOT/grub.cfg"]
	efi["EFI/debian/grub.cfg"] = all["EFI/debian/grub.cfg"]
	n, err := treeSize(efi)
	if err != nil {
		return err
	}
	efiImg := filepath.Join(dir, "efi.img")
	if err := fatImage(efiImg, (n+n/8+1<<20+1<<20-1)&^(1<<20-1), efi, serial(b.mid), sp.Epoch); err != nil {
		return err
	}
	all["boot/efi.img"] = efiImg
	all["isolinux/isolinux.bin"] = ISOLINUX.path
	all["isolinux/ldlinux.c32"] = LDLinux.path
	delete(all, "EFI/BOOT/grub.cfg")
	delete(all, "EFI/debian/grub.cfg")
	args := []string{"-as", "mkisofs", "-o", out, "-quiet", "-R", "-V", "BOOTOPS", "-volid", "BOOTOPS",
		"-isohybrid-mbr", ISOHybrid.path,
		"-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat", "-no-emul-boot", "-boot-load-size", "4", "-boot-info-table",
		"-eltorito-alt-boot", "-e", "boot/efi.img", "-no-emul-boot", "-isohybrid-gpt-basdat",
		// Every file's date the epoch, whatever its file's here.
		"--set_all_file_dates", fmt.Sprintf("=%d", sp.Epoch.Unix()),
		"-graft-points"}
	var paths []string
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		args = append(args, p+"="+all[p])
	}
	cmd := exec.Command("xorriso", args...)
	// xorriso takes the volume's dates and UUID from SOURCE_DATE_EPOCH.
	cmd.Env = append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", sp.Epoch.Unix()))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("media: xorriso: %v: %s", err, b)
	}
	return nil
}
