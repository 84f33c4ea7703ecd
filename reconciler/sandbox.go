package reconciler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bootops/bootops/compiler"
)

// Defaults of serve's --compile-timeout and --compile-memory. The worker
// evaluates the CUE of a 1,000-node repository in about 0.9 s with a peak
// of 72 MB, and of a 10,000-node one in 12 s with 371 MB (BENCHMARKS.md, "A
// commit cannot stall the daemon"): both defaults leave a margin of five
// over the larger, and stop a runaway comprehension long before it hurts.
const (
	DefaultCompileTimeout = 60 * time.Second
	DefaultCompileMemory  = 2 << 30
)

// exitMemory is the worker's exit status when its heap passes the limit.
const exitMemory = 3

// Child is a compiler.Sandbox: it evaluates in a child process (the
// bootops binary's hidden compile-worker command, which calls
// LimitWorker, then compiler.EvalWorker), kills it at the deadline and
// has it stop itself past the memory limit. The daemon's own heap and
// goroutines never see the revision's CUE.
type Child struct {
	// Command is the worker's argv; "--memory", Memory are appended.
	Command []string
	// Env is the worker's environment (nil: this process's).
	Env     []string
	Timeout time.Duration
	Memory  int64
	// Context, when it ends, kills the worker at once (the daemon is
	// stopping; nil: never).
	Context context.Context
}

var _ compiler.Sandbox = (*Child)(nil)

// LimitError is a revision refused because compiling it went past a limit.
// Its message is the status's reason; it says which flag raises the limit.
type LimitError struct {
	Timeout time.Duration // set when the deadline passed
	Memory  int64         // set when the memory limit was reached
}

func (e *LimitError) Error() string {
	if e.Memory > 0 {
		return fmt.Sprintf("needed more than %s to compile (the limit is serve's --compile-memory)", bytesIEC(e.Memory))
	}
	return fmt.Sprintf("took longer than %s to compile (the limit is serve's --compile-timeout)", e.Timeout)
}

// Eval runs the worker on req.
func (c *Child) Eval(req []byte) ([]byte, error) {
	if len(c.Command) == 0 {
		return nil, errors.New("compile worker: no command")
	}
	parent := c.Context
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, c.Timeout)
	defer cancel()
	args := append(append([]string{}, c.Command[1:]...), "--memory", strconv.FormatInt(c.Memory, 10))
	cmd := exec.CommandContext(ctx, c.Command[0], args...)
	cmd.Env = c.Env
	cmd.Stdin = bytes.NewReader(req)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Killed at the deadline; a pipe held open by nothing else must not
	// keep Wait waiting.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	switch {
	case err == nil:
		return stdout.Bytes(), nil
	case parent.Err() != nil:
		return nil, fmt.Errorf("compile worker: stopped: %w", context.Cause(parent))
	case ctx.Err() != nil:
		return nil, &LimitError{Timeout: c.Timeout}
	case outOfMemory(err, stderr.String()):
		return nil, &LimitError{Memory: c.Memory}
	}
	msg := strings.TrimSpace(stderr.String())
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	return nil, fmt.Errorf("compile worker: %w: %s", err, msg)
}

// outOfMemory says the worker stopped at its memory limit: its own check
// (exitMemory), or the address-space limit under it, which the Go runtime
// reports as a fatal error (no heap, or no stack for a thread).
func outOfMemory(err error, stderr string) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == exitMemory {
		return true
	}
	for _, s := range []string{"out of memory", "cannot allocate memory", "errno=12"} {
		if strings.Contains(stderr, s) {
			return true
		}
	}
	return false
}

// LimitWorker fences the worker process in before it reads anything: a
// soft memory limit, so the collector works hard before the limit is
// reached; a watch that exits with exitMemory once the memory the runtime
// holds passes it; and, for an allocation faster than the watch, an
// address-space limit (the runtime reserves address space it has not
// used, so that limit sits well above; see addressSpace).
func LimitWorker(memory int64) error {
	if memory <= 0 {
		return nil
	}
	debug.SetMemoryLimit(memory)
	as := uint64(addressSpace(memory))
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: as, Max: as}); err != nil {
		return fmt.Errorf("compile worker: address-space limit: %w", err)
	}
	go watchMemory(memory)
	return nil
}

// addressSpace is the RLIMIT_AS of a worker limited to memory: an idle
// worker already holds 1.8 GiB of address space (VmSize, measured: the
// runtime's reservations, the binary, a stack per thread, more threads on
// more cores), and a heap of n bytes maps up to about 2n while the
// collector runs. The watch stops the worker long before this limit; it
// is there for an allocation too large and too fast for the watch.
func addressSpace(memory int64) int64 {
	return 2*memory + 4<<30
}

// watchMemory exits the process once the memory the runtime holds (heap,
// stacks, its own structures; not what it returned to the system) passes
// limit.
func watchMemory(limit int64) {
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	for range time.Tick(10 * time.Millisecond) {
		metrics.Read(samples)
		held := int64(samples[0].Value.Uint64()) - int64(samples[1].Value.Uint64())
		if held > limit {
			fmt.Fprintf(os.Stderr, "compile worker: %s held, over the limit of %s\n", bytesIEC(held), bytesIEC(limit))
			os.Exit(exitMemory)
		}
	}
}

// bytesIEC writes n in GiB or MiB, as the flags are given.
func bytesIEC(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	default:
		return fmt.Sprintf("%d MiB", (n+1<<20-1)>>20)
	}
}
