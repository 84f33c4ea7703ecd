package compiler

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"unicode/utf8"
)

// maxFileSize is the largest repository file the compiler reads. A larger
// file is an error (never silently skipped); it is not read at all.
const maxFileSize = 8 << 20

// listed is a file found in the repository, with what its directory entry
// says of it (mtime 0 when the source has no meaningful times).
type listed struct {
	path  string
	size  int64
	mtime int64
}

// srcFile is one repository file to compile.
type srcFile struct {
	path string
	data []byte
}

// listFiles walks fsys for *.yaml, *.yml and *.cue files, skipping hidden
// entries, cue.mod and what .bootopsignore lists. Symlinks are followed only
// when they stay inside the repository; one that leaves it is an error and
// its target is never read.
func listFiles(fsys fs.FS, stat bool) ([]listed, ignore, Errors) {
	ign, errs := readIgnore(fsys)
	var files []listed
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, errorf(Pos{File: p, Line: 1, Col: 1}, "", "cannot read: %v", unwrapPathErr(err)))
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if p == "." {
			return nil
		}
		base := path.Base(p)
		if strings.HasPrefix(base, ".") || (d.IsDir() && base == "cue.mod") || ign.match(p, d.IsDir()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || !isSource(p) {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			if e := checkSymlink(fsys, p); e != nil {
				errs = append(errs, e)
				return nil
			}
		} else if !d.Type().IsRegular() {
			errs = append(errs, errorf(Pos{File: p, Line: 1, Col: 1}, "", "not a regular file"))
			return nil
		}
		l := listed{path: p}
		if stat && d.Type().IsRegular() {
			// A zero time (fstest.MapFS, some archives) is no time at all:
			// its UnixNano is not 0, and two files of one size would look
			// unchanged.
			if info, err := d.Info(); err == nil && !info.ModTime().IsZero() {
				l.size, l.mtime = info.Size(), info.ModTime().UnixNano()
			}
		}
		files = append(files, l)
		return nil
	})
	if err != nil {
		errs = append(errs, errorf(Pos{File: ".", Line: 1, Col: 1}, "", "walk: %v", err))
	}
	return files, ign, errs
}

// updateListing applies a watcher's list of changed paths to the previous
// listing without walking the tree. It reports false when only a walk can
// tell (an ignore file, a folder or a symlink changed).
//
// known holds the paths of prev; it is updated in place when the listing
// changes.
func updateListing(fsys fs.FS, prev []listed, known map[string]bool, ign ignore, changed map[string]bool) ([]listed, bool) {
	out := prev
	removed := map[string]bool{}
	var added []string
	for p := range changed {
		if p == ".bootopsignore" {
			return nil, false
		}
		if excluded(p, ign) {
			continue
		}
		st, err := fs.Lstat(fsys, p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if known[p] {
				removed[p] = true
			} else if !isSource(p) {
				// A removed folder: which files it held only a walk says.
				return nil, false
			}
			continue
		case err != nil || st.IsDir() || st.Mode()&fs.ModeSymlink != 0 || !st.Mode().IsRegular():
			return nil, false
		}
		if !isSource(p) {
			continue
		}
		if !known[p] {
			out = append(out, listed{path: p})
			added = append(added, p)
		}
	}
	if len(removed) > 0 {
		out = slices.DeleteFunc(out, func(l listed) bool { return removed[l.path] })
	}
	for p := range removed {
		delete(known, p)
	}
	for _, p := range added {
		known[p] = true
	}
	if len(added) > 0 {
		slices.SortFunc(out, func(a, b listed) int { return strings.Compare(a.path, b.path) })
	}
	return out, true
}

// excluded reports whether a walk would skip p: a hidden name or cue.mod on
// the way, or a match in .bootopsignore.
func excluded(p string, ign ignore) bool {
	parts := strings.Split(p, "/")
	for i, part := range parts {
		dir := i < len(parts)-1
		if strings.HasPrefix(part, ".") || (dir && part == "cue.mod") || ign.match(strings.Join(parts[:i+1], "/"), dir) {
			return true
		}
	}
	return false
}

func isSource(p string) bool {
	switch path.Ext(p) {
	case ".yaml", ".yml", ".cue":
		return true
	}
	return false
}

