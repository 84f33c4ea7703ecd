package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bootops/bootops/boot"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/power"
	"github.com/bootops/bootops/rollout"
)

// RolloutInterval is how often the rollout controller looks at the fleet
// (and at once when the Plan changes).
const RolloutInterval = 5 * time.Second

// syncEventsPerRound bounds the sync events one round records: a commit
// that moves 10,000 installed nodes at once (or the first start of a
// daemon that keeps sync) goes on their timelines over a few rounds
// instead of flooding the status store's queue.
const syncEventsPerRound = 500

// rollouts is day 2 from Git: for each profile's nodes at each site served
// it shows which run what Git says (SYNC, a metric, an event when that
// changes) and, under a rolling policy, reinstalls the out-of-date ones
// through their BMC in the waves the planner picks. A group's state is
// written to the status store before any node is touched.
type rollouts struct {
	plans *boot.Live
	sites []string
	store rolloutStore
	// active, when set (a site's cluster), says whether this member runs
	// the rollouts now; the others only read the groups it stores.
	active func() bool
	// stale: the groups are not the store's (another member ran them).
	stale bool
	power *power.Manager // nil: no node can be reinstalled by it
	log   *slog.Logger
	now   func() time.Time
	// outOfDate is bootops_nodes_out_of_date{site,profile}.
	outOfDate *prometheus.GaugeVec

	// groups are the controller's own (by site/profile, as stored): only
	// the round touches them, from one goroutine.
	groups map[string]*rollout.Group
	poke   chan struct{}
	// byPlan is the served Plan's nodes by site and profile, made once per
	// Plan; in is each group's planner input, reused round to round (at
	// 50,000 nodes these were most of what a round allocated).
	byPlan   *plan.Plan
	bySite   map[string]map[string][]*plan.Node
	in       map[string][]rollout.Node
	lastPoke time.Time

	mu sync.Mutex
	// published is a copy of each group as last stored, for the boot
	// plane's questions (Reinstalling): never a group the round changes.
	published map[string]*rollout.Group
	shown     []bhttp.RolloutStatus
	// skipped is why each node was last passed over (site/node), so its
	// timeline says it once, not every round.
	skipped map[string]string
	// syncBudget is what is left of this round's syncEventsPerRound.
	syncBudget int
	// bmcTries and bmcBackoff bound a reinstall's BMC retries (0:
	// defaultBMCTries, defaultBMCBackoff).
	bmcTries   int
	bmcBackoff time.Duration
}

// rolloutStore is where the rollouts keep their groups and say what they
// did: the status store, or a site's cluster.
type rolloutStore interface {
	Machines() []status.Machine
	Record(status.Event)
	PutRollout(group string, state []byte) error
	Rollouts() (map[string][]byte, error)
}

func newRollouts(plans *boot.Live, sites []string, store rolloutStore, pm *power.Manager, log *slog.Logger, reg prometheus.Registerer) (*rollouts, error) {
	r := &rollouts{plans: plans, sites: sites, store: store, power: pm, log: log, now: time.Now,
		groups: map[string]*rollout.Group{}, published: map[string]*rollout.Group{}, poke: make(chan struct{}, 1), skipped: map[string]string{},
		outOfDate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bootops_nodes_out_of_date",
			Help: "Installed nodes whose install (image, workflow or cloud-init) is not what Git says now, by site and profile.",
		}, []string{"site", "profile"})}
	reg.MustRegister(r.outOfDate)
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

// load takes the groups as stored.
func (r *rollouts) load() error {
	stored, err := r.store.Rollouts()
	if err != nil {
		return fmt.Errorf("rollouts: %w", err)
	}
	groups := map[string]*rollout.Group{}
	for k, b := range stored {
		var g rollout.Group
		if err := json.Unmarshal(b, &g); err != nil {
			return fmt.Errorf("rollouts: group %s in the status store: %w", k, err)
		}
		groups[k] = &g
		r.publish(k, b)
	}
	r.groups = groups
	return nil
}

// publish makes b, group key as just stored, what the boot plane sees.
func (r *rollouts) publish(key string, b []byte) {
	var g rollout.Group
	if err := json.Unmarshal(b, &g); err != nil {
		r.log.Error("rollout: publish", "group", key, "err", err)
		return
	}
	r.mu.Lock()
	r.published[key] = &g
	r.mu.Unlock()
}

// Poke has the controller look now (a new Plan).
func (r *rollouts) Poke() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// pokeGap is the least time between two rounds a new Plan asks for: a
// burst of pushes (each a new Plan) costs one round a second, not one a
// push, and a rollout still starts within a second of its commit.
const pokeGap = time.Second

