package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/reconciler"
)

// workerCommand is the hidden command serve runs to evaluate a revision's
// CUE in a child process (reconciler.Child): not for people, so not in
// the help.
const workerCommand = "compile-worker"

// compileWorker limits itself to --memory bytes, then reads the CUE files
// on stdin and writes the objects and errors on stdout.
func compileWorker(e *env, stdin io.Reader, args []string) int {
	fs := flag.NewFlagSet("bootops "+workerCommand, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	memory := fs.Int64("memory", 0, "memory limit in bytes (0: none)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if err := reconciler.LimitWorker(*memory); err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitInvalid
	}
	c, err := compiler.New()
	if err == nil {
		err = c.EvalWorker(stdin, e.stdout)
	}
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitInvalid
	}
	return exitOK
}

// workerArgv is how this binary runs the worker: /proc/self/exe where
// there is one, so a daemon whose binary was upgraded on disk still runs
// its own worker (the two speak the same wire format).
func workerArgv() ([]string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return []string{"/proc/self/exe", workerCommand}, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("compile worker: %w", err)
	}
	return []string{exe, workerCommand}, nil
}

// byteSize is a flag of a number of bytes, written 2GiB, 512MiB or 1073741824.
type byteSize int64

func (b *byteSize) String() string {
	switch n := int64(*b); {
	case n > 0 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n > 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	default:
		return strconv.FormatInt(n, 10)
	}
}

func (b *byteSize) Set(s string) error {
	num, unit := s, int64(1)
	for i, suffix := range []string{"GiB", "MiB", "KiB", "G", "M", "K"} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			num, unit = n, 1<<(10*(3-i%3))
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("want a size such as 2GiB or 512MiB, got %q", s)
	}
	*b = byteSize(n * unit)
	return nil
}

// inTime runs f, and gives up on it past d (0: no limit): the offline
// commands' --timeout. f goes on in the background, and the command exits.
func inTime(d time.Duration, f func() error) error {
	if d <= 0 {
		return f()
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("took longer than %s to compile (--timeout)", d)
	}
}