func checkSymlink(fsys fs.FS, p string) *Error {
	pos := Pos{File: p, Line: 1, Col: 1}
	rl, ok := fsys.(fs.ReadLinkFS)
	if !ok {
		return errorf(pos, "", "symlinks are not supported by this source")
	}
	target, err := rl.ReadLink(p)
	if err != nil {
		return errorf(pos, "", "cannot read symlink: %v", unwrapPathErr(err))
	}
	if path.IsAbs(target) || strings.HasPrefix(target, "/") {
		return errorf(pos, "", "symlink points outside the repository (to %s): refused", target)
	}
	resolved := path.Join(path.Dir(p), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return errorf(pos, "", "symlink points outside the repository (to %s): refused", target)
	}
	return nil
}

// readFile reads one file with the size and text checks.
func readFile(fsys fs.FS, p string) ([]byte, fs.FileInfo, *Error) {
	pos := Pos{File: p, Line: 1, Col: 1}
	f, err := fsys.Open(p)
	if err != nil {
		return nil, nil, errorf(pos, "", "cannot read: %v", unwrapPathErr(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, errorf(pos, "", "cannot read: %v", unwrapPathErr(err))
	}
	if st.IsDir() {
		return nil, nil, errorf(pos, "", "is a directory")
	}
	if st.Size() > maxFileSize {
		return nil, nil, errorf(pos, "", "file is %d bytes, more than the %d MiB limit: split it", st.Size(), maxFileSize>>20)
	}
	// One read of the size stat gave, and one more to see the end (the
	// file may have grown since).
	data := make([]byte, 0, st.Size()+512)
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if len(data) > maxFileSize {
			return nil, nil, errorf(pos, "", "file is more than the %d MiB limit: split it", maxFileSize>>20)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, errorf(pos, "", "cannot read: %v", unwrapPathErr(err))
		}
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if e := checkText(p, data); e != nil {
		return nil, nil, e
	}
	return data, st, nil
}

// checkText refuses binary content with the position of the first bad byte.
func checkText(p string, data []byte) *Error {
	line, col := 1, 1
	for i := 0; i < len(data); {
		c := data[i]
		if c == 0 {
			return errorf(Pos{File: p, Line: line, Col: col}, "", "not a text file (NUL byte)")
		}
		if c < utf8.RuneSelf {
			if c == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return errorf(Pos{File: p, Line: line, Col: col}, "", "not a text file (invalid UTF-8)")
		}
		i += size
		col++
	}
	return nil
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ignore holds the patterns of .bootopsignore: one per line, '#' comments,
// gitignore-like: a pattern without '/' matches a name at any depth, one with
// '/' matches from the root, a trailing '/' matches folders only.
type ignore []ignorePattern

type ignorePattern struct {
	pat      string
	anchored bool
	dirOnly  bool
}

func readIgnore(fsys fs.FS) (ignore, Errors) {
	data, err := fs.ReadFile(fsys, ".bootopsignore")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, Errors{errorf(Pos{File: ".bootopsignore", Line: 1, Col: 1}, "", "cannot read: %v", unwrapPathErr(err))}
	}
	var ign ignore
	var errs Errors
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			errs = append(errs, errorf(Pos{File: ".bootopsignore", Line: n, Col: 1}, "", "negated patterns are not supported"))
			continue
		}
		p := ignorePattern{}
		if strings.HasSuffix(line, "/") {
			p.dirOnly = true
			line = strings.TrimSuffix(line, "/")
		}
		if strings.Contains(line, "/") {
			p.anchored = true
			line = strings.TrimPrefix(line, "/")
		}
		if _, err := path.Match(line, ""); err != nil {
			errs = append(errs, errorf(Pos{File: ".bootopsignore", Line: n, Col: 1}, "", "bad pattern %q: %v", line, err))
			continue
		}
		p.pat = line
		ign = append(ign, p)
	}
	return ign, errs
}

func (ign ignore) match(p string, dir bool) bool {
	for _, g := range ign {
		if g.dirOnly && !dir {
			continue
		}
		if g.anchored {
			if ok, _ := path.Match(g.pat, p); ok {
				return true
			}
			continue
		}
		if ok, _ := path.Match(g.pat, path.Base(p)); ok {
			return true
		}
	}
	return false
}

// siteFromPath returns <site> for files under sites/<site>/.
func siteFromPath(p string) string {
	parts := strings.Split(p, "/")
	if len(parts) >= 3 && parts[0] == "sites" {
		return parts[1]
	}
	return ""
}
