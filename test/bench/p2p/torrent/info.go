package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/anacrolix/torrent/bencode"
	"github.com/anacrolix/torrent/metainfo"
)

// runInfo implements "p2ptorrent info": it hashes the raw image into a
// private, v1 (SHA-1 pieces) single-file metainfo named "image".
func runInfo(args []string) error {
	fs := flag.NewFlagSet("info", flag.ContinueOnError)
	in := fs.String("in", "", "raw image file to describe")
	piece := fs.Int64("piece", 4<<20, "piece length in bytes")
	out := fs.String("o", "", "path of the .torrent to write")
	webseed := fs.String("webseed", "", "optional BEP 19 web seed URL (url-list)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *out == "" {
		return errors.New("-in and -o are required")
	}
	if *piece <= 0 {
		return fmt.Errorf("-piece %d: must be positive", *piece)
	}
	mi, err := buildMetaInfo(*in, *piece, *webseed)
	if err != nil {
		return err
	}
	return writeMetaInfo(mi, *out)
}

// buildMetaInfo hashes the file at path and returns its metainfo.
func buildMetaInfo(path string, pieceLen int64, webseed string) (*metainfo.MetaInfo, error) {
	size, err := fileSize(path)
	if err != nil {
		return nil, err
	}
	private := true
	info := metainfo.Info{
		Name:        "image",
		PieceLength: pieceLen,
		Length:      size,
		Private:     &private,
	}
	// GeneratePieces rather than BuildFromFilePath: the latter takes the
	// length from os.Stat, which is 0 for a block device.
	err = info.GeneratePieces(func(metainfo.FileInfo) (io.ReadCloser, error) {
		return os.Open(path)
	})
	if err != nil {
		return nil, fmt.Errorf("hashing %s: %w", path, err)
	}
	infoBytes, err := bencode.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("encoding info: %w", err)
	}
	mi := &metainfo.MetaInfo{InfoBytes: infoBytes, CreatedBy: "bootops p2ptorrent"}
	if webseed != "" {
		mi.UrlList = []string{webseed}
	}
	return mi, nil
}

// fileSize returns the size of a regular file or block device by seeking to
// its end.
func fileSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("sizing %s: %w", path, err)
	}
	if size == 0 {
		return 0, fmt.Errorf("%s is empty", path)
	}
	return size, nil
}

// writeMetaInfo writes mi to path, replacing it atomically.
func writeMetaInfo(mi *metainfo.MetaInfo, path string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := mi.Write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("closing %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}
