package media

import (
	"fmt"
	"os"
	"os/exec"
)

// The boot loaders a medium carries, from Debian's packages: shim signed
// by Microsoft's UEFI CA, GRUB signed by Debian (shim trusts Debian's
// key; GRUB checks the kernel against it), ISOLINUX for BIOS.
var (
	Shim        = loader{"/usr/lib/shim/shimx64.efi.signed", "shim-signed"}
	MokManager  = loader{"/usr/lib/shim/mmx64.efi.signed", "shim-signed"}
	GRUB        = loader{"/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed", "grub-efi-amd64-signed"}
	ISOLINUX    = loader{"/usr/lib/ISOLINUX/isolinux.bin", "isolinux"}
	ISOHybrid   = loader{"/usr/lib/ISOLINUX/isohdpfx.bin", "isolinux"}
	LDLinux     = loader{"/usr/lib/syslinux/modules/bios/ldlinux.c32", "syslinux-common"}
	toolPackage = map[string]string{"xorriso": "xorriso", "mformat": "mtools", "mcopy": "mtools", "mmd": "mtools", "objcopy": "binutils"}
)

// loader is a boot loader's file and the Debian package that ships it.
type loader struct{ path, pkg string }

// need checks that the loaders and tools are installed, naming the Debian
// packages of those that are not.
func need(loaders []loader, tools ...string) error {
	for _, l := range loaders {
		if _, err := os.Stat(l.path); err != nil {
			return fmt.Errorf("media: %s is missing: install the Debian package %s", l.path, l.pkg)
		}
	}
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("media: %s is missing: install the Debian package %s", t, toolPackage[t])
		}
	}
	return nil
}

// uefiFiles are the UEFI chain's files on a medium: shim as the removable
// media path's loader, GRUB and MokManager beside it.
func uefiFiles() tree {
	return tree{
		"EFI/BOOT/BOOTX64.EFI": Shim.path,
		"EFI/BOOT/grubx64.efi": GRUB.path,
		"EFI/BOOT/mmx64.efi":   MokManager.path,
	}
}
