package reconciler

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// treeFS is one commit's tree read straight from the object store, as an
// fs.FS: no checkout, no worktree. Folders are indexed up front (tree
// objects are small); a file's size comes from the object header and its
// content is read only when opened, so a 100 MB blob that the compiler
// refuses by size is never loaded.
//
// Its folders (Files) are kept apart from the object store: see Files.
type treeFS struct {
	Files
	mu    sync.Mutex // the object store is read by one goroutine at a time
	store storer.EncodedObjectStorer
}

// Files is a commit's tree as folders of names and blob hashes, without
// its object store: what the next tree shares and two trees are compared
// by (Changed), keeping no clone open or reachable. A folder's index is
// immutable once made and named by its tree hash, so the next commit's
// tree shares every folder whose hash did not change (newTreeFS's prev): a
// push that edits one node file of 50,000 decodes the few trees on its
// path, not all of them, and what changed is found the same way. The zero
// Files is no tree.
type Files struct {
	root *treeEntry
	dirs map[string]*dirIndex // folder path → its index
	sub  string               // the folder the files are seen from ("": the root)
}

// dirIndex is one folder: its tree's hash, its entries sorted by name.
type dirIndex struct {
	hash    plumbing.Hash
	entries []*treeEntry
	byName  map[string]*treeEntry
}

type treeEntry struct {
	name string
	mode filemode.FileMode
	hash plumbing.Hash
	size atomic.Int64 // -1 until asked; shared by the treeFSs that share the folder
}

// sizer is what the filesystem storage offers to size an object without
// reading it.
type sizer interface {
	EncodedObjectSize(plumbing.Hash) (int64, error)
}

// newTreeFS indexes root's folders, taking from prev (the zero Files:
// none) every folder whose tree hash is the same at the same path.
func newTreeFS(s storer.EncodedObjectStorer, root *object.Tree, prev Files) (*treeFS, error) {
	t := &treeFS{store: s, Files: Files{dirs: map[string]*dirIndex{}}}
	t.root = &treeEntry{name: ".", mode: filemode.Dir, hash: root.Hash}
	if err := t.index(".", root, prev); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *treeFS) index(dir string, tree *object.Tree, prev Files) error {
	d := &dirIndex{hash: tree.Hash, entries: make([]*treeEntry, 0, len(tree.Entries)), byName: make(map[string]*treeEntry, len(tree.Entries))}
	for _, e := range tree.Entries {
		if e.Mode == filemode.Submodule {
			continue // a gitlink: nothing of this repository to read
		}
		te := &treeEntry{name: e.Name, mode: e.Mode, hash: e.Hash}
		te.size.Store(-1)
		d.entries = append(d.entries, te)
		d.byName[e.Name] = te
		if e.Mode != filemode.Dir {
			continue
		}
		p := join(dir, e.Name)
		if prev.shareInto(&t.Files, p, e.Hash) {
			continue
		}
		sub, err := object.GetTree(t.store, e.Hash)
		if err != nil {
			return err
		}
		if err := t.index(p, sub, prev); err != nil {
			return err
		}
	}
	sort.Slice(d.entries, func(i, j int) bool { return d.entries[i].name < d.entries[j].name })
	t.dirs[dir] = d
	return nil
}

// shareInto gives t the folder p and every folder under it when prev has p
// with tree hash h; false when it has not.
func (prev Files) shareInto(t *Files, p string, h plumbing.Hash) bool {
	d := prev.dirs[p]
	if d == nil || d.hash != h {
		return false
	}
	t.dirs[p] = d
	for _, e := range d.entries {
		if e.mode == filemode.Dir {
			prev.shareInto(t, join(p, e.name), e.hash)
		}
	}
	return true
}

func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// Changed lists the files that differ between old and f (added, removed,
// other content), sorted, as paths from the folder they are seen from. It
// descends only into folders whose tree hash differs. Against the zero
// Files (no tree before) it lists nothing: the caller compiles everything.
func (f Files) Changed(old Files) []string {
	if f.dirs == nil || old.dirs == nil {
		return nil
	}
	dir := f.sub
	if dir == "" {
		dir = "."
	}
	var out []string
	f.diff(old, dir, &out)
	if dir != "." {
		for i, p := range out {
			out[i] = strings.TrimPrefix(p, dir+"/")
		}
	}
	sort.Strings(out)
	return out
}

