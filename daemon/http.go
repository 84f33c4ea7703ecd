package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/agentapi"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/lease"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/reconciler"
	"github.com/bootops/bootops/sitecluster"
	"github.com/bootops/bootops/trust"
)

// httpDeps are the planes the HTTP server serves from.
type httpDeps struct {
	plans  *boot.Live
	events *status.Durable
	rec    *reconciler.Reconciler
	secret boot.Secret
	member *sitecluster.Member // nil: the site's one daemon
	// siteLog copies the agents' events to the other members (with member).
	siteLog *siteLog
	root    *os.Root
	pools   *lease.Stores
	hook    http.Handler
	reg     *prometheus.Registry
	log     *slog.Logger
}

// newHTTP builds the HTTP server (its listeners come later): scripts,
// artifacts, the agents' API, the webhook and /metrics, behind the LAN's
// limits.
func newHTTP(cfg Config, d httpDeps) *bhttp.Server {
	agentRequests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bootops_agent_requests_total",
		Help: "Requests of agents (check-in, events), by result: ok, unauthorized (wrong, spent or missing credential), mismatch, conflict (identity-conflict: a spent token again, a provisioned node claimed), refused (events out of the workflow's order), report_refused (an installed OS's report with a wrong, old or missing credential), bad_request.",
	}, []string{"result"})
	d.reg.MustRegister(agentRequests, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "bootops_status_events_dropped_total",
		Help: "Boot-plane events the status store did not keep: its queue was full, a write failed, or a node was past its event budget (--node-events-burst).",
	}, func() float64 { return float64(d.events.Dropped()) }))
	for _, r := range []string{agentapi.ResultOK, agentapi.ResultUnauthorized, agentapi.ResultMismatch, agentapi.ResultConflict, agentapi.ResultRefused, agentapi.ResultReportRefused, agentapi.ResultBadRequest} {
		agentRequests.WithLabelValues(r)
	}
	events := d.events
	// One budget of newcomers per address, for a script and a check-in alike.
	newcomers := &status.Newcomers{Burst: cfg.HTTP.NewBurst, Every: cfg.HTTP.NewEvery}
	// A member of a site's cluster keeps its sessions and spent tokens
	// there. (Provisioned is the daemon's, set once the rollouts exist:
	// daemon.provisioned, the cluster's when there is one.)
	var store agentapi.Store = events
	if d.member != nil {
		store = clustered{Durable: events, m: d.member, sl: d.siteLog, log: d.log}
	}
	agent := &agentapi.Server{Plans: d.plans, Secret: d.secret, Store: store, Provisioned: events.Provisioned,
		Revision: func() string { return d.rec.Status().Applied.Revision },
		Limits:   agentapi.Limits{Newcomers: newcomers},
		Count:    func(r string) { agentRequests.WithLabelValues(r).Inc() },
		Log:      d.log,
	}
	srv := &bhttp.Server{
		Plans: d.plans, Events: events, Secret: d.secret, Agent: agent, Log: d.log,
		Machines:     bhttp.Machines{Provisioned: events.Provisioned, Known: events.Known, Newcomers: newcomers, MACOf: d.pools.MACOf},
		Files:        bhttp.Files{Artifacts: &bhttp.Artifacts{Repo: d.root, CacheDir: filepath.Join(cfg.StateDir, "cache"), Redirect: cfg.HTTP.ArtifactMode == "redirect"}},
		View:         bhttp.View{Status: events, Source: sourceStatus{d.rec}},
		DrainTimeout: cfg.DrainTimeout,
		Routes: map[string]http.Handler{
			"POST /hooks/git": d.hook,
			"/hooks/git":      d.hook, // other methods: 405 from the handler
			"GET /metrics":    promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}),
		},
	}
	guardLAN(cfg.HTTP, srv, events, d.reg)
	return srv
}

// newWebhook is POST /hooks/git: a push makes the follower look at once.
func newWebhook(secret func() []byte, follower *reconciler.Follower, m *reconciler.Metrics, log *slog.Logger) *reconciler.Webhook {
	hook := &reconciler.Webhook{
		Secret: secret,
		Ref:    func() string { return "" },
		Trigger: func(reason string) {
			if follower != nil {
				follower.Trigger(reason)
			}
		},
		Count: m.Webhook,
		Log:   log,
	}
	if follower != nil {
		hook.Ref = func() string { return follower.Ref() }
	}
	return hook
}

// Conns is --max-conns, or half of what the open-files limit leaves after
// the daemon's own files (at least 64): each connection costs a file and
// some 50 KB of memory, and the rest is for files, leases and Git.
func (l HTTPConfig) Conns() int {
	if l.MaxConns > 0 {
		return l.MaxConns
	}
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil || r.Cur > 1<<20 {
		return 65536
	}
	return max(64, int(r.Cur-128)/2)
}

