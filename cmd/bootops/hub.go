package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/bootops/bootops/api"
	"github.com/bootops/bootops/boot"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/boot/ui"
	"github.com/bootops/bootops/hub"
	"github.com/bootops/bootops/reconciler"
	"github.com/bootops/bootops/trust"
)

func hubCmd() *command {
	c := &command{
		name:    "hub",
		summary: "Run a hub server: every site daemon's events, over NATS JetStream, in one read-only view (status API, logs, dashboard); or register a site with it.",
		usage:   "--sites-dir D --store D --tls-cert F --tls-key F [--name N] [--nats-addr A] [--http-addr A --view-token-file F] [--cluster-addr A --routes URL,… --replicas 3 --cluster-cert F --cluster-key F --cluster-ca F] [limits]  |  add-site NAME --sites-dir D -o SEED",
		example: "  bootops hub --sites-dir /etc/bootops-hub/sites --store /var/lib/bootops-hub/js \\\n" +
			"      --tls-cert /var/lib/bootops-hub/tls/server.pem --tls-key /var/lib/bootops-hub/tls/server-key.pem \\\n" +
			"      --nats-addr :4222 --http-addr :8090 --view-token-file /etc/bootops-hub/view-token\n" +
			"  # both listeners are on 127.0.0.1 unless told otherwise; a view beyond loopback needs --view-token-file\n" +
			"  # before: the hub's TLS certificate, and each site's key\n" +
			"  bootops ca init --host hub.example.net --state-dir /var/lib/bootops-hub\n" +
			"  bootops hub add-site store-0042 --sites-dir /etc/bootops-hub/sites -o store-0042.seed\n" +
			"  #   copy store-0042.seed (mode 0600) and /var/lib/bootops-hub/tls/ca.pem to the site; then there:\n" +
			"  #   bootops serve … --site store-0042 --hub nats://hub.example.net:4222 --hub-seed store-0042.seed --hub-ca ca.pem\n" +
			"  bootops status --server http://hub.example.net:8090      # every site's nodes (the view's token in $BOOTOPS_TOKEN)\n" +
			"  # three servers, each with its route certificate (bootops ca route h1 --host h1.example.net …):\n" +
			"  #   --name h1 --cluster-addr h1.example.net:6222 --routes nats://h2.example.net:6222,nats://h3.example.net:6222 --replicas 3 \\\n" +
			"  #   --cluster-cert h1.pem --cluster-key h1-key.pem --cluster-ca /var/lib/bootops-hub/tls/ca.pem",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		var h hubSettings
		h.addFlags(fs)
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			if pos[0] != "add-site" || len(pos) != 2 {
				return usagef("unknown subcommand %q: want 'add-site NAME'", strings.Join(pos, " "))
			}
			return addSite(e, pos[1], h.sitesDir, h.out)
		}
		if err := h.check(); err != nil {
			return err
		}
		viewToken, err := h.viewToken()
		if err != nil {
			return err
		}
		var handler slog.Handler = slog.NewJSONHandler(e.stderr, nil)
		if h.logFormat == "text" {
			handler = slog.NewTextHandler(e.stderr, nil)
		}
		log := slog.New(handler)
		cfg, err := h.config(log)
		if err != nil {
			return err
		}
		hubGC(e)
		node, err := hub.Start(ctx, cfg)
		if err != nil {
			return err
		}
		defer node.Close()
		go followSites(ctx, log, node, h.sitesDir, cfg.Sites)
		return serveHub(ctx, log, node, h.name, h.httpAddr, viewToken, h.pprofAddr)
	}
	return c
}

// hubSettings are bootops hub's flags.
type hubSettings struct {
	name, natsAddr, httpAddr, viewTokenFile, store, sitesDir, tlsCert, tlsKey string
	clusterAddr, clusterCert, clusterKey, clusterCA, routes                   string
	out, logFormat, pprofAddr                                                 string
	replicas                                                                  int
	lim                                                                       hub.Limits
}

