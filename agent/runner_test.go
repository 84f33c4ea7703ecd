package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
)

// recorder is a Reporter (and Flusher) that keeps the events.
type recorder struct {
	mu      sync.Mutex
	events  []plan.AgentEvent
	flushed int // events reported when Flush was last called
}

func (r *recorder) Report(e plan.AgentEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) Flush(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushed = len(r.events)
	return nil
}

func (r *recorder) all() []plan.AgentEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// types lists the event types, leaving out progress and log events.
func (r *recorder) types() []string {
	var out []string
	for _, e := range r.all() {
		if e.Type != plan.AgentProgress && e.Type != plan.AgentLog {
			out = append(out, e.Type)
		}
	}
	return out
}

func (r *recorder) of(typ string) []plan.AgentEvent {
	var out []plan.AgentEvent
	for _, e := range r.all() {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) logs() []string {
	var out []string
	for _, e := range r.of(plan.AgentLog) {
		out = append(out, e.Message)
	}
	return out
}

// fakeMounts stands in for mount(2): a device is a directory of the test,
// and mounting it makes the mount point a symlink to that directory.
type fakeMounts struct {
	mu    sync.Mutex
	roots map[string]string // device → directory
	calls []string
}

func (f *fakeMounts) mount(dev, fstype, dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("mount %s %s %s", dev, fstype, dir))
	if fstype == "bind" {
		return nil
	}
	root, ok := f.roots[dev]
	if !ok {
		return fmt.Errorf("%s: no such device", dev)
	}
	if err := os.Remove(dir); err != nil {
		return err
	}
	return os.Symlink(root, dir)
}

func (f *fakeMounts) unmount(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "unmount "+dir)
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if err := os.Remove(dir); err != nil {
			return err
		}
		return os.Mkdir(dir, 0o700)
	}
	return nil
}

// newRunner returns a Runner whose machine hooks fail unless a test sets
// them, with a fast backoff, and the recorder it reports to.
func newRunner(t *testing.T) (*Runner, *recorder) {
	t.Helper()
	rec := &recorder{}
	fail := func(what string) error { return fmt.Errorf("test did not expect %s", what) }
	return &Runner{
		Report:      rec,
		ResolveDisk: func(name string) (string, error) { return name, nil },
		Mount:       func(dev, fstype, dir string) error { return fail("mount " + dev) },
		Unmount:     func(dir string) error { return fail("unmount") },
		Exec: func(ctx context.Context, chroot string, argv []string, out io.Writer) error {
			return fail(fmt.Sprint("exec ", argv))
		},
		Power:     func(action string) error { return fail(action) },
		KexecLoad: func(kernel, initrd, cmdline string) error { return fail("kexec load") },
		Backoff:   time.Millisecond,
	}, rec
}

func wf(actions ...plan.Action) plan.Workflow {
	return plan.Workflow{Node: "n1", Profile: "p", Actions: actions}
}

func TestPowerActionAfterProvisioned(t *testing.T) {
	for _, power := range []string{"reboot", "poweroff"} {
		t.Run(power, func(t *testing.T) {
			r, rec := newRunner(t)
			r.Generation = 3
			var ran []string
			r.Exec = func(ctx context.Context, chroot string, argv []string, out io.Writer) error {
				ran = append(ran, argv[0])
				return nil
			}
			var calls []string
			r.Power = func(action string) error {
				calls = append(calls, action)
				got := rec.types()
				want := []string{"started", "done", "provisioned"} // the power action itself is a log line
				if !slices.Equal(got, want) {
					t.Errorf("events when %s was called: %v, want %v", action, got, want)
				}
				if p := rec.of(plan.AgentProvisioned); len(p) != 1 || p[0].Generation != 3 {
					t.Errorf("provisioned events %+v, want one of generation 3", p)
				}
				if rec.flushed != len(rec.all()) {
					t.Errorf("%d events flushed before %s, want all %d", rec.flushed, action, len(rec.all()))
				}
				return nil
			}
			err := r.Run(t.Context(), wf(
				plan.Action{Action: "exec", Name: "first", Command: []string{"first"}},
				plan.Action{Action: power, Name: power},
				plan.Action{Action: "exec", Name: "after", Command: []string{"after"}},
			))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(calls, []string{power}) {
				t.Errorf("power calls %v, want [%s]", calls, power)
			}
			if !slices.Equal(ran, []string{"first"}) {
				t.Errorf("ran %v: nothing runs after a power action", ran)
			}
		})
	}
}

