package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/tpm"
)

// Reporter receives the agent's events (the caller numbers, batches and
// sends them). The Runner calls it from one goroutine at a time.
type Reporter interface{ Report(plan.AgentEvent) }

// Flusher is a Reporter that can deliver what it queued on demand. Before a
// reboot, poweroff or kexec the Runner flushes it, and a flush error fails
// the action: a machine that reboots before the server stored its
// "provisioned" event would be provisioned again at its next PXE boot.
type Flusher interface {
	Flush(ctx context.Context) error
}

// Seed is a node's NoCloud seed: the user-data, meta-data and
// network-config files the compiler renders beside the workflow
// (plan.Artifacts). The workflow does not carry them, so the caller supplies
// them through Runner.CloudInit.
type Seed struct {
	UserData      string
	MetaData      string
	NetworkConfig string
	// Report is the installed OS's per-boot report script (with the
	// node's report credential), written to ReportScriptPath.
	Report string
	// ReportKey, on a machine whose check-in proved its TPM, is the key
	// that check-in proved: written beside the report script
	// (ReportKeyPath), the script quotes its reports with it.
	ReportKey *tpm.ReportKey
}

// ReportScriptPath is where cloud-init finds the report script: it runs
// what is in scripts/per-boot at every boot.
const ReportScriptPath = "/var/lib/cloud/scripts/per-boot/bootops-report"

// ReportKeyPath is where the report key's blobs go in the new system,
// with .pub and .priv after it (tpm2_load -u, -r).
const ReportKeyPath = "/var/lib/bootops/report-key"

// Defaults of a Runner and its actions.
const (
	DefaultTimeout  = time.Hour       // an action without a timeout
	DefaultBackoff  = 2 * time.Second // the first retry's delay
	MaxBackoff      = time.Minute     // retry delays double up to this
	DefaultSeedPath = "/var/lib/cloud/seed/nocloud"
)

// Runner runs a workflow's actions in order. Every field is optional: nil
// fields get the real thing (Linux syscalls, /sys, exec), which tests
// replace.
type Runner struct {
	Report Reporter
	// Generation is the reprovision generation the workflow installs
	// (plan.CheckInReply.Generation), carried by the provisioned event.
	Generation int
	// ResolveDisk turns an action's disk into a device path: "" or "auto"
	// is the first non-removable disk, anything else itself (a
	// /dev/disk/by-* link resolved). Tests point it at regular files.
	ResolveDisk func(name string) (string, error)
	HTTP        *http.Client
	// Mount and Unmount are how write-file, cloud-init, exec with chroot
	// and kexec reach a partition of the new system: mount(2) and umount(2)
	// by default. fstype "bind" asks for a recursive bind mount. Tests
	// replace them with a plain directory, as they run without root.
	Mount   func(dev, fstype, dir string) error
	Unmount func(dir string) error
	// Exec runs a command with its output going to out; chroot "" runs it
	// in the Micro-OS. Default: os/exec.
	Exec func(ctx context.Context, chroot string, argv []string, out io.Writer) error
	// Power is called with "reboot", "poweroff" or "kexec" once the
	// provisioned event is reported (default: reboot(2)). On a real
	// machine it does not return.
	Power func(action string) error
	// KexecLoad loads the new system's kernel for a later Power("kexec")
	// (default: kexec_file_load(2)). initrd "" means none.
	KexecLoad func(kernel, initrd, cmdline string) error
	// CloudInit fetches the node's seed for the cloud-init action. Nil, or
	// an empty Seed, writes an empty seed (an unknown machine has none) and
	// says so in a log event.
	CloudInit func(ctx context.Context) (Seed, error)
	Now       func() time.Time
	Backoff   time.Duration // first retry delay (default 2 s, doubling, max 1 min)
	// Stall is how long an image download may receive nothing before it
	// drops the connection and asks for the rest (default 15 s).
	Stall time.Duration
	// Swarm, when set, is how image-to-disk fetches its image with the
	// other machines installing it, within Peers' limits (the site's
	// imageDelivery: peers); nil fetches it from its URL.
	Swarm SwarmClient
	Peers *plan.Peers
	// QAStream opens qa-network's download of n bytes from the boot
	// server (plan.QAStreamPath, with the session credential); nil fails
	// qa-network.
	QAStream func(ctx context.Context, n int64) (io.ReadCloser, error)

	// SealFirstBoot seals an encrypted install's first-boot key (default:
	// the machine's TPM, tpm.ClevisSeal). Cryptsetup runs cryptsetup with
	// stdin (default: os/exec); MapperDir is where its mappings appear
	// (default /dev/mapper). Tests replace them.
	// DiskInventory lists the machine's disks for erase-disks, each with
	// its device path (default: the inventory's, under /dev). Tools runs
	// nvme and hdparm (default: os/exec).
	DiskInventory func() ([]plan.DiskInfo, map[string]string, error)
	Tools         func(ctx context.Context, argv ...string) ([]byte, error)

	SealFirstBoot func(secret []byte) (tpm.ClevisJWE, error)
	Cryptsetup    func(ctx context.Context, stdin []byte, args ...string) ([]byte, error)
	MapperDir     string

	qaHook qaHooks // tests' failure injection into the QA actions

	crypt *cryptState // an encrypted install's open mappings

	seeding *seeding // the image this machine serves to the others
}