// Run looks every RolloutInterval and when poked, until ctx ends.
func (r *rollouts) Run(ctx context.Context) error {
	t := time.NewTicker(RolloutInterval)
	defer t.Stop()
	for {
		r.Round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-r.poke:
			if wait := pokeGap - time.Since(r.lastPoke); wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
			r.lastPoke = time.Now()
		}
	}
}

// Round judges and advances every group once. In a site's cluster only
// the member holding the rollouts does; another reads the groups as the
// holder stored them (what the boot plane asks), and the member that takes
// the role over goes on from them.
func (r *rollouts) Round(ctx context.Context) {
	p := r.plans.Current()
	if p == nil {
		return
	}
	if r.active != nil && !r.active() {
		r.stale = true
		if err := r.load(); err != nil {
			r.log.Debug("rollout: the groups as the cluster has them", "err", err)
		}
		r.mu.Lock()
		r.shown = nil
		r.mu.Unlock()
		return
	}
	if r.stale {
		if err := r.load(); err != nil {
			r.log.Warn("rollout: this member runs the rollouts now, and cannot read where they are: not this round", "err", err)
			return
		}
		r.stale = false
	}
	machines := map[string]*status.Machine{}
	all := r.store.Machines()
	for i := range all {
		if all[i].Node != "" {
			machines[all[i].Key] = &all[i]
		}
	}
	r.outOfDate.Reset()
	r.syncBudget = syncEventsPerRound
	var groups []*shownGroup
	waves := &waves{sem: make(chan struct{}, parallelWaves)}
	if r.byPlan != p {
		r.byPlan, r.bySite = p, map[string]map[string][]*plan.Node{}
		for _, site := range p.Sites {
			byProfile := map[string][]*plan.Node{}
			for _, n := range site.Nodes {
				byProfile[n.Profile] = append(byProfile[n.Profile], n)
			}
			r.bySite[site.Name] = byProfile
		}
	}
	ran := map[string]bool{}
	for _, site := range servedSites(r.sites, p) {
		byProfile := r.bySite[site.Name]
		for _, profile := range sortedProfiles(byProfile) {
			groups = append(groups, r.group(ctx, site, profile, byProfile[profile], machines, waves))
			ran[site.Name+"/"+profile] = true
		}
	}
	for key := range r.in {
		if !ran[key] {
			delete(r.in, key) // a group gone keeps no buffer
		}
	}
	waves.wg.Wait()
	var shown []bhttp.RolloutStatus
	for _, sg := range groups {
		if sg.worth {
			shown = append(shown, sg.st)
		}
	}
	r.mu.Lock()
	r.shown = shown
	r.mu.Unlock()
}

func sortedProfiles(m map[string][]*plan.Node) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// shownGroup is a group's line in the status, and whether it is worth
// showing: set once its wave is over.
type shownGroup struct {
	st    bhttp.RolloutStatus
	worth bool
}

// waves runs the groups' reinstall waves side by side, parallelWaves at
// once: one slow BMC (15 s a call, retried) delays its own group only.
type waves struct {
	sem chan struct{}
	wg  sync.WaitGroup
}

// parallelWaves bounds the groups whose nodes are being started at once.
const parallelWaves = 8

func (w *waves) run(f func()) {
	w.wg.Add(1)
	w.sem <- struct{}{}
	go func() {
		defer func() { <-w.sem; w.wg.Done() }()
		f()
	}()
}

