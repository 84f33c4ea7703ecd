package swarm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const testChunk = 64 << 10

// testImage is a raw image of n chunks (the last one short), with the
// chunks in zeros all zeros.
func testImage(n int, zeros ...int) []byte {
	b := make([]byte, n*testChunk-1000)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for _, z := range zeros {
		clear(b[z*testChunk : min(len(b), (z+1)*testChunk)])
	}
	return b
}

func TestBuildManifest(t *testing.T) {
	img := testImage(10, 2, 9)
	var sparse fileAt
	m, err := Build("src", bytes.NewReader(img), &sparse, testChunk)
	if err != nil {
		t.Fatal(err)
	}
	if m.Chunks() != 10 || m.Size != int64(len(img)) {
		t.Fatalf("chunks %d size %d", m.Chunks(), m.Size)
	}
	sum := sha256.Sum256(img)
	if m.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("sha256 %s", m.SHA256)
	}
	for i := range 10 {
		off, n := m.Span(i)
		chunk := img[off : off+n]
		if !m.Verify(i, chunk) {
			t.Errorf("chunk %d does not verify", i)
		}
		if m.IsZero(i) != (i == 2 || i == 9) {
			t.Errorf("chunk %d: zero %v", i, m.IsZero(i))
		}
		bad := bytes.Clone(chunk)
		bad[n/2] ^= 1
		if m.Verify(i, bad) || m.Verify(i, chunk[:n-1]) {
			t.Errorf("chunk %d: a changed or short chunk verifies", i)
		}
		if !m.IsZero(i) && !bytes.Equal(sparse.b[off:off+n], chunk) {
			t.Errorf("chunk %d not written to the sparse copy", i)
		}
	}
	if m.NonZero() != int64(8*testChunk) {
		t.Errorf("non-zero bytes %d", m.NonZero())
	}
	m.Source = hex.EncodeToString(sum[:])
	if err := m.Check(); err != nil {
		t.Error(err)
	}
	m.Hashes = m.Hashes[1:]
	if err := m.Check(); err == nil {
		t.Error("a manifest with hashes missing passed its check")
	}
}

// fileAt is an in-memory io.WriterAt.
type fileAt struct{ b []byte }

func (f *fileAt) WriteAt(p []byte, off int64) (int, error) {
	if need := off + int64(len(p)); need > int64(len(f.b)) {
		f.b = append(f.b, make([]byte, need-int64(len(f.b)))...)
	}
	return copy(f.b[off:], p), nil
}

// fleet is a server (scheduler and chunks) on loopback and the peers
// that fetch from it.
type fleet struct {
	t     *testing.T
	img   []byte
	im    *Image
	sched *Scheduler
	srv   *httptest.Server
	dir   string
}

func newFleet(t *testing.T, img []byte) *fleet {
	dir := t.TempDir()
	sum := sha256.Sum256(append([]byte("compressed "), img...))
	raw := filepath.Join(dir, "raw")
	f, _ := os.Create(raw)
	m, err := Build(hex.EncodeToString(sum[:]), bytes.NewReader(img), f, testChunk)
	f.Truncate(int64(len(img)))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	fl := &fleet{t: t, img: img, im: &Image{Manifest: m, Path: raw}, sched: &Scheduler{ServerStreams: 2}, dir: dir}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /swarm/{source}/chunk/{i}", func(w http.ResponseWriter, r *http.Request) {
		fl.im.ServeChunk(w, r, fl.sched.Key(m.Source))
	})
	fl.srv = httptest.NewServer(mux)
	t.Cleanup(fl.srv.Close)
	return fl
}

func (fl *fleet) member(name string) Member {
	return Member{Name: name, IP: "127.0.0.1", Server: fl.srv.URL, Peers: 3}
}

// peer makes a peer of the fleet, named name, writing to a file of its
// own.
func (fl *fleet) peer(name string) (*Peer, *os.File) {
	f, err := os.Create(filepath.Join(fl.dir, name+".disk"))
	if err != nil {
		fl.t.Fatal(err)
	}
	fl.t.Cleanup(func() { f.Close() })
	p := &Peer{Manifest: fl.im.Manifest, Disk: f, Listen: "127.0.0.1:0", Peers: 3,
		MinRate: 256 << 10, SlowGrace: 400 * time.Millisecond,
		Coordinate: func(ctx context.Context, r Report) (Reply, error) {
			return fl.sched.Report(fl.im.Manifest, fl.member(name), r), nil
		}}
	if err := p.Start(); err != nil {
		fl.t.Fatal(err)
	}
	fl.t.Cleanup(func() { p.Close() })
	return p, f
}

