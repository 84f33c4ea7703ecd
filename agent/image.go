package agent

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bootops/bootops/swarm"
)

const (
	mib = 1 << 20
	// writeBuffer is how much decompressed image goes to the disk per write.
	writeBuffer = 4 * mib
	// maxDrops is how often in a row a download may lose its connection
	// without a byte getting through before the attempt fails.
	maxDrops = 5
	// stallTimeout is how long a download's connection may deliver
	// nothing before it is given up and the rest asked for again: on a
	// long lossy link a connection that lost its way (a NAT that forgot
	// it, a link down for a while) would otherwise wait out TCP's
	// retransmission backoff, minutes.
	stallTimeout = 15 * time.Second
)

// wipeDisk zeroes the first and the last MiB of the disk: the MBR, the GPT
// and its backup, and most filesystem and RAID signatures, so nothing of
// the old system is found by the new one.
func (r *Runner) wipeDisk(ctx context.Context, s *step) error {
	disk, err := r.ResolveDisk(s.a.Disk)
	if err != nil {
		return fmt.Errorf("disk %q: %w", s.a.Disk, err)
	}
	f, err := os.OpenFile(disk, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("size of %s: %w", disk, err)
	}
	if size == 0 {
		return fmt.Errorf("%s is empty (size 0)", disk)
	}
	zero := make([]byte, mib)
	if _, err := f.WriteAt(zero[:min(size, mib)], 0); err != nil {
		return fmt.Errorf("wipe %s: %w", disk, err)
	}
	if size > mib {
		off := max(size-mib, mib)
		if _, err := f.WriteAt(zero[:size-off], off); err != nil {
			return fmt.Errorf("wipe %s: %w", disk, err)
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) { // EINVAL: a device without sync (/dev/null)
		return fmt.Errorf("sync %s: %w", disk, err)
	}
	if err := rereadPartitions(f); err != nil {
		s.log(fmt.Sprintf("re-read partition table of %s: %v", disk, err))
	}
	s.log(fmt.Sprintf("wiped the first and last MiB of %s (%d bytes)", disk, size))
	return ctx.Err()
}

// imageToDisk streams the image at URL through its decompressor onto the
// disk.
//
// The sha256 is the one of the file at the URL, as downloaded (compressed
// when compression is gz, zst or xz): the digest `sha256sum` prints for
// the file and distributions publish beside their images, and the one the
// boot server checks Micro-OS artifacts against. The action succeeds only
// when it matches; the disk then holds the image, fsynced.
//
// compression is none, gz, zst or xz; the schema always sets it (default
// none), so "" means none too and nothing is guessed from the URL.
func (r *Runner) imageToDisk(ctx context.Context, s *step) error {
	a := s.a
	want := strings.ToLower(a.SHA256)
	if len(want) != sha256.Size*2 {
		return permanentf("sha256 %q: want 64 hex digits", a.SHA256)
	}
	if !strings.HasPrefix(a.URL, "http://") && !strings.HasPrefix(a.URL, "https://") {
		return permanentf("url %q: the agent fetches images over http or https only", a.URL)
	}
	switch a.Compression {
	case "", "none", "gz", "zst", "xz":
	default:
		return permanentf("compression %q: want none, gz, zst or xz", a.Compression)
	}
	disk, err := r.ResolveDisk(a.Disk)
	if err != nil {
		return fmt.Errorf("disk %q: %w", a.Disk, err)
	}
	// Read and write: the GPT's backup is moved after the image.
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()

	if a.Encrypt != nil {
		return r.encryptedImageToDisk(ctx, s, f, disk)
	}
	var written int64
	if r.Swarm != nil {
		if written, err = r.imageFromPeers(ctx, s, f, disk); err != nil {
			if ctx.Err() != nil {
				return err
			}
			s.log(fmt.Sprintf("fetching the image with the other machines failed (%v): fetching it from %s", err, a.URL))
		}
	}
	if r.Swarm == nil || err != nil {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if written, err = r.imageFromURL(ctx, s, f, disk); err != nil {
			return err
		}
	}
	if size, err := f.Seek(0, io.SeekEnd); err == nil && size > written {
		moved, err := moveBackupGPT(f, size, sectorSize(disk))
		switch {
		case err != nil:
			s.log(fmt.Sprintf("the image's GPT was left as it is: %v", err))
		case moved:
			s.log(fmt.Sprintf("moved the GPT's backup to the end of %s (%d MB image on a %d MB disk): the OS can grow into the rest", disk, written>>20, size>>20))
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) { // EINVAL: a device without sync (/dev/null)
		return fmt.Errorf("sync %s: %w", disk, err)
	}
	if err := rereadPartitions(f); err != nil {
		s.log(fmt.Sprintf("re-read partition table of %s: %v", disk, err))
	}
	return nil
}

// imageFromURL streams the image from its URL through its decompressor
// into f (the disk, from its start, or an encrypted install's writer),
// checking the sha256 of what it downloaded, and returns the bytes
// written.
func (r *Runner) imageFromURL(ctx context.Context, s *step, f io.Writer, disk string) (int64, error) {
	a := s.a
	want := strings.ToLower(a.SHA256)
	start := r.Now()
	src := &download{ctx: ctx, client: r.HTTP, url: a.URL, delay: r.Backoff, log: s.log, stall: r.Stall}
	if err := src.connect(); err != nil {
		return 0, err
	}
	defer src.Close()
	h := sha256.New()
	in := bufio.NewReaderSize(io.TeeReader(src, h), mib)
	dec, err := swarm.Decompress(a.Compression, in)
	if err != nil {
		return 0, fmt.Errorf("%s stream: %w", a.Compression, err)
	}
	// A qcow2 file written as it is would leave a disk no firmware boots.
	peek := bufio.NewReaderSize(dec, 64<<10)
	if magic, _ := peek.Peek(4); string(magic) == "QFI\xfb" {
		dec.Close()
		return 0, permanentf("%s is a qcow2 image, not a raw disk: convert it (qemu-img convert -O raw) and give the raw image's URL and sha256; nothing was written", a.URL)
	}
	written, err := copyLarge(f, peek, make([]byte, writeBuffer), func() {
		s.progress(start, src.n, src.total, false)
	})
	dec.Close()
	if err != nil {
		return 0, fmt.Errorf("%s to %s: %w", a.URL, disk, err)
	}
	// Whatever follows the compressed stream (padding) is part of the file
	// the sha256 is of.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return 0, fmt.Errorf("%s: %w", a.URL, err)
	}
	s.progress(start, src.n, src.total, true)
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return 0, fmt.Errorf("sha256 mismatch: got %s, want %s", got, want)
	}
	s.log(fmt.Sprintf("wrote %d bytes to %s (%d downloaded, sha256 %s)", written, disk, src.n, want))
	return written, nil
}

