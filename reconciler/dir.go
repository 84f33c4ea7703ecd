package reconciler

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/bootops/bootops/plan"
)

// Dir follows a repository folder with fsnotify: an editor's burst of
// writes becomes one compilation, of the files that changed.
type Dir struct {
	Path string
	R    *Reconciler
	// Debounce is how long the folder must be quiet before compiling
	// (default 200 ms).
	Debounce time.Duration
	Log      *slog.Logger

	runs atomic.Int64
}

// Compilations counts the compilations so far.
func (d *Dir) Compilations() int { return int(d.runs.Load()) }

// Load compiles the whole folder once and serves it if it compiles.
func (d *Dir) Load() (*plan.Plan, error) {
	return d.reconcile(nil)
}

// reconcile compiles (changed != nil: only those paths changed) and swaps
// the Plan in on success.
func (d *Dir) reconcile(changed []string) (*plan.Plan, error) {
	d.runs.Add(1)
	return d.R.Apply(Snapshot{FS: os.DirFS(d.Path), Changed: changed})
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