func (h *hubSettings) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&h.name, "name", hostname(), "this hub server's name, unique in its cluster")
	fs.StringVar(&h.natsAddr, "nats-addr", "127.0.0.1:4222", "NATS address the site daemons connect to (TLS); loopback unless given, e.g. :4222")
	fs.StringVar(&h.httpAddr, "http-addr", "127.0.0.1:8090", "HTTP address of the view: /api/v1/status, /api/v1/events, the dashboard, /metrics; loopback unless given (then --view-token-file is needed)")
	fs.StringVar(&h.viewTokenFile, "view-token-file", "", "file holding the token the view asks for (Authorization: Bearer, or /?token=… once in a browser): it shows every site; read-only")
	lim := &h.lim
	fs.Func("max-msg-size", "largest message a site may send, in bytes (default 1048576: a hello naming 10,000 nodes fits)", intFlag(&lim.MaxMsgSize))
	fs.Func("site-max-msgs", "messages a site keeps on its stream; past it its own oldest go (default 1000000)", intFlag(&lim.SiteMsgs))
	fs.Func("site-max-bytes", "bytes a site keeps on its stream; past it its own oldest go, never another site's (default 1073741824)", intFlag(&lim.SiteBytes))
	fs.Func("site-view-bytes", "bytes of a site's events and machines the view keeps; past it the site's oldest go (default 268435456)", intFlag(&lim.ViewBytes))
	fs.Func("site-conns", "connections one site's key may hold at once (default 16)", intFlag(&lim.SiteConns))
	fs.Func("site-subs", "subscriptions each connection may make (default 64)", intFlag(&lim.SiteSubs))
	fs.Func("site-max-machines", "machines a site may have in the view, nodes and unknown machines (default 20000)", intFlag(&lim.SiteMachines))
	fs.Func("max-seq-jump", "a site's next event this far or further past the last one the hub applied is refused (default 1000000), not let hide what follows", intFlag(&lim.MaxSeqJump))
	fs.StringVar(&h.store, "store", "/var/lib/bootops-hub/js", "folder of the JetStream stream")
	fs.StringVar(&h.sitesDir, "sites-dir", "", "folder of the sites allowed in: NAME.pub, each a site's nkey public key (add-site writes them)")
	fs.StringVar(&h.tlsCert, "tls-cert", "", "PEM certificate of the NATS listener (bootops ca init's server.pem)")
	fs.StringVar(&h.tlsKey, "tls-key", "", "its private key, mode 0600")
	fs.StringVar(&h.clusterAddr, "cluster-addr", "", "route address for a 3-server cluster (e.g. :6222): mutual TLS only, with --cluster-cert, --cluster-key and --cluster-ca")
	fs.StringVar(&h.clusterCert, "cluster-cert", "", "this server's route certificate (bootops ca route NAME --host …)")
	fs.StringVar(&h.clusterKey, "cluster-key", "", "its private key, mode 0600")
	fs.StringVar(&h.clusterCA, "cluster-ca", "", "the hub's CA (its tls/ca.pem): every other server's route certificate must be of it")
	fs.StringVar(&h.routes, "routes", "", "the other servers' route URLs, comma-separated (nats://h2:6222,nats://h3:6222)")
	fs.IntVar(&h.replicas, "replicas", 1, "copies of the stream: 1, or 3 in a 3-server cluster")
	fs.StringVar(&h.out, "o", "", "add-site: file to write the site's nkey seed to (mode 0600)")
	fs.StringVar(&h.logFormat, "log-format", "json", "log format: json or text")
	fs.StringVar(&h.pprofAddr, "pprof-addr", "", "debugging: serve Go's profiles (/debug/pprof/) on this address; keep it on loopback")
}

// check refuses settings that cannot work together.
func (h *hubSettings) check() error {
	switch {
	case h.sitesDir == "":
		return usagef("--sites-dir is required: the sites allowed in (bootops hub add-site)")
	case h.tlsCert == "" || h.tlsKey == "":
		return usagef("--tls-cert and --tls-key are required: sites reach the hub over TLS only (bootops ca init makes them)")
	case h.replicas != 1 && h.replicas != 3:
		return usagef("--replicas %d: want 1 or 3", h.replicas)
	case h.viewTokenFile == "" && !loopback(h.httpAddr):
		return usagef("--http-addr %s: the view shows every site; beyond loopback it needs --view-token-file", h.httpAddr)
	case h.viewTokenFile == "" && h.pprofAddr != "" && !loopback(h.pprofAddr):
		return usagef("--pprof-addr %s: beyond loopback the profiles need --view-token-file too", h.pprofAddr)
	case h.clusterAddr != "" && (h.clusterCert == "" || h.clusterKey == "" || h.clusterCA == ""):
		return usagef("--cluster-addr needs --cluster-cert, --cluster-key and --cluster-ca: routes are mutual TLS, from the hub's CA (bootops ca route NAME --host …)")
	}
	return nil
}