// group is one group's round: sync events and the metric, then the
// planner's step, stored, then acted on — its wave of reinstalls run by
// waves beside the other groups'. The group is the wave's alone until the
// round ends.
func (r *rollouts) group(ctx context.Context, site *plan.Site, profile string, nodes []*plan.Node, machines map[string]*status.Machine, waves *waves) *shownGroup {
	key := site.Name + "/" + profile
	pol := site.Rollout(profile)
	if r.in == nil {
		r.in = map[string][]rollout.Node{}
	}
	in := r.in[key][:0]
	stale := 0
	for _, n := range nodes {
		m := machines[site.Name+"/"+n.Name]
		rn := r.node(site, n, m)
		in = append(in, rn)
		if m != nil {
			sync := status.NodeSync(m, n.Install)
			if strings.HasPrefix(sync, status.SyncPrefix) {
				stale++
			}
			// unknown says nothing new about a node never known.
			if sync != m.Sync && sync != "" && !(sync == status.SyncUnknown && m.Sync == "") && r.syncBudget > 0 {
				r.syncBudget--
				// On the timeline (and to the hub) when it changes.
				r.store.Record(status.Event{Kind: status.KindRollout, Site: site.Name, Node: n.Name, Sync: sync, Rollout: key, Error: sync != status.SyncIn && sync != status.SyncUnknown, Message: "sync: " + sync})
			}
		}
	}
	clear(in[len(in):cap(in)]) // nothing of an earlier Plan kept reachable
	r.in[key] = in
	r.outOfDate.WithLabelValues(site.Name, profile).Set(float64(stale))
	g := r.groups[key]
	if g == nil {
		g = &rollout.Group{}
	}
	before, _ := json.Marshal(g)
	d, err := rollout.Step(r.now(), pol, in, g)
	st := bhttp.RolloutStatus{Site: site.Name, Profile: profile, Strategy: pol.Strategy, OutOfDate: d.OutOfDate, InProgress: d.InProgress}
	if err != nil {
		st.Summary = "error: " + err.Error()
		return &shownGroup{st, true}
	}
	st.Summary = rollout.Summary(d, g)
	if g.Halt != nil {
		st.Halted = g.Halt.Node + ": " + g.Halt.Why
	}
	if after, _ := json.Marshal(g); !bytes.Equal(before, after) {
		// Stored before any node is touched: a restart neither starts a
		// node twice nor forgets a halt.
		if err := r.store.PutRollout(key, after); err != nil {
			r.log.Error("rollout: status store", "group", key, "err", err)
			return &shownGroup{st, true}
		}
		r.groups[key] = g
		r.publish(key, after)
	}
	r.tell(site.Name, key, d)
	sg := &shownGroup{st: st}
	wave := func() {
		for i, name := range d.Start {
			if g.Halt != nil {
				// Halted by a node of this wave: the rest are touched no
				// further, and were never started.
				r.unstart(site.Name, key, g, d.Start[i:])
				break
			}
			r.reinstall(ctx, site, key, name, g, d)
		}
		if g.Halt != nil {
			sg.st.Halted = g.Halt.Node + ": " + g.Halt.Why // the moment it is
			sg.st.Summary = rollout.Summary(d, g)
		}
		sg.worth = pol.Strategy == plan.RolloutRolling || d.OutOfDate > 0 || d.InProgress > 0 || g.Halt != nil
	}
	if len(d.Start) == 0 {
		wave()
	} else {
		waves.run(wave)
	}
	return sg
}

// node is what the planner needs of one node.
func (r *rollouts) node(site *plan.Site, n *plan.Node, m *status.Machine) rollout.Node {
	rn := rollout.Node{Name: n.Name, Labels: n.Labels, Want: n.Install, State: status.StateRegistered, HasBMC: n.BMC != nil && r.power != nil}
	if m != nil {
		rn.Have, rn.State, rn.Since, rn.CloudInit = m.Installed, m.State, m.Since, m.CloudInit
		if m.State == status.StateFailed {
			rn.Error = m.Last.Message
		}
	}
	if rn.HasBMC {
		if s, ok := r.power.Status(site.Name + "/" + n.Name); ok {
			rn.Power, rn.PowerProblem = s.Power, s.Error
		}
	}
	return rn
}

// tell puts the planner's verdicts on the nodes' timelines.
func (r *rollouts) tell(site, key string, d rollout.Decision) {
	rec := func(node, msg string, isErr bool) {
		r.store.Record(status.Event{Kind: status.KindRollout, Site: site, Node: node, Rollout: key, Message: msg, Error: isErr})
	}
	for _, n := range d.Healthy {
		rec(n, "rollout: healthy: running its new install", false)
	}
	for n, why := range d.Failed {
		rec(n, "rollout: failed: "+why, true)
	}
	if h := d.Halted; h != nil {
		rec(h.Node, fmt.Sprintf("rollout %s halted: %s: %s (no further node is touched until Git changes: fix it, or revert)", key, h.Node, h.Why), true)
		r.log.Warn("rollout halted", "group", key, "node", h.Node, "why", h.Why)
	}
	if d.Resumed != "" {
		r.log.Info("rollout resumed", "group", key, "why", d.Resumed)
	}
	for n, why := range d.Skipped {
		if k := site + "/" + n; r.skipped[k] != why {
			r.skipped[k] = why
			rec(n, "rollout: skipped: "+why, false)
		}
	}
}

// reinstall sets the node's next boot to the network, once, and power
// cycles it. A BMC that fails here fails the node (and halts the group):
// the planner saw it answer a moment ago.
func (r *rollouts) reinstall(ctx context.Context, site *plan.Site, key, name string, g *rollout.Group, d rollout.Decision) {
	i := slices.IndexFunc(site.Nodes, func(n *plan.Node) bool { return n.Name == name })
	m := g.Marks[name]
	if i < 0 || m == nil {
		return
	}
	what := "install " + plan.Short(m.Digest)
	canary := ""
	if m.Canary {
		canary = " (canary)"
	}
	r.store.Record(status.Event{Kind: status.KindRollout, Site: site.Name, Node: name, Rollout: key,
		Message: fmt.Sprintf("rollout: reinstalling%s for %s: PXE once and a power cycle through its BMC", canary, what)})
	nodeKey := site.Name + "/" + name
	ctx = power.AskedBy(ctx, "the rollout "+key)
	err := r.pxeCycle(ctx, nodeKey)
	if err == nil {
		return
	}
	why := "power: " + err.Error()
	m.Failed = why
	if g.Halt == nil {
		g.Halt = &rollout.Halt{Node: name, Why: why, Digest: m.Digest, At: r.now()}
	}
	b, _ := json.Marshal(g)
	if perr := r.store.PutRollout(key, b); perr != nil {
		r.log.Error("rollout: status store", "group", key, "err", perr)
	}
	r.publish(key, b)
	r.store.Record(status.Event{Kind: status.KindRollout, Site: site.Name, Node: name, Rollout: key, Error: true,
		Message: fmt.Sprintf("rollout %s halted: %s: %s", key, name, why)})
}

