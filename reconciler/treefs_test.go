package reconciler

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
)

// writeTree stores files (path → content) as blobs and trees in st and
// returns the root tree.
func writeTree(t *testing.T, st *memory.Storage, files map[string]string) *object.Tree {
	t.Helper()
	type node struct {
		files map[string]plumbing.Hash
		dirs  map[string]*node
	}
	root := &node{files: map[string]plumbing.Hash{}, dirs: map[string]*node{}}
	for p, content := range files {
		o := st.NewEncodedObject()
		o.SetType(plumbing.BlobObject)
		w, _ := o.Writer()
		w.Write([]byte(content))
		w.Close()
		h, err := st.SetEncodedObject(o)
		if err != nil {
			t.Fatal(err)
		}
		n := root
		parts := strings.Split(p, "/")
		for _, d := range parts[:len(parts)-1] {
			if n.dirs[d] == nil {
				n.dirs[d] = &node{files: map[string]plumbing.Hash{}, dirs: map[string]*node{}}
			}
			n = n.dirs[d]
		}
		n.files[parts[len(parts)-1]] = h
	}
	var write func(n *node) plumbing.Hash
	write = func(n *node) plumbing.Hash {
		tr := &object.Tree{}
		for name, h := range n.files {
			tr.Entries = append(tr.Entries, object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h})
		}
		for name, d := range n.dirs {
			tr.Entries = append(tr.Entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: write(d)})
		}
		// Git's order: by name, a folder as if its name ended in "/".
		slices.SortFunc(tr.Entries, func(a, b object.TreeEntry) int {
			ka, kb := a.Name, b.Name
			if a.Mode == filemode.Dir {
				ka += "/"
			}
			if b.Mode == filemode.Dir {
				kb += "/"
			}
			return strings.Compare(ka, kb)
		})
		o := st.NewEncodedObject()
		if err := tr.Encode(o); err != nil {
			t.Fatal(err)
		}
		h, err := st.SetEncodedObject(o)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	tr, err := object.GetTree(st, write(root))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// changedFiles is what changed between two file maps, from the maps
// alone: the answer Files.Changed must give, found another way. Paths
// under sub (not ".") are listed from it.
func changedFiles(base, next map[string]string, sub string) []string {
	var out []string
	for _, m := range []map[string]string{base, next} {
		for p := range m {
			c1, in1 := base[p]
			c2, in2 := next[p]
			if in1 && in2 && c1 == c2 {
				continue
			}
			if sub != "." {
				rest, ok := strings.CutPrefix(p, sub+"/")
				if !ok {
					continue
				}
				p = rest
			}
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestTreeFSSharesAndDiffs: a tree indexed after another shares the
// folders whose hash did not change (the same index, not a copy), reads
// the same as one indexed alone, and what changed between the two is what
// comparing the two sets of files says — for edits, additions, removals, a
// folder that became a file and a file that became a folder, from the root
// and from a folder within (as `bootops diff --dir` sees it).
func TestTreeFSSharesAndDiffs(t *testing.T) {
	base := map[string]string{
		"site.yaml":                 "site",
		"sites/a/nodes/n1.yaml":     "n1",
		"sites/a/nodes/n2.yaml":     "n2",
		"sites/b/nodes/n3.yaml":     "n3",
		"sites/b/nodes/deep/x.yaml": "x",
		"profiles/p.yaml":           "p",
		"gone/one.yaml":             "1",
		"gone/sub/two.yaml":         "2",
		"becomes-dir":               "file",
	}
	next := map[string]string{}
	for p, c := range base {
		next[p] = c
	}
	next["sites/a/nodes/n1.yaml"] = "n1 edited"
	next["sites/a/nodes/n9.yaml"] = "added"
	delete(next, "sites/b/nodes/deep/x.yaml")
	delete(next, "gone/one.yaml")
	delete(next, "gone/sub/two.yaml")
	next["gone"] = "now a file"
	delete(next, "becomes-dir")
	next["becomes-dir/inside.yaml"] = "in"

	st := memory.NewStorage()
	oldFS, err := newTreeFS(st, writeTree(t, st, base), Files{})
	if err != nil {
		t.Fatal(err)
	}
	newTree := writeTree(t, st, next)
	shared, err := newTreeFS(st, newTree, oldFS.Files)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := newTreeFS(st, newTree, Files{})
	if err != nil {
		t.Fatal(err)
	}

	if shared.dirs["profiles"] != oldFS.dirs["profiles"] || shared.dirs["sites/b"] == oldFS.dirs["sites/b"] {
		t.Error("unchanged folder profiles should be shared, changed sites/b not")
	}
	if shared.dirs["sites/a/nodes"] == oldFS.dirs["sites/a/nodes"] {
		t.Error("sites/a/nodes changed and was shared")
	}

	want := changedFiles(base, next, ".")
	got := shared.Changed(oldFS.Files)
	if !slices.Equal(got, want) {
		t.Errorf("changed = %q, want %q", got, want)
	}
	if again := alone.Changed(oldFS.Files); !slices.Equal(again, want) {
		t.Errorf("changed, indexed alone = %q, want %q", again, want)
	}
	oldSub, newSub := oldFS.Files, shared.Files
	oldSub.sub, newSub.sub = "sites", "sites"
	if got, want := newSub.Changed(oldSub), changedFiles(base, next, "sites"); !slices.Equal(got, want) {
		t.Errorf("changed within sites = %q, want %q", got, want)
	}
	if got := shared.Changed(Files{}); got != nil {
		t.Errorf("against no tree before: %q, want nothing (the caller compiles everything)", got)
	}
	for _, p := range []string{"sites/a/nodes/n1.yaml", "sites/a/nodes/n9.yaml", "sites/b/nodes/deep/x.yaml", "gone", "gone/one.yaml", "gone/sub/two.yaml", "becomes-dir", "becomes-dir/inside.yaml"} {
		if !slices.Contains(got, p) {
			t.Errorf("changed misses %s: %q", p, got)
		}
	}
	if slices.Contains(got, "profiles/p.yaml") || slices.Contains(got, "sites/a/nodes/n2.yaml") {
		t.Errorf("changed lists unchanged files: %q", got)
	}
	if d := shared.Changed(shared.Files); len(d) != 0 {
		t.Errorf("a tree against itself: %q", d)
	}

	// Read through the shared index: the same files, sizes and contents.
	if err := fstest.TestFS(shared, "site.yaml", "sites/a/nodes/n9.yaml", "profiles/p.yaml", "gone", "becomes-dir/inside.yaml"); err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(shared, "sites/a/nodes/n1.yaml")
	if err != nil || string(b) != "n1 edited" {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := fs.Stat(shared, "sites/b/nodes/deep"); err == nil {
		t.Error("a removed folder is still there")
	}
}
