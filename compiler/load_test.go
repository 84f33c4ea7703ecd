package compiler

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// diskRepo writes the base repository into a temporary directory.
func diskRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range readTxtar(t, "testdata/_base.txtar").files {
		p := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func compileErrors(t *testing.T, dir string) []string {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := newCompiler(t).Compile(os.DirFS(dir))
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("compile hangs (did it open the FIFO behind a symlink?)")
	}
	var list Errors
	if err != nil && !errors.As(err, &list) {
		t.Fatalf("not an Errors: %v", err)
	}
	var out []string
	for _, e := range list {
		out = append(out, e.Error())
	}
	return out
}

func wantErrors(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n got: %q\nwant: %q", got, want)
	}
}

func TestSymlinkOutsideIsRefusedUnread(t *testing.T) {
	dir := diskRepo(t)
	// The target is a FIFO: opening it would block, so a compile that
	// finishes proves the target was never read.
	fifo := filepath.Join(t.TempDir(), "outside.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fifo, filepath.Join(dir, "sites/s1/nodes/abs.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../"+filepath.Base(filepath.Dir(fifo))+"/outside.yaml", filepath.Join(dir, "sites/s1/nodes/rel.yaml")); err != nil {
		t.Fatal(err)
	}
	wantErrors(t, compileErrors(t, dir),
		"sites/s1/nodes/abs.yaml:1:1: symlink points outside the repository (to "+fifo+"): refused",
		"sites/s1/nodes/rel.yaml:1:1: symlink points outside the repository (to ../../../../"+filepath.Base(filepath.Dir(fifo))+"/outside.yaml): refused")
}

func TestSymlinkInsideIsFollowed(t *testing.T) {
	dir := diskRepo(t)
	body := "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n2\nidentity: {serial: LINKED}\n"
	if err := os.MkdirAll(filepath.Join(dir, "common"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "common/n2.yml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../common/n2.yml", filepath.Join(dir, "sites/s1/nodes/n2.yaml")); err != nil {
		t.Fatal(err)
	}
	// Read twice (as itself and through the link), the node clashes with
	// itself: proof that the link was followed.
	wantErrors(t, compileErrors(t, dir),
		"sites/s1/nodes/n2.yaml:3:1: name: duplicate Node \"n2\" in site s1 (also at common/n2.yml:3:1)",
		"sites/s1/nodes/n2.yaml:4:12: identity.serial: serial LINKED is also node s1/n2's (at common/n2.yml:4:12)")
	// Ignoring the folder leaves the link alone to define the node.
	if err := os.WriteFile(filepath.Join(dir, ".bootopsignore"), []byte("common/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := newCompiler(t).Compile(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	if n := p.Node("s1", "n2"); n == nil || n.Identity.Serial != "LINKED" || n.Source != "sites/s1/nodes/n2.yaml:1" {
		t.Errorf("node through symlink: %+v", n)
	}
}

func TestHugeFileIsRefusedUnread(t *testing.T) {
	dir := diskRepo(t)
	p := filepath.Join(dir, "sites/s1/nodes/huge.yaml")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: 50 MB that cost nothing to make, and would cost a lot to parse.
	if err := f.Truncate(50 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wantErrors(t, compileErrors(t, dir), "sites/s1/nodes/huge.yaml:1:1: file is 52428800 bytes, more than the 8 MiB limit: split it")
}

func TestBinaryGarbage(t *testing.T) {
	dir := diskRepo(t)
	os.WriteFile(filepath.Join(dir, "sites/s1/nodes/nul.yaml"), []byte("apiVersion: x\nkind: \x00\x01\x02"), 0o644)
	os.WriteFile(filepath.Join(dir, "sites/s1/nodes/latin1.yaml"), []byte("name: caf\xe9\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "garbage.cue"), []byte("\xff\xfe\x00x"), 0o644)
	wantErrors(t, compileErrors(t, dir),
		"garbage.cue:1:1: not a text file (invalid UTF-8)",
		"sites/s1/nodes/latin1.yaml:1:10: not a text file (invalid UTF-8)",
		"sites/s1/nodes/nul.yaml:2:7: not a text file (NUL byte)")
}

func TestUnreadableFileIsAnError(t *testing.T) {
	dir := diskRepo(t)
	if err := os.Mkdir(filepath.Join(dir, "sites/s1/nodes/dir.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A folder named like a YAML file is walked into, not read: no error,
	// and nothing silently skipped either (it holds no files).
	if got := compileErrors(t, dir); len(got) != 0 {
		t.Errorf("errors: %q", got)
	}
}
