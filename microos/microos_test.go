package microos

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// fakeModules lists a small modules tree: file, compression, dependencies.
// virtio_net's dependencies are listed in an order that loading them from
// last to first alone would get wrong (virtio before virtio_ring), so the
// resolution must follow each dependency's own line.
var fakeModules = []struct{ path, deps string }{
	{"kernel/drivers/virtio/virtio_ring.ko.xz", ""},
	{"kernel/drivers/virtio/virtio.ko.zst", "kernel/drivers/virtio/virtio_ring.ko.xz"},
	{"kernel/net/core/failover.ko", ""},
	{"kernel/drivers/net/net_failover.ko.xz", "kernel/net/core/failover.ko"},
	{"kernel/drivers/net/virtio_net.ko", "kernel/net/core/failover.ko kernel/drivers/net/net_failover.ko.xz kernel/drivers/virtio/virtio_ring.ko.xz kernel/drivers/virtio/virtio.ko.zst"},
	{"kernel/lib/crc64-rocksoft.ko.zst", ""},
	{"kernel/drivers/nvme/host/nvme-core.ko", "kernel/lib/crc64-rocksoft.ko.zst"},
	{"kernel/drivers/nvme/host/nvme.ko.xz", "kernel/drivers/nvme/host/nvme-core.ko kernel/lib/crc64-rocksoft.ko.zst"},
}

// moduleBody is what a fake module holds once uncompressed.
func moduleBody(name string) []byte { return []byte("\x7fELF fake module " + name) }

// fakeTree writes the fake modules tree and returns its folder.
func fakeTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var dep strings.Builder
	for _, m := range fakeModules {
		body := moduleBody(moduleName(m.path))
		var buf bytes.Buffer
		switch {
		case strings.HasSuffix(m.path, ".xz"):
			w, err := xz.NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(body)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		case strings.HasSuffix(m.path, ".zst"):
			w, err := zstd.NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(body)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			buf.Write(body)
		}
		if bytes.HasPrefix(buf.Bytes(), elfMagic) != strings.HasSuffix(m.path, ".ko") {
			t.Fatalf("%s: compression did not happen", m.path)
		}
		write(t, filepath.Join(dir, m.path), buf.Bytes())
		fmt.Fprintf(&dep, "%s: %s\n", m.path, m.deps)
	}
	write(t, filepath.Join(dir, "modules.dep"), []byte(dep.String()))
	write(t, filepath.Join(dir, "modules.builtin"), []byte("kernel/net/packet/af_packet.ko\nkernel/lib/crc-t10dif.ko\n"))
	return dir
}