// viewToken is the token the view asks for ("": loopback only).
func (h *hubSettings) viewToken() (string, error) {
	if h.viewTokenFile != "" {
		if err := trust.CheckPrivate(h.viewTokenFile); err != nil {
			return "", usagef("--view-token-file: %v", err)
		}
	}
	tok, err := readSecret(h.viewTokenFile, "--view-token-file")
	if err != nil {
		return "", usagef("%v", err)
	}
	return tok, nil
}

// config is the hub server's: the sites allowed in, its TLS, its cluster.
func (h *hubSettings) config(log *slog.Logger) (hub.Config, error) {
	sites, errs := readSites(h.sitesDir)
	if err := errors.Join(errs...); err != nil {
		return hub.Config{}, err
	}
	if len(sites) == 0 {
		return hub.Config{}, fmt.Errorf("--sites-dir %s: no NAME.pub file: add sites with bootops hub add-site NAME", h.sitesDir)
	}
	if err := trust.CheckPrivate(h.tlsKey); err != nil {
		return hub.Config{}, usagef("--tls-key: %v", err)
	}
	cert, err := tls.LoadX509KeyPair(h.tlsCert, h.tlsKey)
	if err != nil {
		return hub.Config{}, usagef("--tls-cert/--tls-key: %v", err)
	}
	cfg := hub.Config{Name: h.name, Listen: h.natsAddr, TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ClusterListen: h.clusterAddr, Replicas: h.replicas, StoreDir: h.store, Sites: sites, Limits: h.lim, Log: log}
	if h.clusterAddr != "" {
		if cfg.ClusterTLS, err = trust.RouteTLS(h.clusterCert, h.clusterKey, h.clusterCA); err != nil {
			return hub.Config{}, usagef("--cluster-cert, --cluster-key, --cluster-ca: %v", err)
		}
	}
	if h.routes != "" {
		cfg.Routes = strings.Split(h.routes, ",")
	}
	return cfg, nil
}

// intFlag parses a flag's number into p.
func intFlag[T int | int32 | int64 | uint64](p *T) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return errors.New("want a number, 0 or more")
		}
		*p = T(n)
		return nil
	}
}

// hubGC: the hub lives long and holds what its bounds allow (the sites'
// views, JetStream's caches): collect at the default pace, with no soft
// limit under them — the command's 200 MiB had the collector run without
// end once 50 sites' lanes were open (half the throughput went to it).
// GOGC and GOMEMLIMIT still win when set.
func hubGC(e *env) {
	if e.getenv("GOGC") == "" {
		debug.SetGCPercent(100)
	}
	if e.getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(math.MaxInt64)
	}
}

// loopback says whether addr listens on a loopback address only.
func loopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// viewCookie holds, in a browser that opened /?token=…, a value derived
// from the view's token (cookieOf): the token itself never sits in a
// cookie jar.
const viewCookie = "bootops_view"

// cookieOf is the view cookie's value for token: an HMAC of a fixed label
// under it, so it proves the token without being it.
func cookieOf(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("bootops hub view cookie"))
	return hex.EncodeToString(m.Sum(nil))
}

