package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/anacrolix/torrent/metainfo"
	"github.com/anacrolix/torrent/storage"
)

// Piece completion states kept by fileStorage.
const (
	pieceUnknown    int32 = iota // library must hash the piece to find out
	pieceIncomplete              // known missing
	pieceComplete                // verified
)

// fileStorage is a storage.ClientImpl that reads and writes the single file
// of a torrent with ReadAt/WriteAt on one *os.File at the piece's offset, the
// way an agent writes an image to a block device. Piece completion is kept in
// memory only: it does not survive a restart.
//
// The caller owns f and closes it after the torrent client is closed.
type fileStorage struct {
	f       *os.File
	initial int32 // completion state every piece starts in
	states  []atomic.Int32
}

// newFileStorage returns a storage over f. If trustEmpty, every piece starts
// known-incomplete (a fresh output file, nothing to hash); otherwise every
// piece starts unknown and the library hashes it before use (a seed).
func newFileStorage(f *os.File, trustEmpty bool) *fileStorage {
	s := &fileStorage{f: f, initial: pieceUnknown}
	if trustEmpty {
		s.initial = pieceIncomplete
	}
	return s
}

// OpenTorrent implements storage.ClientImpl for a single-file torrent.
func (s *fileStorage) OpenTorrent(_ context.Context, info *metainfo.Info, _ metainfo.Hash) (storage.TorrentImpl, error) {
	if info.IsDir() {
		return storage.TorrentImpl{}, fmt.Errorf("torrent %q has several files; only one is supported", info.Name)
	}
	s.states = make([]atomic.Int32, info.NumPieces())
	for i := range s.states {
		s.states[i].Store(s.initial)
	}
	return storage.TorrentImpl{
		Piece: s.piece,
		// The caller closes the file; nothing to release per torrent.
		Close: func() error { return nil },
	}, nil
}

func (s *fileStorage) piece(p metainfo.Piece) storage.PieceImpl {
	return &filePiece{s: s, index: p.Index(), off: p.Offset(), len: p.Length()}
}

// filePiece is one piece's window onto the file.
type filePiece struct {
	s     *fileStorage
	index int
	off   int64 // piece start in the file
	len   int64 // piece length
}

// clamp trims b to the part of the piece at off, and reports whether it had
// to (a short read or write then ends with io.EOF).
func (p *filePiece) clamp(b []byte, off int64) ([]byte, bool) {
	if off >= p.len {
		return b[:0], len(b) > 0
	}
	if rest := p.len - off; int64(len(b)) > rest {
		return b[:rest], true
	}
	return b, false
}

func (p *filePiece) ReadAt(b []byte, off int64) (int, error) {
	b, short := p.clamp(b, off)
	n, err := p.s.f.ReadAt(b, p.off+off)
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

func (p *filePiece) WriteAt(b []byte, off int64) (int, error) {
	b, short := p.clamp(b, off)
	n, err := p.s.f.WriteAt(b, p.off+off)
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

func (p *filePiece) MarkComplete() error {
	p.s.states[p.index].Store(pieceComplete)
	return nil
}

func (p *filePiece) MarkNotComplete() error {
	p.s.states[p.index].Store(pieceIncomplete)
	return nil
}

func (p *filePiece) Completion() storage.Completion {
	switch p.s.states[p.index].Load() {
	case pieceComplete:
		return storage.Completion{Ok: true, Complete: true}
	case pieceIncomplete:
		return storage.Completion{Ok: true}
	default:
		return storage.Completion{}
	}
}
