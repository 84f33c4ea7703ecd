package daemon

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/bootops/bootops/boot/agentapi"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/swarm"
)

// newSwarm is the daemon's part in machines fetching their image from
// each other (a site's imageDelivery: peers): images prepared under the
// state folder, the scheduler, its metrics, and, with --swarm-addr, a
// listener of its own for chunks.
func newSwarm(ctx context.Context, g *errgroup.Group, cfg SwarmConfig, stateDir string, log *slog.Logger, reg *prometheus.Registry, guard *bhttp.Guard) (*agentapi.Swarm, error) {
	sw := &agentapi.Swarm{
		Cache:     &swarm.Cache{Dir: filepath.Join(stateDir, "images"), Client: &http.Client{Timeout: 6 * time.Hour}},
		Scheduler: &swarm.Scheduler{ServerStreams: cfg.Streams},
	}
	swarmMetrics(sw.Scheduler, reg)
	if cfg.Addr == "" {
		return sw, nil
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, listenErr("swarm-addr", cfg.Addr, err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	sw.Port, _ = strconv.Atoi(port)
	mux := http.NewServeMux()
	mux.Handle("GET /swarm/{source}/chunk/{i}", bhttp.Streaming(http.HandlerFunc(sw.ServeChunk)))
	log.Info("image chunks", "addr", ln.Addr().String())
	serveUntil(ctx, g, ln, mux, guard)
	return sw, nil
}

func swarmMetrics(sched *swarm.Scheduler, reg prometheus.Registerer) {
	stat := func(f func(swarm.Stats) float64) func() float64 {
		return func() float64 { return f(sched.Stats()) }
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bootops_swarm_bytes_total", Help: "Image bytes machines fetched with their peers, from the server.", ConstLabels: prometheus.Labels{"from": "server"}},
			stat(func(s swarm.Stats) float64 { return float64(s.ServerBytes) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bootops_swarm_bytes_total", Help: "Image bytes machines fetched with their peers, from the server.", ConstLabels: prometheus.Labels{"from": "peers"}},
			stat(func(s swarm.Stats) float64 { return float64(s.PeerBytes) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bootops_swarm_failed_transfers_total", Help: "Chunk transfers between machines that failed, by why: bad (the bytes did not match: the source was dropped), gone, slow.", ConstLabels: prometheus.Labels{"why": "bad"}},
			stat(func(s swarm.Stats) float64 { return float64(s.Bad) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bootops_swarm_failed_transfers_total", Help: "Chunk transfers between machines that failed, by why: bad (the bytes did not match: the source was dropped), gone, slow.", ConstLabels: prometheus.Labels{"why": "gone"}},
			stat(func(s swarm.Stats) float64 { return float64(s.Gone) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bootops_swarm_failed_transfers_total", Help: "Chunk transfers between machines that failed, by why: bad (the bytes did not match: the source was dropped), gone, slow.", ConstLabels: prometheus.Labels{"why": "slow"}},
			stat(func(s swarm.Stats) float64 { return float64(s.Slow) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bootops_swarm_members", Help: "Machines fetching or serving an image with their peers now."},
			stat(func(s swarm.Stats) float64 { return float64(s.Members) })),
	)
}
