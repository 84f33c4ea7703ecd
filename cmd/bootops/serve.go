package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/dhcp"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/boot/tftp"
	"github.com/bootops/bootops/boot/ui"
	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/hub"
	"github.com/bootops/bootops/microos"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/power"
	"github.com/bootops/bootops/reconciler"
	"github.com/bootops/bootops/swarm"
	"github.com/bootops/bootops/trust"
)

// serveConfig is what `bootops serve` runs with.
type serveConfig struct {
	source, ref, site, httpAddr, dhcp, iface, ipxeDir, stateDir, tftpAddr, artifactMode, logFormat, logLevel string
	gitUser, gitPasswordFile, gitSSHKey, gitKnownHosts, gitCAFile                                            string
	webhookSecretFile, verifyCommits, configFile, uiTokenFile                                                string
	httpsAddr, tlsCert, tlsKey, overlayKey, shim, grub                                                       string
	secretsDir, ageIdentity, bmcAllow                                                                        string
	hubURLs, hubSeed, hubCA, pprofAddr, swarmAddr                                                            string
	swarmStreams                                                                                             int
	limits                                                                                                   limits
	interval, drainTimeout, powerInterval, bmcTimeout                                                        time.Duration
	allowEmpty, bmcInsecureTLS                                                                               bool
	compileTimeout                                                                                           time.Duration
	compileMemory                                                                                            byteSize
}

func serveCmd() *command {
	c := &command{
		name:    "serve",
		summary: "Run the boot plane: follow a Git repository (or a folder), compile every revision and serve the last good one over HTTP, DHCP and TFTP.",
		usage:   "--source GIT-URL|DIR [--ref R] [--interval 30s] [--site S[,S…]] [--http-addr A] [--https-addr A] [--dhcp proxy|reservation|off] [--interface IF] [--state-dir D] [--webhook-secret-file F] [--verify-commits KEYRING] [--config FILE]",
		example: "  bootops serve --source sites --state-dir /tmp/bootops --http-addr 127.0.0.1:8080 --dhcp off --tftp-addr \"\"\n" +
			"  # (runs as any user: HTTP only; DHCP and TFTP need root for ports 67 and 69)\n" +
			"  curl 'http://127.0.0.1:8080/ipxe?serial=DEMO-0001'\n" +
			"  # the dashboard: http://127.0.0.1:8080/ (read-only; --ui-token-file allows \"Fetch now\")\n\n" +
			"  # Follow a branch; a push webhook makes it look at once, else it polls:\n" +
			"  bootops serve --source https://git.example.com/ops/fleet.git --ref main --site store-0042 \\\n" +
			"      --git-password-file /etc/bootops/token --webhook-secret-file /etc/bootops/hook-secret \\\n" +
			"      --verify-commits /etc/bootops/keys.asc --state-dir /var/lib/bootops\n" +
			"  # Settings may also come from BOOTOPS_<FLAG> variables and a --config YAML file\n" +
			"  # (flag: value per line); SIGHUP re-reads it; SIGTERM drains transfers, then exits.",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		cfg, err := c.serveConfig(e, args)
		if err != nil {
			return err
		}
		return serve(ctx, e, cfg, func() (serveConfig, error) { return c.serveConfig(e, args) })
	}
	return c
}