// ActionError is what Run returns when an action failed for good.
type ActionError struct {
	Step   int // 1-based
	Action string
	Name   string
	Err    error
}

func (e *ActionError) Error() string {
	if e.Name == "" || e.Name == e.Action {
		return e.Action + ": " + e.Err.Error()
	}
	return fmt.Sprintf("%s %q: %v", e.Action, e.Name, e.Err)
}

func (e *ActionError) Unwrap() error { return e.Err }

// permanentError is a failure retrying cannot fix (a bad parameter).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanentf(format string, args ...any) error {
	return &permanentError{fmt.Errorf(format, args...)}
}

// Run runs wf's actions in order and stops at the first that fails for good
// (its error is an *ActionError). The provisioned event is reported right
// before the first reboot, poweroff or kexec, or after the last action if
// there is none; actions after a power action never run.
func (r *Runner) Run(ctx context.Context, wf plan.Workflow) error {
	c := r.withDefaults()
	provisioned := func() {
		if wf.Commission {
			c.emit(plan.AgentEvent{Type: plan.AgentCommissioned, Message: "every QA action passed"})
			return
		}
		if wf.Retire {
			c.emit(plan.AgentEvent{Type: plan.AgentRetired, Message: "every disk not kept erased and verified"})
			return
		}
		c.emit(plan.AgentEvent{Type: plan.AgentProvisioned, Generation: c.Generation})
	}
	defer c.stopSeeding(ctx, false)
	for i, a := range wf.Actions {
		s := &step{r: &c, a: a, i: i + 1, n: len(wf.Actions)}
		if plan.IsPowerAction(a.Action) {
			c.stopSeeding(ctx, true)
			provisioned()
			return c.runAction(ctx, s)
		}
		if err := c.runAction(ctx, s); err != nil {
			return err
		}
	}
	c.stopSeeding(ctx, true)
	if err := c.closeCrypt(ctx); err != nil {
		return err
	}
	provisioned()
	return nil
}

// withDefaults returns a copy of r with every nil field set, so Run never
// writes to the caller's Runner.
func (r *Runner) withDefaults() Runner {
	c := *r
	if c.Report == nil {
		c.Report = discard{}
	}
	if c.ResolveDisk == nil {
		c.ResolveDisk = func(name string) (string, error) { return resolveDisk("/sys", name) }
	}
	if c.HTTP == nil {
		// No overall timeout: an image takes as long as the action's.
		c.HTTP = &http.Client{}
	}
	if c.Mount == nil {
		c.Mount = defaultMount
	}
	if c.Unmount == nil {
		c.Unmount = defaultUnmount
	}
	if c.Exec == nil {
		c.Exec = defaultExec
	}
	if c.Power == nil {
		c.Power = defaultPower
	}
	if c.KexecLoad == nil {
		c.KexecLoad = defaultKexecLoad
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Backoff <= 0 {
		c.Backoff = DefaultBackoff
	}
	if c.SealFirstBoot == nil {
		c.SealFirstBoot = defaultSealFirstBoot
	}
	if c.Cryptsetup == nil {
		c.Cryptsetup = defaultCryptsetup
	}
	if c.MapperDir == "" {
		c.MapperDir = "/dev/mapper"
	}
	if c.crypt == nil {
		c.crypt = &cryptState{mapped: map[int]string{}}
	}
	return c
}

type discard struct{}

func (discard) Report(plan.AgentEvent) {}

func (r *Runner) emit(e plan.AgentEvent) {
	e.Time = r.Now()
	r.Report.Report(e)
}

// runAction runs one action: each attempt gets the action's timeout, and
// failed attempts are retried after a doubling delay.
func (r *Runner) runAction(ctx context.Context, s *step) error {
	// A power action comes after the provisioned event: it is logged, not
	// reported as a step, so the node stays provisioned.
	if plan.IsPowerAction(s.a.Action) {
		s.emit(plan.AgentEvent{Type: plan.AgentLog, Message: s.a.Action})
	} else {
		s.emit(plan.AgentEvent{Type: plan.AgentStarted})
	}
	err := r.attempts(ctx, s)
	if err == nil {
		if !plan.IsPowerAction(s.a.Action) {
			s.emit(plan.AgentEvent{Type: plan.AgentActionDone})
		}
		return nil
	}
	ae := &ActionError{Step: s.i, Action: s.a.Action, Name: s.a.Name, Err: err}
	s.emit(plan.AgentEvent{Type: plan.AgentFailed, Message: ae.Error()})
	return ae
}

func (r *Runner) attempts(ctx context.Context, s *step) error {
	timeout := DefaultTimeout
	if s.a.Timeout != "" {
		d, err := time.ParseDuration(s.a.Timeout)
		if err != nil || d <= 0 {
			return fmt.Errorf("timeout %q: want a duration such as 30m", s.a.Timeout)
		}
		timeout = d
	}
	tries := 1 + max(s.a.Retries, 0)
	delay := r.Backoff
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		err := r.do(actx, s)
		if err != nil && actx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("timed out after %s: %w", timeout, err)
		}
		cancel()
		var perm *permanentError
		switch {
		case err == nil:
			return nil
		case try >= tries || errors.As(err, &perm) || ctx.Err() != nil:
			return err
		}
		s.emit(plan.AgentEvent{Type: plan.AgentRetry,
			Message: fmt.Sprintf("attempt %d of %d: %v; retrying in %s", try, tries, err, delay)})
		if !sleep(ctx, delay) {
			return fmt.Errorf("%w (while waiting to retry after: %v)", ctx.Err(), err)
		}
		delay = min(2*delay, MaxBackoff)
	}
}

