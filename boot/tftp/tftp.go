// Package tftp serves the iPXE binaries over TFTP, read-only. The files are
// read once at start from the iPXE folder (Debian's ipxe package links
// ipxe.efi to /boot: the link is resolved here, deliberately) and served
// from memory by exact name, so no request path can reach the filesystem.
package tftp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Files are the binaries served, by name.
type Files map[string][]byte

// Names of the iPXE builds the DHCP server hands out.
var Names = []string{"undionly.kpxe", "ipxe.efi", "snp.efi", "snponly.efi", "ipxe.pxe", "undionly.kkpxe"}

// Load reads the known iPXE binaries from dir; missing ones are skipped,
// but at least one must be there.
func Load(dir string) (Files, error) {
	files := Files{}
	for _, name := range Names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("tftp: %w", err)
		}
		files[name] = b
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("tftp: no iPXE binary in %s (install Debian's ipxe package, or point --ipxe-dir elsewhere)", dir)
	}
	return files, nil
}

// Lookup finds a file by the name a client asked for: a leading '/' is
// ignored, anything else must match exactly.
func (f Files) Lookup(name string) ([]byte, bool) {
	b, ok := f[strings.TrimPrefix(name, "/")]
	return b, ok
}

// List names the files, sorted.
func (f Files) List() []string {
	var out []string
	for n := range f {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
