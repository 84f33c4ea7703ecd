package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
)

// epochMsg is an event as a forwarder with a store epoch sends it. The
// header is spelt out: the test is the same on a hub before epochs.
func epochMsg(site, epoch string, seq, prev uint64, e status.Event) *nats.Msg {
	m := eventMsg(site, seq, prev, e)
	m.Header.Set("Bootops-Epoch", epoch)
	return m
}

// A site whose status store was wiped and made anew numbers its events
// from 1 again, under a new epoch: the hub applies them (before epochs, it
// dropped them as resends, forever), while a resend within an epoch, the
// new one or the one before, is still dropped, also after a hub restart.
func TestHubNewEpochStartsANewSequence(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north")
	var logBuf testutil.SyncBuffer
	// A short duplicate window: the resends below reach the view.
	hubs := cluster(t, ctx, 1, pubs, slog.New(slog.NewTextHandler(&logBuf, nil)), func(c *Config) { c.Dedup = time.Second })
	streamReady(t, ctx, hubs[0])
	nc, _ := hostile(t, hubs[0], kps["north"])
	send := func(epoch string, seq, prev uint64) {
		t.Helper()
		if err := nc.PublishMsg(epochMsg("north", epoch, seq, prev, status.Event{Kind: status.KindDHCP, Node: "n1", Message: fmt.Sprintf("%s %d", epoch, seq)})); err != nil {
			t.Fatal(err)
		}
	}
	events := func(n *Node, want int, when string) {
		t.Helper()
		if !testutil.Poll(60*time.Second, 50*time.Millisecond, func() bool { return len(n.View.Events("north/n1")) >= want }) {
			t.Fatalf("%s: %d events of north/n1 in the view, want %d: %+v", when, len(n.View.Events("north/n1")), want, n.View.Events("north/n1"))
		}
		caughtUp(t, ctx, n, 60*time.Second)
		if got := n.View.Events("north/n1"); len(got) != want {
			t.Errorf("%s: %d events of north/n1 in the view, want %d: %+v", when, len(got), want, got)
		}
	}
	for i := range uint64(5) {
		send("old-store", i+1, i)
	}
	nc.Flush()
	events(hubs[0], 5, "the first store")
	// The store is wiped: the new one starts at 1, under a new epoch.
	for i := range uint64(3) {
		send("new-store", i+1, i)
	}
	nc.Flush()
	events(hubs[0], 8, "the new store")
	if !strings.Contains(logBuf.String(), "new epoch") {
		t.Errorf("the hub's log does not say the site has a new epoch:\n%s", logBuf.String())
	}
	// Resends, within the new epoch and the old one, past the stream's
	// duplicate window: dropped by the view.
	time.Sleep(1500 * time.Millisecond)
	send("new-store", 2, 1)
	send("old-store", 4, 3)
	send("new-store", 4, 3)
	nc.Flush()
	events(hubs[0], 9, "after the resends")
	if got := hubs[0].View.Refused("north", RefusedDuplicate); got != 2 {
		t.Errorf("%d resends refused, want 2", got)
	}
	// After a restart the view reads the stream again: the same.
	cfg := hubs[0].cfg
	hubs[0].Close()
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	events(n, 9, "after a restart")
	got := n.View.Events("north/n1")
	var msgs []string
	for _, e := range got {
		msgs = append(msgs, e.Message)
	}
	if want := "old-store 1,old-store 2,old-store 3,old-store 4,old-store 5,new-store 1,new-store 2,new-store 3,new-store 4"; strings.Join(msgs, ",") != want {
		t.Errorf("after a restart: %s, want %s", strings.Join(msgs, ","), want)
	}
}

// failSent is an outbox whose site dies after the hub acknowledged but
// before the outbox dropped what it sent: every event is sent again.
type failSent struct{ Outbox }

func (failSent) Sent(uint64) error { return errors.New("killed before the outbox dropped them") }

