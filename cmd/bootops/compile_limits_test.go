package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/reconciler"
	"github.com/bootops/bootops/test/gitserver"
)

// A commit whose CUE runs for minutes is refused at --compile-timeout: the
// last good Plan stays served, the status says why, and the next commit
// is compiled as any other.
func TestServeRefusesRunawayCUE(t *testing.T) {
	// The daemon runs the compile worker as this test binary (TestMain).
	t.Setenv("BOOTOPS_TEST_AS_MAIN", "1")
	work := demoRepo(t)
	os.Remove(filepath.Join(work, ".gitignore"))
	rem := gitserver.New(t, work)
	first := gitserver.Git(t, work, "rev-parse", "HEAD")
	d := startDaemon(t, nil, "--source", rem.URL, "--interval", "200ms", "--compile-timeout", "3s", "--state-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--dhcp", "off", "--tftp-addr", "")
	d.await("the first commit", func(s reconciler.Status) bool { return s.Applied.Revision == first })

	// In-process, this comprehension ran for more than ten minutes.
	slow := rem.Commit("runaway comprehension", map[string]string{"sites/lab/slow.cue": "package lab\n\nimport \"list\"\n\n_x: [for i in list.Range(0, 500000, 1) {i * 2}]\n"})
	start := time.Now()
	st := waitStatus(t, d, 2*time.Minute, func(s reconciler.Status) bool { return s.Attempted.Revision == slow })
	t.Logf("refused after %s", time.Since(start).Round(time.Millisecond))
	if st.Attempted.Result != reconciler.ResultRefused || st.Attempted.Error != "took longer than 3s to compile (the limit is serve's --compile-timeout)" ||
		st.Applied.Revision != first || !st.Stale || !strings.Contains(st.Reason, "took longer than 3s") {
		t.Fatalf("after the runaway commit: %+v", st)
	}
	if _, body := d.get("/ipxe?serial=demo-0001"); !strings.Contains(body, "bootops.node=vm-serial") {
		t.Errorf("the good plan is not served:\n%s", body)
	}

	fixed := rem.Commit("a node in CUE", map[string]string{"sites/lab/slow.cue": "package lab\n\nvmCUE: #Node & {apiVersion: \"bootops.dev/v1alpha1\", kind: \"Node\", name: \"vm-cue\", identity: serial: \"CUE-1\"}\n"})
	waitStatus(t, d, 2*time.Minute, func(s reconciler.Status) bool { return s.Applied.Revision == fixed && !s.Stale })
	if _, body := d.get("/ipxe?serial=cue-1"); !strings.Contains(body, "bootops.node=vm-cue") {
		t.Errorf("the node of the next commit is not served:\n%s", body)
	}
}

// waitStatus is daemon.await with a longer patience, for a loaded machine.
func waitStatus(t *testing.T, d *daemon, patience time.Duration, cond func(reconciler.Status) bool) reconciler.Status {
	t.Helper()
	var st reconciler.Status
	for end := time.Now().Add(patience); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if st = d.status(); cond(st) {
			return st
		}
	}
	t.Fatalf("gave up after %s; status %+v\nlog:\n%s", patience, st, d.stderr.String())
	return st
}

// The limits come from flags, BOOTOPS_* variables and the config file, as
// every setting does; the README's settings file names them.
func TestCompileLimitSettings(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "serve.yaml", "source: x\ncompile-timeout: 90s\ncompile-memory: 512MiB\n")
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	cfg, err := serveCmd().serveConfig(e, []string{"--config", filepath.Join(dir, "serve.yaml")})
	if err != nil || cfg.compileTimeout != 90*time.Second || cfg.compileMemory != 512<<20 {
		t.Errorf("from the file: %v %v %v", err, cfg.compileTimeout, cfg.compileMemory)
	}
	cfg, err = serveCmd().serveConfig(e, []string{"--source", "x"})
	if err != nil || cfg.compileTimeout != time.Minute || cfg.compileMemory != 2<<30 {
		t.Errorf("defaults: %v %v %v", err, cfg.compileTimeout, cfg.compileMemory)
	}
	e.getenv = func(k string) string { return map[string]string{"BOOTOPS_COMPILE_MEMORY": "3G"}[k] }
	if cfg, err = serveCmd().serveConfig(e, []string{"--source", "x"}); err != nil || cfg.compileMemory != 3<<30 {
		t.Errorf("from a variable: %v %v", err, cfg.compileMemory)
	}
	e.getenv = func(string) string { return "" }
	for _, args := range [][]string{{"--compile-memory", "lots"}, {"--compile-memory", "1MiB"}, {"--compile-timeout", "0s"}} {
		if _, err := serveCmd().serveConfig(e, append([]string{"--source", "x"}, args...)); !errors.As(err, new(usageError)) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	readme, err := os.ReadFile("../../docs/gitops.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "compile-timeout: 60s\ncompile-memory: 2GiB\n") {
		t.Error("docs/gitops.md: the settings file does not show the compile limits")
	}
}

// validate --timeout gives up on a runaway comprehension (in a process of
// its own: the evaluation goes on until the command exits).
func TestValidateTimeout(t *testing.T) {
	repo := demoRepo(t)
	write(t, repo, "sites/lab/slow.cue", "package lab\n\nimport \"list\"\n\n_x: [for i in list.Range(0, 500000, 1) {i * 2}]\n")
	cmd := exec.Command(os.Args[0], "validate", "--timeout", "2s", repo)
	cmd.Env = append(os.Environ(), "BOOTOPS_TEST_AS_MAIN=1")
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitInvalid || !strings.Contains(string(out), "took longer than 2s to compile (--timeout)") {
		t.Errorf("validate --timeout 2s: %v\n%s", err, out)
	}
}
