package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/dhcp"
	"github.com/bootops/bootops/boot/dhcp6"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/lease"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/boot/ui"
	"github.com/bootops/bootops/hub"
	"github.com/bootops/bootops/power"
	"github.com/bootops/bootops/reconciler"
	"github.com/bootops/bootops/sitecluster"
	"github.com/bootops/bootops/trust"
)

// daemon holds the planes as Run builds them.
type daemon struct {
	cfg      Config
	log      *slog.Logger
	settings atomic.Pointer[reloadable]
	reg      *prometheus.Registry
	overlays *overlaySwap
	rec      *reconciler.Reconciler
	src      *source
	dash     *ui.Server
	events   *status.Durable
	root     *os.Root
	secret   boot.Secret
	member   *sitecluster.Member // the site's cluster, when it has more than one daemon
	siteLog  *siteLog            // the member's side of the site's log (with member)
	leases   *leasePools
	fwd      atomic.Pointer[hub.Forwarder] // set after the store, which pokes it
	http     *bhttp.Server
	boot     *bootPlane
	power    *power.Manager
	rollouts *rollouts
}

// Run builds every plane from cfg and serves until ctx ends or a plane
// fails.
func Run(ctx context.Context, cfg Config) error {
	tuneGC(ctx)
	d, live, err := newDaemon(cfg)
	if err != nil {
		return err
	}
	cfg = d.cfg
	// The status store first: its file's lock stops a second daemon on the
	// same state folder before it touches anything there.
	defer d.close()
	if err := d.openEvents(); err != nil {
		return err
	}
	// The reconciler and its source: a Git remote followed, or a folder.
	if err := d.newReconciler(ctx); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	if d.src, err = newSource(cfg, d.log, d.rec, live); err != nil {
		return err
	}
	g.Go(func() error { return d.src.Run(ctx) })
	// The served revision's files, and the HTTP server that serves them.
	if err := d.openFiles(); err != nil {
		return err
	}
	// The site's other daemons, when it has more than one: the secret and
	// the facts a wipe depends on become the cluster's.
	d.leases = &leasePools{dir: cfg.StateDir, macs: &lease.Stores{}}
	if err := d.openCluster(ctx); err != nil {
		return err
	}
	if d.siteLog != nil {
		g.Go(func() error { return d.siteLog.copyEvents(ctx) })
		g.Go(func() error { return d.siteLog.follow(ctx) })
	}
	d.newHTTP()
	d.http.Authorize = d.authorize
	if cfg.Dashboard.OpenReads {
		d.log.Warn("--open-reads: anyone who reaches the HTTP listeners reads every node's status, timeline, inventory and delivery record; for a closed lab only")
	}
	// The dashboard.
	routeDashboard(d.dash, d.http, d.events, d.src.Sync, d.reg)
	g.Go(func() error { return d.dash.Run(ctx) })
	if err := d.startPlanActors(ctx, g); err != nil {
		return err
	}
	// The swarm, then the HTTP, pprof and HTTPS listeners.
	if d.http.Agent.Swarm, err = newSwarm(ctx, g, cfg.Swarm, cfg.StateDir, d.log, d.reg, d.http.Guard); err != nil {
		return err
	}
	addr, err := d.serveHTTP(ctx, g)
	if err != nil {
		return err
	}
	// SIGHUP.
	g.Go(func() error { return reloadOnHUP(ctx, d.log, cfg, cfg.Level, &d.settings, d.src.follower) })
	// DHCP and TFTP need the site's network: they start with the first
	// Plan (kept, fetched or compiled).
	g.Go(func() error {
		p := waitPlan(ctx, d.rec)
		if p == nil {
			return nil
		}
		return d.boot.start(ctx, g, cfg, p)
	})
	d.log.Info("started", "source", reconciler.Redacted(cfg.Source.Source), "http", addr, "state_dir", cfg.StateDir)
	return g.Wait()
}

