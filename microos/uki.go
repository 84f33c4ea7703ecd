package microos

import (
	"bytes"
	"debug/pe"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DefaultStub is the EFI stub of Debian's systemd-boot-efi package: the
// PE a unified kernel image is built on.
const DefaultStub = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

// UKIOptions says how BuildUKI makes a unified kernel image.
type UKIOptions struct {
	// Stub is the EFI stub (default DefaultStub).
	Stub string
	// Cmdline is the kernel command line, fixed inside the image.
	Cmdline string
	// SignKey and SignCert (PEM; the key unencrypted) sign the image for
	// Secure Boot with sbsign (Debian package sbsigntool). Both or none.
	SignKey, SignCert string
}

// BuildUKI writes out, one PE that holds the stub, the command line, the
// kernel and the initrd, signed when opt says so. The stub finds its
// sections by name (.cmdline, .linux, .initrd); they go after its last
// section, each at a 4 KiB boundary (objcopy from binutils). Equal inputs
// give equal bytes.
func BuildUKI(kernel, initrd string, opt UKIOptions, out string) error {
	if opt.Stub == "" {
		opt.Stub = DefaultStub
	}
	if (opt.SignKey == "") != (opt.SignCert == "") {
		return errors.New("uki: give both --sign-key and --sign-cert, or neither")
	}
	for _, tool := range []struct{ name, pkg string }{{"objcopy", "binutils"}, {"sbsign", "sbsigntool"}} {
		if tool.name == "sbsign" && opt.SignKey == "" {
			continue
		}
		if _, err := exec.LookPath(tool.name); err != nil {
			return fmt.Errorf("uki: %s is missing: install the Debian package %s", tool.name, tool.pkg)
		}
	}
	if opt.SignKey != "" {
		if err := plainKey(opt.SignKey); err != nil {
			return err
		}
	}
	end, err := stubEnd(opt.Stub)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".uki-*")
	if err != nil {
		return fmt.Errorf("uki: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmdline := filepath.Join(tmp, "cmdline")
	if err := os.WriteFile(cmdline, []byte(opt.Cmdline+"\x00"), 0o644); err != nil {
		return fmt.Errorf("uki: %w", err)
	}
	args := []string{}
	addr := align(end)
	for _, s := range []struct{ name, file string }{{".cmdline", cmdline}, {".linux", kernel}, {".initrd", initrd}} {
		st, err := os.Stat(s.file)
		if err != nil {
			return fmt.Errorf("uki: %w", err)
		}
		args = append(args, "--add-section", s.name+"="+s.file, "--change-section-vma", fmt.Sprintf("%s=0x%x", s.name, addr))
		addr = align(addr + uint64(st.Size()))
	}
	unsigned := filepath.Join(tmp, "unsigned.efi")
	if err := run("objcopy", append(args, opt.Stub, unsigned)...); err != nil {
		return err
	}
	result := unsigned
	if opt.SignKey != "" {
		result = filepath.Join(tmp, "signed.efi")
		if err := run("sbsign", "--key", opt.SignKey, "--cert", opt.SignCert, "--output", result, unsigned); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(result)
	if err != nil {
		return fmt.Errorf("uki: %w", err)
	}
	return writeFile(out, b)
}

// stubEnd is the address after the stub's last section.
func stubEnd(stub string) (uint64, error) {
	f, err := pe.Open(stub)
	if err != nil {
		return 0, fmt.Errorf("uki: stub %s (Debian package systemd-boot-efi): %w", stub, err)
	}
	defer f.Close()
	var end uint64
	for _, s := range f.Sections {
		end = max(end, uint64(s.VirtualAddress)+uint64(max(s.VirtualSize, s.Size)))
	}
	if oh, ok := f.OptionalHeader.(*pe.OptionalHeader64); ok {
		end += oh.ImageBase
	}
	return end, nil
}

func align(a uint64) uint64 { return (a + 4095) &^ 4095 }

// plainKey refuses an encrypted private key: sbsign would ask for its
// pass phrase, and no one is there to answer.
func plainKey(name string) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return fmt.Errorf("uki: sign key: %w", err)
	}
	if bytes.Contains(b, []byte("ENCRYPTED")) {
		return fmt.Errorf("uki: the sign key %s is encrypted: decrypt it into a file only you can read (openssl pkey -in %s -out plain.key) and give that", name, name)
	}
	return nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("uki: %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
