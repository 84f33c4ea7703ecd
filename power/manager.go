package power

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bootops/bootops/plan"
)

// Defaults of a Manager.
const (
	DefaultInterval = time.Minute
	DefaultTimeout  = 20 * time.Second
	DefaultParallel = 20
	// DefaultSettle is how long an operator's on, off or cycle waits for
	// the BMC to report the state asked for.
	DefaultSettle = 5 * time.Second
	// DefaultBusy is how long an operator's call waits for a running
	// call of the same BMC.
	DefaultBusy = 5 * time.Second
	// DefaultBackoff is the wait after a failed automatic attempt, doubled
	// after each (at most 10 min).
	DefaultBackoff = 15 * time.Second
	// MaxAttempts bounds the automatic tries per node and generation.
	MaxAttempts = 6
)

// Manager watches the power of every node with a BMC in the live Plan and,
// on sites with power: auto, sets a one-time PXE boot and power-cycles a
// node that is new or whose reprovision was raised: once per generation,
// never while it is installing, retrying with backoff. It holds the BMC
// credentials; nothing else in the daemon does.
type Manager struct {
	// Plan is the live Plan.
	Plan func() *plan.Plan
	// Node says where a node stands: whether it is installing now (in the
	// Micro-OS or provisioning: never power it then), and the generation
	// its OS was installed at (ok false when it never was).
	Node func(site, node string) (installing bool, installed int, ok bool)
	// Retired says whether a node has been retired (its disks erased, as
	// Git asked); nil: none has. A node Git retires is booted into the
	// Micro-OS once for its retirement, never after it is done.
	Retired func(site, node string) bool
	// Record puts a step on the node's timeline; generation is the one a
	// cycle was for (0 otherwise).
	Record  func(site, node, msg string, isErr bool, generation int)
	Secrets *Secrets
	Dial    Dial          // default DialBMCLib
	Timeout time.Duration // per BMC call; default DefaultTimeout
	// MediaURL is where a node's BMC fetches its boot medium for
	// bmc.boot: virtual-media (nil: such nodes boot by network).
	MediaURL func(site, node string) string
	// MediaTimeout bounds a virtual media call (InsertMedia, EjectMedia);
	// default DefaultMediaTimeout.
	MediaTimeout time.Duration
	// Interval between power polls; default DefaultInterval.
	Interval time.Duration
	Parallel int // BMCs asked at once; default DefaultParallel
	// Settle is how long an operator's action reads the power state
	// back, a few times, until it is the one asked for; default
	// DefaultSettle.
	Settle time.Duration
	// Busy is how long an operator's call waits for a poll (or another
	// call) of the same BMC before it fails with ErrBusy; default
	// DefaultBusy.
	Busy time.Duration
	// Backoff is the wait after the first failed automatic attempt,
	// doubled after each; default DefaultBackoff.
	Backoff time.Duration
	// StateFile keeps the generation each node was cycled for, so a
	// restart does not cycle it again.
	StateFile string
	// Cycles, when set, keeps that record in place of StateFile: a site's
	// cluster, where the member acting next must know what another did.
	// It is read again before each round.
	Cycles CycleStore
	// Acts, when set, says whether the policy (power: auto) may act from
	// here now: in a site's cluster one member at a time does. Polls and
	// operators' calls are served either way.
	Acts func() bool
	Log  *slog.Logger
	Now  func() time.Time // default time.Now
	// Allow is where credentials may be sent when their secret file has
	// no allow: lines, and where age values may (serve --bmc-allow).
	Allow AllowList
	// InsecureTLS allows a Redfish BMC that Git says not to verify
	// (serve --bmc-insecure-tls-allowed).
	InsecureTLS bool
	Resolve     Resolver // default the system's resolver

	once   sync.Once
	mu     sync.Mutex
	nodes  map[string]*nodePower
	cycled map[string]int
	poke   chan struct{}
	// slots bound Run's polls in flight (Parallel); bg waits for them;
	// swept tells Run a visit ended (it may have set a retry).
	slots chan struct{}
	bg    sync.WaitGroup
	swept chan struct{}
}

