package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"
)

// File is one entry of a layer.
type File struct {
	Path     string // absolute path in the image
	Mode     int64  // permission bits (and sticky bit): 0755, 01777
	UID, GID int
	Dir      bool
	Data     []byte // a file's contents
}

// Tar writes files as a layer's tar stream: sorted by path, the parent
// folders a file needs added (root's, 0755) unless listed, every entry
// stamped with mtime and no user or group names, so the bytes depend on
// the files alone.
func Tar(files []File, mtime time.Time) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		p := path.Clean(f.Path)
		if !path.IsAbs(p) || p == "/" {
			return nil, fmt.Errorf("image: layer entry %q: want an absolute path below /", f.Path)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("image: layer entry %s twice", p)
		}
		f.Path = p
		byPath[p] = f
	}
	for p, f := range byPath {
		if !f.Dir && f.Data == nil {
			return nil, fmt.Errorf("image: layer entry %s: a file without contents", p)
		}
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d, Dir: true, Mode: 0o755}
			} else if !byPath[d].Dir {
				return nil, fmt.Errorf("image: layer entry %s: its parent %s is a file", p, d)
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime = mtime.UTC().Truncate(time.Second)
	for _, p := range paths {
		f := byPath[p]
		h := &tar.Header{
			Name: strings.TrimPrefix(p, "/"), Mode: f.Mode, Uid: f.UID, Gid: f.GID,
			ModTime: mtime,
		}
		if f.Dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("image: tar %s: %w", p, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("image: tar %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image: tar: %w", err)
	}
	return buf.Bytes(), nil
}
