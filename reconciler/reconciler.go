// Package reconciler keeps the live Plan in step with the repository: it
// takes snapshots of a source (a Git remote or a local folder), compiles
// each, swaps the Plan in only when it compiles and passes the checks, keeps
// the last good Plan on disk, and says which revision is served and why not
// the newest.
package reconciler

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
)

// Swapper takes a new Plan; the boot plane's boot.Live is one.
type Swapper interface {
	Swap(*plan.Plan)
}

// Snapshot is one revision of the repository, ready to compile.
type Snapshot struct {
	// Revision is the commit SHA; empty for a folder (the Plan's content
	// hash names it once compiled).
	Revision string
	Message  string // the commit's subject line
	FS       fs.FS
	// Changed lists the paths that differ from the snapshot compiled
	// before; nil when unknown (everything is read).
	Changed []string
	// Refused, when set, rejects the snapshot before it is compiled (an
	// unsigned commit, say), with this reason.
	Refused error
	// Materialize copies the files Micro-OS objects point at into the
	// state folder before the Plan is served (a Git snapshot has no
	// folder to serve them from).
	Materialize bool
	// Stages, when set, holds where the time went before Apply (the
	// source's side); Apply adds its own and keeps them on the Attempt.
	Stages *Stages
}

// Stages is where one revision's time went, in milliseconds, from what
// triggered the look (a webhook, a poll) to the Plan served: the push to
// live breakdown (BENCHMARKS.md, test/bench/pushlive).
type Stages struct {
	QueuedMS  float64 `json:"queuedMs"`  // trigger → the look began (another look running)
	ListMS    float64 `json:"listMs"`    // the remote's refs listed
	FetchMS   float64 `json:"fetchMs"`   // the commit's new objects fetched into the kept clone
	ReadMS    float64 `json:"readMs"`    // the tree read: every file's blob, to know what changed
	CompileMS float64 `json:"compileMs"` // compiled (the changed files), checked, materialized
	SwapMS    float64 `json:"swapMs"`    // swapped in: the boot plane answers from it
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Results of one reconcile.
const (
	ResultApplied   = "applied"   // compiled and now served
	ResultUnchanged = "unchanged" // compiled to the Plan already served
	ResultRefused   = "refused"   // errors, a bad signature or an empty Plan: the last good Plan stays
)

// Attempt is one reconcile of one revision.
type Attempt struct {
	Revision   string    `json:"revision"`
	Message    string    `json:"message,omitempty"`
	At         time.Time `json:"at"`
	DurationMS float64   `json:"durationMs"`
	Result     string    `json:"result"`
	Plan       string    `json:"plan,omitempty"`
	Nodes      int       `json:"nodes"`
	// Error says in one line why the revision was refused; Errors are the
	// positioned compile errors (file:line:col: …), at most 100.
	Error  string   `json:"error,omitempty"`
	Errors []string `json:"errors,omitempty"`
	Total  int      `json:"errorCount,omitempty"`
	// Stages is where its time went (a revision from Git).
	Stages *Stages `json:"stages,omitempty"`
}

// Check is the last look at the source (listing the remote, fetching).
type Check struct {
	At       time.Time `json:"at"`
	Revision string    `json:"revision,omitempty"`
	Error    string    `json:"error,omitempty"`
	// Failures counts the checks in a row that failed.
	Failures int `json:"failures,omitempty"`
}

// Status is what the source served and tried: the "source" part of
// GET /api/v1/status.
type Status struct {
	URL       string  `json:"url"`
	Ref       string  `json:"ref,omitempty"`
	Applied   Attempt `json:"applied"`
	Attempted Attempt `json:"attempted"`
	LastCheck Check   `json:"lastCheck"`
	// Stale is true when the served revision may not be the newest: the
	// newest was refused, or the source could not be read. Reason says
	// which, in words.
	Stale  bool   `json:"stale"`
	Reason string `json:"reason,omitempty"`
	// Restored is true while the Plan served is the one kept in the state
	// folder, not yet confirmed by the source.
	Restored bool `json:"restored,omitempty"`
	// History holds the last reconciles, newest first.
	History []Attempt `json:"history"`
}

const historyLen = 10

// Reconciler compiles snapshots and swaps good Plans in.
type Reconciler struct {
	Compiler *compiler.Compiler
	Live     Swapper
	// Sites, when set, is the subset of sites served: the others are
	// compiled (the repository is checked whole) but not served.
	Sites []string
	// AllowEmpty lets a revision with no site to serve, or one that drops
	// every node, replace the live Plan.
	AllowEmpty bool
	// State keeps the last good Plan on disk; nil: nothing is kept.
	State   *State
	Metrics *Metrics
	Log     *slog.Logger
	// Done, when set, is called after every reconcile (the daemon returns
	// the compilation's garbage to the system there).
	Done func()

	mu      sync.Mutex
	status  Status
	current *plan.Plan
}

// SetSource sets the source's name (a URL without credentials) and ref.
func (r *Reconciler) SetSource(url, ref string) {
	r.mu.Lock()
	r.status.URL, r.status.Ref = url, ref
	r.mu.Unlock()
}

// Status reports what is served and what was tried.
func (r *Reconciler) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.status
	st.History = slices.Clone(st.History)
	if st.History == nil {
		st.History = []Attempt{}
	}
	return st
}