// guardLAN wires what bounds the LAN's traffic into the HTTP server: the
// connection guard, and the metrics of it and of the newcomers' budget.
func guardLAN(l HTTPConfig, srv *bhttp.Server, store *status.Durable, reg prometheus.Registerer) {
	srv.Guard = &bhttp.Guard{Max: l.Conns(), PerSource: l.PerSource}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		counter("bootops_unknown_evicted_total", "Machines that are no node dropped from the status store to stay within --unknown-max/--unknown-max-mb (never a registered node).",
			func() float64 { return float64(store.Evicted()) }),
		counter("bootops_newcomers_refused_total", "Script requests and check-ins of machines new to the daemon turned away (429): their address was past --new-machines-burst.",
			func() float64 { return float64(srv.Machines.Newcomers.Denied()) }),
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

// listenHTTP opens the HTTP listener, behind the connection guard.
func listenHTTP(addr string, guard *bhttp.Guard) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return guard.Listener(ln), nil
}

// httpsListener is the TLS listener of one of --https-addr's addresses.
func httpsListener(cfg HTTPConfig, addr, stateDir string, guard *bhttp.Guard) (net.Listener, error) {
	dir := filepath.Join(stateDir, "tls")
	cert, key := cfg.TLSCert, cfg.TLSKey
	if cert == "" {
		cert = filepath.Join(dir, trust.ServerFile)
	}
	if key == "" {
		key = filepath.Join(dir, trust.ServerKeyFile)
	}
	if err := trust.CheckPrivate(key); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("--https-addr needs a certificate: %s is missing; run 'bootops ca init --host <serverAddress> --state-dir %s', or give --tls-cert and --tls-key", key, stateDir)
		}
		return nil, fmt.Errorf("--tls-key: %w", err)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("https: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenErr("https-addr", addr, err)
	}
	cfgTLS := trust.ServerTLS(pair)
	// Operators' client certificates: of the site CA, asked for only by
	// a client that offers trust.OperatorALPN (never a machine's).
	if b, err := os.ReadFile(filepath.Join(dir, trust.CAFile)); err == nil {
		cas, err := trust.PoolFromPEM(string(b))
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, trust.CAFile), err)
		}
		cfgTLS = trust.OperatorTLS(cfgTLS, cas)
	}
	// The guard counts the TCP connections; TLS goes over them, so that
	// a request still carries its TLS state (a check-in by identity).
	return tls.NewListener(guard.Listener(ln), cfgTLS), nil
}

// httpsPortServed says an --https-addr listener is on port.
func httpsPortServed(addrs string, port int) bool {
	for _, a := range Addrs(addrs) {
		if _, p, err := net.SplitHostPort(a); err == nil && p == strconv.Itoa(port) {
			return true
		}
	}
	return false
}

// Addrs are the addresses of a listener setting (--http-addr,
// --https-addr, --tftp-addr): comma-separated, so that a dual-stack site's
// daemon listens on both families ("0.0.0.0:69,[::]:69"); "" is none.
func Addrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// udpNetwork is the network a TFTP address listens on: udp6 for an IPv6
// one ("[::]:69", "[2001:db8::1]:69"), else udp4 (":69" stays IPv4, as
// it always was).
func udpNetwork(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if ip, perr := netip.ParseAddr(host); err == nil && perr == nil && !ip.Unmap().Is4() {
		return "udp6"
	}
	return "udp4"
}

// PprofRoutes are --pprof-addr's routes (the hub's too).
var PprofRoutes = map[string]http.Handler{
	"/debug/pprof/":        http.HandlerFunc(pprof.Index),
	"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
	"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
}

// ServePprof serves Go's profiles on addr (serve --pprof-addr) until ctx
// ends: what the benchmarks profile the daemon with.
func ServePprof(ctx context.Context, g *errgroup.Group, addr string, guard *bhttp.Guard, wrap func(http.Handler) http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return listenErr("pprof-addr", addr, err)
	}
	mux := http.NewServeMux()
	for pattern, h := range PprofRoutes {
		mux.Handle(pattern, h)
	}
	var h http.Handler = mux
	if wrap != nil {
		h = wrap(h) // a credential, say
	}
	// A profile or a trace takes as long as it was asked to.
	serveUntil(ctx, g, ln, bhttp.Streaming(h), guard)
	return nil
}

// serveUntil serves h on ln until ctx ends: a listener of the daemon's
// beside its main one, with the same timeouts and connection guard.
func serveUntil(ctx context.Context, g *errgroup.Group, ln net.Listener, h http.Handler, guard *bhttp.Guard) {
	if guard != nil {
		ln = guard.Listener(ln)
	}
	srv := bhttp.NewHTTPServer(h, guard, nil)
	g.Go(func() error {
		<-ctx.Done()
		return srv.Close()
	})
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
}
