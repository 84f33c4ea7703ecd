package microos

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// Options says what goes into the Micro-OS.
type Options struct {
	// Arch is the processor family it is for: ArchX86_64 (default) or
	// ArchARM64. The kernel, busybox, the agent and the tools must all be
	// built for it (Build checks each).
	Arch string
	// Kernel is the kernel image, e.g. /boot/vmlinuz-6.1.0-56-amd64.
	Kernel string
	// Modules is the kernel's modules folder, holding modules.dep; default
	// /lib/modules/<version>, the version taken from the kernel's file name
	// vmlinuz-<version>.
	Modules string
	// Busybox is a static busybox; default /bin/busybox (Debian package
	// busybox-static).
	Busybox string
	// Agent is the static bootops-agent binary.
	Agent string
	// Load names the modules /init loads, with what they depend on; nil
	// means DefaultModules. Names match with '-' and '_' alike.
	Load []string
	// Tools are host programs built in with their shared libraries; nil
	// means DefaultTools.
	Tools []Tool
	// Root is the host's root the tools and libraries are read under
	// (default "/").
	Root string
	// Config, when set, is built in as the agent's settings
	// (trust.ConfigPath): its server, site CA and overlay keys.
	Config *trust.Config
}

// DefaultBusybox is where Debian's busybox-static installs busybox.
const DefaultBusybox = "/bin/busybox"

// DefaultModules are the modules a generic distribution kernel (Debian's
// linux-image-amd64) needs to reach the network and the disks of common
// virtual and physical machines. Built-in ones are skipped, so the list
// suits kernels that build some of them in.
var DefaultModules = []string{
	// NICs: virtual ones, then Intel, Realtek and Broadcom server and desktop ones.
	"virtio_pci", "virtio_net", "vmxnet3",
	"e1000", "e1000e", "igb", "igc", "ixgbe", "i40e", "r8169", "tg3",
	// udhcpc's raw sockets; VLANs of a static network from Git.
	"af_packet", "8021q",
	// Disks: virtio, SATA/IDE, NVMe, and the common server RAID/SAS HBAs.
	"virtio_blk", "virtio_scsi", "ahci", "ata_piix", "sd_mod", "nvme",
	"megaraid_sas", "mpt3sas", "smartpqi",
	// Filesystems the actions write into; ext4's metadata checksums need
	// crc32c (a soft dependency modules.dep does not list), vfat its code
	// page and character set; efivarfs for UEFI boot entries.
	"ext4", "crc32c_generic", "vfat", "nls_cp437", "nls_ascii", "nls_utf8", "efivarfs",
	// An encrypted install: dm-crypt with AES-XTS (xts asks the crypto
	// API for ecb(aes), which nothing would load on demand: no modprobe),
	// and the kernel's crypto API for cryptsetup's keyslots (AES-NI where
	// the CPU has it).
	"dm_mod", "dm_crypt", "ecb", "xts", "algif_skcipher", "aesni_intel",
}

// Result names what Build wrote.
type Result struct {
	Kernel, Initrd             string   // paths of the written files
	KernelSHA256, InitrdSHA256 string   // hex
	KernelVersion              string   // from the kernel's file name; "" when it has none
	Modules                    []string // what /init loads, in load order
	// UKI and UKISHA256 name the unified kernel image, when one was built.
	UKI, UKISHA256 string
}

// SHA256 is the hex sha256 of b.
func SHA256(b []byte) string { return sum(b) }