// startPlanActors starts what acts on each new Plan: power, the
// rollouts, the forgetting of nodes gone from Git, and the hub forwarder.
func (d *daemon) startPlanActors(ctx context.Context, g *errgroup.Group) error {
	cfg := d.cfg
	var err error
	if d.power, err = newPower(cfg.Power, cfg.StateDir, d.log, d.overlays.live, d.events, d.reg); err != nil {
		return configErr(err)
	}
	// In a site's cluster one member at a time acts on its own — the
	// rollouts and the power policy — from the records the cluster keeps.
	var day2 func() bool
	if d.member != nil {
		day2 = d.member.Campaign(ctx, "rollouts", nil).Active
		d.power.Acts, d.power.Cycles = day2, d.clustered()
	}
	routePower(d.http, d.power)
	if testHTTP != nil {
		testHTTP(d.http)
	}
	// Day 2: drift, and the rolling reinstalls Git asks for.
	var rs rolloutStore = d.events
	if d.member != nil {
		rs = d.clustered()
	}
	if d.rollouts, err = newRollouts(d.overlays.live, cfg.Source.Sites, rs, d.power, d.log, d.reg); err != nil {
		return err
	}
	if d.member != nil {
		// One member runs the rollouts at a time; the others answer the
		// boot plane from the groups it stores.
		d.rollouts.active = day2
	}
	d.http.View.Rollouts = d.rollouts.Status
	if d.member != nil {
		d.http.View.Cluster = d.clusterStatus
		d.clusterMetrics()
	}
	d.http.Machines.Provisioned, d.http.Agent.Provisioned = d.provisioned, d.provisioned
	// Retired nodes' erase certificates, signed with the server's record
	// key (made once; its public half, records.pub, checks them offline).
	recordKey, err := trust.RecordKey(filepath.Join(cfg.StateDir, "records.key"))
	if err != nil {
		return fmt.Errorf("the record signing key: %w", err)
	}
	d.http.Agent.Certify = func(doc []byte) (string, error) {
		b, err := trust.SignRecord(recordKey, trust.KindEraseCertificate, doc)
		return string(b), err
	}
	g.Go(func() error { return d.rollouts.Run(ctx) })
	planChanged := d.onPlanChange()
	g.Go(func() error {
		return retainNodes(ctx, d.log, d.overlays.live, d.events, cfg.Status.NodeGrace, planChanged)
	})
	g.Go(func() error { return d.power.Run(ctx) })
	// The hub forwarder.
	if cfg.Hub.Forwarder != nil {
		cluster := func() *bhttp.ClusterStatus { return nil }
		if d.member != nil {
			cluster = d.clusterStatus
		}
		fwd, err := cfg.Hub.Forwarder(d.overlays.live, d.rec, d.events, d.rollouts.Status, cluster)
		if err != nil {
			return configErr(err)
		}
		d.fwd.Store(fwd)
		g.Go(func() error { return fwd.Run(ctx) })
	}
	return nil
}

// newDaemon reads the settings SIGHUP may change and readies the
// dashboard, which every other plane tells of its news.
func newDaemon(cfg Config) (*daemon, reloadable, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Level == nil {
		cfg.Level = new(slog.LevelVar)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, reloadable{}, stateDirErr(cfg.StateDir, err)
	}
	live, err := cfg.reloadable()
	if err != nil {
		return nil, live, configErr(err) // a bad keyring or secret file: the command line's fault
	}
	cfg.Level.Set(live.level)
	d := &daemon{cfg: cfg, log: cfg.Log}
	d.settings.Store(&live)
	// The dashboard: told of every stored event and every reconcile.
	d.dash = &ui.Server{Authorize: d.authorize, Log: d.log}
	return d, live, nil
}

// testHTTP, when set (by this package's tests), sees the HTTP server once
// its routes are in: the contract check of api/openapi.json.
var testHTTP func(*bhttp.Server)

