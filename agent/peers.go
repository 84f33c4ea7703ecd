package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/swarm"
)

// SwarmClient is the agent's line to the server's swarm of an image (see
// plan.AgentSwarmPath): the uplink, in the Micro-OS.
type SwarmClient interface {
	// Manifest returns the image's manifest; a *swarm.PreparingError
	// while the server prepares the image.
	Manifest(ctx context.Context, image string) (*swarm.Manifest, error)
	Report(ctx context.Context, image string, r swarm.Report) (swarm.Reply, error)
}

// seeding is the image a machine holds and serves to the others until
// its workflow reaches its power action.
type seeding struct {
	peer   *swarm.Peer
	disk   *os.File
	stop   func() // ends the heartbeat, and waits for it
	linger time.Duration
	log    func(string)
}

// imageFromPeers fetches the image onto the disk f with the other machines
// installing it (package swarm): every chunk is checked against the
// manifest the server made from the image (after checking the sha256 Git
// gives), zero chunks are written here, and the whole image is read back
// and checked at the end. It returns the bytes written; the machine goes
// on serving its chunks until its power action.
func (r *Runner) imageFromPeers(ctx context.Context, s *step, f *os.File, disk string) (int64, error) {
	sha := s.a.SHA256
	m, err := r.manifest(ctx, s, sha)
	if err != nil {
		return 0, err
	}
	if size, err := f.Seek(0, io.SeekEnd); err == nil && size < m.Size {
		return 0, permanentf("the image is %d bytes, larger than %s (%d bytes)", m.Size, disk, size)
	}
	// A handle of its own: the machine serves chunks from it after this
	// step (which closes f) returns, until its power action.
	own, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	lim := r.Peers
	var mu sync.Mutex
	p := &swarm.Peer{Manifest: m, Disk: own, Peers: lim.PerMachine, UploadRate: int64(lim.UploadMbit) * 125000,
		Client: swarm.NewClient(lim.PerMachine),
		Coordinate: func(ctx context.Context, rep swarm.Report) (swarm.Reply, error) {
			return r.Swarm.Report(ctx, sha, rep)
		},
		// Transfers log and report progress from goroutines of their
		// own: one at a time.
		Log: func(msg string) { mu.Lock(); defer mu.Unlock(); s.log(msg) }}
	start := r.Now()
	p.Progress = func(c swarm.Counts) { mu.Lock(); defer mu.Unlock(); s.progressFrom(start, c, m.Size, false) }
	if err := p.Start(); err != nil {
		own.Close()
		return 0, err
	}
	s.log(fmt.Sprintf("fetching the image (%d MB, %d MB of it not zeros, %d chunks) with the other machines; serving chunks on %s",
		m.Size>>20, m.NonZero()>>20, m.Chunks(), p.Addr()))
	if err := p.Fetch(ctx); err != nil {
		p.Close()
		own.Close()
		return 0, err
	}
	c := p.Counts()
	s.progressFrom(start, c, m.Size, true)
	s.log(fmt.Sprintf("wrote %d bytes to %s: %d MB from the server, %d MB from other machines, the rest zeros; read back, sha256 %s as the server made it from the image of sha256 %s",
		m.Size, disk, c.FromServer>>20, c.FromPeers>>20, m.SHA256, sha))
	// The GPT's backup is about to move: the chunks it touches are served
	// from memory, as they were.
	p.Pin(0)
	p.Pin(m.Chunks() - 1)
	linger, _ := time.ParseDuration(lim.Linger)
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	beating := make(chan struct{})
	go func() { defer close(beating); p.Heartbeat(hctx, 2*time.Second) }()
	// Stopping waits for the heartbeat to end: one still under way after
	// the machine said it leaves would put it back in the swarm.
	stop := func() { cancel(); <-beating }
	r.stopSeeding(ctx, false) // an earlier image of this workflow
	r.seeding = &seeding{peer: p, disk: own, stop: stop, linger: linger, log: s.log}
	return m.Size, nil
}

// manifest asks the server for the image's manifest, waiting while the
// server prepares the image.
func (r *Runner) manifest(ctx context.Context, s *step, sha string) (*swarm.Manifest, error) {
	var said time.Time
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		m, err := r.Swarm.Manifest(ctx, sha)
		var prep *swarm.PreparingError
		if !errors.As(err, &prep) {
			if err == nil {
				err = m.Check()
			}
			if err == nil && m.Source != sha {
				err = fmt.Errorf("the server sent the manifest of image %s", m.Source)
			}
			return m, err
		}
		if time.Since(said) > 10*time.Second {
			s.log(prep.Error())
			said = time.Now()
		}
		if !sleep(ctx, wait) {
			return nil, ctx.Err()
		}
	}
}

// stopSeeding stops serving the image to the others; linger first serves
// them while they still fetch it, within the site's bound.
func (r *Runner) stopSeeding(ctx context.Context, linger bool) {
	sd := r.seeding
	if sd == nil {
		return
	}
	r.seeding = nil
	sd.stop()
	d := sd.linger
	if !linger {
		d = 0
	}
	sd.peer.Linger(ctx, d)
	sd.disk.Close()
	c := sd.peer.Counts()
	sd.log(fmt.Sprintf("stopped serving the image: %d MB served to other machines", c.Served>>20))
}

// progressFrom reports an image fetched with the other machines: bytes on
// the disk of total, and where they came from.
func (s *step) progressFrom(start time.Time, c swarm.Counts, total int64, final bool) {
	now := s.r.Now()
	if !final && !s.lastProgress.IsZero() && now.Sub(s.lastProgress) < time.Second {
		return
	}
	s.lastProgress = now
	e := plan.AgentEvent{Type: plan.AgentProgress, Bytes: c.Written, Total: total, FromServer: c.FromServer, FromPeers: c.FromPeers}
	if secs := now.Sub(start).Seconds(); secs > 0 {
		e.Rate = float64(c.FromServer+c.FromPeers) / secs
	}
	s.emit(e)
}
