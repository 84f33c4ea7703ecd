package swarm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// ChunkSize is the size of a chunk (the last one of an image is shorter):
// 4 MiB takes about 34 ms at 1 Gb/s, so a request's overhead stays small
// and a chunk can be passed on soon after it arrived.
const ChunkSize = 4 << 20

// Manifest describes a raw image chunk by chunk. Source, the sha256 of the
// file at the image's URL (compressed or not), names the image.
type Manifest struct {
	Source    string `json:"source"`
	Size      int64  `json:"size"`   // the raw image's length in bytes
	SHA256    string `json:"sha256"` // of the raw image
	ChunkSize int64  `json:"chunkSize"`
	// Hashes holds every chunk's sha256, one after the other.
	Hashes []byte `json:"hashes"`
	// Zero has bit i (byte i/8, bit i%8) set when chunk i is all zeros.
	Zero []byte `json:"zero"`
}

// Chunks is the number of chunks.
func (m *Manifest) Chunks() int {
	if m.ChunkSize <= 0 {
		return 0
	}
	return int((m.Size + m.ChunkSize - 1) / m.ChunkSize)
}

// Span is chunk i's offset and length.
func (m *Manifest) Span(i int) (off, n int64) {
	off = int64(i) * m.ChunkSize
	return off, min(m.ChunkSize, m.Size-off)
}

// IsZero says chunk i is all zeros: nobody sends it, each machine writes it.
func (m *Manifest) IsZero(i int) bool { return m.Zero[i/8]&(1<<(i%8)) != 0 }

// Verify says b is chunk i.
func (m *Manifest) Verify(i int, b []byte) bool {
	if _, n := m.Span(i); int64(len(b)) != n {
		return false
	}
	sum := sha256.Sum256(b)
	return bytes.Equal(sum[:], m.Hashes[i*sha256.Size:(i+1)*sha256.Size])
}

// NonZero is the number of bytes in chunks that are not all zeros: what
// is transferred.
func (m *Manifest) NonZero() int64 {
	var n int64
	for i := range m.Chunks() {
		if !m.IsZero(i) {
			_, l := m.Span(i)
			n += l
		}
	}
	return n
}

// Check says whether m is consistent (a manifest from the network).
func (m *Manifest) Check() error {
	switch {
	case len(m.Source) != 64 || len(m.SHA256) != 64:
		return errors.New("manifest: source and sha256 must be 64 hex digits")
	case m.ChunkSize <= 0 || m.ChunkSize > 64<<20:
		return fmt.Errorf("manifest: chunk size %d out of range", m.ChunkSize)
	case m.Size <= 0:
		return fmt.Errorf("manifest: size %d", m.Size)
	case len(m.Hashes) != m.Chunks()*sha256.Size:
		return fmt.Errorf("manifest: %d bytes of hashes for %d chunks", len(m.Hashes), m.Chunks())
	case len(m.Zero) != (m.Chunks()+7)/8:
		return fmt.Errorf("manifest: zero bitmap of %d bytes for %d chunks", len(m.Zero), m.Chunks())
	}
	return nil
}

// Build reads a raw image from r and describes it. Every chunk that is
// not all zeros is also written to w at its offset (w may be nil), so w
// becomes a sparse copy of the image. chunk is the chunk size (0:
// ChunkSize).
func Build(source string, r io.Reader, w io.WriterAt, chunk int64) (*Manifest, error) {
	if chunk <= 0 {
		chunk = ChunkSize
	}
	m := &Manifest{Source: source, ChunkSize: chunk}
	whole := sha256.New()
	buf := make([]byte, chunk)
	for i := 0; ; i++ {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			b := buf[:n]
			whole.Write(b)
			sum := sha256.Sum256(b)
			m.Hashes = append(m.Hashes, sum[:]...)
			if i/8 >= len(m.Zero) {
				m.Zero = append(m.Zero, 0)
			}
			if allZero(b) {
				m.Zero[i/8] |= 1 << (i % 8)
			} else if w != nil {
				if _, err := w.WriteAt(b, m.Size); err != nil {
					return nil, fmt.Errorf("write chunk %d: %w", i, err)
				}
			}
			m.Size += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if m.Size == 0 {
		return nil, errors.New("the image is empty")
	}
	m.SHA256 = hex.EncodeToString(whole.Sum(nil))
	return m, nil
}

// allZero says b holds only zeros.
func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
