package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/bootops/bootops/test/bench/wan/wanem"
)

type bench struct {
	config
	link *wanem.Link
	srv  *server
	work string
}

// outcome is one download's figures.
type outcome struct {
	took      time.Duration
	err       error
	sha       string // "ok", "MISMATCH" or "-" (failed)
	resumes   int    // the agent's resumes (Range requests after a lost connection)
	requests  int64
	refetched int64         // body bytes the server wrote beyond the file's size (sent twice, or lost in a dead socket's buffer)
	flowed    time.Duration // after the link came back, until the server wrote again (-1: never)
	linkDown  uint64        // IP bytes the link carried server → store
}

func (b *bench) clients() []client {
	return []client{
		{"curl", curl()},
		{"curl -C - --retry", curl("-C", "-", "--retry", "10", "--retry-delay", "1", "--retry-all-errors",
			"--connect-timeout", "5", "--speed-limit", "1", "--speed-time", "10")},
		{"agent.Fetch", agentFetch},
	}
}

func (b *bench) scenarios(ctx context.Context) error {
	all := b.clients()
	fmt.Printf("\n## goodput, no cut\n\n| client | time | goodput | of %g Mbit/s | sha256 | link bytes down / file |\n|---|---|---|---|---|---|\n", float64(b.shape.Rate)/1e6)
	for range b.rounds {
		for _, c := range []client{all[0], all[2]} {
			o := b.measure(ctx, c, 0, false)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			mbit := float64(len(b.srv.file)) * 8 / o.took.Seconds() / 1e6
			fmt.Printf("| %s | %.1f s | %.1f Mbit/s | %.2f | %s | %.3f |%s\n", c.name, o.took.Seconds(), mbit,
				mbit*1e6/float64(b.shape.Rate), o.sha, float64(o.linkDown)/float64(len(b.srv.file)), errNote(o.err))
		}
	}
	if b.cut <= 0 {
		return nil
	}
	for _, lost := range []bool{false, true} {
		title := fmt.Sprintf("link cut for %s after a third of the file", b.cut)
		if lost {
			title += ", the connection lost in it"
		}
		fmt.Printf("\n## %s\n\n| client | result | time | flowing again after the link came back | requests | resumes | re-sent by the server | link bytes down / file | sha256 |\n|---|---|---|---|---|---|---|---|---|\n", title)
		for _, c := range all {
			o := b.measure(ctx, c, b.cut, lost)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Printf("| %s | %s | %.1f s | %s | %d | %d | %.1f MiB | %.3f | %s |\n", c.name, result(o.err), o.took.Seconds(),
				flowed(o.flowed), o.requests, o.resumes, float64(o.refetched)/(1<<20), float64(o.linkDown)/float64(len(b.srv.file)), o.sha)
			if o.err != nil {
				fmt.Printf("|  | %s |\n", o.err)
			}
		}
	}
	return nil
}

// measure runs one download, with the link cut for cut once a third of
// the file is sent (0: no cut), the server's connections aborted at the
// cut when lost.
func (b *bench) measure(ctx context.Context, c client, cut time.Duration, lost bool) outcome {
	path := filepath.Join(b.work, "download")
	os.Remove(path)
	defer os.Remove(path)
	b.srv.sent.Store(0)
	b.srv.requests.Store(0)
	down0, _ := b.link.Stats()
	dctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	done := make(chan struct{})
	flowed := make(chan time.Duration, 1)
	if cut > 0 {
		go func() { flowed <- b.cutAt(done, int64(len(b.srv.file)/3), cut, lost) }()
	}
	start := time.Now()
	resumes, err := c.get(dctx, path)
	o := outcome{took: time.Since(start), err: err, resumes: resumes, flowed: -1}
	close(done)
	if cut > 0 {
		o.flowed = <-flowed
	}
	o.sha = "-"
	if err == nil {
		o.sha = b.check(path)
	}
	o.requests = b.srv.requests.Load()
	o.refetched = max(0, b.srv.sent.Load()-int64(len(b.srv.file)))
	down1, _ := b.link.Stats()
	o.linkDown = down1.Bytes - down0.Bytes
	return o
}

// cutAt waits until the server has sent after bytes, cuts the link for d
// (aborting the server's connections first when lost) and returns how long
// after the link came back the server wrote again: -1 when it did not
// before the download ended. The link is always up again when it returns.
func (b *bench) cutAt(done <-chan struct{}, after int64, d time.Duration, lost bool) time.Duration {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for b.srv.sent.Load() < after {
		select {
		case <-done:
			return -1
		case <-tick.C:
		}
	}
	b.link.Down()
	if lost {
		b.srv.abort()
	}
	select {
	case <-done:
	case <-time.After(d):
	}
	b.link.Up()
	back, sent := time.Now(), b.srv.sent.Load()
	for b.srv.sent.Load() == sent {
		select {
		case <-done:
			return -1
		case <-tick.C:
		}
	}
	return time.Since(back)
}

// check compares the downloaded file's sha256 with the server's.
func (b *bench) check(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "-"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "-"
	}
	if hex.EncodeToString(h.Sum(nil)) != b.srv.sum {
		return "MISMATCH"
	}
	return "ok"
}

func result(err error) string {
	if err != nil {
		return "failed"
	}
	return "done"
}

func errNote(err error) string {
	if err != nil {
		return " failed: " + err.Error()
	}
	return ""
}

func flowed(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}