// nodePower is what the Manager knows of one node's BMC.
type nodePower struct {
	// call is held by the one call to the BMC at a time (a buffered
	// channel: an operator waits for it at most Manager.Busy); holder
	// says who holds it, for ErrBusy.
	call   chan struct{}
	holder string

	state   string
	err     string
	checked time.Time
	// requested is an operator's action ("off") the BMC took but whose
	// state it did not report yet: Status says "requested off" until the
	// next poll.
	requested string
	// automatic tries for generation gen: failures so far, and when the
	// next may start.
	gen      int
	attempts int
	next     time.Time
	// retry is when Run visits the node for its next try, between
	// rounds: zero when none is waiting.
	retry time.Time
	// loginFails counts the BMC's failed logins in a row with the
	// credentials of fingerprint; past LoginFailures it is polled only
	// from quiet (a real BMC locks an account that keeps failing).
	loginFails  int
	fingerprint string
	quiet       time.Time
	// inserted: this daemon filled the node's virtual CD for an install;
	// it is ejected once the node is provisioned (ejectDone).
	inserted bool
}

// Status is a node's power as last seen.
type Status struct {
	Node    string    `json:"node"`
	Power   string    `json:"power"`
	Error   string    `json:"error,omitempty"`
	Checked time.Time `json:"checked,omitzero"`
}

func (m *Manager) init() {
	m.once.Do(func() {
		m.nodes = map[string]*nodePower{}
		m.cycled = map[string]int{}
		m.poke = make(chan struct{}, 1)
		if m.Dial == nil {
			m.Dial = DialBMCLib
		}
		if m.Timeout <= 0 {
			m.Timeout = DefaultTimeout
		}
		if m.Interval <= 0 {
			m.Interval = DefaultInterval
		}
		if m.Parallel <= 0 {
			m.Parallel = DefaultParallel
		}
		m.slots = make(chan struct{}, m.Parallel)
		m.swept = make(chan struct{}, 1)
		if m.Settle <= 0 {
			m.Settle = DefaultSettle
		}
		if m.Busy <= 0 {
			m.Busy = DefaultBusy
		}
		if m.Backoff <= 0 {
			m.Backoff = DefaultBackoff
		}
		if m.Now == nil {
			m.Now = time.Now
		}
		if m.Resolve == nil {
			m.Resolve = lookupIP
		}
		if m.Log == nil {
			m.Log = slog.New(slog.DiscardHandler)
		}
		if m.StateFile != "" {
			if b, err := os.ReadFile(m.StateFile); err == nil {
				if err := json.Unmarshal(b, &m.cycled); err != nil {
					m.Log.Warn("power: state file unreadable; no node counts as cycled", "file", m.StateFile, "err", err)
					m.cycled = map[string]int{}
				}
			}
		}
	})
}

// Poke makes the Manager look again now (a new Plan: a raised reprovision).
func (m *Manager) Poke() {
	m.init()
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

// Run polls and applies the policy until ctx ends. A failed automatic
// attempt is tried again when its backoff is over, between rounds (they
// are a minute apart, the first backoff 15 s).
func (m *Manager) Run(ctx context.Context) error {
	m.init()
	defer m.bg.Wait()
	t := time.NewTicker(m.Interval)
	defer t.Stop()
	for {
		ts := m.targets()
		m.forget(ts)
		m.refresh()
		m.sweep(ctx, ts)
		for round := false; !round; {
			var due <-chan time.Time
			stop := func() bool { return false }
			if next, ok := m.nextRetry(); ok {
				rt := time.NewTimer(max(0, next.Sub(m.Now())))
				due, stop = rt.C, rt.Stop
			}
			select {
			case <-ctx.Done():
				stop()
				return nil
			case <-t.C:
				round = true
			case <-m.poke:
				round = true
			case <-due:
				m.sweep(ctx, m.dueRetries())
			case <-m.swept:
				// A visit ended: its retry, if it set one, is waited for.
			}
			stop()
		}
	}
}

// sweep starts a visit of each of ts whose BMC is not busy, Parallel at
// once across sweeps, and returns at once: a BMC still in its last call (a
// hung one, for the whole --bmc-timeout) is skipped this time, and never
// delays the others' next poll.
func (m *Manager) sweep(ctx context.Context, ts []target) {
	for _, t := range ts {
		np := m.node(t.key())
		select {
		case np.call <- struct{}{}:
		default:
			continue // busy: its last poll, or an operator's call, still runs
		}
		m.mu.Lock()
		np.holder = "a poll"
		m.mu.Unlock()
		m.bg.Add(1)
		go func() {
			defer m.bg.Done()
			defer m.unlock(np)
			select {
			case m.slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-m.slots }()
			m.visitHeld(ctx, t, np)
			select {
			case m.swept <- struct{}{}:
			default:
			}
		}()
	}
}

// nextRetry is the earliest retry waiting.
func (m *Manager) nextRetry() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	for _, np := range m.nodes {
		if !np.retry.IsZero() && (next.IsZero() || np.retry.Before(next)) {
			next = np.retry
		}
	}
	return next, !next.IsZero()
}

