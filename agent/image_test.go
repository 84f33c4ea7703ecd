package agent

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// payload is a fake disk image: more than one write buffer, partly
// compressible so xz stays quick.
func payload() []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	for i := 0; b.Len() < writeBuffer+300_000; i++ {
		fmt.Fprintf(&b, "sector %d of the image\n", i)
		if i%64 == 0 {
			for range 32 {
				b.WriteByte(byte(rng.Uint32()))
			}
		}
	}
	return b.Bytes()
}

func compress(t *testing.T, kind string, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	var err error
	switch kind {
	case "none":
		return data
	case "gz":
		w := gzip.NewWriter(&b)
		w.Write(data)
		err = w.Close()
	case "zst":
		w, _ := zstd.NewWriter(&b)
		w.Write(data)
		err = w.Close()
	case "xz":
		w, _ := xz.NewWriter(&b)
		w.Write(data)
		err = w.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// newDisk is a regular file standing in for a disk, filled with 0xee.
func newDisk(t *testing.T, size int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vda")
	if err := os.WriteFile(p, bytes.Repeat([]byte{0xee}, size), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// imageServer serves file, letting a test take over any request by number
// (from 1): take returns true when it answered.
type imageServer struct {
	file []byte
	take func(n int, w http.ResponseWriter, r *http.Request) bool

	mu       sync.Mutex
	requests int
	ranges   []string // Range and If-Range of every request
}

func (s *imageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	n := s.requests
	s.ranges = append(s.ranges, r.Header.Get("Range")+"|"+r.Header.Get("If-Range"))
	s.mu.Unlock()
	w.Header().Set("ETag", `"v1"`)
	if s.take != nil && s.take(n, w, r) {
		return
	}
	http.ServeContent(w, r, "image", time.Time{}, bytes.NewReader(s.file))
}

func startImage(t *testing.T, s *imageServer) (*Runner, *recorder, string) {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	r, rec := newRunner(t)
	r.HTTP = srv.Client()
	return r, rec, srv.URL + "/images/os.img"
}

func TestImageToDisk(t *testing.T) {
	testutil.Slow(t)
	data := payload()
	for _, kind := range []string{"none", "gz", "zst", "xz"} {
		t.Run(kind, func(t *testing.T) {
			file := compress(t, kind, data)
			r, rec, url := startImage(t, &imageServer{file: file})
			disk := newDisk(t, len(data)+1000)
			err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Name: "image", Disk: disk, URL: url,
				SHA256: digest(file), Compression: kind, Timeout: "1m"}))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(disk)
			if !bytes.Equal(got[:len(data)], data) {
				t.Error("the disk does not hold the image")
			}
			if !bytes.Equal(got[len(data):], bytes.Repeat([]byte{0xee}, 1000)) {
				t.Error("the disk was changed after the image")
			}
			want := []string{"started", "done", "provisioned"}
			if got := rec.types(); !slices.Equal(got, want) {
				t.Errorf("events %v, want %v", got, want)
			}
			p := rec.of(plan.AgentProgress)
			if len(p) == 0 {
				t.Fatal("no progress event")
			}
			if last := p[len(p)-1]; last.Bytes != int64(len(file)) || last.Total != int64(len(file)) || last.Action != "image" {
				t.Errorf("last progress %+v, want %d of %d bytes of image", last, len(file), len(file))
			}
		})
	}
}

// The sha256 is the one of the file at the URL, not of the image in it.
func TestImageSHA256IsOfTheDownloadedFile(t *testing.T) {
	data := payload()
	file := compress(t, "gz", data)
	r, _, url := startImage(t, &imageServer{file: file})
	err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Disk: newDisk(t, 0), URL: url,
		SHA256: digest(data), Compression: "gz"}))
	if err == nil || !strings.Contains(err.Error(), "sha256 mismatch: got "+digest(file)) {
		t.Errorf("Run: %v, want a mismatch naming the file's digest", err)
	}
}

func TestImageSHA256Mismatch(t *testing.T) {
	file := []byte("not the image you are looking for")
	s := &imageServer{file: file}
	r, rec, url := startImage(t, s)
	wrong := strings.Repeat("0", 64)
	err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Name: "image-to-disk", Disk: newDisk(t, 0), URL: url,
		SHA256: wrong, Compression: "none", Retries: 1}))
	var ae *ActionError
	if !errors.As(err, &ae) {
		t.Fatalf("Run: %v, want an ActionError", err)
	}
	want := "image-to-disk: sha256 mismatch: got " + digest(file) + ", want " + wrong
	if err.Error() != want {
		t.Errorf("Run: %q, want %q", err, want)
	}
	if got := rec.types(); !slices.Equal(got, []string{"started", "retry", "failed"}) {
		t.Errorf("events %v, want started, retry, failed", got)
	}
	if msg := rec.of(plan.AgentFailed)[0].Message; msg != want {
		t.Errorf("failed event %q, want %q", msg, want)
	}
	if s.requests != 2 {
		t.Errorf("%d downloads, want 2 (1 + 1 retry)", s.requests)
	}
}