func TestProvisionedAtTheEnd(t *testing.T) {
	r, rec := newRunner(t)
	r.Exec = func(context.Context, string, []string, io.Writer) error { return nil }
	if err := r.Run(t.Context(), wf(plan.Action{Action: "exec", Name: "x", Command: []string{"true"}})); err != nil {
		t.Fatal(err)
	}
	want := []string{"started", "done", "provisioned"}
	if got := rec.types(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	e := rec.of(plan.AgentStarted)[0]
	if e.Step != 1 || e.Steps != 1 || e.Action != "x" || e.Time.IsZero() {
		t.Errorf("started event %+v: want step 1 of 1 of x, with a time", e)
	}
}

func TestFailureStopsTheWorkflow(t *testing.T) {
	r, rec := newRunner(t)
	var ran []string
	r.Exec = func(ctx context.Context, chroot string, argv []string, out io.Writer) error {
		ran = append(ran, argv[0])
		return errors.New("exit status 2")
	}
	err := r.Run(t.Context(), wf(
		plan.Action{Action: "exec", Name: "migrate", Command: []string{"/bin/migrate"}},
		plan.Action{Action: "exec", Name: "never", Command: []string{"/bin/never"}},
	))
	var ae *ActionError
	if !errors.As(err, &ae) || ae.Step != 1 || ae.Name != "migrate" {
		t.Fatalf("Run: %v, want an ActionError of step 1, migrate", err)
	}
	if !slices.Equal(ran, []string{"/bin/migrate"}) {
		t.Errorf("ran %v, want only the failing action", ran)
	}
	want := []string{"started", "failed"}
	if got := rec.types(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	msg := rec.of(plan.AgentFailed)[0].Message
	for _, part := range []string{"migrate", "/bin/migrate", "exit status 2"} {
		if !strings.Contains(msg, part) {
			t.Errorf("failed message %q does not name %q", msg, part)
		}
	}
}

func TestTimeoutAndRetries(t *testing.T) {
	r, rec := newRunner(t)
	calls := 0
	r.Exec = func(ctx context.Context, chroot string, argv []string, out io.Writer) error {
		calls++
		<-ctx.Done()
		return ctx.Err()
	}
	err := r.Run(t.Context(), wf(plan.Action{Action: "exec", Name: "hang", Timeout: "20ms", Retries: 2, Command: []string{"sleep"}}))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want a deadline exceeded", err)
	}
	if calls != 3 {
		t.Errorf("%d attempts, want 3 (1 + 2 retries)", calls)
	}
	want := []string{"started", "retry", "retry", "failed"}
	if got := rec.types(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	retries := rec.of(plan.AgentRetry)
	for i, delay := range []string{"retrying in 1ms", "retrying in 2ms"} {
		if !strings.Contains(retries[i].Message, delay) || !strings.Contains(retries[i].Message, "timed out after 20ms") {
			t.Errorf("retry %d: %q, want the timeout and %q (doubling backoff)", i+1, retries[i].Message, delay)
		}
	}
	if msg := rec.of(plan.AgentFailed)[0].Message; !strings.Contains(msg, "timed out after 20ms") {
		t.Errorf("failed message %q does not say it timed out", msg)
	}
}

func TestRetryThenSuccess(t *testing.T) {
	r, rec := newRunner(t)
	calls := 0
	r.Exec = func(context.Context, string, []string, io.Writer) error {
		if calls++; calls == 1 {
			return errors.New("flaky")
		}
		return nil
	}
	if err := r.Run(t.Context(), wf(plan.Action{Action: "exec", Name: "x", Retries: 1, Command: []string{"x"}})); err != nil {
		t.Fatal(err)
	}
	want := []string{"started", "retry", "done", "provisioned"}
	if got := rec.types(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

func TestBadParametersAreNotRetried(t *testing.T) {
	for name, a := range map[string]plan.Action{
		"unknown action": {Action: "format-disk", Retries: 3},
		"bad timeout":    {Action: "exec", Timeout: "soon", Retries: 3, Command: []string{"x"}},
		"bad mode":       {Action: "write-file", Path: "/etc/x", Mode: "rw-r--r--", Retries: 3},
		"relative path":  {Action: "write-file", Path: "etc/x", Retries: 3},
		"compression":    {Action: "image-to-disk", URL: "http://x/i", SHA256: strings.Repeat("a", 64), Compression: "bz2", Retries: 3},
	} {
		t.Run(name, func(t *testing.T) {
			r, rec := newRunner(t)
			if err := r.Run(t.Context(), wf(a)); err == nil {
				t.Fatal("Run succeeded")
			}
			want := []string{"started", "failed"}
			if got := rec.types(); !slices.Equal(got, want) {
				t.Errorf("events %v, want %v (no retries)", got, want)
			}
		})
	}
}

func TestExecLogs(t *testing.T) {
	r, rec := newRunner(t)
	var chroots []string
	r.Exec = func(ctx context.Context, chroot string, argv []string, out io.Writer) error {
		chroots = append(chroots, chroot)
		io.WriteString(out, "one\ntw")
		io.WriteString(out, "o\r\nthree")
		return nil
	}
	if err := r.Run(t.Context(), wf(plan.Action{Action: "exec", Name: "x", Command: []string{"/bin/x"}})); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.logs(), []string{"one", "two", "three"}; !slices.Equal(got, want) {
		t.Errorf("logs %q, want %q", got, want)
	}
	if !slices.Equal(chroots, []string{""}) {
		t.Errorf("chroot %q, want none", chroots)
	}
	for _, e := range rec.of(plan.AgentLog) {
		if e.Action != "x" || e.Step != 1 {
			t.Errorf("log event %+v does not name its action", e)
		}
	}
}

func TestExecInChroot(t *testing.T) {
	r, _ := newRunner(t)
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "dev"), 0o755)
	fm := &fakeMounts{roots: map[string]string{"/dev/nvme0n1p3": root}}
	r.Mount, r.Unmount = fm.mount, fm.unmount
	var chroot string
	r.Exec = func(ctx context.Context, dir string, argv []string, out io.Writer) error {
		chroot = dir
		// The new system is reachable at dir while the command runs.
		_, err := os.Stat(filepath.Join(dir, "dev"))
		return err
	}
	err := r.Run(t.Context(), wf(plan.Action{Action: "exec", Name: "x", Disk: "/dev/nvme0n1", Partition: 3, FSType: "ext4", Chroot: true, Command: []string{"update-grub"}}))
	if err != nil {
		t.Fatal(err)
	}
	if chroot == "" {
		t.Fatal("the command did not run in a chroot")
	}
	want := []string{
		"mount /dev/nvme0n1p3 ext4 " + chroot,
		"mount /dev bind " + filepath.Join(chroot, "dev"),
		"unmount " + filepath.Join(chroot, "dev"),
		"unmount " + chroot,
	}
	if !slices.Equal(fm.calls, want) {
		t.Errorf("mounts\n%s\nwant\n%s", strings.Join(fm.calls, "\n"), strings.Join(want, "\n"))
	}
	if _, err := os.Lstat(chroot); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mount point %s left behind: %v", chroot, err)
	}
}

func TestExecDefault(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	r, rec := newRunner(t)
	r.Exec = nil
	err := r.Run(t.Context(), wf(plan.Action{Action: "exec", Name: "sh", Command: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}}))
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Run: %v, want exit status 3", err)
	}
	logs := rec.logs()
	if !slices.Contains(logs, "out") || !slices.Contains(logs, "err") {
		t.Errorf("logs %q, want stdout and stderr lines", logs)
	}
}

