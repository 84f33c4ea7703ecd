// Package media makes boot media for machines no boot server answers on
// their LAN: an edge node in a store, a cell site or a kiosk. From a
// compiled Plan, the site's (or one node's) Micro-OS and the site CA it
// writes
//
//   - a hybrid ISO: ISOLINUX for BIOS, shim and GRUB (signed by Microsoft
//     and Debian) for UEFI with or without Secure Boot, bootable from a CD,
//     a BMC's virtual media or a USB stick;
//   - a raw USB disk image: GPT with one EFI system partition holding the
//     same UEFI chain;
//   - a unified kernel image for the firmware's HTTPS boot URL.
//
// Each carries the Micro-OS's kernel and initrd, and a small second initrd
// with the agent's settings: the server's https URL, the site and its CA,
// and the node's static network when Git gives it one. None carries a
// secret: no token, no key, no user-data. A medium is a function of its
// inputs; the same commit gives the same bytes (every date is the epoch
// given, every identifier derived from the contents).
//
// The tools are Debian's: xorriso and isolinux (ISO), mtools (FAT),
// shim-signed, grub-efi-amd64-signed, syslinux-common, binutils (UKI).
package media
