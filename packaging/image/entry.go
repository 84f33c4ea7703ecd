package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Entry is one tar entry of a layer as read back.
type Entry struct {
	Path     string
	Type     byte
	Mode     int64
	UID, GID int
	Size     int64
	ModTime  time.Time
}

func walk(l v1.Layer, visit func(Entry)) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return fmt.Errorf("image: layer: %w", err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("image: layer: %w", err)
		}
		visit(Entry{Path: path.Clean("/" + h.Name), Type: h.Typeflag, Mode: h.Mode, UID: h.Uid, GID: h.Gid, Size: h.Size, ModTime: h.ModTime})
	}
}