// readError marks errors of the source in copyLarge.
type readError struct{ err error }

func (e *readError) Error() string { return "read: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// copyLarge copies src to dst in writes of len(buf) bytes (fewer only at
// the end), calling tick after each: disks like large writes, and neither
// the decompressors nor os.File's ReadFrom guarantee them.
func copyLarge(dst io.Writer, src io.Reader, buf []byte, tick func()) (int64, error) {
	var written int64
	for {
		n := 0
		var rerr error
		for n < len(buf) && rerr == nil {
			var m int
			m, rerr = src.Read(buf[n:])
			n += m
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return written, fmt.Errorf("write: %w", err)
			}
			written += int64(n)
			tick()
		}
		if rerr == io.EOF {
			return written, nil
		}
		if rerr != nil {
			return written, &readError{rerr}
		}
	}
}

// download is the body of an HTTP GET that survives dropped connections:
// when the body ends early it asks again for the rest (Range: bytes=n-),
// so a reader above it (the hash, the decompressor) never notices.
type download struct {
	ctx    context.Context
	client *http.Client
	url    string
	delay  time.Duration
	log    func(string)

	body      io.ReadCloser
	n         int64  // bytes delivered so far
	total     int64  // the file's size, -1 when unknown
	validator string // ETag or Last-Modified, so a resume gets the same file
	drops     int    // connections lost in a row without a byte
	// stall is how long a connection may deliver nothing (default
	// stallTimeout); watchdog closes the body past it, stalled says so.
	stall    time.Duration
	watchdog *time.Timer
	stalled  atomic.Bool
}

// connect makes the first request.
func (d *download) connect() error {
	d.total = -1
	return d.get()
}

func (d *download) get() error {
	req, err := http.NewRequestWithContext(d.ctx, http.MethodGet, d.url, nil)
	if err != nil {
		return permanentf("url %q: %w", d.url, err)
	}
	// The file's own bytes: a transparently gunzipped body could be
	// neither hashed as the file nor resumed.
	req.Header.Set("Accept-Encoding", "identity")
	if d.n > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", d.n))
		if d.validator != "" {
			req.Header.Set("If-Range", d.validator)
		}
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	switch {
	case d.n == 0 && resp.StatusCode == http.StatusOK:
		d.total = resp.ContentLength
		if et := resp.Header.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
			d.validator = et
		} else {
			d.validator = resp.Header.Get("Last-Modified")
		}
	case d.n > 0 && resp.StatusCode == http.StatusPartialContent:
		from, size, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err == nil && from != d.n {
			err = fmt.Errorf("starts at byte %d, want %d", from, d.n)
		}
		if err == nil && d.total >= 0 && size >= 0 && size != d.total {
			err = fmt.Errorf("the file is now %d bytes, was %d", size, d.total)
		}
		if err != nil {
			resp.Body.Close()
			return &answerError{fmt.Errorf("resume %s at byte %d: Content-Range %q: %w", d.url, d.n, resp.Header.Get("Content-Range"), err)}
		}
		if d.total < 0 {
			d.total = size
		}
	case d.n > 0 && resp.StatusCode == http.StatusOK:
		resp.Body.Close()
		return &answerError{fmt.Errorf("resume %s at byte %d: the server answered %s instead of 206 Partial Content "+
			"(it ignores Range requests, or the file changed): cannot resume", d.url, d.n, resp.Status)}
	default:
		resp.Body.Close()
		return &answerError{fmt.Errorf("GET %s: %s", d.url, resp.Status)}
	}
	d.body = resp.Body
	d.watch()
	return nil
}