// dueRetries are the nodes whose retry is due (Run polls them, and tries
// again where the policy still wants it), taken off the wait.
func (m *Manager) dueRetries() []target {
	ts := m.targets()
	now := m.Now()
	var due []target
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range ts {
		if np := m.nodes[t.key()]; np != nil && !np.retry.IsZero() && !now.Before(np.retry) {
			np.retry = time.Time{}
			due = append(due, t)
		}
	}
	return due
}

// visitAll visits ts, Parallel at once, and returns when every BMC has
// answered or timed out.
func (m *Manager) visitAll(ctx context.Context, ts []target) {
	sem := make(chan struct{}, m.Parallel)
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.visit(ctx, t)
		}()
	}
	wg.Wait()
}

// target is one node with a BMC.
type target struct {
	site *plan.Site
	node *plan.Node
}

func (t target) key() string { return t.site.Name + "/" + t.node.Name }

func (m *Manager) targets() []target {
	p := m.Plan()
	if p == nil {
		return nil
	}
	var ts []target
	for _, s := range p.Sites {
		for _, n := range s.Nodes {
			if n.BMC != nil {
				ts = append(ts, target{s, n})
			}
		}
	}
	return ts
}

// Round asks every BMC its power state, Parallel at once, and on power:
// auto sites acts where the policy says. It returns when every BMC has
// answered or timed out.
func (m *Manager) Round(ctx context.Context) {
	m.init()
	ts := m.targets()
	m.forget(ts)
	m.refresh()
	m.visitAll(ctx, ts)
}

// refresh reads the record of what nodes were cycled for again before a
// round this member acts in: another member may have acted since.
func (m *Manager) refresh() {
	if m.Cycles != nil && (m.Acts == nil || m.Acts()) {
		m.loadCycles()
	}
}

