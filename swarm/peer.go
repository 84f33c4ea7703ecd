package swarm

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Disk is where a Peer writes the image and serves chunks from.
type Disk interface {
	io.ReaderAt
	io.WriterAt
}

// Defaults of a Peer.
const (
	DefaultMinRate   = 1 << 20         // bytes/s a machine's transfers must keep together after DefaultSlowGrace
	DefaultSlowGrace = 5 * time.Second // a transfer's time to get going
	tick             = 250 * time.Millisecond
	maxSilence       = time.Minute // reports failing this long end Fetch
)

// Peer is one machine of a swarm: it fetches the image onto its disk,
// chunk by chunk as the scheduler directs, and serves the chunks it holds
// to the others.
type Peer struct {
	Manifest *Manifest
	Disk     Disk
	// Coordinate sends a report to the server's scheduler and returns its
	// reply.
	Coordinate func(ctx context.Context, r Report) (Reply, error)
	// Client makes the chunk transfers (nil: one of its own).
	Client *http.Client
	// Peers is how many transfers it makes, and serves, at once (0:
	// DefaultPeers).
	Peers int
	// UploadRate bounds the bytes per second it serves to others, all
	// transfers together (0: no bound).
	UploadRate int64
	// MinRate is the least bytes per second the machine's transfers must
	// keep together after their first seconds (0: DefaultMinRate): each
	// one its share, MinRate divided by Peers, as they share the
	// machine's link. Slower ones are dropped and fetched elsewhere.
	MinRate int64
	// SlowGrace is a transfer's time to get going before MinRate counts
	// (0: DefaultSlowGrace).
	SlowGrace time.Duration
	// Listen is the address its chunk server listens on (":0": any port).
	Listen string
	// Progress is called after each chunk written; Log with what is worth
	// a line.
	Progress func(Counts)
	Log      func(string)

	instance string
	have     []atomic.Bool
	done     atomic.Bool // Fetch wrote and checked the whole image (chunks lost since do not undo it)
	pinned   sync.Map    // chunk → []byte: chunks kept in memory (Pin)
	key      atomic.Value
	up       limiter
	serving  chan struct{} // upload slots
	ln       net.Listener
	srv      *http.Server
	counts   struct{ written, server, peers, served, bad atomic.Int64 }

	mu      sync.Mutex
	pending Report // what the next report carries
	resend  bool   // the scheduler's idea of what it holds is off: send all
}

// Counts is what a Peer has done so far.
type Counts struct {
	Written    int64 // bytes of the image on the disk (zero chunks too)
	FromServer int64 // bytes fetched from the server
	FromPeers  int64 // bytes fetched from other machines
	Served     int64 // bytes served to other machines
	Bad        int64 // transfers whose bytes did not match (reported: the server checks their sources)
}

// Counts returns what p has done so far.
func (p *Peer) Counts() Counts {
	return Counts{Written: p.counts.written.Load(), FromServer: p.counts.server.Load(), FromPeers: p.counts.peers.Load(),
		Served: p.counts.served.Load(), Bad: p.counts.bad.Load()}
}

func (p *Peer) peers() int {
	if p.Peers > 0 {
		return p.Peers
	}
	return DefaultPeers
}

func (p *Peer) log(format string, args ...any) {
	if p.Log != nil {
		p.Log(fmt.Sprintf(format, args...))
	}
}

// Start starts the chunk server. It serves nothing until chunks are
// written, and stops at Close.
func (p *Peer) Start() error {
	if err := p.Manifest.Check(); err != nil {
		return err
	}
	id := make([]byte, 8)
	crand.Read(id)
	p.instance = hex.EncodeToString(id)
	p.have = make([]atomic.Bool, p.Manifest.Chunks())
	p.key.Store("")
	p.serving = make(chan struct{}, p.peers())
	p.up.rate = float64(p.UploadRate)
	listen := p.Listen
	if listen == "" {
		listen = ":0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("chunk server: %w", err)
	}
	p.ln = ln
	mux := http.NewServeMux()
	mux.HandleFunc("GET /swarm/{source}/chunk/{i}", p.serve)
	// A chunk request has no body, and its answer streams at the upload
	// rate: no read or write deadline past the header (a read deadline
	// would cancel a long answer's context), but idle connections close.
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10}
	go p.srv.Serve(ln)
	return nil
}

// Addr is where the chunk server listens.
func (p *Peer) Addr() string { return p.ln.Addr().String() }