// authorize says whether r's credential gives role: the operators'
// tokens as last (re)read; reads are anyone's with --open-reads.
func (d *daemon) authorize(r *http.Request, role bhttp.Role) bool {
	if role == bhttp.RoleRead && d.cfg.Dashboard.OpenReads {
		return true
	}
	got, _ := d.settings.Load().operators.RoleOf(r)
	return got >= role
}

// newReconciler builds the reconciler and what it swaps Plans into: each
// Plan's site overlays are built and signed as it is swapped in.
func (d *daemon) newReconciler(ctx context.Context) error {
	key, siteCA, err := loadTrust(d.cfg.StateDir, d.cfg.HTTP.OverlayKey)
	if err != nil {
		return err
	}
	d.overlays = &overlaySwap{live: &boot.Live{}, key: key, ca: siteCA}
	d.reg = newRegistry()
	if d.rec, err = newReconciler(ctx, d.cfg, d.log, d.overlays, d.reg); err != nil {
		return err
	}
	d.rec.Done = afterReconcile(d.dash.Notify)
	return nil
}

// openEvents opens the status store, which locks the state folder.
func (d *daemon) openEvents() error {
	var err error
	d.events, err = newStore(d.cfg.Status, d.cfg.StateDir, d.log, d.cfg.Hub.Forwarder != nil, func() {
		d.dash.Notify()
		if fwd := d.fwd.Load(); fwd != nil {
			fwd.Poke()
		}
	})
	return storeErr(d.cfg.StateDir, err)
}

// openFiles opens the secret that signs the agents' credentials and the
// served revision's files.
func (d *daemon) openFiles() error {
	var err error
	if d.secret, err = boot.LoadSecret(d.cfg.StateDir); err != nil {
		return err
	}
	d.root, err = os.OpenRoot(d.src.root)
	return err
}

func (d *daemon) close() {
	if d.member != nil {
		d.member.Close()
	}
	if d.events != nil {
		d.events.Close()
	}
	if d.root != nil {
		d.root.Close()
	}
}

// newHTTP builds the HTTP server and the DHCP and TFTP servers' share of
// it (their metrics and leases).
func (d *daemon) newHTTP() {
	metrics := dhcp.NewMetrics(d.reg)
	hook := newWebhook(func() []byte { return d.settings.Load().webhookSecret }, d.src.follower, d.rec.Metrics, d.log)
	d.http = newHTTP(d.cfg, httpDeps{plans: d.overlays.live, events: d.events, rec: d.rec, secret: d.secret, member: d.member, root: d.root,
		siteLog: d.siteLog, pools: d.leases.macs, hook: hook, reg: d.reg, log: d.log})
	d.boot = &bootPlane{plans: d.overlays.live, events: d.events, httpSrv: d.http, metrics: metrics, metrics6: dhcp6.NewMetrics(d.reg), pools: d.leases, log: d.log,
		member: d.member}
}

// onPlanChange makes every new Plan poke the power manager (a raised
// reprovision: act now) and the returned channel.
func (d *daemon) onPlanChange() <-chan struct{} {
	planChanged := make(chan struct{}, 1)
	done := d.rec.Done
	d.rec.Done = func() {
		done()
		d.sayServing()
		d.power.Poke()
		d.rollouts.Poke()
		select {
		case planChanged <- struct{}{}:
		default:
		}
	}
	d.sayServing() // what was applied before
	return planChanged
}

// sayServing records in the site's cluster which revision this member
// serves, for the others' status.
func (d *daemon) sayServing() {
	rev := d.rec.Status().Applied.Revision
	if d.member == nil || rev == "" {
		return
	}
	go func() {
		if err := d.member.SetServing(rev); err != nil {
			d.log.Debug("cluster: the revision this member serves, not recorded", "revision", rev, "err", err)
		}
	}()
}

// provisioned is the generation a node was provisioned at, unless a
// rollout started it for an install its disk does not hold yet: it then
// boots the Micro-OS again, at the same generation.
func (d *daemon) provisioned(site, node string) (int, bool) {
	gen, ok := d.events.Provisioned(site, node)
	if d.member != nil {
		gen, ok = d.clustered().Provisioned(site, node)
	}
	if !ok {
		return gen, ok
	}
	if p := d.overlays.live.Current(); p != nil {
		if n := p.Node(site, node); n != nil && d.rollouts.Reinstalling(site, n.Profile, node, d.events.Installed(site+"/"+node)) {
			return gen, false
		}
	}
	return gen, true
}

