package microos

import (
	"bytes"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
)

// File type bits of a cpio mode (as in stat(2)).
const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
	modeCharDev = 0o020000
)

// entry is one member of the archive.
type entry struct {
	name         string // relative, without a leading slash: "bin/busybox"
	mode         uint32 // type and permission bits
	data         []byte // a file's content or a symlink's target
	major, minor uint32 // a device node's number
}

// archive collects entries and writes them as a newc cpio, the format the
// kernel unpacks, in a reproducible way: entries sorted by name (a folder
// sorts before what it holds), inode numbers given in that order, times,
// owners and device fields zero.
type archive struct {
	entries map[string]entry
}

func newArchive() *archive { return &archive{entries: map[string]entry{}} }

// add puts e into the archive, with any parent folders it lacks.
func (a *archive) add(e entry) {
	e.name = strings.TrimPrefix(path.Clean("/"+e.name), "/")
	for d := path.Dir(e.name); d != "."; d = path.Dir(d) {
		if _, ok := a.entries[d]; !ok {
			a.entries[d] = entry{name: d, mode: modeDir | 0o755}
		}
	}
	a.entries[e.name] = e
}

func (a *archive) dir(name string, perm uint32) { a.add(entry{name: name, mode: modeDir | perm}) }

func (a *archive) file(name string, perm uint32, data []byte) {
	a.add(entry{name: name, mode: modeFile | perm, data: data})
}

func (a *archive) symlink(name, target string) {
	a.add(entry{name: name, mode: modeSymlink | 0o777, data: []byte(target)})
}

func (a *archive) charDev(name string, perm, major, minor uint32) {
	a.add(entry{name: name, mode: modeCharDev | perm, major: major, minor: minor})
}

// writeTo writes the archive, trailer included, to w.
func (a *archive) writeTo(w io.Writer) error {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	cw := &cpioWriter{w: w}
	for i, n := range names {
		cw.write(uint32(i+1), a.entries[n])
	}
	cw.write(0, entry{name: "TRAILER!!!"})
	return cw.err
}

// cpioWriter writes newc headers and data, keeping the first error and the
// offset the 4-byte padding is counted from.
type cpioWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *cpioWriter) put(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.put(make([]byte, 4-r))
	}
}

func (c *cpioWriter) write(ino uint32, e entry) {
	nlink := uint32(1)
	if e.mode&0o170000 == modeDir {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize, check.
	c.put(fmt.Appendf(nil, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, e.mode, 0, 0, nlink, 0, len(e.data), 0, 0, e.major, e.minor, len(e.name)+1, 0))
	c.put(append([]byte(e.name), 0))
	c.pad()
	c.put(e.data)
	c.pad()
}

// Overlay is an uncompressed newc archive of files (path → content, mode
// 0644, their folders 0755) for the kernel to unpack over the Micro-OS's
// own initramfs: the signed site overlay.
func Overlay(files map[string][]byte) []byte {
	a := newArchive()
	for name, data := range files {
		a.file(name, 0o644, data)
	}
	var b bytes.Buffer
	a.writeTo(&b)
	return b.Bytes()
}
