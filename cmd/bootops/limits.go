package main

import (
	"context"
	"flag"
	"log/slog"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bootops/bootops/boot"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
)

// limits are what the daemon lets traffic from the LAN take: connections,
// machines new to it, and what it keeps of machines that are no node.
type limits struct {
	maxConns, perSource int
	newBurst            int
	newEvery            time.Duration
	unknownMax          int
	unknownMB           int
	nodeGrace           time.Duration
	nodeBurst           int
	nodeEvery           time.Duration
}

func addLimitFlags(fs *flag.FlagSet, l *limits) {
	fs.IntVar(&l.maxConns, "max-conns", 0, "HTTP connections open at once on all listeners; past it the longest-idle keep-alive is closed (default: half the open-files limit)")
	fs.IntVar(&l.perSource, "max-conns-per-source", 64, "HTTP connections open at once from one address")
	fs.IntVar(&l.newBurst, "new-machines-burst", 20, "machines new to the daemon one address may introduce at once (script requests, check-ins); past it 429 until…")
	fs.DurationVar(&l.newEvery, "new-machines-every", time.Second, "…one more per this long")
	fs.IntVar(&l.unknownMax, "unknown-max", 20000, "machines that are no node kept in the status store (the least recently seen go first; a registered node never does)")
	fs.IntVar(&l.unknownMB, "unknown-max-mb", 64, "MiB of events kept for machines that are no node")
	fs.DurationVar(&l.nodeGrace, "node-grace", 7*24*time.Hour, "how long a node removed from Git keeps its status (provisioned generation, timeline) in case it comes back")
	fs.IntVar(&l.nodeBurst, "node-events-burst", 200, "boot-plane events (DHCP, TFTP, scripts) one node's timeline takes at once; past it…")
	fs.DurationVar(&l.nodeEvery, "node-events-every", time.Second, "…one more per this long (the rest are counted in the next)")
}

func (l limits) check() error {
	switch {
	case l.maxConns < 0 || l.perSource < 1 || l.newBurst < 1 || l.unknownMax < 1 || l.unknownMB < 1 || l.nodeBurst < 1:
		return usagef("--max-conns-per-source, --new-machines-burst, --unknown-max, --unknown-max-mb and --node-events-burst: at least 1")
	case l.newEvery <= 0 || l.nodeEvery <= 0 || l.nodeGrace < 0:
		return usagef("--new-machines-every and --node-events-every: more than 0")
	}
	return nil
}

// conns is --max-conns, or half of what the open-files limit leaves after
// the daemon's own files (at least 64): each connection costs a file and
// some 50 KB of memory, and the rest is for files, leases and Git.
func (l limits) conns() int {
	if l.maxConns > 0 {
		return l.maxConns
	}
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil || r.Cur > 1<<20 {
		return 65536
	}
	return max(64, int(r.Cur-128)/2)
}

// storeOptions are the status store's bounds; evicted is told of the
// unknown machines it drops.
func (l limits) storeOptions(evicted func(int)) status.Options {
	return status.Options{MaxUnknown: l.unknownMax, MaxUnknownBytes: int64(l.unknownMB) << 20,
		NodeTrafficBurst: l.nodeBurst, NodeTrafficEvery: l.nodeEvery, Evicted: evicted}
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

// guardLAN wires what bounds the LAN's traffic into the HTTP server: the
// connection guard, the newcomers' budget, and their metrics.
func guardLAN(l limits, srv *bhttp.Server, store *status.Durable, reg prometheus.Registerer) {
	srv.Guard = &bhttp.Guard{Max: l.conns(), PerSource: l.perSource}
	srv.Newcomers = &status.Newcomers{Burst: l.newBurst, Every: l.newEvery}
	srv.Known = store.Known
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		counter("bootops_unknown_evicted_total", "Machines that are no node dropped from the status store to stay within --unknown-max/--unknown-max-mb (never a registered node).",
			func() float64 { return float64(store.Evicted()) }),
		counter("bootops_newcomers_refused_total", "Script requests and check-ins of machines new to the daemon turned away (429): their address was past --new-machines-burst.",
			func() float64 { return float64(srv.Newcomers.Denied()) }),
		counter("bootops_http_conns_refused_total", "HTTP connections closed at once: their address had --max-conns-per-source open, or every slot was busy.",
			func() float64 { return float64(srv.Guard.Refused()) }),
		counter("bootops_http_conns_reclaimed_total", "Idle HTTP keep-alive connections closed to make room under --max-conns.",
			func() float64 { return float64(srv.Guard.Reclaimed()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bootops_http_conns_open", Help: "HTTP connections open on the daemon's listeners."},
			func() float64 { return float64(srv.Guard.Open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bootops_unknown_machines", Help: "Machines that are no node kept in the status store."},
			func() float64 { n, _ := store.Unknown(); return float64(n) }),
	)
}

// retainNodes forgets, --node-grace after they leave Git, the nodes the
// served Plan no longer has: at every new Plan and hourly.
func retainNodes(ctx context.Context, log *slog.Logger, plans boot.Plans, store *status.Durable, grace time.Duration, changed <-chan struct{}) error {
	tick := time.NewTicker(time.Hour)
	defer tick.Stop()
	for {
		if p := plans.Current(); p != nil {
			keys := map[string]bool{}
			for _, s := range p.Sites {
				for _, n := range s.Nodes {
					keys[s.Name+"/"+n.Name] = true
				}
			}
			if err := store.Retain(func(k string) bool { return keys[k] }, grace); err != nil {
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