// Build writes out/vmlinuz, a copy of the kernel, and out/initrd.img, a
// gzipped newc cpio archive, creating out if needed.
func Build(opt Options, out string) (Result, error) {
	if opt.Kernel == "" {
		return Result{}, errors.New("microos: no kernel given")
	}
	if opt.Agent == "" {
		return Result{}, errors.New("microos: no bootops-agent given")
	}
	if opt.Root == "" {
		opt.Root = "/"
	}
	if opt.Busybox == "" {
		opt.Busybox = filepath.Join(opt.Root, DefaultBusybox)
	}
	switch opt.Arch {
	case "", ArchX86_64:
		opt.Arch = ArchX86_64
	case ArchARM64:
	default:
		return Result{}, fmt.Errorf("microos: arch %q: want %s or %s", opt.Arch, ArchX86_64, ArchARM64)
	}
	if opt.Load == nil {
		opt.Load = DefaultModules
		if opt.Arch == ArchARM64 {
			opt.Load = DefaultModulesARM64
		}
	}
	version, ok := strings.CutPrefix(filepath.Base(opt.Kernel), "vmlinuz-")
	if !ok {
		version = ""
	}
	if opt.Modules == "" {
		if version == "" {
			return Result{}, fmt.Errorf("microos: no version in the kernel's file name %s (want vmlinuz-<version>): give the modules folder", opt.Kernel)
		}
		opt.Modules = filepath.Join(opt.Root, "lib/modules", version)
	}

	kernel, err := os.ReadFile(opt.Kernel)
	if err != nil {
		return Result{}, fmt.Errorf("microos: kernel: %w", err)
	}
	if got := kernelArch(kernel); got != "" && got != opt.Arch {
		return Result{}, fmt.Errorf("microos: kernel %s is for %s, the Micro-OS for %s (--arch)", opt.Kernel, got, opt.Arch)
	}
	if err := checkELFArch(opt.Agent, "bootops-agent", opt.Arch); err != nil {
		return Result{}, err
	}
	if err := checkELFArch(opt.Busybox, "busybox", opt.Arch); err != nil {
		return Result{}, err
	}
	initrd, mods, err := image(opt)
	if err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return Result{}, fmt.Errorf("microos: %w", err)
	}
	r := Result{
		Kernel:        filepath.Join(out, "vmlinuz"),
		Initrd:        filepath.Join(out, "initrd.img"),
		KernelSHA256:  sum(kernel),
		InitrdSHA256:  sum(initrd),
		KernelVersion: version,
		Modules:       mods,
	}
	if err := writeFile(r.Kernel, kernel); err != nil {
		return Result{}, err
	}
	if err := writeFile(r.Initrd, initrd); err != nil {
		return Result{}, err
	}
	return r, nil
}

// image builds the gzipped initramfs and gives the modules it loads.
func image(opt Options) ([]byte, []string, error) {
	deps, err := readDepTable(opt.Modules)
	if err != nil {
		return nil, nil, fmt.Errorf("microos: %w", err)
	}
	mods, err := deps.resolve(opt.Load)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (in neither modules.dep nor modules.builtin of %s)", err, opt.Modules)
	}
	busybox, err := readStatic(opt.Busybox, "busybox (Debian package busybox-static)")
	if err != nil {
		return nil, nil, err
	}
	agent, err := readStatic(opt.Agent, "bootops-agent")
	if err != nil {
		return nil, nil, err
	}

	a := newArchive()
	for _, d := range []string{"dev", "etc", "lib/modules", "mnt", "proc", "run", "sbin", "sys", "usr/bin", "usr/sbin"} {
		a.dir(d, 0o755)
	}
	a.dir("root", 0o700)
	a.dir("tmp", 0o1777)
	// The kernel opens /dev/console for /init before devtmpfs is mounted.
	a.charDev("dev/console", 0o600, 5, 1)
	a.file("bin/busybox", 0o755, busybox)
	a.symlink("bin/sh", "busybox")
	a.file("bin/bootops-agent", 0o755, agent)
	a.file("etc/udhcpc.script", 0o755, []byte(udhcpcScript))
	tools, root := opt.Tools, opt.Root
	if tools == nil {
		tools = DefaultTools
	}
	if root == "" {
		root = "/"
	}
	if err := addTools(a, root, tools); err != nil {
		return nil, nil, err
	}
	if opt.Config != nil {
		b, err := json.MarshalIndent(opt.Config, "", "  ")
		if err != nil {
			return nil, nil, err
		}
		a.dir("etc/bootops", 0o755)
		a.file(strings.TrimPrefix(trust.ConfigPath, "/"), 0o644, append(b, '\n'))
	}
	names := make([]string, len(mods))
	for i, m := range mods {
		b, err := readModule(opt.Modules, m)
		if err != nil {
			return nil, nil, fmt.Errorf("microos: %w", err)
		}
		a.file("lib/modules/"+m.name+".ko", 0o644, b)
		names[i] = m.name
	}
	a.file("init", 0o755, initScript(names))

	var buf bytes.Buffer
	// A zero gzip.Header: no name, no time, so equal inputs give equal
	// bytes. The best compression would save 0.3% at seven times the time.
	zw := gzip.NewWriter(&buf)
	if err := a.writeTo(zw); err != nil {
		return nil, nil, fmt.Errorf("microos: initramfs: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, nil, fmt.Errorf("microos: initramfs: %w", err)
	}
	return buf.Bytes(), names, nil
}

