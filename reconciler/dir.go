// Package reconciler keeps the live Plan in step with the repository: it
// compiles every change, swaps the Plan in only when the compilation
// succeeds, and says which revision is served and why not the newest.
package reconciler

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
)

// Swapper takes a new Plan; the boot plane's boot.Live is one.
type Swapper interface {
	Swap(*plan.Plan)
}

// Attempt is one compilation of the repository.
type Attempt struct {
	Revision string
	At       time.Time
	Duration time.Duration
	Error    error
}

// Status is what the source served and tried last.
type Status struct {
	Applied   Attempt
	Attempted Attempt
}

// Dir follows a repository folder with fsnotify: an editor's burst of
// writes becomes one compilation, of the files that changed.
type Dir struct {
	Path     string
	Compiler *compiler.Compiler
	Live     Swapper
	// Debounce is how long the folder must be quiet before compiling
	// (default 200 ms).
	Debounce time.Duration
	Log      *slog.Logger

	mu     sync.Mutex
	status Status
	runs   int
}

// Status reports the last applied and the last attempted revision.
func (d *Dir) Status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.status
}

// Compilations counts the compilations so far.
func (d *Dir) Compilations() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runs
}

// Load compiles the whole folder once and serves it if it compiles.
func (d *Dir) Load() (*plan.Plan, error) {
	return d.reconcile(nil)
}

// reconcile compiles (changed != nil: only those paths changed) and swaps
// the Plan in on success.
func (d *Dir) reconcile(changed []string) (*plan.Plan, error) {
	start := time.Now()
	fsys := os.DirFS(d.Path)
	var p *plan.Plan
	var err error
	if changed == nil {
		p, err = d.Compiler.Compile(fsys)
	} else {
		p, err = d.Compiler.CompileChanged(fsys, changed)
	}
	a := Attempt{At: start.UTC(), Duration: time.Since(start), Error: err}
	if p != nil {
		a.Revision = "dir:" + p.Hash[:12]
	}
	d.mu.Lock()
	d.runs++
	d.status.Attempted = a
	if err == nil {
		d.status.Applied = a
	}
	d.mu.Unlock()
	if err != nil {
		d.log().Warn("reconcile: keeping the last good plan", "path", d.Path, "changed", len(changed), "errors", strings.Count(err.Error(), "\n")+1, "first", firstLine(err.Error()))
		return nil, err
	}
	d.Live.Swap(p)
	d.log().Info("reconcile: serving", "revision", a.Revision, "changed", len(changed), "duration", a.Duration.String())
	return p, nil
}

// Run watches the folder until ctx ends.
func (d *Dir) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("reconciler: watch %s: %w", d.Path, err)
	}
	defer w.Close()
	if err := d.watchTree(w, d.Path); err != nil {
		return err
	}
	debounce := d.Debounce
	if debounce <= 0 {
		debounce = 200 * time.Millisecond
	}
	pending := map[string]bool{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			d.log().Warn("reconciler: watch", "err", err)
		case ev := <-w.Events:
			rel, err := filepath.Rel(d.Path, ev.Name)
			if err != nil || strings.HasPrefix(rel, "..") {
				continue
			}
			if ev.Has(fsnotify.Create) {
				if st, err := os.Lstat(ev.Name); err == nil && st.IsDir() {
					// A new folder: watch it, and what it already holds.
					_ = d.watchTree(w, ev.Name)
				}
			}
			pending[filepath.ToSlash(rel)] = true
			timer.Reset(debounce)
		case <-timer.C:
			changed := make([]string, 0, len(pending))
			for p := range pending {
				changed = append(changed, p)
			}
			clear(pending)
			_, _ = d.reconcile(changed)
		}
	}
}

// watchTree watches dir and every folder below it but hidden ones.
func (d *Dir) watchTree(w *fsnotify.Watcher, dir string) error {
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !e.IsDir() {
			return nil
		}
		if p != d.Path && strings.HasPrefix(e.Name(), ".") {
			return filepath.SkipDir
		}
		if err := w.Add(p); err != nil {
			return fmt.Errorf("reconciler: watch %s: %w", p, err)
		}
		return nil
	})
}

func (d *Dir) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.New(slog.DiscardHandler)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