// serveConfig reads the flags, BOOTOPS_* variables and the config file;
// SIGHUP calls it again.
func (c *command) serveConfig(e *env, args []string) (serveConfig, error) {
	fs := c.flags(e)
	var cfg serveConfig
	fs.StringVar(&cfg.source, "source", "", "Git URL (https://, ssh://, user@host:path, git://, file://) or repository folder to serve (required)")
	fs.StringVar(&cfg.ref, "ref", "", "Git branch, tag or commit to follow (default: the remote's default branch)")
	fs.DurationVar(&cfg.interval, "interval", 30*time.Second, "how often to look at the Git remote (±10% jitter); a webhook looks at once")
	fs.StringVar(&cfg.site, "site", "", "sites this daemon serves, comma-separated (default: every site; DHCP runs for each on its network.interface)")
	fs.StringVar(&cfg.httpAddr, "http-addr", ":8080", "HTTP listen address")
	fs.StringVar(&cfg.httpsAddr, "https-addr", "", "HTTPS listen address for the agents of sites with network.httpsPort (e.g. :8443); its certificate: --tls-cert")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "PEM certificate chain of the HTTPS listener (default <state-dir>/tls/server.pem, from bootops ca init)")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "its private key, mode 0600 (default <state-dir>/tls/server-key.pem)")
	fs.StringVar(&cfg.overlayKey, "overlay-key", "", "ed25519 key that signs the site overlays (default <state-dir>/tls/overlay.key when it exists)")
	fs.StringVar(&cfg.shim, "shim", "/usr/lib/shim/shimx64.efi.signed", "Debian's signed shim, served as shimx64.efi for the shim chain (package shim-signed)")
	fs.StringVar(&cfg.grub, "grub", "/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed", "Debian's signed network GRUB, served as grubx64.efi (package grub-efi-amd64-signed)")
	fs.StringVar(&cfg.dhcp, "dhcp", "", "DHCP mode: proxy, reservation or off (default: the site's network.dhcp)")
	fs.StringVar(&cfg.iface, "interface", "", "network interface of the provisioning LAN (default: the site's network.interface)")
	fs.StringVar(&cfg.ipxeDir, "ipxe-dir", "/usr/lib/ipxe", "folder with the iPXE binaries served over TFTP")
	fs.StringVar(&cfg.tftpAddr, "tftp-addr", ":69", "TFTP listen address (\"\" for none)")
	fs.StringVar(&cfg.stateDir, "state-dir", "/var/lib/bootops", "folder for the last good plan, the secret that signs the agents' credentials, DHCP leases and the artifact cache")
	fs.StringVar(&cfg.artifactMode, "artifact-mode", "serve", "Micro-OS files from a URL: serve (fetch, verify, cache) or redirect (send machines to the URL)")
	fs.StringVar(&cfg.logFormat, "log-format", "json", "log format: json or text")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&cfg.gitUser, "git-username", "", "https user name (default \"git\" when a password is given)")
	fs.StringVar(&cfg.gitPasswordFile, "git-password-file", "", "file holding the https password or access token")
	fs.StringVar(&cfg.gitSSHKey, "git-ssh-key", "", "ssh private key file (ssh:// and user@host:path URLs)")
	fs.StringVar(&cfg.gitKnownHosts, "git-known-hosts", "", "known_hosts file with the ssh server's key (default ~/.ssh/known_hosts)")
	fs.StringVar(&cfg.gitCAFile, "git-ca-file", "", "PEM file of CA certificates the https server's certificate may chain to")
	fs.StringVar(&cfg.webhookSecretFile, "webhook-secret-file", "", "file holding the shared secret of POST /hooks/git (GitHub, GitLab, Gitea/Forgejo, generic HMAC)")
	fs.StringVar(&cfg.uiTokenFile, "ui-token-file", "", "file holding the token the dashboard's actions (fetch now) need; without it the dashboard is read-only")
	fs.StringVar(&cfg.verifyCommits, "verify-commits", "", "armored OpenPGP public keys: serve only commits signed by one of them")
	fs.StringVar(&cfg.secretsDir, "secrets-dir", "", "folder of BMC credentials: one file per bmc.credentials.secret, \"username:password\", then \"allow: NETWORK|ADDRESS|HOST[, …]\" lines naming the BMCs it may be sent to; mode 0600")
	fs.StringVar(&cfg.ageIdentity, "age-identity", "", "age identity file (age-keygen) that decrypts bmc.credentials.age values, mode 0600")
	fs.StringVar(&cfg.bmcAllow, "bmc-allow", "", "BMC networks, addresses or host names (comma-separated) that age credentials, and secret files without allow: lines, may be sent to; none: refused (Git names a BMC's address, the daemon where its password may go)")
	fs.BoolVar(&cfg.bmcInsecureTLS, "bmc-insecure-tls-allowed", false, "obey bmc.tlsVerify: false in Git (Redfish BMCs whose certificate is not checked); without it such a BMC is refused")
	fs.DurationVar(&cfg.powerInterval, "power-interval", power.DefaultInterval, "how often to ask every BMC its power state (20 at once)")
	fs.DurationVar(&cfg.bmcTimeout, "bmc-timeout", power.DefaultTimeout, "how long one BMC call may take before it counts as unreachable")
	fs.StringVar(&cfg.hubURLs, "hub", "", "report this site's events to a hub (bootops hub): its NATS URLs, comma-separated (nats://hub1:4222,…); needs --site S, --hub-seed and --hub-ca")
	fs.StringVar(&cfg.hubSeed, "hub-seed", "", "the site's nkey seed file from bootops hub add-site (mode 0600)")
	fs.StringVar(&cfg.hubCA, "hub-ca", "", "PEM CA certificate(s) the hub's TLS certificate chains to")
	fs.StringVar(&cfg.swarmAddr, "swarm-addr", "", "serve image chunks to sites with imageDelivery: peers on a listener of their own (default: on --http-addr); its port is the same on every site's server address")
	fs.IntVar(&cfg.swarmStreams, "swarm-streams", swarm.DefaultServerStreams, "chunk transfers the server makes at once per image to machines fetching with their peers: enough to fill its link")
	addLimitFlags(fs, &cfg.limits)
	fs.StringVar(&cfg.pprofAddr, "pprof-addr", "", "debugging: serve Go's profiles (/debug/pprof/) on this address; keep it on loopback")
	fs.DurationVar(&cfg.compileTimeout, "compile-timeout", reconciler.DefaultCompileTimeout, "a revision whose CUE takes longer to evaluate is refused (a child process, killed at the deadline)")
	cfg.compileMemory = reconciler.DefaultCompileMemory
	fs.Var(&cfg.compileMemory, "compile-memory", "a revision whose CUE needs more memory to evaluate is refused (e.g. 2GiB, 512MiB)")
	fs.BoolVar(&cfg.allowEmpty, "allow-empty", false, "serve a revision with no site, or one that removes every node")
	fs.DurationVar(&cfg.drainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long transfers in flight may finish")
	fs.StringVar(&cfg.configFile, "config", "", "YAML file of settings (flag-name: value); flags and BOOTOPS_* variables win over it")
	if err := parseNone(fs, e, args); err != nil {
		return cfg, err
	}
	if cfg.configFile != "" {
		if err := applyConfigFile(fs, cfg.configFile); err != nil {
			return cfg, err
		}
	}
	if cfg.source == "" {
		return cfg, usagef("--source is required")
	}
	if cfg.artifactMode != "serve" && cfg.artifactMode != "redirect" {
		return cfg, usagef("--artifact-mode %q: want serve or redirect", cfg.artifactMode)
	}
	if _, err := parseLevel(cfg.logLevel); err != nil {
		return cfg, err
	}
	if cfg.hubURLs != "" {
		switch {
		case len(cfg.sites()) != 1:
			return cfg, usagef("--hub: name the one site this daemon reports as with --site S (a hub credential is one site's)")
		case cfg.hubSeed == "" || cfg.hubCA == "":
			return cfg, usagef("--hub needs --hub-seed (the site's key, from bootops hub add-site) and --hub-ca (the hub's CA): sites reach the hub over TLS only")
		}
	}
	if err := cfg.limits.check(); err != nil {
		return cfg, err
	}
	if _, err := power.ParseAllowList(cfg.bmcAllow); err != nil {
		return cfg, usagef("--bmc-allow: %v", err)
	}
	if cfg.compileTimeout <= 0 || cfg.compileMemory < 64<<20 {
		return cfg, usagef("--compile-timeout: more than 0; --compile-memory: at least 64MiB")
	}
	if cfg.powerInterval < time.Second || cfg.bmcTimeout < time.Second {
		return cfg, usagef("--power-interval and --bmc-timeout: at least 1s")
	}
	return cfg, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, usagef("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func (cfg serveConfig) sites() []string {
	var out []string
	for _, s := range strings.Split(cfg.site, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// readSecret reads a one-line secret file ("" name: none).
func readSecret(name, what string) (string, error) {
	if name == "" {
		return "", nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s: %s is empty", what, name)
	}
	return s, nil
}

// reloadable is what SIGHUP changes without a restart.
type reloadable struct {
	interval      time.Duration
	keyring       string
	webhookSecret []byte
	uiToken       string
	level         slog.Level
}

func (cfg serveConfig) reloadable() (reloadable, error) {
	var r reloadable
	var err error
	r.interval = cfg.interval
	r.level, _ = parseLevel(cfg.logLevel)
	if r.keyring, err = readSecret(cfg.verifyCommits, "--verify-commits"); err != nil {
		return r, err
	}
	if r.keyring != "" {
		if err := reconciler.CheckKeyring(r.keyring); err != nil {
			return r, fmt.Errorf("--verify-commits %s: %w", cfg.verifyCommits, err)
		}
	}
	secret, err := readSecret(cfg.webhookSecretFile, "--webhook-secret-file")
	if err != nil {
		return r, err
	}
	if secret != "" {
		r.webhookSecret = []byte(secret)
	}
	if r.uiToken, err = readSecret(cfg.uiTokenFile, "--ui-token-file"); err != nil {
		return r, err
	}
	return r, nil
}

func serve(ctx context.Context, e *env, cfg serveConfig, reload func() (serveConfig, error)) error {
	// A daemon lives long: collect at the default pace, and hard past a
	// soft limit that follows the live heap (a 10,000-node Plan with the
	// compiler's caches is about 30 MB live; compiling a revision makes
	// garbage, not live data). GOGC and GOMEMLIMIT still win when set.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(100)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		go followHeap(ctx)
	}
	level := new(slog.LevelVar)
	opts := &slog.HandlerOptions{Level: level}
	var handler slog.Handler = slog.NewJSONHandler(e.stderr, opts)
	if cfg.logFormat == "text" {
		handler = slog.NewTextHandler(e.stderr, opts)
	}
	log := slog.New(handler)
	live, err := cfg.reloadable()
	if err != nil {
		return usageError{err.Error()} // a bad keyring or secret file: the command line's fault
	}
	level.Set(live.level)
	var settings atomic.Pointer[reloadable]
	settings.Store(&live)
	// The dashboard: told of every stored event and every reconcile.
	dash := &ui.Server{Token: func() string { return settings.Load().uiToken }, Log: log}

	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return err
	}
	comp, err := compiler.New()
	if err != nil {
		return err
	}
	// A revision's CUE is evaluated in a child process, so a runaway
	// comprehension is refused instead of stalling or exhausting the
	// daemon; YAML, which cannot loop, stays in-process with its caches.
	worker, err := workerArgv()
	if err != nil {
		return err
	}
	comp.Sandbox = &reconciler.Child{Command: worker, Timeout: cfg.compileTimeout, Memory: int64(cfg.compileMemory), Context: ctx}
	plans := &boot.Live{}
	// Each Plan's site overlays are built and signed as it is swapped in.
	key, siteCA, err := loadTrust(cfg)
	if err != nil {
		return err
	}
	overlays := &overlaySwap{live: plans, key: key, ca: siteCA}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := reconciler.NewMetrics(reg)
	state := &reconciler.State{Dir: cfg.stateDir}
	rec := &reconciler.Reconciler{Compiler: comp, Live: overlays, Sites: cfg.sites(), AllowEmpty: cfg.allowEmpty, State: state, Metrics: metrics, Log: log}
	// After every reconcile the dashboard shows the source's news, and
	// (unless GOMEMLIMIT rules) the compilation's garbage goes back to
	// the system at once: the daemon's resident size is its Plan, not its
	// last compilation.
	freeMemory := os.Getenv("GOMEMLIMIT") == ""
	var freeing atomic.Bool
	rec.Done = func() {
		dash.Notify()
		if freeMemory && freeing.CompareAndSwap(false, true) {
			go func() { debug.FreeOSMemory(); freeing.Store(false) }()
		}
	}

	g, ctx := errgroup.WithContext(ctx)
	var follower *reconciler.Follower
	var dir *reconciler.Dir
	var repoRoot string
	if reconciler.IsGitURL(cfg.source) {
		gsrc, err := gitSource(cfg, filepath.Join(cfg.stateDir, "git"))
		if err != nil {
			return err
		}
		rec.SetSource(reconciler.Redacted(cfg.source), cfg.ref)
		follower = &reconciler.Follower{Git: gsrc, R: rec, Log: log}
		follower.Configure(live.interval, live.keyring)
		if saved, err := rec.Restore(); err != nil {
			log.Warn("state: the kept plan cannot be read", "err", err)
		} else if saved != nil {
			follower.Restored(saved.Revision)
		}
		repoRoot = state.FilesDir()
		if err := os.MkdirAll(repoRoot, 0o755); err != nil {
			return err
		}
		g.Go(func() error { return follower.Run(ctx) })
	} else {
		abs, _ := filepath.Abs(cfg.source)
		rec.SetSource("dir:"+abs, "")
		if _, err := rec.Restore(); err != nil {
			log.Warn("state: the kept plan cannot be read", "err", err)
		}
		dir = &reconciler.Dir{Path: cfg.source, R: rec, Log: log}
		if _, err := dir.Load(); err != nil && rec.Current() == nil {
			var list compiler.Errors
			if errors.As(err, &list) {
				for _, l := range list {
					fmt.Fprintln(e.stderr, l)
				}
			} else {
				fmt.Fprintln(e.stderr, err)
			}
			return fmt.Errorf("%s does not compile: nothing to serve", cfg.source)
		}
		repoRoot = cfg.source
		// Edits to the folder are compiled and, when they compile, served.
		g.Go(func() error { return dir.Run(ctx) })
	}
	secret, err := boot.LoadSecret(cfg.stateDir)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(repoRoot)
	if err != nil {
		return err
	}
	defer root.Close()

	// Every event of every machine, durable: a restart (or a crash) loses
	// nothing the agent was told was stored.
	var fwd *hub.Forwarder
	// Registered nodes and sightings of other machines are held apart:
	// no traffic evicts a node (cfg.limits).
	notice := &evictionNotice{log: log, limit: cfg.limits.unknownMax}
	storeOpts := cfg.limits.storeOptions(notice.evicted)
	storeOpts.Outbox = cfg.hubURLs != ""
	storeOpts.Changed = func() {
		dash.Notify()
		if fwd != nil {
			fwd.Poke()
		}
	}
	events, err := status.Open(filepath.Join(cfg.stateDir, "status.db"), storeOpts)
	if err != nil {
		return fmt.Errorf("status store: %w", err)
	}
	defer events.Close()
	agentRequests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bootops_agent_requests_total",
		Help: "Requests of agents (check-in, events), by result: ok, unauthorized (wrong, spent or missing credential), mismatch, conflict (identity-conflict: a spent token again, a provisioned node claimed), refused (events out of the workflow's order), report_refused (an installed OS's report with a wrong, old or missing credential), bad_request.",
	}, []string{"result"})
	reg.MustRegister(agentRequests, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "bootops_status_events_dropped_total",
		Help: "Boot-plane events the status store could not keep (its queue was full or a write failed).",
	}, func() float64 { return float64(events.Dropped()) }))
	for _, r := range []string{bhttp.AgentOK, bhttp.AgentUnauthorized, bhttp.AgentMismatch, bhttp.AgentConflict, bhttp.AgentRefused, bhttp.AgentReportRefused, bhttp.AgentBadRequest} {
		agentRequests.WithLabelValues(r)
	}
	dhcpMetrics := dhcp.NewMetrics(reg)
	// Every site's pool: an unknown machine that reports no identifier is
	// keyed by the MAC its address was leased to.
	pools := &dhcp.Pools{}
	hook := &reconciler.Webhook{
		Secret: func() []byte { return settings.Load().webhookSecret },
		Ref:    func() string { return "" },
		Trigger: func(reason string) {
			if follower != nil {
				follower.Trigger(reason)
			}
		},
		Count: metrics.Webhook,
		Log:   log,
	}
	if follower != nil {
		hook.Ref = func() string { return follower.Ref() }
	}
	httpSrv := &bhttp.Server{
		Plans: plans, Events: events, Status: events, Store: events, Provisioned: events.Provisioned, Secret: secret, Sessions: events, MACOf: pools.MACOf, Source: sourceStatus{rec}, Log: log,
		AgentCount:   func(r string) { agentRequests.WithLabelValues(r).Inc() },
		Artifacts:    &bhttp.Artifacts{Repo: root, CacheDir: filepath.Join(cfg.stateDir, "cache"), Redirect: cfg.artifactMode == "redirect"},
		DrainTimeout: cfg.drainTimeout,
		Routes: map[string]http.Handler{
			"POST /hooks/git": hook,
			"/hooks/git":      hook, // other methods: 405 from the handler
			"GET /metrics":    promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		},
	}
	guardLAN(cfg.limits, httpSrv, events, reg)
	// The dashboard at /: the fleet as the status API has it, pushed as
	// it changes (a new revision too: the reconciler's Done pokes it).
	dash.Doc = func() bhttp.StatusDoc { return httpSrv.StatusDoc(true) }
	dash.Events = events.Events
	dash.Sync = func(reason string) {
		switch {
		case follower != nil:
			follower.Trigger(reason)
		case dir != nil:
			go dir.Load()
		}
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bootops_dashboard_streams",
		Help: "Dashboard event streams open (browsers watching the fleet).",
	}, func() float64 { open, _ := dash.Stats(); return float64(open) }), prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "bootops_dashboard_streams_dropped_total",
		Help: "Dashboard streams dropped because the browser did not read them.",
	}, func() float64 { _, dropped := dash.Stats(); return float64(dropped) }))
	for pattern, h := range dash.Routes() {
		if pattern == "GET /api/v1/stream" {
			h = bhttp.Streaming(h) // a browser watches for hours
		}
		httpSrv.Routes[pattern] = h
	}
	g.Go(func() error { return dash.Run(ctx) })
	pm, err := powerManager(cfg, log, plans, events, reg)
	if err != nil {
		return usageError{err.Error()}
	}
	for pattern, h := range pm.Routes(func(r *http.Request) bool { return bhttp.Authorized(r, settings.Load().uiToken) }) {
		// A power action waits for the BMC (several calls of up to
		// --bmc-timeout each): past the listeners' deadlines.
		httpSrv.Routes[pattern] = bhttp.Streaming(h)
	}
	httpSrv.Power = func(key string) (string, string) {
		st, ok := pm.Status(key)
		if !ok {
			return "", ""
		}
		return st.Power, st.Error
	}
	planChanged := make(chan struct{}, 1)
	done := rec.Done
	rec.Done = func() {
		done()
		pm.Poke() // a raised reprovision: act now
		select {
		case planChanged <- struct{}{}:
		default:
		}
	}
	g.Go(func() error { return retainNodes(ctx, log, plans, events, cfg.limits.nodeGrace, planChanged) })
	g.Go(func() error { return pm.Run(ctx) })
	if cfg.hubURLs != "" {
		if fwd, err = hubForwarder(cfg, log, plans, rec, events); err != nil {
			return usageError{err.Error()}
		}
		g.Go(func() error { return fwd.Run(ctx) })
	}
	if httpSrv.Swarm, err = swarmServer(ctx, g, cfg, log, reg, httpSrv.Guard); err != nil {
		return err
	}
	httpSrv.Overlay, httpSrv.SiteCA = overlays.overlay, siteCA
	ln, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		return err
	}
	ln = httpSrv.Guard.Listener(ln)
	g.Go(func() error { return httpSrv.Serve(ctx, ln) })
	if cfg.pprofAddr != "" {
		if err := servePprof(ctx, g, cfg.pprofAddr, httpSrv.Guard); err != nil {
			return err
		}
	}
	if cfg.httpsAddr != "" {
		tln, err := httpsListener(cfg, httpSrv.Guard)
		if err != nil {
			return err
		}
		log.Info("https", "addr", tln.Addr().String())
		g.Go(func() error { return httpSrv.Serve(ctx, tln) })
	}
	g.Go(func() error { return reloadOnHUP(ctx, log, cfg, reload, level, &settings, follower) })
	g.Go(func() error {
		// DHCP and TFTP need the site's network: they start with the
		// first Plan (kept, fetched or compiled).
		p := waitPlan(ctx, rec)
		if p == nil {
			return nil
		}
		return bootPlane(ctx, g, cfg, log, p, plans, events, httpSrv, ln.Addr().String(), dhcpMetrics, pools)
	})
	log.Info("started", "source", reconciler.Redacted(cfg.source), "http", ln.Addr().String(), "state_dir", cfg.stateDir)
	return g.Wait()
}