// dropAfter answers the first request with the start of the file only,
// then drops the connection.
func dropAfter(cut int, file []byte) func(int, http.ResponseWriter, *http.Request) bool {
	return func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n != 1 {
			return false
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(file)))
		w.Write(file[:cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
}

func TestImageResumesAfterADroppedConnection(t *testing.T) {
	data := payload()
	file := compress(t, "gz", data)
	const cut = 100_000
	s := &imageServer{file: file, take: dropAfter(cut, file)}
	r, rec, url := startImage(t, s)
	disk := newDisk(t, 0)
	err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Disk: disk, URL: url, SHA256: digest(file), Compression: "gz"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(disk); !bytes.Equal(got, data) {
		t.Error("the disk does not hold the image")
	}
	want := []string{"|", fmt.Sprintf("bytes=%d-|\"v1\"", cut)}
	if !slices.Equal(s.ranges, want) {
		t.Errorf("requests (Range|If-Range) %q, want %q", s.ranges, want)
	}
	// One attempt: the download resumed, the action was not retried.
	if got := rec.types(); !slices.Equal(got, []string{"started", "done", "provisioned"}) {
		t.Errorf("events %v", got)
	}
	if logs := strings.Join(rec.logs(), "\n"); !strings.Contains(logs, fmt.Sprintf("connection lost at byte %d", cut)) {
		t.Errorf("logs do not tell of the lost connection:\n%s", logs)
	}
	p := rec.of(plan.AgentProgress)
	if last := p[len(p)-1]; last.Bytes != int64(len(file)) || last.Total != int64(len(file)) {
		t.Errorf("last progress %+v, want all %d bytes", last, len(file))
	}
}

func TestImageResumeRefusedByServer(t *testing.T) {
	file := compress(t, "gz", payload())
	const cut = 50_000
	drop := dropAfter(cut, file)
	s := &imageServer{file: file, take: func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 1 {
			return drop(n, w, r)
		}
		w.Write(file) // 200, the Range ignored
		return true
	}}
	r, rec, url := startImage(t, s)
	err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Disk: newDisk(t, 0), URL: url, SHA256: digest(file), Compression: "gz"}))
	want := fmt.Sprintf("resume %s at byte %d: the server answered 200 OK instead of 206 Partial Content", url, cut)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Run: %v\nwant %q", err, want)
	}
	if msg := rec.of(plan.AgentFailed)[0].Message; !strings.Contains(msg, "cannot resume") {
		t.Errorf("failed event %q does not say the download cannot resume", msg)
	}
	if s.requests != 2 {
		t.Errorf("%d requests, want 2", s.requests)
	}
}

func TestImageRetriedAfterServerError(t *testing.T) {
	data := payload()
	file := compress(t, "zst", data)
	s := &imageServer{file: file, take: func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	}}
	r, rec, url := startImage(t, s)
	disk := newDisk(t, 0)
	err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Disk: disk, URL: url, SHA256: digest(file), Compression: "zst", Retries: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.types(); !slices.Equal(got, []string{"started", "retry", "done", "provisioned"}) {
		t.Errorf("events %v, want one retry", got)
	}
	if msg := rec.of(plan.AgentRetry)[0].Message; !strings.Contains(msg, "503 Service Unavailable") {
		t.Errorf("retry event %q does not say why", msg)
	}
	if got, _ := os.ReadFile(disk); !bytes.Equal(got, data) {
		t.Error("the disk does not hold the image")
	}
}

func TestProgressAtMostEverySecond(t *testing.T) {
	r, rec := newRunner(t)
	now := time.Unix(1000, 0)
	r.Now = func() time.Time { return now }
	s := &step{r: r, a: plan.Action{Action: "image-to-disk"}, i: 1, n: 1}
	start := now
	for i := range 10 {
		now = now.Add(300 * time.Millisecond)
		s.progress(start, int64(i+1)*100, 1000, false)
	}
	s.progress(start, 1000, 1000, true)
	var got []int64
	for _, e := range rec.of(plan.AgentProgress) {
		got = append(got, e.Bytes)
	}
	// At 0.3 s (the first), 1.5 s, 2.7 s, then the final one.
	if want := []int64{100, 500, 900, 1000}; !slices.Equal(got, want) {
		t.Errorf("progress at %v, want %v", got, want)
	}
	if last := rec.of(plan.AgentProgress)[3]; last.Rate != 1000/3.0 {
		t.Errorf("rate %v, want %v bytes/s", last.Rate, 1000/3.0)
	}
}

