package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/reconciler"
)

// newReconciler builds the compiler and the reconciler that swaps each
// good revision's Plan into plans (through overlays), with its metrics in
// reg.
func newReconciler(ctx context.Context, cfg Config, log *slog.Logger, live *overlaySwap, reg prometheus.Registerer) (*reconciler.Reconciler, error) {
	comp, err := compiler.New()
	if err != nil {
		return nil, err
	}
	// A revision's CUE is evaluated in a child process, so a runaway
	// comprehension is refused instead of stalling or exhausting the
	// daemon; YAML, which cannot loop, stays in-process with its caches.
	src := cfg.Source
	comp.Sandbox = &reconciler.Child{Command: src.Worker, Timeout: src.CompileTimeout, Memory: src.CompileMemory, Context: ctx}
	state := &reconciler.State{Dir: cfg.StateDir}
	return &reconciler.Reconciler{Compiler: comp, Live: live, Sites: src.Sites, AllowEmpty: src.AllowEmpty, State: state, Metrics: reconciler.NewMetrics(reg), Log: log}, nil
}

// newRegistry is the daemon's metrics registry, with Go's and the
// process's own.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// afterReconcile is the reconciler's Done: the dashboard shows the
// source's news, and (unless GOMEMLIMIT rules) a compilation's garbage
// goes back to the system at once when there is enough of it
// (worthFreeing): the daemon's resident size is its Plan, not its last
// compilation. A forced collection of a 50,000-node heap costs 0.7 s of
// CPU, too much for the few MB a one-file push leaves.
func afterReconcile(notify func()) func() {
	freeMemory := os.Getenv("GOMEMLIMIT") == ""
	var freeing atomic.Bool
	return func() {
		notify()
		if freeMemory && worthFreeing() && freeing.CompareAndSwap(false, true) {
			go func() { debug.FreeOSMemory(); freeing.Store(false) }()
		}
	}
}

// worthFreeing: the heap holds garbage past a sixteenth of the live bytes
// of the last collection (and past 4 MiB). A forced collection marks the
// whole live heap, so its cost per byte returned stays bounded: at 10,000
// nodes nearly every revision's garbage goes back at once (the resident
// size stays the Plan's), at 50,000 a push's few MB wait for the next.
func worthFreeing() bool {
	h := readHeap()
	return h.objects-h.live > max(4<<20, h.live/16)
}

// source is what the reconciler follows: a Git remote or a folder.
type source struct {
	follower *reconciler.Follower // a Git remote
	dir      *reconciler.Dir      // a folder
	root     string               // the served revision's files
}

// Run follows the source until ctx ends.
func (s *source) Run(ctx context.Context) error {
	if s.follower != nil {
		return s.follower.Run(ctx)
	}
	// Edits to the folder are compiled and, when they compile, served.
	return s.dir.Run(ctx)
}

// Sync looks at the source now (the dashboard's "Fetch now").
func (s *source) Sync(reason string) {
	switch {
	case s.follower != nil:
		s.follower.Trigger(reason)
	case s.dir != nil:
		go s.dir.Load()
	}
}

// newSource restores the kept Plan and readies the source: a Git remote
// to follow, or a folder, which must compile when nothing is kept.
func newSource(cfg Config, log *slog.Logger, rec *reconciler.Reconciler, live reloadable) (*source, error) {
	src := cfg.Source
	if reconciler.IsGitURL(src.Source) {
		gsrc, err := gitSource(src, filepath.Join(cfg.StateDir, "git"))
		if err != nil {
			return nil, err
		}
		rec.SetSource(reconciler.Redacted(src.Source), src.Ref)
		follower := &reconciler.Follower{Git: gsrc, R: rec, Log: log}
		follower.Configure(live.interval, live.keyring)
		if saved, err := rec.Restore(); err != nil {
			log.Warn("state: the kept plan cannot be read", "err", err)
		} else if saved != nil {
			follower.Restored(saved.Revision)
		}
		root := rec.State.FilesDir()
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, err
		}
		return &source{follower: follower, root: root}, nil
	}
	abs, _ := filepath.Abs(src.Source)
	rec.SetSource("dir:"+abs, "")
	if _, err := rec.Restore(); err != nil {
		log.Warn("state: the kept plan cannot be read", "err", err)
	}
	if err := isFolder(src.Source); err != nil && rec.Current() == nil {
		return nil, configErrf("--source %s: %v: no plan is served (give a repository folder, or a Git URL: https://, ssh://, git://, file://, user@host:path)", src.Source, err)
	}
	dir := &reconciler.Dir{Path: src.Source, R: rec, Log: log}
	if _, err := dir.Load(); err != nil && rec.Current() == nil {
		var list compiler.Errors
		if errors.As(err, &list) {
			for _, l := range list {
				fmt.Fprintln(cfg.Stderr, l)
			}
		} else {
			fmt.Fprintln(cfg.Stderr, err)
		}
		return nil, fmt.Errorf("%s does not compile (above), and --state-dir %s keeps no earlier plan: no plan is served", src.Source, cfg.StateDir)
	}
	return &source{dir: dir, root: src.Source}, nil
}

// isFolder says why path is no folder (nil when it is one): a typo, or a
// checkout not there yet.
func isFolder(path string) error {
	st, err := os.Stat(path)
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case err != nil:
		return err
	case !st.IsDir():
		return errors.New("not a folder")
	}
	return nil
}

func gitSource(cfg SourceConfig, workDir string) (*reconciler.Git, error) {
	g := &reconciler.Git{URL: cfg.Source, Ref: cfg.Ref, Username: cfg.GitUser, SSHKeyFile: cfg.GitSSHKey, KnownHosts: cfg.GitKnownHosts, WorkDir: workDir}
	var err error
	if g.Password, err = ReadSecret(cfg.GitPasswordFile, "--git-password-file"); err != nil {
		return nil, configErr(err)
	}
	if cfg.GitCAFile != "" {
		if g.CABundle, err = os.ReadFile(cfg.GitCAFile); err != nil {
			return nil, configErrf("--git-ca-file: %v", err)
		}
	}
	if err := g.Check(); err != nil {
		return nil, configErr(err)
	}
	return g, nil
}

// sourceStatus shows the reconciler's revisions in the status API.
type sourceStatus struct{ r *reconciler.Reconciler }

func (s sourceStatus) Status() any { return s.r.Status() }

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