// readStatic reads a program for the image and refuses a dynamically linked
// ELF one: the Micro-OS has no C library or loader. Files that are not ELF
// (a script) pass as they are.
func readStatic(name, what string) ([]byte, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("microos: %s: %w", what, err)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return b, nil
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("microos: %s: %s is dynamically linked; the Micro-OS needs a static build", what, name)
		}
	}
	return b, nil
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// writeFile replaces name whole, so a reader never sees half a file.
func writeFile(name string, data []byte) error {
	if err := trust.WriteFile(name, data, 0o644); err != nil {
		return fmt.Errorf("microos: write %s: %w", name, err)
	}
	return nil
}

// Processor families a Micro-OS is built for (a MicroOS's arch in Git).
const (
	ArchX86_64 = plan.ArchX86_64
	ArchARM64  = plan.ArchARM64
)

// DefaultModulesARM64 are DefaultModules for Debian's linux-image-arm64:
// the same roles, the NICs of ARM servers (Mellanox, Broadcom, Intel,
// Marvell) and the ARMv8 Crypto Extensions' AES in place of AES-NI.
var DefaultModulesARM64 = []string{
	"virtio_pci", "virtio_net", "virtio_mmio",
	"e1000e", "igb", "ixgbe", "i40e", "mlx5_core", "bnxt_en", "tg3",
	"af_packet", "8021q",
	"virtio_blk", "virtio_scsi", "ahci", "sd_mod", "nvme", "megaraid_sas", "mpt3sas",
	"ext4", "crc32c_generic", "vfat", "nls_cp437", "nls_ascii", "nls_utf8", "efivarfs",
	"dm_mod", "dm_crypt", "ecb", "xts", "algif_skcipher", "aes_ce_blk",
}

// kernelArch is the processor family of a Linux kernel image: an x86
// bzImage ("HdrS" at 0x202), an arm64 Image ("ARM\x64" at 0x38), gzipped
// as Debian's arm64 vmlinuz is, or "" when it is neither.
func kernelArch(b []byte) string {
	if len(b) > 0x206 && string(b[0x202:0x206]) == "HdrS" {
		return ArchX86_64
	}
	head := b
	if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return ""
		}
		head = make([]byte, 0x40)
		if _, err := io.ReadFull(zr, head); err != nil {
			return ""
		}
	}
	if len(head) >= 0x3c && string(head[0x38:0x3c]) == "ARM\x64" {
		return ArchARM64
	}
	return ""
}

// checkELFArch says when the program at name is not built for arch.
func checkELFArch(name, what, arch string) error {
	f, err := elf.Open(name)
	if err != nil {
		return nil // read (and refused, if it must be) where it is used
	}
	defer f.Close()
	got := ""
	switch f.Machine {
	case elf.EM_X86_64:
		got = ArchX86_64
	case elf.EM_AARCH64:
		got = ArchARM64
	default:
		got = f.Machine.String()
	}
	if got != arch {
		hint := ""
		if what == "bootops-agent" {
			hint = fmt.Sprintf(" (build it with GOARCH=%s: make agent-%s)", goArch(arch), arch)
		}
		return fmt.Errorf("microos: %s %s is built for %s, the Micro-OS for %s%s", what, name, got, arch, hint)
	}
	return nil
}

// goArch is Go's name of a processor family.
func goArch(arch string) string {
	if arch == ArchX86_64 {
		return "amd64"
	}
	return arch
}