// forget drops nodes no longer in the Plan (or without a BMC).
func (m *Manager) forget(ts []target) {
	keep := map[string]bool{}
	for _, t := range ts {
		keep[t.key()] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.nodes {
		if !keep[k] {
			delete(m.nodes, k)
		}
	}
}

func (m *Manager) node(key string) *nodePower {
	m.mu.Lock()
	defer m.mu.Unlock()
	np := m.nodes[key]
	if np == nil {
		np = &nodePower{state: Unknown, call: make(chan struct{}, 1)}
		m.nodes[key] = np
	}
	return np
}

// controller is t's BMC with its credentials, at the one address they
// may be sent to; an error says which credentials are missing or
// unreadable, or why the daemon will not send them there. Nothing is sent
// to the BMC before it returns.
func (m *Manager) controller(ctx context.Context, t target) (Controller, error) {
	b := t.node.BMC
	if err := m.tlsAllowed(b); err != nil {
		return nil, err
	}
	c, err := m.Secrets.Lookup(b)
	if err != nil {
		return nil, err
	}
	to, err := m.destination(ctx, b, c)
	if err != nil {
		return nil, err
	}
	return m.Dial(b, to, c), nil
}

func (m *Manager) visit(ctx context.Context, t target) {
	np := m.node(t.key())
	if err := m.lock(ctx, np, "a poll", 0); err != nil {
		return
	}
	defer m.unlock(np)
	m.visitHeld(ctx, t, np)
}

// visitHeld polls t and applies the site's policy; the caller holds
// np.call.
func (m *Manager) visitHeld(ctx context.Context, t target, np *nodePower) {
	fp := m.fingerprint(t.node.BMC)
	m.mu.Lock()
	if fp != np.fingerprint {
		np.fingerprint, np.loginFails, np.quiet = fp, 0, time.Time{} // Git or the secret changed: try again
	}
	waiting := m.Now().Before(np.quiet)
	m.mu.Unlock()
	if waiting {
		return // its credentials were refused: no login until quiet ends
	}
	state, err := m.poll(ctx, t, np)
	m.loginFailed(t, np, err)
	if err == nil {
		m.ejectDone(ctx, t, np)
	}
	if t.site.Power != plan.PowerAuto || m.Acts != nil && !m.Acts() {
		return
	}
	m.auto(ctx, t, np, state, err)
}

// poll asks t's BMC its power state and keeps it; the caller holds np.call.
func (m *Manager) poll(ctx context.Context, t target, np *nodePower) (string, error) {
	c, err := m.controller(ctx, t)
	var state string
	if err == nil {
		err = m.again(ctx, func(ctx context.Context) (err error) { state, err = c.PowerState(ctx); return err })
	}
	m.mu.Lock()
	before := np.err
	np.checked = m.Now()
	np.requested = ""
	if err != nil {
		np.state, np.err = Unreachable, err.Error()
	} else {
		np.state, np.err = state, ""
	}
	m.mu.Unlock()
	switch {
	case err != nil && before != err.Error():
		// A warning, once per new error: the site goes on.
		m.Log.Warn("power: BMC unreachable", "node", t.key(), "err", err)
	case err == nil && before != "":
		m.Log.Info("power: BMC answers again", "node", t.key(), "power", state)
	}
	return state, err
}

// LoginFailures is how many failed logins in a row make a BMC's
// credentials "refused": it is then polled only after a wait that doubles
// each time (the poll interval, then twice that, … at most MaxQuiet),
// until Git's BMC or its secret changes.
const (
	LoginFailures = 3
	MaxQuiet      = time.Hour
)

// fingerprint names a BMC's address and credentials as they are now
// ("" when its secret cannot be read).
func (m *Manager) fingerprint(b *plan.BMC) string {
	c, err := m.Secrets.Lookup(b)
	if err != nil {
		return ""
	}
	h := sha256.Sum256([]byte(b.Host() + "\x00" + b.Protocol + "\x00" + b.Auth + "\x00" + c.Username + "\x00" + c.Password))
	return hex.EncodeToString(h[:8])
}

// loginRefused says whether err is a BMC refusing the login (not a BMC
// that did not answer): an IPMI session that could not be established,
// a Redfish 401.
func loginRefused(err error) bool {
	var te *TimeoutError
	if err == nil || errors.As(err, &te) {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"RMCP+ session", "401", "Unauthorized", "unauthorized", "authentication failed", "invalid user", "Invalid user"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// loginFailed counts a poll's refused login and, past LoginFailures,
// keeps the BMC quiet and says so in its status; any other outcome
// starts the count again.
func (m *Manager) loginFailed(t target, np *nodePower, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !loginRefused(err) {
		np.loginFails = 0
		return
	}
	np.loginFails++
	if np.loginFails < LoginFailures {
		return
	}
	wait := min(m.Interval<<(np.loginFails-LoginFailures), MaxQuiet)
	if wait <= 0 {
		wait = MaxQuiet
	}
	np.quiet = m.Now().Add(wait)
	np.err = fmt.Sprintf("credentials refused (%d logins failed in a row; next try at %s, or when Git or the secret changes): %s",
		np.loginFails, np.quiet.UTC().Format("15:04:05Z"), np.err)
	if np.loginFails == LoginFailures {
		m.Log.Warn("power: BMC credentials refused: polled less often, so that the BMC does not lock the account", "node", t.key(), "next", np.quiet, "err", err)
	}
}

// retireKey is where cycled keeps that a node was booted for its
// retirement (1), apart from its install generations.
func retireKey(t target) string { return t.key() + " retire" }

// due says whether the policy wants t cycled now, for which generation,
// and why. A node Git retires is cycled once for its retirement, and
// never again once retired; otherwise once per generation it is not
// installed at.
func (m *Manager) due(t target) (gen int, why string, ok bool) {
	gen = t.node.Reprovision
	installing, installed, wasInstalled := m.Node(t.site.Name, t.node.Name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.node.Retire != nil {
		_, done := m.cycled[retireKey(t)]
		switch {
		case done, installing:
			return gen, "", false // once per retirement; never under a running step
		case m.Retired != nil && m.Retired(t.site.Name, t.node.Name):
			return gen, "", false // retired: it stays off
		}
		return gen, "Git retires it", true
	}
	delete(m.cycled, retireKey(t)) // back in service: a later retirement boots it again
	if done, ok := m.cycled[t.key()]; ok && done >= gen {
		return gen, "", false // once per generation
	}
	if wasInstalled && installed >= gen {
		return gen, "", false // its OS is this generation's
	}
	if installing {
		return gen, "", false // never under a running install
	}
	why = "a new node"
	if gen > 0 {
		why = fmt.Sprintf("reprovision raised to %d", gen)
	}
	return gen, why, true
}

// auto applies power: auto to t, whose BMC just said state (or failed
// with pollErr: for a node that is due, that is a failed attempt too, on
// its timeline); the caller holds np.call.
func (m *Manager) auto(ctx context.Context, t target, np *nodePower, state string, pollErr error) {
	gen, why, ok := m.due(t)
	if !ok {
		return
	}
	now := m.Now()
	m.mu.Lock()
	if np.gen != gen {
		np.gen, np.attempts, np.next = gen, 0, time.Time{}
	}
	if np.attempts >= MaxAttempts || now.Before(np.next) {
		m.mu.Unlock()
		return
	}
	np.holder = "an automatic power action"
	m.mu.Unlock()
	err := pollErr
	if err == nil {
		var c Controller
		if c, err = m.controller(ctx, t); err == nil {
			err = m.bootAndCycle(ctx, t, np, c, state, gen, why)
		}
	}
	if err == nil {
		m.mu.Lock()
		if t.node.Retire != nil {
			m.cycled[retireKey(t)] = 1
		} else {
			m.cycled[t.key()] = gen
		}
		m.mu.Unlock()
		if err := m.save(); err != nil {
			m.Log.Error("power: state file", "file", m.StateFile, "err", err)
		}
		return
	}
	m.mu.Lock()
	np.attempts++
	n := np.attempts
	wait := backoff(m.Backoff, n)
	np.next = now.Add(wait)
	if n < MaxAttempts {
		np.retry = np.next
	}
	m.mu.Unlock()
	if n >= MaxAttempts {
		m.Record(t.site.Name, t.node.Name, fmt.Sprintf("power: gave up after %d attempts for generation %d: %v (fix the BMC, then raise reprovision or restart the daemon)", n, gen, err), true, 0)
		return
	}
	m.Record(t.site.Name, t.node.Name, fmt.Sprintf("power: failed (attempt %d of %d): %v; next try in %s", n, MaxAttempts, err, wait), true, 0)
}

// backoff is the wait after the n-th failed attempt: first (15 s),
// doubling, at most 10 min.
func backoff(first time.Duration, n int) time.Duration {
	d := first << (n - 1)
	if d > 10*time.Minute || d <= 0 {
		d = 10 * time.Minute
	}
	return d
}

// bootAndCycle boots t into the Micro-OS: its virtual medium, or PXE once
// and a power cycle (on, when it is off); why is on the timeline.
func (m *Manager) bootAndCycle(ctx context.Context, t target, np *nodePower, c Controller, state string, gen int, why string) error {
	purpose := fmt.Sprintf("for generation %d (%s)", gen, why)
	if t.node.Retire != nil {
		purpose, gen = "for its retirement ("+why+")", 0
	}
	if t.node.BMC.Boot == plan.BootVirtualMedia && m.MediaURL != nil {
		if err := m.bootMedia(AskedBy(ctx, "power: auto"), t, np, c, m.MediaURL(t.site.Name, t.node.Name)); err != nil {
			return err
		}
		m.Record(t.site.Name, t.node.Name, "power: booted its virtual medium "+purpose, false, gen)
		return nil
	}
	if err := m.bounded(ctx, func(ctx context.Context) error { return c.SetBootDevice(ctx, "pxe", true) }); err != nil {
		return err
	}
	m.Record(t.site.Name, t.node.Name, "power: set next boot pxe (once)", false, 0)
	action, said := "cycle", "power: cycled"
	if state == Off {
		action, said = "on", "power: powered on (it was off)"
	}
	if err := m.bounded(ctx, func(ctx context.Context) error { return c.SetPower(ctx, action) }); err != nil {
		return err
	}
	m.Record(t.site.Name, t.node.Name, said+" "+purpose, false, gen)
	return nil
}

// CycleStore keeps what the policy cycled each node for (node key →
// generation; "<key> retire" → 1 for a retirement's boot).
type CycleStore interface {
	LoadCycles() (map[string]int, error)
	SaveCycles(map[string]int) error
}

// loadCycles takes the record from Cycles (kept as it was when it cannot
// be read: the policy then acts on what this member last knew).
func (m *Manager) loadCycles() {
	c, err := m.Cycles.LoadCycles()
	if err != nil {
		m.Log.Warn("power: what the nodes were cycled for, not read", "err", err)
		return
	}
	if c == nil {
		// None kept yet (the site's first acting member): this member's
		// own record (its state file, a single daemon's) becomes the site's.
		if err := m.save(); err != nil {
			m.Log.Warn("power: what the nodes were cycled for, not recorded", "err", err)
		}
		return
	}
	m.mu.Lock()
	m.cycled = c
	m.mu.Unlock()
}

func (m *Manager) save() error {
	if m.Cycles != nil {
		m.mu.Lock()
		c := maps.Clone(m.cycled)
		m.mu.Unlock()
		return m.Cycles.SaveCycles(c)
	}
	if m.StateFile == "" {
		return nil
	}
	m.mu.Lock()
	b, err := json.MarshalIndent(m.cycled, "", "  ")
	m.mu.Unlock()
	if err != nil {
		return err
	}
	tmp := m.StateFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, m.StateFile)
}

// Status is the last seen power of the node key ("site/node"); ok is false
// when it has no BMC.
func (m *Manager) Status(key string) (Status, bool) {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	np := m.nodes[key]
	if np == nil {
		return Status{}, false
	}
	return np.status(key), true
}

func (np *nodePower) status(key string) Status {
	power := np.state
	if np.requested != "" {
		power = "requested " + np.requested
	}
	return Status{Node: key, Power: power, Error: np.err, Checked: np.checked}
}

// Counts is how many nodes with a BMC are in each power state.
func (m *Manager) Counts() map[string]int {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	c := map[string]int{On: 0, Off: 0, Unknown: 0, Unreachable: 0}
	for _, np := range m.nodes {
		c[np.state]++
	}
	return c
}

// Errors of the actions asked for by an operator.
var (
	ErrNoNode = errors.New("no such node in the live plan")
	ErrNoBMC  = errors.New("the node has no bmc in Git")
)

func (m *Manager) find(key string) (target, error) {
	for _, t := range m.targets() {
		if t.key() == key {
			return t, nil
		}
	}
	if p := m.Plan(); p != nil {
		for _, s := range p.Sites {
			for _, n := range s.Nodes {
				if s.Name+"/"+n.Name == key {
					return target{}, ErrNoBMC
				}
			}
		}
	}
	return target{}, ErrNoNode
}

// ErrBusy is an operator's call to a BMC that another call (a poll) kept
// busy for longer than Manager.Busy.
var ErrBusy = errors.New("busy")

// lock takes np's call, for who ("a poll"), waiting at most wait (0: as
// long as ctx lasts).
//
// One call to a BMC at a time: a BMC serves few sessions, and a poll
// racing a cycle would read a state half-way. A poll waits its turn (a
// round ends by the calls' deadlines). An operator does not wait behind a
// hung poll, which may hold the BMC for the whole --bmc-timeout, three
// times for an automatic cycle: after Busy (5 s: a healthy BMC's poll is
// over by then) the call fails with ErrBusy, saying what runs, and the
// operator tries again. Cancelling the poll instead would cut an
// automatic cycle half-way (next boot set, no cycle) and count a failed
// attempt for it; failing fast leaves the poll to end by its deadline.
func (m *Manager) lock(ctx context.Context, np *nodePower, who string, wait time.Duration) error {
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case np.call <- struct{}{}:
		m.mu.Lock()
		np.holder = who
		m.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		m.mu.Lock()
		holder := np.holder
		m.mu.Unlock()
		return fmt.Errorf("%w: %s of this BMC is running; try again in a moment (it ends within --bmc-timeout, %s)", ErrBusy, holder, m.Timeout)
	}
}

func (m *Manager) unlock(np *nodePower) { <-np.call }

// queuedKey marks a context of Queued.
type queuedKey struct{}

// Queued marks ctx's calls as automatic ones (a rollout's) that queue
// behind the call running on the same BMC — a poll ends by its deadline,
// Timeout — instead of failing with ErrBusy after Busy: the BMC's work
// goes one call after another in the order it came, and a rollout does
// not spend a try on the daemon's own poll. An operator at a terminal is
// still told at once.
func Queued(ctx context.Context) context.Context { return context.WithValue(ctx, queuedKey{}, true) }

// callWait is how long a call with ctx waits for the BMC: Busy, or for a
// queued one the running call's deadline and Busy besides.
func (m *Manager) callWait(ctx context.Context) time.Duration {
	if q, _ := ctx.Value(queuedKey{}).(bool); q {
		return m.Timeout + m.Busy
	}
	return m.Busy
}

// operator runs f, an operator's call, on the node key's BMC: one call to
// a BMC at a time, as for the polls (see lock).
func (m *Manager) operator(ctx context.Context, key string, f func(t target, np *nodePower, c Controller) error) error {
	m.init()
	t, err := m.find(key)
	if err != nil {
		return err
	}
	np := m.node(key)
	if err := m.lock(ctx, np, "an operator's call", m.callWait(ctx)); err != nil {
		return err
	}
	defer m.unlock(np)
	c, err := m.controller(ctx, t)
	if err != nil {
		return err
	}
	return f(t, np, c)
}

// bounded runs one BMC call within the Manager's timeout.
func (m *Manager) bounded(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, m.Timeout)
	defer cancel()
	return f(ctx)
}

// again is bounded for a call that may be made twice (a read, a boot
// device): a connection the BMC dropped is tried once more at once, on a
// new one — a BMC's web server that drops connections answers the next.
// Never for a power action: a dropped answer may be of a cycle taken.
func (m *Manager) again(ctx context.Context, f func(context.Context) error) error {
	err := m.bounded(ctx, f)
	if err != nil && Dropped(err) && ctx.Err() == nil {
		err = m.bounded(ctx, f)
	}
	return err
}

// Dropped says whether err is a connection the other side closed or
// reset before it answered.
func Dropped(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe") || strings.HasSuffix(msg, "eof")
}

// Last is the node's power as last polled, Unknown before the first poll:
// it asks no BMC.
func (m *Manager) Last(key string) (Status, error) {
	m.init()
	if _, err := m.find(key); err != nil {
		return Status{}, err
	}
	if st, ok := m.Status(key); ok {
		return st, nil
	}
	return Status{Node: key, Power: Unknown}, nil
}

// Query asks the node's BMC its power state now.
func (m *Manager) Query(ctx context.Context, key string) (Status, error) {
	m.init()
	t, err := m.find(key)
	if err != nil {
		return Status{}, err
	}
	np := m.node(key)
	if err := m.lock(ctx, np, "an operator's call", m.callWait(ctx)); err != nil {
		st, _ := m.Status(key)
		return st, err
	}
	_, err = m.poll(ctx, t, np)
	m.unlock(np)
	st, _ := m.Status(key)
	return st, err
}

// checkAction says what is wrong with a power action an operator asked for.
func checkAction(action string) error {
	switch action {
	case "on", "off", "cycle":
		return nil
	}
	return fmt.Errorf("unknown power action %q: want on, off or cycle (status is a GET)", action)
}

// checkDevice says what is wrong with a boot device an operator asked for.
func checkDevice(device string) error {
	switch device {
	case "pxe", "disk":
		return nil
	}
	return fmt.Errorf("unknown boot device %q: want pxe or disk", device)
}

// Act does what an operator asked: "on", "off" or "cycle" (a cycle of a
// machine that is off powers it on), and records it on the timeline.
func (m *Manager) Act(ctx context.Context, key, action string) (Status, error) {
	if err := checkAction(action); err != nil {
		return Status{}, err
	}
	err := m.operator(ctx, key, func(t target, np *nodePower, c Controller) error {
		said := "power: " + action
		if action == "cycle" {
			var state string
			if err := m.again(ctx, func(ctx context.Context) (err error) { state, err = c.PowerState(ctx); return err }); err != nil {
				return err
			}
			if state == Off {
				action, said = "on", "power: cycle of a machine that was off: powered on"
			}
		}
		if err := m.bounded(ctx, func(ctx context.Context) error { return c.SetPower(ctx, action) }); err != nil {
			m.Record(t.site.Name, t.node.Name, said+" failed: "+err.Error(), true, 0)
			return err
		}
		m.Record(t.site.Name, t.node.Name, said+" (asked by "+askedBy(ctx)+")", false, 0)
		m.settle(ctx, c, np, action)
		return nil
	})
	if err != nil {
		return Status{}, err
	}
	st, _ := m.Status(key)
	return st, nil
}

// settle reads the power state back after action until it is the one
// asked for, a few times within m.Settle (and ctx): a BMC takes the
// request at once and changes the state a moment later, and the state read
// right after is the one before. What it reads is kept as a poll's; when
// the state is not there yet, Status says "requested <action>" until the
// next poll. A read that fails is no news: the action was taken, and the
// node is not unreachable for a read cut short by the settle's end.
func (m *Manager) settle(ctx context.Context, c Controller, np *nodePower, action string) {
	want := On
	if action == "off" {
		want = Off
	}
	ctx, cancel := context.WithTimeout(ctx, m.Settle)
	defer cancel()
	const reads = 5
	every := m.Settle / reads
	for i := 0; ; i++ {
		var state string
		err := m.again(ctx, func(ctx context.Context) (err error) { state, err = c.PowerState(ctx); return err })
		if err == nil {
			m.mu.Lock()
			np.state, np.err, np.checked, np.requested = state, "", m.Now(), ""
			m.mu.Unlock()
			if state == want {
				return
			}
		}
		if i == reads-1 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
		if ctx.Err() != nil {
			break
		}
	}
	m.mu.Lock()
	np.requested = action
	m.mu.Unlock()
}

// BootDevice sets the node's next boot device ("pxe" or "disk"), for the
// next boot only when once.
func (m *Manager) BootDevice(ctx context.Context, key, device string, once bool) error {
	if err := checkDevice(device); err != nil {
		return err
	}
	how := "persistent"
	if once {
		how = "once"
	}
	return m.operator(ctx, key, func(t target, _ *nodePower, c Controller) error {
		if err := m.again(ctx, func(ctx context.Context) error { return c.SetBootDevice(ctx, device, once) }); err != nil {
			m.Record(t.site.Name, t.node.Name, fmt.Sprintf("power: set next boot %s (%s) failed: %v", device, how, err), true, 0)
			return err
		}
		m.Record(t.site.Name, t.node.Name, fmt.Sprintf("power: set next boot %s (%s, asked by %s)", device, how, askedBy(ctx)), false, 0)
		return nil
	})
}

type askedByKey struct{}

// AskedBy names, on the node's timeline, who asks for an Act or a
// BootDevice made with ctx ("a rollout"); without it, "an operator".
func AskedBy(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, askedByKey{}, who)
}

func askedBy(ctx context.Context) string {
	if who, ok := ctx.Value(askedByKey{}).(string); ok && who != "" {
		return who
	}
	return "an operator"
}

// StatePath is the state file's usual place under the daemon's state dir.
func StatePath(stateDir string) string { return filepath.Join(stateDir, "power.json") }