// Current is the Plan this reconciler last swapped in (nil: none yet).
func (r *Reconciler) Current() *plan.Plan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current
}

// Restore serves the last good Plan kept in the state folder, if there is
// one from this source. It is what makes a restart while the source is
// unreachable serve at once.
func (r *Reconciler) Restore() (*Saved, error) {
	if r.State == nil {
		return nil, nil
	}
	saved, err := r.State.Load()
	if err != nil || saved == nil {
		return nil, err
	}
	r.mu.Lock()
	url := r.status.URL
	r.mu.Unlock()
	if saved.Source != url {
		r.log().Warn("state: the kept plan comes from another source: not served", "kept", saved.Source, "source", url)
		return nil, nil
	}
	p, err := r.subset(saved.Plan)
	if err != nil {
		return nil, fmt.Errorf("state: kept plan: %w", err)
	}
	a := Attempt{Revision: saved.Revision, Message: saved.Message, At: saved.At, Result: ResultApplied, Plan: p.Hash, Nodes: countNodes(p)}
	r.mu.Lock()
	r.current = p
	r.status.Applied = a
	r.status.Restored = true
	r.mu.Unlock()
	r.Live.Swap(p)
	r.Metrics.revision(a.Revision)
	r.log().Info("serving the kept plan until the source answers", "revision", a.Revision, "saved", saved.At.Format(time.RFC3339), "nodes", a.Nodes)
	return saved, nil
}

// Apply compiles a snapshot and, when it compiles and passes the checks,
// serves it. On any error the Plan served stays as it was, and the status
// records the attempted revision with its errors.
func (r *Reconciler) Apply(snap Snapshot) (*plan.Plan, error) {
	start := time.Now()
	p, full, prev, err := r.build(snap)
	compiled := time.Now()
	rev := snap.Revision
	if rev == "" && p != nil {
		rev = "dir:" + p.Hash[:12]
	}
	a := Attempt{Revision: rev, Message: snap.Message, At: start.UTC(), Result: ResultApplied}
	if err != nil {
		a.Result = ResultRefused
		a.Error, a.Errors, a.Total = describe(err)
		if rev == "" {
			a.Revision = "dir"
		}
	} else {
		a.Plan, a.Nodes = p.Hash, countNodes(p)
		if prev != nil && prev.Hash == p.Hash {
			a.Result = ResultUnchanged
		}
	}
	if err == nil {
		// Same content or not, the newest revision is now the one served.
		r.Live.Swap(p)
	}
	if snap.Stages != nil {
		st := *snap.Stages
		st.CompileMS, st.SwapMS = ms(compiled.Sub(start)), ms(time.Since(compiled))
		a.Stages = &st
	}
	a.DurationMS = ms(time.Since(start))
	r.mu.Lock()
	r.status.Attempted = a
	if err == nil {
		r.current = p
		r.status.Applied = a
		r.status.Restored = false
	}
	r.status.History = append([]Attempt{a}, r.status.History...)
	if len(r.status.History) > historyLen {
		r.status.History = r.status.History[:historyLen]
	}
	r.updateStale()
	r.mu.Unlock()
	r.Metrics.reconciled(a, time.Since(start))
	if r.Done != nil {
		defer r.Done()
	}
	if err != nil {
		served := "the last good plan is still served"
		if prev == nil {
			served = "no plan is served yet" // none compiled, none kept
		}
		r.log().Warn("reconcile: refused; "+served, "revision", a.Revision, "reason", a.Error, "errors", a.Total, "duration_ms", a.DurationMS)
		return nil, err
	}
	r.Metrics.revision(a.Revision)
	r.log().Info("reconcile: serving", "revision", a.Revision, "result", a.Result, "plan", p.Hash[:12], "nodes", a.Nodes, "changed", changedCount(snap.Changed), "duration_ms", a.DurationMS)
	if r.State != nil && a.Result == ResultApplied {
		if err := r.State.Save(&Saved{Source: r.Status().URL, Revision: a.Revision, Message: a.Message, At: a.At, Plan: full}); err != nil {
			r.log().Error("state: cannot keep the plan on disk", "err", err)
		}
	}
	return p, nil
}