func (f Files) diff(old Files, dir string, out *[]string) {
	nd, od := f.dirs[dir], old.dirs[dir]
	if nd != nil && od != nil && nd.hash == od.hash {
		return
	}
	if nd != nil {
		for _, e := range nd.entries {
			p := join(dir, e.name)
			var o *treeEntry
			if od != nil {
				o = od.byName[e.name]
			}
			switch {
			case e.mode == filemode.Dir:
				if o != nil && o.mode != filemode.Dir {
					*out = append(*out, p) // a file became a folder
				}
				if o == nil || o.hash != e.hash || o.mode != filemode.Dir {
					f.diff(old, p, out)
				}
			case o != nil && o.mode == filemode.Dir:
				*out = append(*out, p)
				old.files(p, out) // a folder became a file: its files went
			case o == nil || o.hash != e.hash:
				*out = append(*out, p)
			}
		}
	}
	if od != nil {
		for _, o := range od.entries {
			if nd != nil && nd.byName[o.name] != nil {
				continue
			}
			if o.mode == filemode.Dir {
				old.files(join(dir, o.name), out)
			} else {
				*out = append(*out, join(dir, o.name))
			}
		}
	}
}

// files appends every file under folder dir.
func (f Files) files(dir string, out *[]string) {
	d := f.dirs[dir]
	if d == nil {
		return
	}
	for _, e := range d.entries {
		if e.mode == filemode.Dir {
			f.files(join(dir, e.name), out)
		} else {
			*out = append(*out, join(dir, e.name))
		}
	}
}

func (t *treeFS) lookup(op, name string) (*treeEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if e := t.entry(name); e != nil {
		return e, nil
	}
	return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

// entry is the file or folder at a valid path, or nil.
func (t *treeFS) entry(name string) *treeEntry {
	if name == "." {
		return t.root
	}
	dir, base := ".", name
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		dir, base = name[:i], name[i+1:]
	}
	if d := t.dirs[dir]; d != nil {
		return d.byName[base]
	}
	return nil
}

func (t *treeFS) info(e *treeEntry) *entryInfo {
	if e.mode != filemode.Dir && e.size.Load() < 0 {
		t.mu.Lock()
		if e.size.Load() < 0 {
			if s, ok := t.store.(sizer); ok {
				if n, err := s.EncodedObjectSize(e.hash); err == nil {
					e.size.Store(n)
				}
			}
			if e.size.Load() < 0 {
				if o, err := t.store.EncodedObject(plumbing.BlobObject, e.hash); err == nil {
					e.size.Store(o.Size())
				}
			}
		}
		t.mu.Unlock()
	}
	return &entryInfo{e: e}
}

// Open opens a file or a folder. Symlinks are not followed: the compiler
// checks and resolves them itself through ReadLink.
func (t *treeFS) Open(name string) (fs.File, error) {
	e, err := t.lookup("open", name)
	if err != nil {
		return nil, err
	}
	for hops := 0; e.mode == filemode.Symlink; hops++ {
		target, err := t.ReadLink(name)
		if err != nil {
			return nil, err
		}
		if hops == 8 || path.IsAbs(target) {
			return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("symlink loop or absolute target")}
		}
		name = path.Join(path.Dir(name), target)
		if e, err = t.lookup("open", name); err != nil {
			return nil, err
		}
	}
	if e.mode == filemode.Dir {
		return &treeDir{fs: t, path: name, info: t.info(e)}, nil
	}
	// The size comes with the object when the file is read: one lookup,
	// not two.
	return &treeFile{fs: t, info: &entryInfo{e: e}}, nil
}

func (t *treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	e, err := t.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	if e.mode != filemode.Dir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
	}
	var list []*treeEntry
	if d := t.dirs[name]; d != nil {
		list = d.entries
	}
	out := make([]fs.DirEntry, len(list))
	for i, c := range list {
		out[i] = dirEntry{fs: t, e: c}
	}
	return out, nil
}

func (t *treeFS) Stat(name string) (fs.FileInfo, error) {
	f, err := t.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

func (t *treeFS) Lstat(name string) (fs.FileInfo, error) {
	e, err := t.lookup("lstat", name)
	if err != nil {
		return nil, err
	}
	return t.info(e), nil
}

func (t *treeFS) ReadLink(name string) (string, error) {
	e, err := t.lookup("readlink", name)
	if err != nil {
		return "", err
	}
	if e.mode != filemode.Symlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	b, err := t.read(e)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return string(b), nil
}

// read loads a blob. Callers check the size first where it matters.
func (t *treeFS) read(e *treeEntry) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, err := t.store.EncodedObject(plumbing.BlobObject, e.hash)
	if err != nil {
		return nil, err
	}
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	buf := bytes.NewBuffer(make([]byte, 0, o.Size()))
	_, err = io.Copy(buf, r)
	return buf.Bytes(), err
}