// serveHTTP opens the HTTP, pprof and HTTPS listeners (one per address
// of --http-addr and --https-addr) and serves them; it returns the first
// HTTP listener's address.
func (d *daemon) serveHTTP(ctx context.Context, g *errgroup.Group) (string, error) {
	cfg, srv := d.cfg.HTTP, d.http
	srv.Files.Overlay, srv.Agent.SiteCA = d.overlays.overlay, d.overlays.ca
	mf := &mediaFiles{dir: filepath.Join(d.cfg.StateDir, "media"), ca: d.overlays.ca, artifacts: srv.Files.Artifacts, plans: d.overlays.live}
	srv.Files.Media = mf.get
	var addrs []string
	for _, a := range Addrs(cfg.Addr) {
		ln, err := listenHTTP(a, srv.Guard)
		if err != nil {
			return "", listenErr("http-addr", a, err)
		}
		g.Go(func() error { return srv.Serve(ctx, ln) })
		addrs = append(addrs, ln.Addr().String())
	}
	if len(addrs) == 0 {
		return "", configErrf("--http-addr: no address")
	}
	d.boot.httpAddr = strings.Join(addrs, ",")
	if cfg.PprofAddr != "" {
		if err := ServePprof(ctx, g, cfg.PprofAddr, srv.Guard, nil); err != nil {
			return "", err
		}
	}
	for _, a := range Addrs(cfg.HTTPSAddr) {
		tln, err := httpsListener(cfg, a, d.cfg.StateDir, srv.Guard)
		if err != nil {
			return "", err
		}
		d.log.Info("https", "addr", tln.Addr().String())
		g.Go(func() error { return srv.Serve(ctx, tln) })
	}
	if len(addrs) > 1 {
		d.log.Info("http", "addrs", d.boot.httpAddr)
	}
	return addrs[0], nil
}

// tuneGC: a daemon lives long: collect at the default pace, and hard past
// a soft limit that follows the live heap (a 10,000-node Plan with the
// compiler's caches is about 30 MB live; compiling a revision makes
// garbage, not live data). GOGC and GOMEMLIMIT still win when set.
func tuneGC(ctx context.Context) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(100)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		go followHeap(ctx)
	}
}

// followHeap keeps the soft memory limit 40 MiB above the live heap, or
// the heap's own overhead (metadata, stacks, the unused room in its spans)
// and an eighth of the live heap above it when that is more, and at least
// 64 MiB, checking every 5 s: room for a compilation's garbage, not a
// multiple of the Plan. The overhead matters at scale: at 50,000 nodes it
// is about 90 MB, and a limit of live + 40 MiB sat below what the runtime
// already held, so it collected back to back (a third of the CPU,
// BENCHMARKS.md "Push to live"); at 10,000 nodes the 40 MiB rule holds.
func followHeap(ctx context.Context) {
	for {
		h := readHeap()
		debug.SetMemoryLimit(heapLimit(h.live, h.overhead))
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// heap is what the runtime says of the heap, in bytes.
type heap struct {
	live     int64 // marked live by the last collection
	objects  int64 // in objects now, live or not yet collected
	overhead int64 // held beside the objects: metadata, stacks, unused room in spans
}

func readHeap() heap {
	sample := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(sample)
	var v [5]int64
	for i, s := range sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = int64(s.Value.Uint64())
		}
	}
	return heap{live: v[0], objects: v[1], overhead: max(0, v[2]-v[1]-v[3]-v[4])}
}

// heapLimit is the soft memory limit for a live heap and the runtime's
// overhead beside it.
func heapLimit(live, overhead int64) int64 {
	return max(64<<20, live+max(40<<20, overhead+live/8))
}