// do runs one attempt of an action.
func (r *Runner) do(ctx context.Context, s *step) error {
	switch s.a.Action {
	case "wipe-disk":
		return r.wipeDisk(ctx, s)
	case "image-to-disk":
		return r.imageToDisk(ctx, s)
	case "write-file":
		return r.writeFile(ctx, s)
	case "cloud-init":
		return r.cloudInit(ctx, s)
	case "exec":
		return r.exec(ctx, s)
	case "reboot", "poweroff":
		return r.power(ctx, s)
	case "kexec":
		return r.kexec(ctx, s)
	case plan.QAMemory, plan.QACPU, plan.QADisk, plan.QANetwork:
		return r.runQA(ctx, s)
	case plan.ActionEraseDisks:
		return r.eraseDisks(ctx, s)
	}
	return permanentf("unknown action %q", s.a.Action)
}

// power hands the machine over to whatever boots next, once the reporter
// has delivered the events that say so.
func (r *Runner) power(ctx context.Context, s *step) error {
	if err := r.closeCrypt(ctx); err != nil {
		return fmt.Errorf("before %s: %w", s.a.Action, err)
	}
	if f, ok := r.Report.(Flusher); ok {
		if err := f.Flush(ctx); err != nil {
			return fmt.Errorf("deliver events before %s: %w", s.a.Action, err)
		}
	}
	if err := r.Power(s.a.Action); err != nil {
		return fmt.Errorf("%s: %w", s.a.Action, err)
	}
	return nil
}

// step is one action of a running workflow: what its events carry.
type step struct {
	r    *Runner
	a    plan.Action
	i, n int

	lastProgress time.Time
}

func (s *step) emit(e plan.AgentEvent) {
	e.Action, e.Step, e.Steps = s.a.Name, s.i, s.n
	if e.Action == "" {
		e.Action = s.a.Action
	}
	s.r.emit(e)
}

func (s *step) log(msg string) {
	s.emit(plan.AgentEvent{Type: plan.AgentLog, Message: msg})
}

// progress reports done of total bytes (total <= 0: unknown) at most once a
// second, and always when final.
func (s *step) progress(start time.Time, done, total int64, final bool) {
	now := s.r.Now()
	if !final && !s.lastProgress.IsZero() && now.Sub(s.lastProgress) < time.Second {
		return
	}
	s.lastProgress = now
	e := plan.AgentEvent{Type: plan.AgentProgress, Bytes: done, Total: max(total, 0)}
	if secs := now.Sub(start).Seconds(); secs > 0 {
		e.Rate = float64(done) / secs
	}
	s.emit(e)
}

// lineWriter turns a command's output into log events, one per line;
// overlong lines are split.
type lineWriter struct {
	mu  sync.Mutex
	s   *step
	buf []byte
}

const maxLogLine = 4096

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	for len(w.buf) >= maxLogLine {
		w.line(w.buf[:maxLogLine])
		w.buf = w.buf[maxLogLine:]
	}
	return len(p), nil
}

// Flush reports a last line without its newline.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.line(w.buf)
		w.buf = nil
	}
}

func (w *lineWriter) line(b []byte) {
	w.s.log(strings.TrimRight(string(b), "\r"))
}

// sleep waits d, or less when ctx ends first (false).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
