package reconciler

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"path"
	"sort"
	"sync"
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
type treeFS struct {
	mu    sync.Mutex // the object store is read by one goroutine at a time
	store storer.EncodedObjectStorer
	dirs  map[string][]*treeEntry // folder → entries sorted by name
	files map[string]*treeEntry   // path → entry, folders included
}

type treeEntry struct {
	name string
	mode filemode.FileMode
	hash plumbing.Hash
	size int64 // -1 until asked
}

// sizer is what the filesystem storage offers to size an object without
// reading it.
type sizer interface {
	EncodedObjectSize(plumbing.Hash) (int64, error)
}

func newTreeFS(s storer.EncodedObjectStorer, root *object.Tree) (*treeFS, error) {
	t := &treeFS{store: s, dirs: map[string][]*treeEntry{}, files: map[string]*treeEntry{}}
	t.files["."] = &treeEntry{name: ".", mode: filemode.Dir, hash: root.Hash}
	if err := t.index(".", root); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *treeFS) index(dir string, tree *object.Tree) error {
	entries := make([]*treeEntry, 0, len(tree.Entries))
	for _, e := range tree.Entries {
		if e.Mode == filemode.Submodule {
			continue // a gitlink: nothing of this repository to read
		}
		te := &treeEntry{name: e.Name, mode: e.Mode, hash: e.Hash, size: -1}
		entries = append(entries, te)
		p := e.Name
		if dir != "." {
			p = dir + "/" + e.Name
		}
		t.files[p] = te
		if e.Mode == filemode.Dir {
			sub, err := object.GetTree(t.store, e.Hash)
			if err != nil {
				return err
			}
			if err := t.index(p, sub); err != nil {
				return err
			}
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	t.dirs[dir] = entries
	return nil
}

// Blobs are a tree's files (not folders) by path, with their blob hashes:
// what changed between two trees is a comparison of these.
type Blobs map[string]plumbing.Hash

// Changed lists the paths that differ from old: added, removed or with
// other content.
func (b Blobs) Changed(old Blobs) []string {
	var out []string
	for p, h := range b {
		if old[p] != h {
			out = append(out, p)
		}
	}
	for p := range old {
		if _, ok := b[p]; !ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (t *treeFS) blobs() Blobs {
	out := make(Blobs, len(t.files))
	for p, e := range t.files {
		if e.mode != filemode.Dir {
			out[p] = e.hash
		}
	}
	return out
}

func (t *treeFS) lookup(op, name string) (*treeEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	e := t.files[name]
	if e == nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return e, nil
}

func (t *treeFS) info(e *treeEntry) *entryInfo {
	if e.mode != filemode.Dir && e.size < 0 {
		t.mu.Lock()
		if e.size < 0 {
			if s, ok := t.store.(sizer); ok {
				if n, err := s.EncodedObjectSize(e.hash); err == nil {
					e.size = n
				}
			}
			if e.size < 0 {
				if o, err := t.store.EncodedObject(plumbing.BlobObject, e.hash); err == nil {
					e.size = o.Size()
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
	list := t.dirs[name]
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
	if e := t.files[name]; e != nil && e.mode != filemode.Dir {
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
func (i *entryInfo) Size() int64  { return max(i.e.size, 0) }

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
		if err == nil && f.info.e.size < 0 {
			f.info.e.size = o.Size()
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