// followHeap keeps the soft memory limit 40 MiB above the live heap, and
// at least 64 MiB, checking every 5 s: room for a compilation's garbage,
// not a multiple of the Plan.
func followHeap(ctx context.Context) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	for {
		metrics.Read(sample)
		live := int64(0)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live = int64(sample[0].Value.Uint64())
		}
		debug.SetMemoryLimit(max(64<<20, live+40<<20))
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// bootPlane starts TFTP and DHCP for the sites served.
func bootPlane(ctx context.Context, g *errgroup.Group, cfg serveConfig, log *slog.Logger, p *plan.Plan, plans boot.Plans, events status.Recorder, httpSrv *bhttp.Server, httpAddr string, dhcpMetrics *dhcp.Metrics, pools *dhcp.Pools) error {
	// DHCP's sightings of machines new to the store: a whole link (or
	// relay) shares one budget, so it is 50 times an address's.
	dhcpNewcomers := &status.Newcomers{Burst: 50 * cfg.limits.newBurst, Every: cfg.limits.newEvery / 50}
	var sites []*plan.Site
	if names := cfg.sites(); len(names) > 0 {
		for _, n := range names {
			if s := p.Site(n); s != nil {
				sites = append(sites, s)
			}
		}
	} else {
		sites = p.Sites // every site: each one's DHCP on its own interface
	}
	dhcpSites := 0
	for _, s := range sites {
		if mode(cfg, s) != plan.DHCPOff {
			dhcpSites++
		}
	}
	if dhcpSites > 1 && cfg.iface != "" {
		return usagef("--interface names one network, but %d sites need DHCP: pick one with --site, or set network.interface in each site", dhcpSites)
	}
	var binaries tftp.Files
	if cfg.tftpAddr != "" || dhcpSites > 0 {
		var err error
		if binaries, err = tftp.Load(cfg.ipxeDir); err != nil {
			return err
		}
		// The shim chain's first stages, when Debian's packages are there.
		for name, file := range map[string]string{dhcp.ShimFile: cfg.shim, dhcp.GRUBFile: cfg.grub} {
			if b, err := os.ReadFile(file); err == nil {
				binaries[name] = b
			} else {
				log.Debug("shim chain", "file", file, "err", err)
			}
		}
		httpSrv.Binaries = binaries
	}
	tftpAddr := ""
	if cfg.tftpAddr != "" {
		conn, err := net.ListenPacket("udp4", cfg.tftpAddr)
		if err != nil {
			return fmt.Errorf("tftp: %w", err)
		}
		tftpAddr = conn.LocalAddr().String()
		ts := &tftp.Server{Files: binaries, Dynamic: httpSrv.TFTPFile, Events: events, Log: log, DrainTimeout: cfg.drainTimeout}
		g.Go(func() error { return ts.Serve(ctx, conn) })
	}
	for _, site := range sites {
		m := mode(cfg, site)
		switch m {
		case plan.DHCPProxy, plan.DHCPReservation, plan.DHCPOff:
		default:
			return usagef("--dhcp %q: want proxy, reservation or off", m)
		}
		dhcpMetrics.Site(site.Name)
		iface := cfg.iface
		if iface == "" {
			iface = site.Network.Interface
		}
		if m != plan.DHCPOff {
			serverIP, err := netip.ParseAddr(site.Network.ServerAddress)
			if err != nil {
				return err
			}
			pool := &dhcp.Pool{Path: filepath.Join(cfg.stateDir, "leases-"+site.Name+".json")}
			pools.Add(pool)
			ds := &dhcp.Server{Plans: plans, Site: site.Name, Interface: iface, Events: events, Log: log, Metrics: dhcpMetrics,
				Newcomers: dhcpNewcomers, Known: httpSrv.Known,
				Config: dhcp.Config{ServerIP: serverIP, HTTPPort: site.Network.HTTPPort, Mode: m, Leases: pool}}
			g.Go(func() error { return ds.Serve(ctx) })
		}
		if site.TLS() && !httpsPortServed(cfg.httpsAddr, site.Network.HTTPSPort) {
			log.Warn("site wants TLS, and no --https-addr serves its port: its agents cannot check in", "site", site.Name, "https_port", site.Network.HTTPSPort, "https_addr", cfg.httpsAddr)
		}
		log.Info("serving", "site", site.Name, "plan", p.Hash, "http", httpAddr, "tftp", tftpAddr, "dhcp", m, "interface", iface)
	}
	return nil
}