// BlobID names a file's content (its blob hash); "" if there is none.
func (t *treeFS) BlobID(name string) string {
	if e := t.entry(name); e != nil && e.mode != filemode.Dir {
		return e.hash.String()
	}
	return ""
}

// CopyTo streams a file's content to w (a Micro-OS initrd is large: it is
// not held in memory).
func (t *treeFS) CopyTo(name string, w io.Writer) (int64, error) {
	f, err := t.Open(name)
	if err != nil {
		return 0, err
	}
	f.Close()
	tf, ok := f.(*treeFile)
	if !ok {
		return 0, &fs.PathError{Op: "read", Path: name, Err: errors.New("is a directory")}
	}
	e := tf.info.e
	t.mu.Lock()
	defer t.mu.Unlock()
	o, err := t.store.EncodedObject(plumbing.BlobObject, e.hash)
	if err != nil {
		return 0, err
	}
	r, err := o.Reader()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	return io.Copy(w, r)
}

type entryInfo struct{ e *treeEntry }

func (i *entryInfo) Name() string { return i.e.name }
func (i *entryInfo) Size() int64  { return max(i.e.size.Load(), 0) }

// ModTime is the Unix epoch: a tree has no file times, and a zero
// UnixNano tells the compiler to trust content, never size and time.
func (i *entryInfo) ModTime() time.Time { return time.Unix(0, 0) }
func (i *entryInfo) IsDir() bool        { return i.e.mode == filemode.Dir }
func (i *entryInfo) Sys() any           { return nil }
func (i *entryInfo) Mode() fs.FileMode {
	switch i.e.mode {
	case filemode.Dir:
		return fs.ModeDir | 0o555
	case filemode.Symlink:
		return fs.ModeSymlink | 0o777
	case filemode.Executable:
		return 0o555
	}
	return 0o444
}

type dirEntry struct {
	fs *treeFS
	e  *treeEntry
}

func (d dirEntry) Name() string               { return d.e.name }
func (d dirEntry) IsDir() bool                { return d.e.mode == filemode.Dir }
func (d dirEntry) Type() fs.FileMode          { return (&entryInfo{e: d.e}).Mode().Type() }
func (d dirEntry) Info() (fs.FileInfo, error) { return d.fs.info(d.e), nil }

// treeFile looks its object up on the first Stat or Read, and reads the
// content on the first Read (a blob refused by its size is never read).
type treeFile struct {
	fs   *treeFS
	info *entryInfo
	obj  plumbing.EncodedObject
	r    *bytes.Reader
}

func (f *treeFile) object() (plumbing.EncodedObject, error) {
	if f.obj == nil {
		f.fs.mu.Lock()
		o, err := f.fs.store.EncodedObject(plumbing.BlobObject, f.info.e.hash)
		if err == nil && f.info.e.size.Load() < 0 {
			f.info.e.size.Store(o.Size())
		}
		f.fs.mu.Unlock()
		if err != nil {
			return nil, err
		}
		f.obj = o
	}
	return f.obj, nil
}

func (f *treeFile) Stat() (fs.FileInfo, error) {
	if _, err := f.object(); err != nil {
		return nil, err
	}
	return f.info, nil
}

func (f *treeFile) Close() error { return nil }
func (f *treeFile) Read(p []byte) (int, error) {
	if f.r == nil {
		o, err := f.object()
		if err != nil {
			return 0, err
		}
		f.fs.mu.Lock()
		b, err := readAll(o)
		f.fs.mu.Unlock()
		if err != nil {
			return 0, err
		}
		f.r = bytes.NewReader(b)
	}
	return f.r.Read(p)
}

func readAll(o plumbing.EncodedObject) ([]byte, error) {
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	buf := bytes.NewBuffer(make([]byte, 0, o.Size()))
	_, err = io.Copy(buf, r)
	return buf.Bytes(), err
}

type treeDir struct {
	fs   *treeFS
	path string
	info *entryInfo
	off  int
}

func (d *treeDir) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *treeDir) Close() error               { return nil }
func (d *treeDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.path, Err: errors.New("is a directory")}
}

func (d *treeDir) ReadDir(n int) ([]fs.DirEntry, error) {
	all, _ := d.fs.ReadDir(d.path)
	rest := all[d.off:]
	if n <= 0 {
		d.off = len(all)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	rest = rest[:min(n, len(rest))]
	d.off += len(rest)
	return rest, nil
}

var _ interface {
	fs.ReadDirFS
	fs.StatFS
	fs.ReadLinkFS
} = (*treeFS)(nil)