// build compiles snap into the Plan of the sites served (p) and the whole
// Plan (full: the state folder keeps it, so a daemon restarted with other
// sites has them), checked against the Plan served now (prev), and
// materialized when snap asks.
func (r *Reconciler) build(snap Snapshot) (p, full, prev *plan.Plan, err error) {
	err = snap.Refused
	if err == nil {
		if snap.Changed != nil {
			p, err = r.Compiler.CompileChanged(snap.FS, snap.Changed)
		} else {
			p, err = r.Compiler.Compile(snap.FS)
		}
	}
	full = p
	if err == nil {
		p, err = r.subset(p)
	}
	r.mu.Lock()
	prev = r.current
	r.mu.Unlock()
	if err == nil {
		err = r.checkEmpty(prev, p)
	}
	if err == nil && snap.Materialize && r.State != nil {
		err = r.State.Materialize(snap.FS, p)
	}
	return p, full, prev, err
}

// Checked records a look at the source; err is why it failed.
func (r *Reconciler) Checked(revision string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := Check{At: time.Now().UTC(), Revision: revision}
	if err == nil && revision == r.status.Applied.Revision {
		r.status.Restored = false // the source confirms the kept Plan
	}
	if err != nil {
		c.Error = err.Error()
		c.Failures = r.status.LastCheck.Failures + 1
	}
	r.status.LastCheck = c
	r.updateStale()
	r.Metrics.checked(err)
}

// updateStale sets Stale and Reason; r.mu is held.
func (r *Reconciler) updateStale() {
	st := &r.status
	st.Stale, st.Reason = false, ""
	switch {
	case st.LastCheck.Error != "":
		st.Stale = true
		st.Reason = fmt.Sprintf("cannot read the source (%d tries since the last success): %s", st.LastCheck.Failures, st.LastCheck.Error)
	case st.Attempted.Result == ResultRefused:
		st.Stale = true
		st.Reason = fmt.Sprintf("the newest revision %s was refused: %s", short(st.Attempted.Revision), st.Attempted.Error)
	}
	if st.Stale && st.Applied.Revision != "" {
		st.Reason += fmt.Sprintf("; serving %s", short(st.Applied.Revision))
	}
	r.Metrics.stale(st.Stale)
}

// subset keeps the sites this daemon serves.
func (r *Reconciler) subset(p *plan.Plan) (*plan.Plan, error) {
	if len(r.Sites) == 0 {
		return p, nil
	}
	out := &plan.Plan{Profiles: p.Profiles, MicroOS: p.MicroOS}
	for _, name := range r.Sites {
		s := p.Site(name)
		if s == nil {
			return nil, fmt.Errorf("site %q (--site) is not in this revision", name)
		}
		out.Sites = append(out.Sites, s)
	}
	out.Hash = plan.PlanHash(out)
	return out, nil
}

func (r *Reconciler) checkEmpty(prev, p *plan.Plan) error {
	if r.AllowEmpty {
		return nil
	}
	if len(p.Sites) == 0 {
		return errors.New("the revision has no site: an empty plan is refused (start the daemon with --allow-empty to serve it)")
	}
	if prev != nil && countNodes(prev) > 0 && countNodes(p) == 0 {
		return fmt.Errorf("the revision removes every node (%d served now): refused (start the daemon with --allow-empty to serve it)", countNodes(prev))
	}
	return nil
}

func countNodes(p *plan.Plan) int {
	n := 0
	for _, s := range p.Sites {
		n += len(s.Nodes)
	}
	return n
}

func changedCount(c []string) any {
	if c == nil {
		return "all"
	}
	return len(c)
}

// describe turns an error into a one-line reason and, for compile errors,
// the positioned list (capped).
func describe(err error) (string, []string, int) {
	var list compiler.Errors
	if errors.As(err, &list) {
		var lines []string
		for i, e := range list {
			if i == 100 {
				break
			}
			lines = append(lines, e.Error())
		}
		n := len(list)
		one := fmt.Sprintf("%d error", n)
		if n != 1 {
			one += "s"
		}
		return one + "; first: " + firstLine(list[0].Error()), lines, n
	}
	return firstLine(err.Error()), nil, 1
}

func short(rev string) string {
	if len(rev) == 40 {
		return rev[:12]
	}
	return rev
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func (r *Reconciler) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.New(slog.DiscardHandler)
}