// needToken lets through a request that carries token: as a bearer, as
// the cookie, or as ?token= (which sets the cookie, for the dashboard's
// own requests). token "" lets everything through (a view on loopback).
func needToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bhttp.Authorized(r, token) {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(viewCookie); err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(cookieOf(token))) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		if q := r.URL.Query().Get("token"); q != "" && subtle.ConstantTimeCompare([]byte(q), []byte(token)) == 1 {
			http.SetCookie(w, &http.Cookie{Name: viewCookie, Value: cookieOf(token), Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="bootops hub"`)
		http.Error(w, "the hub's view needs its token (--view-token-file): Authorization: Bearer …, or /?token=… in a browser", http.StatusUnauthorized)
	})
}

// refusedCollector is bootops_hub_refused_total{site,reason}.
type refusedCollector struct{ v *hub.View }

var refusedDesc = prometheus.NewDesc("bootops_hub_refused_total",
	"Messages of a site the hub refused, by reason: duplicate (a resend), sequence (a jump), early, machines (past --site-max-machines), event_too_big, forged, malformed, reply (outside the site's inbox).",
	[]string{"site", "reason"}, nil)

func (c refusedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- refusedDesc }

func (c refusedCollector) Collect(ch chan<- prometheus.Metric) {
	for site, reasons := range c.v.RefusedAll() {
		for reason, n := range reasons {
			ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(n), site, reason)
		}
	}
}

// hubRoutes are the hub's HTTP routes (behind its view token): the
// status API over its view, its metrics, the dashboard without its one
// action, and the API's document.
func hubRoutes(v *hub.View, name string, reg prometheus.Gatherer, dash *ui.Server) map[string]http.Handler {
	routes := map[string]http.Handler{
		// ?site=NAME: one site's machines (a big fleet's document is big).
		"GET /api/v1/status": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			site := r.URL.Query().Get("site")
			bhttp.StatusHandler(func() bhttp.StatusDoc { return v.DocOf(name, site) }).ServeHTTP(w, r)
		}),
		"GET /api/v1/events": bhttp.EventsHandler(v.Events),
		// The escrows' ciphertext, as the sites forwarded it: a site's
		// recovery keys can be had while the site daemon is down.
		"GET /api/v1/recovery-keys/{site}/{node}": bhttp.RecoveryKeysHandler(v.Escrows),
		"GET /metrics":    promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		"GET " + api.Path: api.Handler(),
	}
	for pattern, h := range dash.Routes() {
		if pattern == "GET /api/v1/stream" {
			h = bhttp.Streaming(h)
		}
		if pattern != "POST /api/v1/sync" { // read-only: configuration comes from Git
			routes[pattern] = h
		}
	}
	return routes
}

// serveHub serves the hub's view over HTTP until ctx ends.
func serveHub(ctx context.Context, log *slog.Logger, node *hub.Node, name, addr, token, pprofAddr string) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	v := node.View
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bootops_hub_applied_messages_total", Help: "Messages of the sites' streams this hub's view has applied."}, func() float64 { return float64(v.Applied()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bootops_hub_forged_events_total", Help: "Events a site sent in another site's name (dropped)."}, func() float64 { return float64(v.Forged()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bootops_hub_sites", Help: "Sites the hub has heard from."}, func() float64 { return float64(len(v.Sites())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bootops_hub_machines", Help: "Machines in the hub's view."}, func() float64 { return float64(len(v.Machines())) }),
		refusedCollector{v},
	)
	dash := &ui.Server{Doc: func() bhttp.StatusDoc { d := v.Doc(name); d.StripInventory(true); return d }, Events: v.Events, Log: log}
	v.OnChange(dash.Notify)
	mux := http.NewServeMux()
	for pattern, h := range hubRoutes(v, name, reg, dash) {
		mux.Handle(pattern, h)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	guard := &bhttp.Guard{Max: limits{}.conns(), PerSource: 64}
	srv := bhttp.NewHTTPServer(needToken(token, mux), guard, log)
	ln = guard.Listener(ln)
	g, ctx := errgroup.WithContext(ctx)
	if pprofAddr != "" {
		// The view's token guards the profiles too (none on loopback).
		if err := servePprof(ctx, g, pprofAddr, guard, func(h http.Handler) http.Handler { return needToken(token, h) }); err != nil {
			ln.Close()
			return err
		}
	}
	g.Go(func() error { return dash.Run(ctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	log.Info("hub started", "name", name, "nats", node.ClientURL(), "http", ln.Addr().String(), "view_token", token != "")
	return g.Wait()
}

// sitesEvery is how often the hub looks at its --sites-dir again.
const sitesEvery = 5 * time.Second

// followSites lets in the sites add-site adds, and shuts out the ones
// whose NAME.pub is removed, while the hub runs.
func followSites(ctx context.Context, log *slog.Logger, node *hub.Node, dir string, current map[string]string) {
	t := time.NewTicker(sitesEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Fail closed: a site whose key cannot be read is not let in,
		// and an empty or unreadable folder lets nobody in.
		next, errs := readSites(dir)
		for _, err := range errs {
			log.Warn("hub: a site's key cannot be read: it is not let in", "err", err)
		}
		if maps.Equal(next, current) {
			continue
		}
		if err := node.SetSites(next); err != nil {
			log.Error("hub: sites not changed", "err", err)
			continue
		}
		var added, removed []string
		for s := range next {
			if current[s] == "" {
				added = append(added, s)
			}
		}
		for s := range current {
			if next[s] == "" {
				removed = append(removed, s)
			}
		}
		log.Info("hub: sites changed", "added", added, "removed", removed)
		current = next
	}
}

// readSites reads NAME.pub files: the sites allowed to publish. A file
// that cannot be read or holds no key is an error of its own, its site
// left out; a folder that cannot be read gives no site.
func readSites(dir string) (map[string]string, []error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return map[string]string{}, []error{fmt.Errorf("--sites-dir: %w", err)}
	}
	sites := map[string]string{}
	var errs []error
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".pub") {
			continue
		}
		f := filepath.Join(dir, e.Name())
		name := strings.TrimSuffix(e.Name(), ".pub")
		b, err := os.ReadFile(f)
		switch pub := strings.TrimSpace(string(b)); {
		case err != nil:
			errs = append(errs, err)
		case !hub.ValidSite(name):
			errs = append(errs, fmt.Errorf("%s: site name %q: lowercase letters, digits and '-' (a subject token)", f, name))
		case !nkeys.IsValidPublicUserKey(pub):
			errs = append(errs, fmt.Errorf("%s: not an nkey user public key (bootops hub add-site writes them)", f))
		default:
			sites[name] = pub
		}
	}
	return sites, errs
}

// addSite makes a site's nkey pair: the seed for the site (out, 0600),
// the public key for the hub (sitesDir/NAME.pub).
func addSite(e *env, name, sitesDir, out string) error {
	if !hub.ValidSite(name) {
		return usagef("site name %q: lowercase letters, digits and '-'", name)
	}
	if sitesDir == "" || out == "" {
		return usagef("add-site needs --sites-dir (the hub's) and -o (the site's seed file)")
	}
	pubFile := filepath.Join(sitesDir, name+".pub")
	if _, err := os.Stat(pubFile); err == nil {
		return fmt.Errorf("%s exists: site %s is registered already (remove the file to replace its key)", pubFile, name)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return err
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	if err := os.MkdirAll(sitesDir, 0o755); err != nil {
		return err
	}
	if err := trust.WriteFile(out, append(seed, '\n'), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(pubFile, []byte(pub+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "site %s: seed in %s (give it to the site daemon, --hub-seed), public key in %s (a running hub lets it in within %s)\n", name, out, pubFile, sitesEvery)
	return nil
}

func hostname() string {
	h, _ := os.Hostname()
	if h == "" {
		return "hub"
	}
	return h
}

// hubForwarder sends the site's events to the hub: what the status store
// keeps waits in its outbox until the hub has it.
func hubForwarder(cfg serveConfig, log *slog.Logger, plans *boot.Live, rec *reconciler.Reconciler, events *status.Durable, rollouts func() []bhttp.RolloutStatus, cluster func() *bhttp.ClusterStatus) (*hub.Forwarder, error) {
	if err := trust.CheckPrivate(cfg.hubSeed); err != nil {
		return nil, fmt.Errorf("--hub-seed: %w", err)
	}
	seed, err := os.ReadFile(cfg.hubSeed)
	if err != nil {
		return nil, fmt.Errorf("--hub-seed: %w", err)
	}
	ca, err := os.ReadFile(cfg.hubCA)
	if err != nil {
		return nil, fmt.Errorf("--hub-ca: %w", err)
	}
	pool, err := trust.PoolFromPEM(string(ca))
	if err != nil {
		return nil, fmt.Errorf("--hub-ca %s: %w", cfg.hubCA, err)
	}
	site := cfg.sites()[0]
	host, _ := os.Hostname()
	return &hub.Forwarder{
		Site: site, URLs: strings.Split(cfg.hubURLs, ","), Seed: []byte(strings.TrimSpace(string(seed))), RootCAs: pool, Outbox: events,
		// Beside status.db: a store wiped and made anew gets a new epoch.
		EpochFile: filepath.Join(cfg.stateDir, "hub-epoch.json"),
		Hello: func() hub.Hello {
			h := hub.Hello{Daemon: host, Version: version, Source: rec.Status(), Rollouts: rollouts(), Cluster: cluster()}
			if p := plans.Current(); p != nil {
				h.Plan = p.Hash
				for _, s := range p.Sites {
					if s.Name == site {
						for _, n := range s.Nodes {
							h.Nodes = append(h.Nodes, n.Name)
						}
					}
				}
			}
			return h
		},
		Log: log.With("hub", cfg.hubURLs),
	}, nil
}