// Close stops serving.
func (p *Peer) Close() error {
	if p.srv == nil {
		return nil
	}
	return p.srv.Close()
}

// Pin keeps chunk i in memory, as it is on the disk now, so it is served
// as it is even after the disk changes there (the GPT's backup moved).
func (p *Peer) Pin(i int) {
	if i < 0 || i >= len(p.have) || !p.have[i].Load() {
		return
	}
	off, n := p.Manifest.Span(i)
	b := make([]byte, n)
	if _, err := p.Disk.ReadAt(b, off); err == nil && p.Manifest.Verify(i, b) {
		p.pinned.Store(i, b)
	}
}

// serve answers a chunk request from another machine: only with a chunk
// it holds, read back and checked, so it never passes on bytes that
// changed on its disk since.
func (p *Peer) serve(w http.ResponseWriter, r *http.Request) {
	i, ok := CheckChunkRequest(w, r, p.Manifest, p.key.Load().(string))
	if !ok {
		return
	}
	if !p.have[i].Load() {
		http.Error(w, "not here", http.StatusNotFound)
		return
	}
	select {
	case p.serving <- struct{}{}:
		defer func() { <-p.serving }()
	default:
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	var b []byte
	if v, ok := p.pinned.Load(i); ok {
		b = v.([]byte)
	} else {
		off, n := p.Manifest.Span(i)
		buf := getBuf(p.Manifest.ChunkSize)
		defer putBuf(buf)
		b = buf[:n]
		if _, err := p.Disk.ReadAt(b, off); err != nil {
			http.Error(w, "read: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		// While Fetch runs, only it writes to the disk, after checking
		// what it writes; once it is done, later steps may change it.
		if p.done.Load() && !p.Manifest.Verify(i, b) {
			// Changed on the disk since (a later step wrote there).
			p.have[i].Store(false)
			p.mu.Lock()
			p.pending.Lost = append(p.pending.Lost, i)
			p.mu.Unlock()
			http.Error(w, "changed here since", http.StatusGone)
			return
		}
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	for len(b) > 0 {
		n := min(len(b), 64<<10)
		if err := p.up.wait(r.Context(), n); err != nil {
			return
		}
		if _, err := w.Write(b[:n]); err != nil {
			return
		}
		p.counts.served.Add(int64(n))
		b = b[n:]
	}
}

// CheckChunkRequest checks a chunk request's image and swarm key against
// m and key, answering it when they do not match, and returns the chunk's
// index.
func CheckChunkRequest(w http.ResponseWriter, r *http.Request, m *Manifest, key string) (int, bool) {
	if r.PathValue("source") != m.Source {
		http.Error(w, "no such image", http.StatusNotFound)
		return 0, false
	}
	if !authorized(r, key) {
		http.Error(w, "not a member of this swarm", http.StatusUnauthorized)
		return 0, false
	}
	i, err := strconv.Atoi(r.PathValue("i"))
	if err != nil || i < 0 || i >= m.Chunks() {
		http.Error(w, "no such chunk", http.StatusNotFound)
		return 0, false
	}
	return i, true
}

// authorized says r bears the swarm's key. The key is compared in constant
// time: how long a refusal takes says nothing of how much of a guess was
// right.
func authorized(r *http.Request, key string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && key != "" && subtle.ConstantTimeCompare([]byte(got), []byte(key)) == 1
}

// Fetch writes the whole image to the disk and checks it: zero chunks
// written here, every other chunk fetched where the scheduler says and
// checked before it is written, then everything read back and checked
// against the manifest's sha256. It reports to the scheduler as it goes;
// after it returns, Heartbeat keeps the chunks on offer.
func (p *Peer) Fetch(ctx context.Context) error {
	if err := p.writeZeros(); err != nil {
		return err
	}
	results := make(chan Transfer, p.peers())
	active := 0
	lastOK := time.Now()
	t := time.NewTicker(tick)
	defer t.Stop()
	defer func() {
		// Wait for the transfers still under way: they write to the disk.
		for ; active > 0; active-- {
			<-results
		}
	}()
	for !p.complete() {
		r := p.report(p.peers() - active)
		reply, err := p.Coordinate(ctx, r)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			p.requeue(r)
			if time.Since(lastOK) > maxSilence {
				return fmt.Errorf("the scheduler did not answer for %s: %w", maxSilence, err)
			}
		default:
			lastOK = time.Now()
			p.accept(reply)
			for _, a := range reply.Assign {
				active++
				go func() { results <- p.transfer(ctx, a) }()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case res := <-results:
			active--
			p.closeTransfer(res)
		case <-t.C:
		}
	}
	for ; active > 0; active-- {
		p.closeTransfer(<-results)
	}
	if err := p.verify(); err != nil {
		return err
	}
	p.done.Store(true)
	return nil
}

// complete says every chunk is on the disk.
func (p *Peer) complete() bool {
	for i := range p.have {
		if !p.have[i].Load() {
			return false
		}
	}
	return true
}

// writeZeros writes the zero chunks.
func (p *Peer) writeZeros() error {
	m := p.Manifest
	zero := make([]byte, m.ChunkSize)
	for i := range m.Chunks() {
		if !m.IsZero(i) {
			continue
		}
		off, n := m.Span(i)
		if _, err := p.Disk.WriteAt(zero[:n], off); err != nil {
			return fmt.Errorf("write zeros at %d: %w", off, err)
		}
		p.have[i].Store(true)
		p.counts.written.Add(n)
	}
	p.progress()
	return nil
}

func (p *Peer) progress() {
	if p.Progress != nil {
		p.Progress(p.Counts())
	}
}

// report takes what the next report carries.
func (p *Peer) report(want int) Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.pending
	p.pending = Report{}
	if p.resend {
		r.Have = r.Have[:0]
		for i := range p.have {
			if p.have[i].Load() && !p.Manifest.IsZero(i) {
				r.Have = append(r.Have, i)
			}
		}
		p.resend = false
	}
	r.Instance, r.Want, r.Complete = p.instance, want, p.done.Load()
	if p.ln != nil {
		r.Addr = p.ln.Addr().String()
	}
	return r
}

// requeue puts back what a report that did not go through carried.
func (p *Peer) requeue(r Report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending.Have = append(p.pending.Have, r.Have...)
	p.pending.Lost = append(p.pending.Lost, r.Lost...)
	p.pending.Done = append(p.pending.Done, r.Done...)
	p.pending.Failed = append(p.pending.Failed, r.Failed...)
}

// accept takes in what a reply says.
func (p *Peer) accept(reply Reply) {
	p.key.Store(reply.Key)
	held := 0
	for i := range p.have {
		if p.have[i].Load() && !p.Manifest.IsZero(i) {
			held++
		}
	}
	if reply.Holds != held {
		p.mu.Lock()
		p.resend = true
		p.mu.Unlock()
	}
}

// closeTransfer queues a transfer's outcome for the next report.
func (p *Peer) closeTransfer(t Transfer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.Why == "" {
		p.pending.Done = append(p.pending.Done, t)
		p.pending.Have = append(p.pending.Have, t.Chunk)
		return
	}
	p.pending.Failed = append(p.pending.Failed, t)
}

// transfer fetches one chunk and writes it to the disk.
func (p *Peer) transfer(ctx context.Context, a Assignment) Transfer {
	t := Transfer{Chunk: a.Chunk, From: a.From}
	m := p.Manifest
	buf := getBuf(m.ChunkSize)
	defer putBuf(buf)
	off, n := m.Span(a.Chunk)
	b := buf[:n]
	if err := p.get(ctx, a, b); err != nil {
		t.Why = WhyGone
		if errors.Is(err, errSlow) {
			t.Why = WhySlow
		}
		p.log("chunk %d from %s: %v: fetching it elsewhere", a.Chunk, Source(a.From), err)
		return t
	}
	if !m.Verify(a.Chunk, b) {
		t.Why = WhyBad
		p.counts.bad.Add(1)
		p.log("chunk %d from %s does not match its sha256: fetching it elsewhere, and the server checks that source", a.Chunk, Source(a.From))
		return t
	}
	if _, err := p.Disk.WriteAt(b, off); err != nil {
		// Not the source's fault: the next attempt writes it again.
		t.Why = WhyGone
		p.log("write chunk %d: %v", a.Chunk, err)
		return t
	}
	p.have[a.Chunk].Store(true)
	t.Bytes = n
	p.counts.written.Add(n)
	if a.From == "" {
		p.counts.server.Add(n)
	} else {
		p.counts.peers.Add(n)
	}
	p.progress()
	return t
}

var errSlow = errors.New("too slow")

// get reads chunk a.Chunk from its source into b (exactly len(b) bytes).
func (p *Peer) get(ctx context.Context, a Assignment, b []byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+ChunkPath(p.Manifest.Source, a.Chunk), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+p.key.Load().(string))
	client := p.Client
	if client == nil {
		client = defaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	// A source that stalls is given up once it is below its share of the
	// least rate (the machine's transfers share its link),
	// counted from its answer on (opening the connection is bounded by
	// the client's dial and header timeouts). The server is the fallback:
	// it is never given up for being slow.
	minRate, grace := p.MinRate, p.SlowGrace
	if minRate <= 0 {
		minRate = DefaultMinRate
	}
	if grace <= 0 {
		grace = DefaultSlowGrace
	}
	share := float64(minRate) / float64(p.peers())
	var got atomic.Int64
	slow := make(chan struct{})
	start := time.Now()
	if a.From != "" {
		go func() {
			t := time.NewTicker(grace / 5)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if el := time.Since(start); el >= grace && float64(got.Load())/el.Seconds() < share {
						close(slow)
						cancel()
						return
					}
				}
			}
		}()
	}
	for n := 0; n < len(b) && err == nil; {
		var k int
		k, err = resp.Body.Read(b[n:min(len(b), n+256<<10)])
		n += k
		got.Add(int64(k))
		if err == io.EOF && n < len(b) {
			err = io.ErrUnexpectedEOF
		} else if err == io.EOF {
			err = nil
		}
	}
	select {
	case <-slow:
		return fmt.Errorf("%w: %d bytes in %s", errSlow, got.Load(), time.Since(start).Round(time.Millisecond))
	default:
	}
	return err
}

// verify reads the written image back from the disk and checks it against
// the manifest's sha256.
func (p *Peer) verify() error {
	m := p.Manifest
	if s, ok := p.Disk.(interface{ Sync() error }); ok {
		s.Sync()
	}
	h := sha256.New()
	buf := getBuf(m.ChunkSize)
	defer putBuf(buf)
	for i := range m.Chunks() {
		off, n := m.Span(i)
		if _, err := p.Disk.ReadAt(buf[:n], off); err != nil {
			return fmt.Errorf("read back at %d: %w", off, err)
		}
		h.Write(buf[:n])
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != m.SHA256 {
		return fmt.Errorf("the image read back from the disk has sha256 %s, want %s", got, m.SHA256)
	}
	return nil
}

// Heartbeat keeps reporting, every few seconds, that p holds the image,
// until ctx ends: the scheduler sends others to it meanwhile.
func (p *Peer) Heartbeat(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for ctx.Err() == nil {
		r := p.report(0)
		if reply, err := p.Coordinate(ctx, r); err == nil {
			p.accept(reply)
		} else {
			p.requeue(r)
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// Linger keeps serving while other members are still fetching, at most
// for d, then tells the scheduler p leaves and stops serving.
func (p *Peer) Linger(ctx context.Context, d time.Duration) {
	deadline := time.Now().Add(d)
	waited := false
	for time.Now().Before(deadline) {
		r := p.report(0)
		reply, err := p.Coordinate(ctx, r)
		if err != nil {
			p.requeue(r)
		} else if reply.Fetching == 0 {
			break
		} else if !waited {
			p.log("%d other machines are still fetching the image: serving them for up to %s", reply.Fetching, d)
			waited = true
		}
		select {
		case <-ctx.Done():
			deadline = time.Time{}
		case <-time.After(tick):
		}
	}
	r := p.report(0)
	r.Leaving = true
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	p.Coordinate(lctx, r)
	cancel()
	p.Close()
}

var defaultClient = NewClient(DefaultPeers)

// NewClient returns an HTTP client for chunk transfers made with at most
// peers at once.
func NewClient(peers int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		ResponseHeaderTimeout: 10 * time.Second,
		MaxIdleConnsPerHost:   max(peers, 1),
		DisableCompression:    true,
	}}
}

var bufs sync.Pool

func getBuf(n int64) []byte {
	if b, ok := bufs.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

func putBuf(b []byte) { bufs.Put(&b) }

// limiter spaces out writes to keep to a rate in bytes per second (0: no
// limit).
type limiter struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

func (l *limiter) wait(ctx context.Context, n int) error {
	if l.rate <= 0 {
		return nil
	}
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	d := l.next.Sub(now)
	l.next = l.next.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
	l.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
