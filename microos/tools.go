package microos

import (
	"debug/elf"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Tool is a host program the Micro-OS carries, with the shared libraries
// it needs, for the actions busybox cannot do: cryptsetup for an
// encrypted install.
type Tool struct {
	// Path is where the program is on the build host and in the image.
	Path string
	// Package is the Debian package that installs it, for the error when
	// it is missing.
	Package string
	// Version is the argument that makes it print its version (a test
	// runs it in the image alone); "" means --version.
	Version string
}

// DefaultTools are the tools a Micro-OS carries when Options.Tools is nil:
// cryptsetup for an encrypted install, nvme-cli and hdparm for a
// retirement's erase (NVMe format, ATA security erase).
var DefaultTools = []Tool{
	{Path: "/usr/sbin/cryptsetup", Package: "cryptsetup-bin"},
	{Path: "/usr/sbin/nvme", Package: "nvme-cli"},
	{Path: "/usr/sbin/hdparm", Package: "hdparm", Version: "-V"},
}

// libDirs are where a Debian system's dynamic loader looks, in its order,
// for a machine's libraries (the multiarch folders first).
func libDirs(m elf.Machine) ([]string, error) {
	var triplet string
	switch m {
	case elf.EM_X86_64:
		triplet = "x86_64-linux-gnu"
	case elf.EM_AARCH64:
		triplet = "aarch64-linux-gnu"
	default:
		return nil, fmt.Errorf("no library folders known for %v", m)
	}
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib", "/usr/lib"}, nil
}

// addTools puts each tool, its dynamic loader and every shared library it
// needs (transitively, by DT_NEEDED) into the archive. A library goes to
// the path the loader finds it at under its soname, with the content of
// the file that name resolves to on the host; root is the host's root
// ("/", or a test's tree).
func addTools(a *archive, root string, tools []Tool) error {
	added := map[string]bool{}
	var queue []string // image paths of ELF files whose needs are not resolved yet
	for _, t := range tools {
		if _, err := os.Stat(filepath.Join(root, t.Path)); err != nil {
			return fmt.Errorf("microos: tool %s (Debian package %s): %w", t.Path, t.Package, err)
		}
		queue = append(queue, t.Path)
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if added[p] {
			continue
		}
		added[p] = true
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return fmt.Errorf("microos: tool file %s: %w", p, err)
		}
		a.file(strings.TrimPrefix(p, "/"), 0o755, b)
		needs, err := needed(root, p)
		if err != nil {
			return fmt.Errorf("microos: tool file %s: %w", p, err)
		}
		for _, n := range needs {
			if !added[n] {
				queue = append(queue, n)
			}
		}
	}
	return nil
}

// needed gives the image paths of what the ELF file p needs to run: its
// interpreter and its DT_NEEDED libraries, each found in the loader's
// folders under root.
func needed(root, p string) ([]string, error) {
	f, err := elf.Open(filepath.Join(root, p))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("interpreter: %w", err)
			}
			out = append(out, strings.TrimRight(string(b), "\x00"))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, err
	}
	dirs, err := libDirs(f.Machine)
	if err != nil {
		return nil, err
	}
	for _, lib := range libs {
		i := slices.IndexFunc(dirs, func(d string) bool {
			_, err := os.Stat(filepath.Join(root, d, lib))
			return err == nil
		})
		if i < 0 {
			return nil, fmt.Errorf("library %s: not in %s", lib, strings.Join(dirs, ", "))
		}
		out = append(out, canonicalLib(dirs[i], lib))
	}
	return out, nil
}

// canonicalLib is where a library found in dir goes in the image: a
// merged-/usr host has /lib as a link to usr/lib, and the Micro-OS has a
// real /lib (its modules), so libraries go under /usr.
func canonicalLib(dir, lib string) string {
	if rest, ok := strings.CutPrefix(dir, "/lib"); ok {
		dir = "/usr/lib" + rest
	}
	return path.Join(dir, lib)
}