func mode(cfg serveConfig, s *plan.Site) string {
	if cfg.dhcp != "" {
		return cfg.dhcp
	}
	return s.Network.DHCP
}

// waitPlan waits for the reconciler's first Plan; nil when ctx ends.
func waitPlan(ctx context.Context, rec *reconciler.Reconciler) *plan.Plan {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if p := rec.Current(); p != nil {
			return p
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// reloadOnHUP re-reads the settings on SIGHUP: the poll interval, the
// keyring, the webhook secret and the log level change at once; the others
// need a restart, and the log says which.
func reloadOnHUP(ctx context.Context, log *slog.Logger, cfg serveConfig, reload func() (serveConfig, error), level *slog.LevelVar, settings *atomic.Pointer[reloadable], f *reconciler.Follower) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
		}
		next, err := reload()
		if err == nil {
			var r reloadable
			if r, err = next.reloadable(); err == nil {
				settings.Store(&r)
				level.Set(r.level)
				if f != nil {
					f.Configure(r.interval, r.keyring)
				}
				if restart := restartNeeded(cfg, next); len(restart) > 0 {
					log.Warn("reload: these settings change only with a restart", "settings", restart)
				}
				log.Info("reload: settings re-read", "interval", r.interval.String(), "verify_commits", r.keyring != "", "webhook_secret", r.webhookSecret != nil, "ui_token", r.uiToken != "", "log_level", r.level.String())
				continue
			}
		}
		log.Error("reload: settings not changed", "err", err)
	}
}