// The forwarder's side: a status store wiped and made anew (its events
// numbered from 1 again) gets a new epoch, by itself, and the hub applies
// its events; a site killed before its outbox dropped what the hub had
// sends them again under the same epoch, and they are not applied twice.
func TestHubWipedStoreGetsANewEpoch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north")
	hubs := cluster(t, ctx, 1, pubs)
	dir := t.TempDir()
	seed, _ := kps["north"].Seed()
	var siteLog testutil.SyncBuffer
	var fwd *Forwarder
	run := func(out Outbox) (stop func()) {
		fctx, fcancel := context.WithCancel(ctx)
		fwd = &Forwarder{Site: "north", URLs: []string{"nats://" + hubs[0].cfg.Listen}, Seed: seed, Outbox: out,
			EpochFile: filepath.Join(dir, "hub-epoch.json"), Log: slog.New(slog.NewTextHandler(&siteLog, nil))}
		done := make(chan struct{})
		go func() { defer close(done); fwd.Run(fctx) }()
		return func() { fcancel(); <-done }
	}
	open := func() *status.Durable {
		st, err := status.Open(filepath.Join(dir, "status.db"), status.Options{Outbox: true})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	record := func(st *status.Durable, from, to int) {
		for i := from; i < to; i++ {
			if err := st.RecordSync(status.Event{Kind: status.KindDHCP, Site: "north", Node: "n1", Message: fmt.Sprint("event ", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	drain := func(st *status.Durable, want int, when string) {
		t.Helper()
		if !testutil.Poll(60*time.Second, 50*time.Millisecond, func() bool { out, _ := st.Pending(0, 1); return len(out) == 0 }) {
			t.Fatalf("%s: the outbox did not drain", when)
		}
		caughtUp(t, ctx, hubs[0], 60*time.Second)
		if n := len(hubs[0].View.Events("north/n1")); n != want {
			t.Errorf("%s: %d events in the view, want %d", when, n, want)
		}
	}
	st := open()
	record(st, 0, 20)
	stop := run(st)
	drain(st, 20, "the first store")
	stop()
	first := fwd.Epoch()
	if first == "" {
		t.Fatal("no epoch")
	}
	// Wiped: the store's file goes, the epoch's stays.
	st.Close()
	if err := os.Remove(filepath.Join(dir, "status.db")); err != nil {
		t.Fatal(err)
	}
	st = open()
	defer func() { st.Close() }()
	record(st, 20, 30)
	if out, _ := st.Pending(0, 1); len(out) != 1 || out[0].Seq != 1 {
		t.Fatalf("the new store's first event: %+v, want sequence 1", out)
	}
	stop = run(failSent{st})
	if !testutil.Poll(60*time.Second, 50*time.Millisecond, func() bool { return len(hubs[0].View.Events("north/n1")) >= 30 }) {
		t.Errorf("the new store's events are not in the view: %d events, want 30; the site's log:\n%s", len(hubs[0].View.Events("north/n1")), siteLog.String())
	}
	stop()
	second := fwd.Epoch()
	if second == first || second == "" {
		t.Errorf("the wiped store's epoch is %q, the first's %q", second, first)
	}
	if !strings.Contains(siteLog.String(), "new epoch") {
		t.Errorf("the site's log does not say it took a new epoch:\n%s", siteLog.String())
	}
	// Killed before the outbox dropped them: sent again, same epoch.
	stop = run(st)
	drain(st, 30, "after the resend")
	stop()
	if fwd.Epoch() != second {
		t.Errorf("a resend took a new epoch %q (was %q)", fwd.Epoch(), second)
	}
}

// Issue 44: a site's state restored from a backup (its status store and
// epoch file as they were) issues again the sequence numbers it issued
// after the backup; the hub has those of the old epoch already. The
// forwarder asks the hub for its mark, sees it past anything the store
// issued, and takes a new epoch: the new events are applied, none lost.
func TestHubRestoredSiteGetsANewEpoch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north")
	hubs := cluster(t, ctx, 1, pubs)
	dir, backup := t.TempDir(), t.TempDir()
	seed, _ := kps["north"].Seed()
	var siteLog testutil.SyncBuffer
	var fwd *Forwarder
	files := []string{"status.db", "hub-epoch.json"}
	open := func() *status.Durable {
		st, err := status.Open(filepath.Join(dir, "status.db"), status.Options{Outbox: true})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	run := func(st *status.Durable, from, to, want int, when string) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := st.RecordSync(status.Event{Kind: status.KindDHCP, Site: "north", Node: "n1", Message: fmt.Sprint("event ", i)}); err != nil {
				t.Fatal(err)
			}
		}
		fctx, fcancel := context.WithCancel(ctx)
		fwd = &Forwarder{Site: "north", URLs: []string{"nats://" + hubs[0].cfg.Listen}, Seed: seed, Outbox: st,
			EpochFile: filepath.Join(dir, "hub-epoch.json"), HelloEvery: 200 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&siteLog, nil))}
		done := make(chan struct{})
		go func() { defer close(done); fwd.Run(fctx) }()
		defer func() { fcancel(); <-done }()
		ok := testutil.Poll(60*time.Second, 50*time.Millisecond, func() bool {
			out, _ := st.Pending(0, 1)
			return len(out) == 0 && len(hubs[0].View.Events("north/n1")) >= want
		})
		if n := len(hubs[0].View.Events("north/n1")); !ok || n != want {
			t.Fatalf("%s: %d events in the view, want %d; the site's log:\n%s", when, n, want, siteLog.String())
		}
	}
	copyFiles := func(from, to string) {
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(from, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(to, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := open()
	run(st, 0, 20, 20, "before the backup")
	first := fwd.Epoch()
	st.Close()
	copyFiles(dir, backup)
	st = open()
	run(st, 20, 50, 50, "after the backup")
	if fwd.Epoch() != first {
		t.Fatalf("a new epoch without a restore: %q, was %q", fwd.Epoch(), first)
	}
	st.Close()
	copyFiles(backup, dir) // the site restored
	st = open()
	defer func() { st.Close() }()
	run(st, 50, 60, 60, "restored")
	if fwd.Epoch() == first {
		t.Errorf("the restored store kept its epoch %q", first)
	}
	if !strings.Contains(siteLog.String(), "restored from a backup") {
		t.Errorf("the site's log does not say why it took a new epoch:\n%s", siteLog.String())
	}
}
