package microos

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// ErrNoModule is returned, wrapped with the names, when a requested module
// is neither in modules.dep nor built into the kernel.
var ErrNoModule = errors.New("microos: module not found")

// module is one kernel module to put into the image.
type module struct {
	name string // the file's base name without extensions: "virtio_net", "nvme-core"
	path string // relative to the modules folder, as modules.dep writes it
	deps []string
}

// moduleSuffixes are the file endings modules.dep uses, longest first.
var moduleSuffixes = []string{".ko.zst", ".ko.xz", ".ko.gz", ".ko"}

// moduleName gives a module file's name without folder and extension.
func moduleName(p string) string {
	base := path.Base(p)
	for _, s := range moduleSuffixes {
		if n, ok := strings.CutSuffix(base, s); ok {
			return n
		}
	}
	return base
}

// canonical folds the kernel's equivalence of '-' and '_' in module names.
func canonical(name string) string { return strings.ReplaceAll(name, "-", "_") }

// depTable is a parsed modules.dep plus modules.builtin.
type depTable struct {
	byName  map[string]*module // by canonical name
	byPath  map[string]*module
	builtin map[string]bool // canonical names
}

func readDepTable(dir string) (*depTable, error) {
	t := &depTable{byName: map[string]*module{}, byPath: map[string]*module{}, builtin: map[string]bool{}}
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("modules: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p, deps, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want \"path: dependencies\", got %q", f.Name(), n, line)
		}
		m := &module{name: moduleName(p), path: p, deps: strings.Fields(deps)}
		t.byPath[p] = m
		t.byName[canonical(m.name)] = m
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	// modules.builtin is missing from some trees (a kernel without
	// modules built in, a hand-made tree): no built-in modules then.
	b, err := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("modules: %w", err)
	}
	for _, l := range strings.Fields(string(b)) {
		t.builtin[canonical(moduleName(l))] = true
	}
	return t, nil
}

// resolve gives the modules to load for the requested names, each after
// the modules it needs and each once. Built-in modules are left out; every
// name found nowhere is reported in one error.
func (t *depTable) resolve(names []string) ([]*module, error) {
	var (
		order   []*module
		done    = map[*module]bool{}
		active  = map[*module]bool{}
		missing []string
	)
	var visit func(m *module, chain []string) error
	visit = func(m *module, chain []string) error {
		if done[m] {
			return nil
		}
		chain = append(chain, m.name)
		if active[m] {
			return fmt.Errorf("modules.dep: dependency cycle: %s", strings.Join(chain, " → "))
		}
		active[m] = true
		// modprobe loads a line's dependencies from the last to the first;
		// doing the same keeps the order familiar to anyone comparing.
		for i := len(m.deps) - 1; i >= 0; i-- {
			d, ok := t.byPath[m.deps[i]]
			if !ok {
				return fmt.Errorf("modules.dep: %s needs %s, which has no line of its own", m.path, m.deps[i])
			}
			if err := visit(d, chain); err != nil {
				return err
			}
		}
		active[m] = false
		done[m] = true
		order = append(order, m)
		return nil
	}
	for _, n := range names {
		c := canonical(strings.TrimSpace(n))
		if m, ok := t.byName[c]; ok {
			if err := visit(m, nil); err != nil {
				return nil, err
			}
			continue
		}
		if !t.builtin[c] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoModule, strings.Join(missing, ", "))
	}
	return order, nil
}

// elfMagic starts every kernel module once uncompressed.
var elfMagic = []byte("\x7fELF")

// readModule reads a module file and uncompresses it by its extension.
func readModule(dir string, m *module) ([]byte, error) {
	name := filepath.Join(dir, filepath.FromSlash(m.path))
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", m.name, err)
	}
	defer f.Close()
	var r io.Reader = f
	switch {
	case strings.HasSuffix(m.path, ".ko.xz"):
		xr, err := xz.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("module %s: %s: %w", m.name, name, err)
		}
		r = xr
	case strings.HasSuffix(m.path, ".ko.zst"):
		zr, err := zstd.NewReader(f, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("module %s: %s: %w", m.name, name, err)
		}
		defer zr.Close()
		r = zr
	case strings.HasSuffix(m.path, ".ko.gz"):
		gr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("module %s: %s: %w", m.name, name, err)
		}
		r = gr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("module %s: %s: %w", m.name, name, err)
	}
	if !bytes.HasPrefix(b, elfMagic) {
		return nil, fmt.Errorf("module %s: %s is not an ELF module once uncompressed", m.name, name)
	}
	return b, nil
}
