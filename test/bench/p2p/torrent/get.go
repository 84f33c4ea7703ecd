package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/anacrolix/torrent"
	"github.com/anacrolix/torrent/metainfo"
)

// getResult is the line "get" prints once every piece is verified. Byte
// counts are piece payload received, duplicates (endgame) included, so
// Downloaded can exceed the image size. FromWebseed is non-zero only for a
// .torrent made with -webseed; Redials counts peers re-added by -redial.
type getResult struct {
	Role        string  `json:"role"`
	Seconds     float64 `json:"seconds"`
	Downloaded  int64   `json:"downloaded"`
	FromSeed    int64   `json:"fromSeed"`
	FromPeers   int64   `json:"fromPeers"`
	FromWebseed int64   `json:"fromWebseed,omitempty"`
	BadPeers    int     `json:"badPeers"`
	Redials     int     `json:"redials"`
}

// getFlags are the parsed arguments of "get".
type getFlags struct {
	torrent, out, listen, done string
	peers                      []netip.AddrPort // peers[0] is the seed
	linger, redial             time.Duration
}

func parseGetFlags(args []string) (*getFlags, error) {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	var g getFlags
	var peers string
	fs.StringVar(&g.torrent, "torrent", "", ".torrent file")
	fs.StringVar(&g.out, "out", "", "file or block device to write the image to")
	fs.StringVar(&g.listen, "listen", "", "IP:PORT to accept peers on")
	fs.StringVar(&peers, "peers", "", "comma-separated ip:port list; the first is the seed")
	fs.DurationVar(&g.linger, "linger", 60*time.Second, "how long to keep seeding after completion")
	fs.StringVar(&g.done, "done", "", "file to create once the download is complete")
	fs.DurationVar(&g.redial, "redial", time.Second,
		"while downloading, re-add listed peers with no live connection this often (0: never)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if g.torrent == "" || g.out == "" || g.listen == "" || peers == "" {
		return nil, errors.New("-torrent, -out, -listen and -peers are required")
	}
	for _, s := range strings.Split(peers, ",") {
		ap, err := netip.ParseAddrPort(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("-peers: %w", err)
		}
		g.peers = append(g.peers, ap)
	}
	return &g, nil
}

// runGet implements "p2ptorrent get": download into -out, report, then keep
// seeding for -linger or until SIGTERM/SIGINT.
//
// It is long on purpose: the client's life reads best top to bottom, from
// download to linger.
func runGet(args []string) error {
	g, err := parseGetFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	mi, err := metainfo.LoadFromFile(g.torrent)
	if err != nil {
		return fmt.Errorf("loading %s: %w", g.torrent, err)
	}
	info, err := mi.UnmarshalInfo()
	if err != nil {
		return fmt.Errorf("reading %s: %w", g.torrent, err)
	}
	f, err := openOutput(g.out, info.TotalLength())
	if err != nil {
		return err
	}
	defer f.Close()

	start := time.Now()
	st := newFileStorage(f, true)
	cfg, err := newClientConfig(g.listen, st)
	if err != nil {
		return err
	}
	counter := &pieceCounter{seed: g.peers[0]}
	cfg.Callbacks.ReadMessage = counter.readMessage
	tracker := newConnTracker()
	tracker.install(&cfg.Callbacks)
	cl, err := torrent.NewClient(cfg)
	if err != nil {
		return fmt.Errorf("starting client: %w", err)
	}
	defer cl.Close()
	t, err := addTorrent(cl, g.torrent, st)
	if err != nil {
		return err
	}
	t.DownloadAll()
	t.AddPeers(peerInfos(g.peers))
	redials := make(chan int, 1)
	if g.redial > 0 {
		go func() { redials <- redial(ctx, t, tracker, g.peers, g.redial) }()
	} else {
		redials <- 0
	}

	if err := awaitComplete(ctx, t); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	stats := t.Stats()
	fromSeed, fromPeers := counter.fromSeed.Load(), counter.fromPeers.Load()
	fromWebseed := stats.WebSeeds.BytesReadData.Int64()
	emit(getResult{
		Role:        "get",
		Seconds:     secs,
		Downloaded:  fromSeed + fromPeers + fromWebseed,
		FromSeed:    fromSeed,
		FromPeers:   fromPeers,
		FromWebseed: fromWebseed,
		BadPeers:    len(cl.BadPeerIPs()),
		Redials:     <-redials,
	})
	if g.done != "" {
		if err := os.WriteFile(g.done, nil, 0o644); err != nil {
			return fmt.Errorf("creating -done file: %w", err)
		}
	}
	linger(ctx, g.linger)
	stats = t.Stats()
	emit(struct {
		Role     string `json:"role"`
		Uploaded int64  `json:"uploaded"`
	}{"get", stats.BytesWrittenData.Int64()})
	cl.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", g.out, err)
	}
	return nil
}

// openOutput opens the download target for reading and writing. A regular
// file is created and sized to the image; a block device is used as is.
func openOutput(path string, size int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if fi.Mode().IsRegular() {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fmt.Errorf("sizing %s: %w", path, err)
		}
	}
	return f, nil
}

// peerInfos turns addresses into untrusted, directly-given peers. (The
// library's TorrentSpec.PeerAddrs would mark them trusted, which exempts them
// from banning.)
func peerInfos(addrs []netip.AddrPort) []torrent.PeerInfo {
	ps := make([]torrent.PeerInfo, 0, len(addrs))
	for _, a := range addrs {
		ps = append(ps, torrent.PeerInfo{Addr: a, Source: torrent.PeerSourceDirect, Trusted: false})
	}
	return ps
}

// awaitComplete blocks until every piece is verified, or fails when ctx ends.
func awaitComplete(ctx context.Context, t *torrent.Torrent) error {
	select {
	case <-t.Complete().On():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("interrupted with %d of %d pieces complete", t.Stats().PiecesComplete, t.NumPieces())
	}
}

// linger keeps the client seeding for d, or until ctx ends.
func linger(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}