// mediaURL is the URL of the node's medium when its BMC boots it by
// virtual media ("" when it boots by network).
func (r *rollouts) mediaURL(nodeKey string) string {
	site, node, _ := strings.Cut(nodeKey, "/")
	p := r.plans.Current()
	if p == nil {
		return ""
	}
	if n := p.Node(site, node); n == nil || n.BMC == nil || n.BMC.Boot != plan.BootVirtualMedia {
		return ""
	}
	return mediaURL(p, site, node)
}

// pxeCycle sets the node's next boot to the network, once, and power
// cycles it: both again, after a backoff with jitter, when the BMC failed
// in a way that may pass (busy with the daemon's own poll, a timeout, a
// dropped connection, a 5xx), up to bmcTries in all. The pair is retried
// whole: a cycle that timed out may still have happened and used up the
// network boot.
func (r *rollouts) pxeCycle(ctx context.Context, nodeKey string) error {
	tries, wait := r.bmcTries, r.bmcBackoff
	if tries <= 0 {
		tries = defaultBMCTries
	}
	if wait <= 0 {
		wait = defaultBMCBackoff
	}
	// Queued behind the daemon's own poll of the BMC, if one runs: not
	// a busy answer that costs a try.
	ctx = power.Queued(ctx)
	var err error
	for try := 1; ; try++ {
		if u := r.mediaURL(nodeKey); u != "" {
			// bmc.boot: virtual-media: its medium, inserted and booted once.
			_, err = r.power.InsertMedia(power.AskedBy(ctx, "a rollout"), nodeKey, u)
		} else if err = r.power.BootDevice(ctx, nodeKey, "pxe", true); err == nil {
			_, err = r.power.Act(ctx, nodeKey, "cycle")
		}
		if err == nil || try >= tries || !transientBMC(err) {
			break
		}
		d := wait<<(try-1) + time.Duration(rand.Int64N(int64(wait)))
		r.log.Warn("rollout: a BMC failed; trying again", "node", nodeKey, "try", try, "in", d.String(), "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(d):
		}
	}
	if err != nil && transientBMC(err) {
		return fmt.Errorf("%w (after %d tries)", err, tries)
	}
	return err
}

// The BMC retries of a reinstall: 4 tries, waiting 2 s, 4 s, 8 s (plus up
// to 2 s of jitter each) in between.
const (
	defaultBMCTries   = 4
	defaultBMCBackoff = 2 * time.Second
)

// transientBMC says whether a BMC's failure may pass on its own.
func transientBMC(err error) bool {
	if errors.Is(err, power.ErrBusy) || errors.Is(err, context.DeadlineExceeded) || power.Dropped(err) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"connection refused", "timeout", "timed out",
		"500 internal", "502 bad gateway", "503 service", "504 gateway", "status code: 50", "statuscode: 50"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// unstart forgets the marks of nodes a halted wave never touched, and
// stores the group: they were not reinstalled, and are not waited for.
func (r *rollouts) unstart(site, key string, g *rollout.Group, names []string) {
	for _, n := range names {
		delete(g.Marks, n)
		r.store.Record(status.Event{Kind: status.KindRollout, Site: site, Node: n, Rollout: key,
			Message: fmt.Sprintf("rollout %s halted before this node was touched: not reinstalled", key)})
	}
	b, _ := json.Marshal(g)
	if err := r.store.PutRollout(key, b); err != nil {
		r.log.Error("rollout: status store", "group", key, "err", err)
	}
	r.publish(key, b)
}

// Status is what GET /api/v1/status shows of the rollouts.
func (r *rollouts) Status() []bhttp.RolloutStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.shown)
}

// Reinstalling says whether a rollout started node (site/node) for an
// install its disk does not hold yet: the boot plane then serves it the
// Micro-OS although it is provisioned at its generation.
func (r *rollouts) Reinstalling(site, profile, node string, installed *plan.Install) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.published[site+"/"+profile]
	if g == nil {
		return false
	}
	m := g.Marks[node]
	return m != nil && !m.Done && m.Failed == "" && (installed == nil || installed.Digest != m.Digest)
}