// run has n peers fetch the image at once, each then serving until all
// are done; it checks every disk against the image, byte for byte, and
// returns the peers.
func (fl *fleet) run(n int) []*Peer {
	t := fl.t
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var peers []*Peer
	var disks []*os.File
	for i := range n {
		p, f := fl.peer("m" + string(rune('a'+i)))
		peers, disks = append(peers, p), append(disks, f)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, p := range peers {
		wg.Go(func() {
			if errs[i] = p.Fetch(ctx); errs[i] == nil {
				p.Linger(ctx, 20*time.Second)
			}
		})
	}
	wg.Wait()
	for i, f := range disks {
		if errs[i] != nil {
			t.Fatalf("peer %d: %v", i, errs[i])
		}
		got, _ := os.ReadFile(f.Name())
		if !bytes.Equal(got, fl.img) {
			t.Fatalf("peer %d: the disk is not the image", i)
		}
	}
	return peers
}

// Six machines fetch a 40-chunk image at once: every disk is the image,
// and most bytes came from the other machines, not the server.
func TestSwarmFleet(t *testing.T) {
	img := testImage(40, 3, 17)
	fl := newFleet(t, img)
	peers := fl.run(6)
	var server, fromPeers int64
	for _, p := range peers {
		c := p.Counts()
		server += c.FromServer
		fromPeers += c.FromPeers
		if c.Written != int64(len(img)) || c.FromServer+c.FromPeers != fl.im.Manifest.NonZero() {
			t.Errorf("counts %+v: want %d written, %d fetched", c, len(img), fl.im.Manifest.NonZero())
		}
	}
	st := fl.sched.Stats()
	t.Logf("server sent %d bytes (%.1f images), peers %d; %+v", server, float64(server)/float64(len(img)), fromPeers, st)
	if server > 3*int64(len(img)) {
		t.Errorf("the server sent %d bytes, more than 3 images", server)
	}
	if fromPeers < 3*int64(len(img)) {
		t.Errorf("peers sent only %d bytes", fromPeers)
	}
	if st.ServerBytes != server || st.PeerBytes != fromPeers || st.Bad != 0 {
		t.Errorf("scheduler stats %+v, peers counted server %d peers %d", st, server, fromPeers)
	}
	if st.Members != 0 {
		t.Errorf("%d members still in the swarm after all left", st.Members)
	}
}

// fake is a member of the swarm that says it holds every chunk and
// serves them with serve.
func (fl *fleet) fake(name string, serve http.HandlerFunc) (requests func() int) {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		serve(w, r)
	}))
	fl.t.Cleanup(srv.Close)
	m := fl.im.Manifest
	var all []int
	for i := range m.Chunks() {
		if !m.IsZero(i) {
			all = append(all, i)
		}
	}
	fl.sched.Report(m, fl.member(name), Report{Instance: name, Addr: srv.Listener.Addr().String(), Have: all, Complete: true})
	return func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func (fl *fleet) chunkBytes(r *http.Request) []byte {
	var i int
	for _, c := range r.URL.Path[len("/swarm/"+fl.im.Manifest.Source+"/chunk/"):] {
		i = 10*i + int(c-'0')
	}
	off, n := fl.im.Manifest.Span(i)
	return bytes.Clone(fl.img[off : off+n])
}

// A machine that sends wrong bytes is dropped for the whole swarm once
// the server fetched one of the chunks reported bad from it and found it
// wrong; counted, and everyone still gets the image.
func TestSwarmLyingPeer(t *testing.T) {
	fl := newFleet(t, testImage(30))
	requests := fl.fake("liar", func(w http.ResponseWriter, r *http.Request) {
		b := fl.chunkBytes(r)
		b[len(b)/3] ^= 0xff
		w.Write(b)
	})
	peers := fl.run(4)
	waitChecks(fl.sched)
	var bad int64
	for _, p := range peers {
		bad += p.Counts().Bad
	}
	st := fl.sched.Stats()
	if bad == 0 || st.Bad != bad || st.Banned != 1 || st.Unfounded != 0 {
		t.Errorf("peers counted %d bad chunks, the scheduler %+v", bad, st)
	}
	// At most the transfers assigned to each machine before its first
	// lie came back (it avoids the liar from then on), and the server's
	// re-check.
	if n := requests(); n == 0 || n > 4*3+1 {
		t.Errorf("the liar was asked %d times", n)
	}
	reply := fl.sched.Report(fl.im.Manifest, fl.member("liar"), Report{Instance: "liar", Want: 3})
	if !reply.Banned {
		t.Error("the liar is not banned")
	}
}

// A machine that goes away in the middle of a chunk costs a retry: its
// transfers fail, the chunks come from elsewhere.
func TestSwarmVanishingPeer(t *testing.T) {
	fl := newFleet(t, testImage(30))
	requests := fl.fake("vanishing", func(w http.ResponseWriter, r *http.Request) {
		b := fl.chunkBytes(r)
		w.Header().Set("Content-Length", "65536")
		w.Write(b[:len(b)/2])
		w.(http.Flusher).Flush()
		// The machine is gone: the connection with it.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}
	})
	fl.run(4)
	st := fl.sched.Stats()
	if requests() == 0 || st.Gone == 0 {
		t.Errorf("the vanishing machine was asked %d times; %d transfers failed as gone", requests(), st.Gone)
	}
	if st.Bad != 0 {
		t.Errorf("a cut transfer counted as a lie: %+v", st)
	}
}