func TestLongLinesAreSplit(t *testing.T) {
	r, rec := newRunner(t)
	w := &lineWriter{s: &step{r: r, a: plan.Action{Action: "exec"}, i: 1, n: 1}}
	r.Now = time.Now
	r.Report = rec
	w.Write([]byte(strings.Repeat("x", maxLogLine+10)))
	w.Flush()
	logs := rec.logs()
	if len(logs) != 2 || len(logs[0]) != maxLogLine || len(logs[1]) != 10 {
		t.Errorf("got %d lines, want one of %d bytes and one of 10", len(logs), maxLogLine)
	}
}

func TestKexec(t *testing.T) {
	r, _ := newRunner(t)
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "boot"), 0o755)
	os.WriteFile(filepath.Join(root, "boot", "vmlinuz"), []byte("kernel"), 0o644)
	os.WriteFile(filepath.Join(root, "boot", "initrd.img"), []byte("initrd"), 0o644)
	fm := &fakeMounts{roots: map[string]string{"/dev/vda2": root}}
	r.Mount, r.Unmount = fm.mount, fm.unmount
	var loaded []string
	r.KexecLoad = func(kernel, initrd, cmdline string) error {
		k, err := os.ReadFile(kernel) // still mounted
		if err != nil {
			return err
		}
		loaded = append(loaded, string(k), filepath.Base(initrd), cmdline)
		return nil
	}
	var power []string
	r.Power = func(action string) error {
		if len(loaded) == 0 {
			t.Error("kexec called before the kernel was loaded")
		}
		power = append(power, action)
		return nil
	}
	for name, c := range map[string]struct{ content, want string }{
		"given command line":   {"root=LABEL=root console=ttyS0", "root=LABEL=root console=ttyS0"},
		"default command line": {"", "root=/dev/vda2 ro"},
	} {
		loaded, power = nil, nil
		err := r.Run(t.Context(), wf(plan.Action{Action: "kexec", Name: "kexec", Disk: "/dev/vda", Partition: 2, Content: c.content}))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := []string{"kernel", "initrd.img", c.want}; !slices.Equal(loaded, want) {
			t.Errorf("%s: loaded %q, want %q", name, loaded, want)
		}
		if !slices.Equal(power, []string{"kexec"}) {
			t.Errorf("%s: power %v, want [kexec]", name, power)
		}
	}
}
