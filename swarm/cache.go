package swarm

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Image is a raw image the server holds for a swarm: its manifest and the
// sparse file of its chunks.
type Image struct {
	Manifest *Manifest
	Path     string
}

// Cache fetches OS images for swarms into a folder, once each: the file
// at the image's URL is checked against the sha256 Git gives, and
// decompressed into a sparse raw file beside its manifest
// (DIR/SHA256/raw, DIR/SHA256/manifest.json).
type Cache struct {
	Dir    string
	Client *http.Client

	mu       sync.Mutex
	images   map[string]*Image
	inflight map[string]*prep
}

// prep is an image being prepared.
type prep struct {
	done       chan struct{}
	err        error
	read, size atomic.Int64 // bytes of the file at the URL read so far, of how many (0: unknown)
}

// PreparingError says an image is being fetched: ask again later.
type PreparingError struct{ Read, Size int64 }

func (e *PreparingError) Error() string {
	if e.Size > 0 {
		return fmt.Sprintf("the server is preparing the image (%d of %d MB)", e.Read>>20, e.Size>>20)
	}
	return fmt.Sprintf("the server is preparing the image (%d MB)", e.Read>>20)
}

// Get returns the image whose file at url has the given sha256. Until it
// is ready, it returns a *PreparingError (the first call starts preparing
// it); a failed preparation is returned once, and the next call starts
// again.
func (c *Cache) Get(url, sum, compression string) (*Image, error) {
	sum = strings.ToLower(sum)
	if len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("sha256 %q: want 64 hex digits", sum)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if im := c.images[sum]; im != nil {
		return im, nil
	}
	if c.images == nil {
		c.images, c.inflight = map[string]*Image{}, map[string]*prep{}
	}
	p := c.inflight[sum]
	if p == nil {
		// Prepared before the server started?
		if im, err := c.load(sum); err == nil {
			c.images[sum] = im
			return im, nil
		}
		p = &prep{done: make(chan struct{})}
		c.inflight[sum] = p
		go func() {
			im, err := c.prepare(p, url, sum, compression)
			c.mu.Lock()
			if err == nil {
				c.images[sum] = im
				delete(c.inflight, sum)
			}
			p.err = err
			c.mu.Unlock()
			close(p.done)
		}()
	}
	select {
	case <-p.done:
		delete(c.inflight, sum)
		if p.err != nil {
			return nil, p.err
		}
		return c.images[sum], nil
	default:
		return nil, &PreparingError{Read: p.read.Load(), Size: p.size.Load()}
	}
}

// Lookup returns the image of the given sha256 if it is prepared, and
// nil else (it starts nothing).
func (c *Cache) Lookup(sum string) *Image {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.images[sum]
}

// load reads a prepared image from the folder.
func (c *Cache) load(sum string) (*Image, error) {
	dir := filepath.Join(c.Dir, sum)
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, err
	}
	m := new(Manifest)
	if err := json.Unmarshal(b, m); err != nil {
		return nil, err
	}
	if err := m.Check(); err != nil || m.Source != sum {
		return nil, fmt.Errorf("%s: not this image's manifest", dir)
	}
	st, err := os.Stat(filepath.Join(dir, "raw"))
	if err != nil || st.Size() != m.Size {
		return nil, fmt.Errorf("%s: raw file missing or of another size", dir)
	}
	return &Image{Manifest: m, Path: filepath.Join(dir, "raw")}, nil
}

// prepare fetches, checks and decompresses the image, and writes its
// manifest last: a folder without one is not an image.
func (c *Cache) prepare(p *prep, url, sum, compression string) (*Image, error) {
	dir := filepath.Join(c.Dir, sum)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch the image for peers: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch the image for peers: GET %s: %s", url, resp.Status)
	}
	p.size.Store(max(resp.ContentLength, 0))
	tmp := filepath.Join(dir, "raw.part")
	f, err := os.Create(tmp)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	defer f.Close()
	h := sha256.New()
	in := bufio.NewReaderSize(io.TeeReader(&counter{resp.Body, &p.read}, h), 1<<20)
	dec, err := Decompress(compression, in)
	if err != nil {
		return nil, fmt.Errorf("%s stream: %w", compression, err)
	}
	m, err := Build(sum, dec, f, ChunkSize)
	dec.Close()
	if err != nil {
		return nil, fmt.Errorf("decompress %s: %w", url, err)
	}
	if _, err := io.Copy(io.Discard, in); err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return nil, fmt.Errorf("%s has sha256 %s, Git says %s: not served to peers", url, got, sum)
	}
	if err := f.Truncate(m.Size); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	raw := filepath.Join(dir, "raw")
	if err := os.Rename(tmp, raw); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644); err != nil {
		return nil, err
	}
	return &Image{Manifest: m, Path: raw}, nil
}

type counter struct {
	r io.Reader
	n *atomic.Int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Decompress returns the decompressed stream of in; compression is none
// (or ""), gz, zst or xz.
func Decompress(compression string, in io.Reader) (io.ReadCloser, error) {
	switch compression {
	case "gz":
		return gzip.NewReader(in)
	case "zst":
		d, err := zstd.NewReader(in)
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	case "xz":
		x, err := xz.NewReader(in)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(x), nil
	case "", "none":
		return io.NopCloser(in), nil
	}
	return nil, fmt.Errorf("compression %q: want none, gz, zst or xz", compression)
}

// ServeChunk answers a chunk request from the image's sparse file, for
// the bearers of the swarm's key.
func (im *Image) ServeChunk(w http.ResponseWriter, r *http.Request, key string) {
	i, ok := CheckChunkRequest(w, r, im.Manifest, key)
	if !ok {
		return
	}
	f, err := os.Open(im.Path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	off, n := im.Manifest.Span(i)
	w.Header().Set("Content-Length", fmt.Sprint(n))
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// A LimitedReader of the file itself: the response sends it with
	// sendfile(2).
	io.Copy(w, &io.LimitedReader{R: f, N: n})
}