func restartNeeded(a, b serveConfig) []string {
	var out []string
	for name, same := range map[string]bool{
		"source": a.source == b.source, "ref": a.ref == b.ref, "site": a.site == b.site, "http-addr": a.httpAddr == b.httpAddr,
		"dhcp": a.dhcp == b.dhcp, "interface": a.iface == b.iface, "tftp-addr": a.tftpAddr == b.tftpAddr, "state-dir": a.stateDir == b.stateDir,
		"ipxe-dir": a.ipxeDir == b.ipxeDir, "allow-empty": a.allowEmpty == b.allowEmpty, "artifact-mode": a.artifactMode == b.artifactMode,
		"git-username": a.gitUser == b.gitUser, "git-password-file": a.gitPasswordFile == b.gitPasswordFile, "git-ssh-key": a.gitSSHKey == b.gitSSHKey,
		"https-addr": a.httpsAddr == b.httpsAddr, "swarm-addr": a.swarmAddr == b.swarmAddr, "swarm-streams": a.swarmStreams == b.swarmStreams, "tls-cert": a.tlsCert == b.tlsCert, "tls-key": a.tlsKey == b.tlsKey,
		"overlay-key": a.overlayKey == b.overlayKey, "compile-timeout": a.compileTimeout == b.compileTimeout, "compile-memory": a.compileMemory == b.compileMemory, "shim": a.shim == b.shim, "grub": a.grub == b.grub,
	} {
		if !same {
			out = append(out, name)
		}
	}
	return out
}