func write(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeInputs writes a kernel, busybox and agent and returns Options for
// them and the fake modules tree.
func fakeInputs(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	opt := Options{
		Kernel:  filepath.Join(dir, "vmlinuz-6.1.0-99-amd64"),
		Modules: fakeTree(t),
		Busybox: filepath.Join(dir, "busybox"),
		Agent:   filepath.Join(dir, "bootops-agent"),
		Load:    []string{"virtio-net", "af_packet", "nvme"},
		Tools:   []Tool{}, // none: the host's programs are TestDebianKernel's
	}
	write(t, opt.Kernel, []byte("fake kernel image"))
	write(t, opt.Busybox, []byte("fake busybox"))
	write(t, opt.Agent, []byte("#!/bin/sh\necho fake agent\n"))
	return opt
}

func TestResolve(t *testing.T) {
	for name, tc := range map[string]struct {
		load    []string
		want    []string
		missing []string // names the error must carry
	}{
		"dependencies first, each once": {
			load: []string{"virtio_net", "virtio_ring", "nvme"},
			want: []string{"virtio_ring", "virtio", "failover", "net_failover", "virtio_net", "crc64-rocksoft", "nvme-core", "nvme"},
		},
		"dash and underscore alike": {
			load: []string{"nvme_core", "crc64_rocksoft", "net-failover"},
			want: []string{"crc64-rocksoft", "nvme-core", "failover", "net_failover"},
		},
		"built-in skipped": {
			load: []string{"af_packet", "crc_t10dif", "failover"},
			want: []string{"failover"},
		},
		"missing named": {
			load:    []string{"virtio_net", "no_such_driver", "e1000e"},
			missing: []string{"no_such_driver", "e1000e"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			deps, err := readDepTable(fakeTree(t))
			if err != nil {
				t.Fatal(err)
			}
			mods, err := deps.resolve(tc.load)
			if tc.missing != nil {
				if !errors.Is(err, ErrNoModule) {
					t.Fatalf("err = %v, want ErrNoModule", err)
				}
				for _, m := range tc.missing {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error %q does not name %s", err, m)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range mods {
				got = append(got, m.name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("order\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestResolveCycle(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "modules.dep"), []byte("a.ko: b.ko\nb.ko: a.ko\n"))
	deps, err := readDepTable(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deps.resolve([]string{"a"}); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("err = %v, want a dependency cycle", err)
	}
}

func TestBuildMissingModule(t *testing.T) {
	opt := fakeInputs(t)
	opt.Load = []string{"virtio_net", "bnx2x"}
	out := t.TempDir()
	_, err := Build(opt, out)
	if !errors.Is(err, ErrNoModule) || !strings.Contains(err.Error(), "bnx2x") {
		t.Fatalf("err = %v, want ErrNoModule naming bnx2x", err)
	}
	if _, err := os.Stat(filepath.Join(out, "initrd.img")); err == nil {
		t.Error("initrd.img written despite the error")
	}
}

func TestBuildNeedsModulesFolder(t *testing.T) {
	opt := fakeInputs(t)
	opt.Modules = ""
	opt.Kernel = filepath.Join(t.TempDir(), "bzImage")
	write(t, opt.Kernel, []byte("kernel"))
	if _, err := Build(opt, t.TempDir()); err == nil || !strings.Contains(err.Error(), "vmlinuz-<version>") {
		t.Fatalf("err = %v, want one asking for the modules folder", err)
	}
}

func TestBuildRefusesDynamicPrograms(t *testing.T) {
	// Debian's ls is dynamically linked, like any program built against libc.
	opt := fakeInputs(t)
	opt.Agent = "/bin/ls"
	if _, err := Build(opt, t.TempDir()); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("err = %v, want a refusal of a dynamically linked agent", err)
	}
}

// cpioEntry is one member read back from an archive.
type cpioEntry struct {
	ino, mode, uid, gid, nlink, mtime uint32
	rmajor, rminor                    uint32
	name                              string
	data                              []byte
}

// readInitrd gunzips and parses a newc archive, checking the gzip header
// carries no name or time.
func readInitrd(t *testing.T, name string) []cpioEntry {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header has name %q, time %v; want neither", zr.Name, zr.ModTime)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var out []cpioEntry
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("offset %d: no newc header", off)
		}
		var h [13]uint32
		for i := range h {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("offset %d: field %d: %v", off, i, err)
			}
			h[i] = uint32(v)
		}
		namesize, size := int(h[11]), int(h[6])
		nameEnd := off + 110 + namesize
		if b[nameEnd-1] != 0 {
			t.Fatalf("offset %d: name not NUL-terminated", off)
		}
		e := cpioEntry{ino: h[0], mode: h[1], uid: h[2], gid: h[3], nlink: h[4], mtime: h[5], rmajor: h[9], rminor: h[10],
			name: string(b[off+110 : nameEnd-1])}
		dataOff := align(nameEnd)
		e.data = b[dataOff : dataOff+size]
		off = align(dataOff + size)
		if e.name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, e)
	}
}

func sha(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func TestBuildImage(t *testing.T) {
	opt := fakeInputs(t)
	out := filepath.Join(t.TempDir(), "microos")
	r, err := Build(opt, out)
	if err != nil {
		t.Fatal(err)
	}
	wantMods := []string{"virtio_ring", "virtio", "failover", "net_failover", "virtio_net", "crc64-rocksoft", "nvme-core", "nvme"}
	if !slices.Equal(r.Modules, wantMods) {
		t.Errorf("modules\n got %v\nwant %v", r.Modules, wantMods)
	}
	if r.Kernel != filepath.Join(out, "vmlinuz") || r.Initrd != filepath.Join(out, "initrd.img") {
		t.Errorf("paths %s, %s", r.Kernel, r.Initrd)
	}
	if got := sha(t, r.Kernel); got != r.KernelSHA256 || got != sha(t, opt.Kernel) {
		t.Errorf("kernel sha256 %s, result says %s, source is %s", got, r.KernelSHA256, sha(t, opt.Kernel))
	}
	if got := sha(t, r.Initrd); got != r.InitrdSHA256 {
		t.Errorf("initrd sha256 %s, result says %s", got, r.InitrdSHA256)
	}
	if r.KernelVersion != "6.1.0-99-amd64" {
		t.Errorf("kernel version %q", r.KernelVersion)
	}

	entries := readInitrd(t, r.Initrd)
	byName := map[string]cpioEntry{}
	for i, e := range entries {
		if e.ino != uint32(i+1) {
			t.Errorf("%s: inode %d, want %d", e.name, e.ino, i+1)
		}
		if e.uid != 0 || e.gid != 0 || e.mtime != 0 {
			t.Errorf("%s: uid %d gid %d mtime %d, want zeros", e.name, e.uid, e.gid, e.mtime)
		}
		if i > 0 && entries[i-1].name >= e.name {
			t.Errorf("%s after %s: not sorted", e.name, entries[i-1].name)
		}
		byName[e.name] = e
	}
	for name, want := range map[string]struct {
		mode uint32
		data string // "" checks nothing
	}{
		"bin":                   {0o040755, ""},
		"dev":                   {0o040755, ""},
		"proc":                  {0o040755, ""},
		"sys":                   {0o040755, ""},
		"tmp":                   {0o041777, ""},
		"dev/console":           {0o020600, ""},
		"init":                  {0o100755, ""},
		"bin/busybox":           {0o100755, "fake busybox"},
		"bin/sh":                {0o120777, "busybox"},
		"bin/bootops-agent":     {0o100755, "#!/bin/sh\necho fake agent\n"},
		"etc/udhcpc.script":     {0o100755, udhcpcScript},
		"lib/modules/virtio.ko": {0o100644, string(moduleBody("virtio"))},
	} {
		e, ok := byName[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if e.mode != want.mode {
			t.Errorf("%s: mode %o, want %o", name, e.mode, want.mode)
		}
		if want.data != "" && string(e.data) != want.data {
			t.Errorf("%s: content %q, want %q", name, e.data, want.data)
		}
	}
	if c := byName["dev/console"]; c.rmajor != 5 || c.rminor != 1 {
		t.Errorf("dev/console is %d:%d, want 5:1", c.rmajor, c.rminor)
	}

	// Every module, uncompressed, and nothing else under lib/modules.
	var inImage []string
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.name, "lib/modules/"); ok {
			inImage = append(inImage, n)
			if mode := e.mode; mode != 0o100644 {
				t.Errorf("%s: mode %o", e.name, mode)
			}
			if want := moduleBody(strings.TrimSuffix(n, ".ko")); !bytes.Equal(e.data, want) {
				t.Errorf("%s holds %q, want %q", e.name, e.data, want)
			}
		}
	}
	var want []string
	for _, m := range wantMods {
		want = append(want, m+".ko")
	}
	slices.Sort(want)
	if !slices.Equal(inImage, want) {
		t.Errorf("lib/modules holds %v, want %v", inImage, want)
	}

	// /init loads them in order, then runs the agent.
	script := string(byName["init"].data)
	if !strings.HasPrefix(script, "#!/bin/busybox sh\n") {
		t.Errorf("/init starts %q", script[:min(len(script), 40)])
	}
	var loads []string
	for _, l := range strings.Split(script, "\n") {
		if m, ok := strings.CutPrefix(l, "load /lib/modules/"); ok {
			loads = append(loads, strings.TrimSuffix(m, ".ko"))
		}
	}
	if !slices.Equal(loads, wantMods) {
		t.Errorf("/init loads\n %v\nwant %v", loads, wantMods)
	}
	for _, s := range []string{"insmod \"$1\"", "udhcpc -i \"$n\" -n -t 5 -T 2 -s /etc/udhcpc.script", "\n/bin/bootops-agent\n", "poweroff -f", "bootops.debug", "mount -t devtmpfs", "mount -t securityfs securityfs /sys/kernel/security"} {
		if !strings.Contains(script, s) {
			t.Errorf("/init lacks %q", s)
		}
	}
	if strings.Contains(script, "@MODULES@") {
		t.Error("/init still holds the placeholder")
	}
}

func TestBuildReproducible(t *testing.T) {
	opt := fakeInputs(t)
	first, err := Build(opt, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Different file times and a different output folder change nothing.
	later := time.Now().Add(time.Hour)
	for _, f := range []string{opt.Kernel, opt.Busybox, opt.Agent, filepath.Join(opt.Modules, fakeModules[0].path)} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	second, err := Build(opt, filepath.Join(t.TempDir(), "elsewhere"))
	if err != nil {
		t.Fatal(err)
	}
	if first.InitrdSHA256 != second.InitrdSHA256 || first.KernelSHA256 != second.KernelSHA256 {
		t.Fatalf("two builds differ: initrd %s / %s, kernel %s / %s",
			first.InitrdSHA256, second.InitrdSHA256, first.KernelSHA256, second.KernelSHA256)
	}
	a, _ := os.ReadFile(first.Initrd)
	b, _ := os.ReadFile(second.Initrd)
	if !bytes.Equal(a, b) {
		t.Fatal("equal sha256s, different bytes")
	}

	// And the archive does depend on what goes in.
	opt.Load = []string{"virtio_net"}
	third, err := Build(opt, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if third.InitrdSHA256 == first.InitrdSHA256 {
		t.Error("a different module list gave the same initrd")
	}
}