// A machine behind a slow link is given up once a transfer from it falls
// below the least rate, and avoided; its chunks come from elsewhere.
func TestSwarmSlowPeer(t *testing.T) {
	fl := newFleet(t, testImage(30))
	requests := fl.fake("slow", func(w http.ResponseWriter, r *http.Request) {
		b := fl.chunkBytes(r)
		w.Header().Set("Content-Length", "65536")
		for len(b) > 0 && r.Context().Err() == nil {
			w.Write(b[:1024]) // 1 KiB per 20 ms: 50 KiB/s
			w.(http.Flusher).Flush()
			b = b[1024:]
			time.Sleep(20 * time.Millisecond)
		}
	})
	fl.run(4)
	st := fl.sched.Stats()
	if requests() == 0 || st.Slow == 0 {
		t.Errorf("the slow machine was asked %d times; %d transfers dropped as slow", requests(), st.Slow)
	}
	// Each machine gives up on it at most once per transfer slot before
	// it avoids it.
	if n := requests(); n > 4*3 {
		t.Errorf("the slow machine was asked %d times", n)
	}
}

// A machine whose agent starts again holds nothing any more, and the
// transfers it had under way end: the server's stream it held is free for
// the next machine at once, not after the lease runs out.
func TestSchedulerNewLifeFreesItsTransfers(t *testing.T) {
	img := testImage(4)
	m, err := Build(strings.Repeat("ab", 32), bytes.NewReader(img), nil, testChunk)
	if err != nil {
		t.Fatal(err)
	}
	s := &Scheduler{ServerStreams: 1}
	who := func(name string) Member {
		return Member{Name: name, IP: "127.0.0.1", Server: "http://server", Peers: 2}
	}
	if r := s.Report(m, who("a"), Report{Instance: "a1", Addr: ":1", Want: 2}); len(r.Assign) != 1 || r.Assign[0].URL != "http://server" {
		t.Fatalf("a's first report: %+v", r.Assign)
	}
	if r := s.Report(m, who("b"), Report{Instance: "b1", Addr: ":1", Want: 2}); len(r.Assign) != 0 {
		t.Fatalf("b got %+v while the server's one stream is a's", r.Assign)
	}
	s.Report(m, who("a"), Report{Instance: "a2", Addr: ":1"}) // a booted again
	if r := s.Report(m, who("b"), Report{Instance: "b1", Addr: ":1", Want: 2}); len(r.Assign) != 1 || r.Assign[0].From != "" {
		t.Errorf("after a's new life, b got %+v: want the server's stream", r.Assign)
	}
}

// A chunk that changed on a machine's disk after it fetched the image (a
// later step wrote there) is refused with 410, not passed on, and
// reported lost; the rest is still served.
func TestPeerRefusesAChangedChunk(t *testing.T) {
	fl := newFleet(t, testImage(6))
	p, disk := fl.peer("a")
	if err := p.Fetch(t.Context()); err != nil {
		t.Fatal(err)
	}
	reply := fl.sched.Report(fl.im.Manifest, fl.member("a"), p.report(0))
	disk.WriteAt([]byte("changed"), 2*testChunk+100)
	get := func(i int) (int, []byte) {
		req, _ := http.NewRequest("GET", "http://"+p.Addr()+ChunkPath(fl.im.Manifest.Source, i), nil)
		req.Header.Set("Authorization", "Bearer "+reply.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, body := get(2); code != http.StatusGone || !strings.Contains(string(body), "changed here since") {
		t.Errorf("the changed chunk: %d %q", code, body)
	}
	if r := p.report(0); !slices.Equal(r.Lost, []int{2}) || !r.Complete {
		t.Errorf("next report: lost %v, complete %v; want [2], still complete", r.Lost, r.Complete)
	}
	if code, body := get(3); code != http.StatusOK || !fl.im.Manifest.Verify(3, body) {
		t.Errorf("an unchanged chunk: %d, %d bytes", code, len(body))
	}
}

// A transfer shares the machine's link with the others under way: it is
// slow only below its share of the least rate (MinRate / Peers), and a
// source below that share is still given up.
func TestSlowIsBelowItsShare(t *testing.T) {
	rate := func(bytesPerSec int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			piece := make([]byte, bytesPerSec/10)
			for range 14 { // 1.4 s at the rate
				if _, err := w.Write(piece); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond)
			}
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	p := &Peer{Manifest: &Manifest{Source: "img"}, Peers: 4, MinRate: 256 << 10, SlowGrace: 400 * time.Millisecond}
	p.key.Store("k")
	for _, c := range []struct {
		rate int
		slow bool
	}{{100 << 10, false}, {30 << 10, true}} {
		b := make([]byte, c.rate/10*14)
		err := p.get(context.Background(), Assignment{Chunk: 0, From: "peer/a", URL: rate(c.rate)}, b)
		if got := errors.Is(err, errSlow); got != c.slow {
			t.Errorf("a source at %d KiB/s, MinRate 256 KiB/s over 4 transfers: slow %v (%v), want %v", c.rate>>10, got, err, c.slow)
		}
	}
}
