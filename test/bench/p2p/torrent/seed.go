package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/anacrolix/torrent"
)

// runSeed implements "p2ptorrent seed": serve the complete image until
// SIGTERM or SIGINT, then print the piece bytes uploaded.
func runSeed(args []string) error {
	fs := flag.NewFlagSet("seed", flag.ContinueOnError)
	torrentPath := fs.String("torrent", "", ".torrent file")
	data := fs.String("data", "", "complete raw image")
	listen := fs.String("listen", "", "IP:PORT to accept peers on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *torrentPath == "" || *data == "" || *listen == "" {
		return errors.New("-torrent, -data and -listen are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	f, err := os.Open(*data)
	if err != nil {
		return err
	}
	defer f.Close()
	// Completion starts unknown, so the library hashes the data before serving it.
	st := newFileStorage(f, false)
	cfg, err := newClientConfig(*listen, st)
	if err != nil {
		return err
	}
	cl, err := torrent.NewClient(cfg)
	if err != nil {
		return fmt.Errorf("starting client: %w", err)
	}
	defer cl.Close()
	t, err := addTorrent(cl, *torrentPath, st)
	if err != nil {
		return err
	}
	if err := awaitVerified(ctx, t); err != nil {
		return err
	}
	<-ctx.Done()
	s := t.Stats()
	emit(struct {
		Role     string `json:"role"`
		Uploaded int64  `json:"uploaded"`
	}{"seed", s.BytesWrittenData.Int64()})
	return nil
}

// verifyTimeout bounds the seed's start-up hash of its data.
const verifyTimeout = 10 * time.Minute

// awaitVerified waits until the library has hashed the seed's data (every
// piece starts with unknown completion, so the library checks each one once),
// and logs how long that took. It fails if any piece does not match.
func awaitVerified(ctx context.Context, t *torrent.Torrent) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !t.Complete().Bool() {
		if bad := settledIncomplete(t); bad > 0 {
			return fmt.Errorf("data does not match the torrent: %d of %d pieces bad", bad, t.NumPieces())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("verifying data: %w", context.Cause(ctx))
		case <-t.Complete().On():
		case <-tick.C:
		}
	}
	fmt.Fprintf(os.Stderr, "seed: %d pieces verified in %.2fs, serving\n",
		t.NumPieces(), time.Since(start).Seconds())
	return nil
}

// settledIncomplete returns how many pieces are known bad, or 0 while any
// piece is still unknown or being hashed.
func settledIncomplete(t *torrent.Torrent) int {
	bad := 0
	for _, run := range t.PieceStateRuns() {
		if !run.Ok || run.Checking || run.Marking {
			return 0
		}
		if !run.Complete {
			bad += run.Length
		}
	}
	return bad
}