func gitSource(cfg serveConfig, workDir string) (*reconciler.Git, error) {
	g := &reconciler.Git{URL: cfg.source, Ref: cfg.ref, Username: cfg.gitUser, SSHKeyFile: cfg.gitSSHKey, KnownHosts: cfg.gitKnownHosts, WorkDir: workDir}
	var err error
	if g.Password, err = readSecret(cfg.gitPasswordFile, "--git-password-file"); err != nil {
		return nil, usageError{err.Error()}
	}
	if cfg.gitCAFile != "" {
		if g.CABundle, err = os.ReadFile(cfg.gitCAFile); err != nil {
			return nil, usagef("--git-ca-file: %v", err)
		}
	}
	if err := g.Check(); err != nil {
		return nil, usageError{err.Error()}
	}
	return g, nil
}

// sourceStatus shows the reconciler's revisions in the status API.
type sourceStatus struct{ r *reconciler.Reconciler }

func (s sourceStatus) Status() any { return s.r.Status() }

// loadTrust reads the overlay key and the site CA the overlays carry:
// from the flags, else from <state-dir>/tls when there (none: no overlays).
func loadTrust(cfg serveConfig) (ed25519.PrivateKey, string, error) {
	dir := filepath.Join(cfg.stateDir, "tls")
	path := cfg.overlayKey
	if path == "" {
		if _, err := os.Stat(filepath.Join(dir, trust.OverlayKeyFile)); err == nil {
			path = filepath.Join(dir, trust.OverlayKeyFile)
		}
	}
	var key ed25519.PrivateKey
	if path != "" {
		k, err := trust.ReadOverlayKey(path)
		if err != nil {
			return nil, "", fmt.Errorf("overlay key: %w", err)
		}
		key = k
	}
	ca, _ := os.ReadFile(filepath.Join(dir, trust.CAFile))
	return key, string(ca), nil
}