func TestWipeDisk(t *testing.T) {
	for name, size := range map[string]int{"large": 3*mib + 512, "small": 100_000, "between": mib + 4096} {
		t.Run(name, func(t *testing.T) {
			r, _ := newRunner(t)
			disk := newDisk(t, size)
			if err := r.Run(t.Context(), wf(plan.Action{Action: "wipe-disk", Disk: disk})); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(disk)
			if len(got) != size {
				t.Fatalf("the disk is %d bytes now, was %d", len(got), size)
			}
			for i, b := range got {
				inHead, inTail := i < mib, i >= size-mib
				if want := byte(0xee); inHead || inTail {
					want = 0
					if b != want {
						t.Fatalf("byte %d is %#x, want %#x", i, b, want)
					}
				} else if b != want {
					t.Fatalf("byte %d is %#x, want %#x (untouched)", i, b, want)
				}
			}
		})
	}
}

func TestParseContentRange(t *testing.T) {
	for in, want := range map[string][2]int64{
		"bytes 100-199/200": {100, 200},
		"bytes 5-9/*":       {5, -1},
	} {
		from, size, err := parseContentRange(in)
		if err != nil || from != want[0] || size != want[1] {
			t.Errorf("%q: %d, %d, %v; want %v", in, from, size, err, want)
		}
	}
	for _, bad := range []string{"", "bytes */200", "items 1-2/3", "bytes x-1/2"} {
		if _, _, err := parseContentRange(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// A qcow2 file (even compressed) is refused before a byte is written, for
// good: written as it is, it would leave a disk no firmware boots.
func TestImageQcow2Refused(t *testing.T) {
	file := compress(t, "zst", append([]byte("QFI\xfb\x00\x00\x00\x03"), payload()...))
	s := &imageServer{file: file}
	r, _, url := startImage(t, s)
	disk := newDisk(t, 4096)
	err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Disk: disk, URL: url, SHA256: digest(file), Compression: "zst", Retries: 2}))
	if err == nil || !strings.Contains(err.Error(), "is a qcow2 image, not a raw disk") {
		t.Fatalf("Run: %v", err)
	}
	if got, _ := os.ReadFile(disk); !bytes.Equal(got, bytes.Repeat([]byte{0xee}, 4096)) {
		t.Error("the disk was written")
	}
	if s.requests != 1 {
		t.Errorf("%d downloads: a qcow2 image is not retried", s.requests)
	}
}

// A connection that goes silent (a link down for a while, a NAT that
// forgot it) is given up after Stall and the rest asked for: the image is
// whole, without waiting out TCP.
func TestImageResumesAfterAStalledConnection(t *testing.T) {
	data := payload()
	file := compress(t, "gz", data)
	const cut = 80_000
	s := &imageServer{file: file, take: func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n != 1 {
			return false
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(file)))
		w.Write(file[:cut])
		w.(http.Flusher).Flush()
		<-r.Context().Done() // silent, the connection open, until the client gives up
		return true
	}}
	r, rec, url := startImage(t, s)
	r.Stall = 500 * time.Millisecond
	disk := newDisk(t, 0)
	if err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Disk: disk, URL: url, SHA256: digest(file), Compression: "gz"})); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(disk); !bytes.Equal(got, data) {
		t.Error("the disk does not hold the image")
	}
	if want := []string{"|", fmt.Sprintf("bytes=%d-|\"v1\"", cut)}; !slices.Equal(s.ranges, want) {
		t.Errorf("requests (Range|If-Range) %q, want %q", s.ranges, want)
	}
	if logs := strings.Join(rec.logs(), "\n"); !strings.Contains(logs, fmt.Sprintf("connection lost at byte %d (nothing received for 500ms", cut)) {
		t.Errorf("logs do not tell of the stalled connection:\n%s", logs)
	}
}

// A reader slower than the stall timeout between its reads (a disk, an
// encryption under load) is no stalled connection: the watchdog times only
// the reads, so the whole file comes in one request, and the end of a body
// whose every byte arrived is its end, not a loss.
func TestImageSlowReaderIsNoStall(t *testing.T) {
	file := compress(t, "gz", payload())
	s := &imageServer{file: file}
	_, _, url := startImage(t, s)
	var logs []string
	d := &download{ctx: t.Context(), client: http.DefaultClient, url: url, delay: time.Millisecond, stall: 100 * time.Millisecond,
		log: func(m string) { logs = append(logs, m) }}
	if err := d.connect(); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var got []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := d.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // the writer's pace, three times the stall
	}
	if !bytes.Equal(got, file) || s.requests != 1 || len(logs) != 0 {
		first := ""
		if len(logs) > 0 {
			first = logs[0]
		}
		t.Errorf("%d of %d bytes, %d requests, %d log lines (first: %q)", len(got), len(file), s.requests, len(logs), first)
	}
}
