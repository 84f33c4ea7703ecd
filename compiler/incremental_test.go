package compiler

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestRecompileSeesChanges(t *testing.T) {
	dir := diskRepo(t)
	c := newCompiler(t)
	fsys := os.DirFS(dir)
	if _, err := c.Compile(fsys); err != nil {
		t.Fatal(err)
	}
	n1 := filepath.Join(dir, "sites/s1/nodes/n1.yaml")
	body, _ := os.ReadFile(n1)

	// Compile notices an edit by size/mtime and reads the file again.
	os.WriteFile(n1, append(append([]byte(nil), body...), "reprovision: 7\n"...), 0o644)
	p, err := c.Compile(fsys)
	if err != nil || p.Node("s1", "n1").Reprovision != 7 {
		t.Fatalf("after edit: %v %+v", err, p)
	}
	// CompileChanged reads what it is told changed, and only that.
	os.WriteFile(n1, append(append([]byte(nil), body...), "reprovision: 8\n"...), 0o644)
	p, err = c.CompileChanged(fsys, []string{"sites/s1/nodes/n1.yaml"})
	if err != nil || p.Node("s1", "n1").Reprovision != 8 {
		t.Fatalf("after watched edit: %v", err)
	}
	// Added and removed files, as a watcher reports them.
	os.WriteFile(filepath.Join(dir, "sites/s1/nodes/n2.yaml"), []byte("apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n2\nidentity: {serial: TWO}\n"), 0o644)
	p, err = c.CompileChanged(fsys, []string{"sites/s1/nodes/n2.yaml"})
	if err != nil || p.Node("s1", "n2") == nil {
		t.Fatalf("new file: %v", err)
	}
	os.Remove(filepath.Join(dir, "sites/s1/nodes/n2.yaml"))
	p, err = c.CompileChanged(fsys, []string{"sites/s1/nodes/n2.yaml"})
	if err != nil || p.Node("s1", "n2") != nil {
		t.Fatalf("removed file: %v", err)
	}
	// A folder that appears is walked.
	os.MkdirAll(filepath.Join(dir, "sites/s1/more"), 0o755)
	os.WriteFile(filepath.Join(dir, "sites/s1/more/n3.yaml"), []byte("apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n3\nidentity: {serial: THREE}\n"), 0o644)
	p, err = c.CompileChanged(fsys, []string{"sites/s1/more"})
	if err != nil || p.Node("s1", "n3") == nil {
		t.Fatalf("new folder: %v", err)
	}
	// A folder that goes away is walked too.
	os.RemoveAll(filepath.Join(dir, "sites/s1/more"))
	p, err = c.CompileChanged(fsys, []string{"sites/s1/more"})
	if err != nil || p.Node("s1", "n3") != nil {
		t.Fatalf("removed folder: %v", err)
	}
	// Hidden and ignored paths stay out.
	os.MkdirAll(filepath.Join(dir, ".git"), 0o755)
	os.WriteFile(filepath.Join(dir, ".git/x.yaml"), []byte("junk: ["), 0o644)
	if _, err = c.CompileChanged(fsys, []string{".git/x.yaml"}); err != nil {
		t.Fatalf("hidden file: %v", err)
	}
	// A clash introduced and removed again through the kept index.
	dup := filepath.Join(dir, "sites/s1/nodes/dup.yaml")
	os.WriteFile(dup, []byte("apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n1\nidentity: {serial: ser-1}\n"), 0o644)
	_, err = c.CompileChanged(fsys, []string{"sites/s1/nodes/dup.yaml"})
	if err == nil || err.Error() != "sites/s1/nodes/n1.yaml:3:1: name: duplicate Node \"n1\" in site s1 (also at sites/s1/nodes/dup.yaml:3:1)\n"+
		"sites/s1/nodes/n1.yaml:5:3: identity.serial: serial SER-1 is also node s1/n1's (at sites/s1/nodes/dup.yaml:4:12)" {
		t.Fatalf("clash: %v", err)
	}
	os.Remove(dup)
	if _, err = c.CompileChanged(fsys, []string{"sites/s1/nodes/dup.yaml"}); err != nil {
		t.Fatalf("clash removed: %v", err)
	}
	// An error introduced, then fixed: the cache keeps neither around.
	os.WriteFile(n1, []byte("apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n1\nidentity: {serial: [bad]}\n"), 0o644)
	_, err = c.CompileChanged(fsys, []string{"./sites/s1/nodes/n1.yaml"})
	var list Errors
	if !errors.As(err, &list) || len(list) != 1 || list[0].Path != "identity.serial" {
		t.Fatalf("broken edit: %v", err)
	}
	os.WriteFile(n1, body, 0o644)
	p, err = c.Compile(fsys)
	if err != nil || p.Node("s1", "n1").Reprovision != 0 {
		t.Fatalf("fixed: %v", err)
	}
	// The same content compiles to the same Plan, cached or cold.
	cold, err := newCompiler(t).Compile(fsys)
	if err != nil || cold.Hash != p.Hash {
		t.Fatalf("cold %v: hash %s, warm %s", err, cold.Hash, p.Hash)
	}
}
