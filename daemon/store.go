package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
)

// newStore opens the status store: every event of every machine, durable,
// so that a restart (or a crash) loses nothing the agent was told was
// stored. Registered nodes and sightings of other machines are held apart:
// no traffic evicts a node. outbox keeps what a hub has not had yet;
// changed is told of every stored event.
func newStore(cfg StatusConfig, stateDir string, log *slog.Logger, outbox bool, changed func()) (*status.Durable, error) {
	notice := &evictionNotice{log: log, limit: cfg.UnknownMax}
	opts := cfg.storeOptions(notice.evicted)
	opts.Outbox = outbox
	opts.Changed = changed
	events, err := status.Open(filepath.Join(stateDir, "status.db"), opts)
	if err != nil {
		return nil, fmt.Errorf("status store: %w", err)
	}
	return events, nil
}

// storeOptions are the status store's bounds; evicted is told of the
// unknown machines it drops.
func (l StatusConfig) storeOptions(evicted func(int)) status.Options {
	return status.Options{MaxUnknown: l.UnknownMax, MaxUnknownBytes: int64(l.UnknownMB) << 20,
		NodeTrafficBurst: l.NodeBurst, NodeTrafficEvery: l.NodeEvery, Evicted: evicted}
}

// evictionNotice says, at most every 10 s, that the unknown machines'
// table is full and how many sightings went since it last said so.
type evictionNotice struct {
	log   *slog.Logger
	limit int
	n     atomic.Int64
	last  atomic.Int64
}

func (e *evictionNotice) evicted(n int) {
	total := e.n.Add(int64(n))
	now := time.Now().UnixNano()
	last := e.last.Load()
	if now-last < int64(10*time.Second) || !e.last.CompareAndSwap(last, now) {
		return
	}
	e.n.Add(-total)
	e.log.Warn("status: the table of machines that are no node is full: the oldest sightings were dropped (registered nodes are kept); a flood of made-up identities, or raise --unknown-max",
		"dropped", total, "limit", e.limit)
}

// retainNodes forgets, --node-grace after they leave Git, the nodes the
// served Plan no longer has: at every new Plan and hourly.
func retainNodes(ctx context.Context, log *slog.Logger, plans boot.Plans, store *status.Durable, grace time.Duration, changed <-chan struct{}) error {
	tick := time.NewTicker(time.Hour)
	defer tick.Stop()
	for {
		if p := plans.Current(); p != nil {
			// The Plan's own index, not a set of every node's key per
			// revision: at 50,000 nodes that set was a push's garbage.
			inPlan := func(k string) bool {
				site, name, _ := strings.Cut(k, "/")
				return p.Node(site, name) != nil
			}
			if err := store.Retain(inPlan, grace); err != nil {
				log.Warn("status: forgetting nodes removed from Git", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-changed:
		}
	}
}