// watch arms the watchdog over the current body: nothing read for
// d.stall, and the body is closed (the read in flight returns an error
// and the download resumes with a new connection).
func (d *download) watch() {
	stall := d.stallOrDefault()
	if d.watchdog != nil {
		d.watchdog.Stop()
	}
	body := d.body
	d.stalled.Store(false)
	d.watchdog = time.AfterFunc(stall, func() {
		d.stalled.Store(true)
		body.Close()
	})
	d.watchdog.Stop() // each Read runs it while it waits
}

// parseContentRange reads "bytes FROM-TO/SIZE"; size is -1 for "*".
func parseContentRange(v string) (from, size int64, err error) {
	rest, ok := strings.CutPrefix(v, "bytes ")
	span, total, ok2 := strings.Cut(rest, "/")
	first, _, ok3 := strings.Cut(span, "-")
	if !ok || !ok2 || !ok3 {
		return 0, 0, errors.New("not bytes FROM-TO/SIZE")
	}
	if from, err = strconv.ParseInt(first, 10, 64); err != nil {
		return 0, 0, err
	}
	if total == "*" {
		return from, -1, nil
	}
	size, err = strconv.ParseInt(total, 10, 64)
	return from, size, err
}

func (d *download) Read(p []byte) (int, error) {
	for {
		if d.body == nil {
			if err := d.reconnect(); err != nil {
				return 0, err
			}
		}
		// The watchdog times the network, not the reader: it runs while a
		// read waits, and stands still while the caller writes what it
		// read (a slow disk, an encryption under load).
		d.watchdog.Reset(d.stallOrDefault())
		n, err := d.body.Read(p)
		d.watchdog.Stop()
		d.n += int64(n)
		if n > 0 {
			d.drops = 0
		}
		if err != nil && d.stalled.Load() {
			err = fmt.Errorf("nothing received for %s: %w", d.stallOrDefault(), err)
		}
		switch {
		case err == nil:
			return n, nil
		case err == io.EOF && (d.total < 0 || d.n >= d.total):
			return n, io.EOF
		case d.total >= 0 && d.n >= d.total:
			// Every byte is here: whatever ended the body after them
			// loses nothing (asking for more would be refused: 416).
			d.body.Close()
			d.body = nil
			return n, io.EOF
		case err == io.EOF:
			err = io.ErrUnexpectedEOF
		}
		d.body.Close()
		d.body = nil
		if d.ctx.Err() != nil {
			return n, err
		}
		d.drops++
		if d.drops > maxDrops {
			return n, fmt.Errorf("%s: connection lost %d times in a row at byte %d: %w", d.url, d.drops, d.n, err)
		}
		d.log(fmt.Sprintf("connection lost at byte %d (%v): resuming", d.n, err))
		if n > 0 {
			return n, nil
		}
	}
}

// reconnect asks for the rest of the file after a lost connection, waiting
// a little longer after each failure. Answers other than 206 end the
// download: they will not get better by asking again now.
func (d *download) reconnect() error {
	for {
		if !sleep(d.ctx, time.Duration(d.drops)*d.delay) {
			return d.ctx.Err()
		}
		err := d.get()
		if err == nil || d.ctx.Err() != nil || d.drops >= maxDrops || errors.As(err, new(*answerError)) {
			return err
		}
		d.drops++
		d.log(fmt.Sprintf("resume at byte %d: %v", d.n, err))
	}
}

// answerError is a server's answer a download cannot go on with, as
// opposed to a transport error.
type answerError struct{ err error }

func (e *answerError) Error() string { return e.err.Error() }
func (e *answerError) Unwrap() error { return e.err }

func (d *download) stallOrDefault() time.Duration {
	if d.stall > 0 {
		return d.stall
	}
	return stallTimeout
}

func (d *download) Close() error {
	if d.watchdog != nil {
		d.watchdog.Stop()
	}
	if d.body == nil {
		return nil
	}
	err := d.body.Close()
	d.body = nil
	return err
}

// sectorSize is a disk's logical sector size, from sysfs; 512 when it
// says nothing (a file in the tests, most disks).
func sectorSize(dev string) int64 {
	b, err := os.ReadFile("/sys/class/block/" + filepath.Base(dev) + "/queue/logical_block_size")
	if err != nil {
		return 512
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 512 {
		return 512
	}
	return n
}