// overlaySwap swaps Plans in for the boot plane, with their site overlays
// built and signed first: the HTTP and TFTP servers serve their bytes, as
// they serve every other artifact, and never sign at request time.
type overlaySwap struct {
	live *boot.Live
	key  ed25519.PrivateKey
	ca   string
	cur  atomic.Pointer[microos.SiteOverlays]
}

func (o *overlaySwap) Swap(p *plan.Plan) {
	o.cur.Store(microos.BuildOverlays(p, o.key, o.ca))
	o.live.Swap(p)
}

func (o *overlaySwap) overlay(site string) ([]byte, error) {
	cur := o.cur.Load()
	if cur == nil {
		return nil, errors.New("no plan loaded yet")
	}
	return cur.Get(site)
}

// httpsListener is the TLS listener of --https-addr.
func httpsListener(cfg serveConfig, guard *bhttp.Guard) (net.Listener, error) {
	dir := filepath.Join(cfg.stateDir, "tls")
	cert, key := cfg.tlsCert, cfg.tlsKey
	if cert == "" {
		cert = filepath.Join(dir, trust.ServerFile)
	}
	if key == "" {
		key = filepath.Join(dir, trust.ServerKeyFile)
	}
	if err := trust.CheckPrivate(key); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("--https-addr needs a certificate: %s is missing; run 'bootops ca init --host <serverAddress> --state-dir %s', or give --tls-cert and --tls-key", key, cfg.stateDir)
		}
		return nil, fmt.Errorf("--tls-key: %w", err)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("https: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.httpsAddr)
	if err != nil {
		return nil, err
	}
	// The guard counts the TCP connections; TLS goes over them, so that
	// a request still carries its TLS state (a check-in by identity).
	return tls.NewListener(guard.Listener(ln), trust.ServerTLS(pair)), nil
}

// httpsPortServed says the --https-addr listener is on port.
func httpsPortServed(addr string, port int) bool {
	_, p, err := net.SplitHostPort(addr)
	return err == nil && p == strconv.Itoa(port)
}

// servePprof serves Go's profiles on addr (serve --pprof-addr) until ctx
// ends: what the benchmarks profile the daemon with.
func servePprof(ctx context.Context, g *errgroup.Group, addr string, guard *bhttp.Guard) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// A profile or a trace takes as long as it was asked to.
	serveUntil(ctx, g, ln, bhttp.Streaming(mux), guard)
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
