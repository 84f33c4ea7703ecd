package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"syscall"
	"testing"
	"time"

	"github.com/bootops/bootops/reconciler"
	"github.com/bootops/bootops/test/gitserver"
)

// daemon is `bootops serve` running in-process.
type daemon struct {
	t      *testing.T
	addr   string
	stderr *lockedBuffer
	cancel context.CancelFunc
	done   chan int
}

// startDaemon runs serve with reads open: these tests are of Git and the
// CLI's views (TestServeAndStatus reads with the operator token).
func startDaemon(t *testing.T, environ map[string]string, args ...string) *daemon {
	t.Helper()
	return runServe(t, environ, append([]string{"--open-reads"}, args...)...)
}

// runServe runs `bootops serve args…` in-process until its HTTP listener
// is up; the test's end stops it.
func runServe(t *testing.T, environ map[string]string, args ...string) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{t: t, stderr: &lockedBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		e := &env{stdout: io.Discard, stderr: d.stderr, getenv: func(k string) string { return environ[k] }}
		d.done <- run(ctx, e, append([]string{"serve"}, args...))
	}()
	for i := 0; i < 400 && d.addr == ""; i++ {
		d.addr = d.logged("started", "http")
		select {
		case code := <-d.done:
			t.Fatalf("serve exited %d:\n%s", code, d.stderr.String())
		case <-time.After(25 * time.Millisecond):
		}
	}
	if d.addr == "" {
		t.Fatalf("serve did not start:\n%s", d.stderr.String())
	}
	t.Cleanup(d.stop)
	return d
}

// logged is the field key of the daemon's last log line msg ("" if none).
func (d *daemon) logged(msg, key string) string {
	v := ""
	for _, line := range strings.Split(d.stderr.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == msg {
			if s, ok := l[key].(string); ok {
				v = s
			}
		}
	}
	return v
}

func (d *daemon) stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	select {
	case code := <-d.done:
		if code != 0 {
			d.t.Errorf("serve exit %d:\n%s", code, d.stderr.String())
		}
	case <-time.After(20 * time.Second):
		d.t.Error("serve did not stop")
	}
}

func (d *daemon) get(path string) (int, string) {
	d.t.Helper()
	resp, err := http.Get("http://" + d.addr + path)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (d *daemon) status() reconciler.Status {
	d.t.Helper()
	code, out, errs := bootops(d.t, nil, "status", "--server", "http://"+d.addr, "-o", "json")
	if code != 0 {
		d.t.Fatalf("status: %d %s", code, errs)
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		d.t.Fatal(err)
	}
	return doc.Source
}

func (d *daemon) await(what string, cond func(reconciler.Status) bool) reconciler.Status {
	d.t.Helper()
	var st reconciler.Status
	for i := 0; i < 300; i++ {
		if st = d.status(); cond(st) {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("timed out waiting for %s; status %+v\nlog:\n%s", what, st, d.stderr.String())
	return st
}

// hook posts a GitHub push notification signed with secret.
func (d *daemon) hook(secret, sha string) int {
	d.t.Helper()
	body := []byte(fmt.Sprintf(`{"ref":"refs/heads/main","after":%q}`, sha))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req, _ := http.NewRequest("POST", "http://"+d.addr+"/hooks/git", bytes.NewReader(body))
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func metric(t *testing.T, body, series string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

func TestServeGit(t *testing.T) {
	work := demoRepo(t)
	os.Remove(filepath.Join(work, ".gitignore")) // the Micro-OS files go in too
	rem := gitserver.New(t, work)
	first := gitserver.Git(t, work, "rev-parse", "HEAD")
	etc := t.TempDir()
	write(t, etc, "hook-secret", "s3cret\n")
	write(t, etc, "bootops.yaml", "# settings\ninterval: 1h\nwebhook-secret-file: "+filepath.Join(etc, "hook-secret")+"\nlog-level: debug\n")
	state := t.TempDir()
	args := []string{"--source", rem.URL, "--config", filepath.Join(etc, "bootops.yaml"), "--state-dir", state, "--http-addr", "127.0.0.1:0", "--tftp-addr", ""}
	d := startDaemon(t, map[string]string{"BOOTOPS_DHCP": "off"}, args...)

	st := d.await("the first commit", func(s reconciler.Status) bool { return s.Applied.Revision == first })
	if st.URL != rem.URL || st.Stale {
		t.Errorf("status: %+v", st)
	}
	if code, body := d.get("/ipxe?serial=demo-0001"); code != 200 || !strings.Contains(body, "bootops.node=vm-serial") {
		t.Errorf("script: %d\n%s", code, body)
	}
	// Micro-OS files of a Git revision are served from the state folder.
	if code, body := d.get("/artifacts/microos/default/kernel"); code != 200 || body != "kernel bytes" {
		t.Errorf("kernel: %d %q", code, body)
	}

	// Push → live through the webhook.
	sha := rem.Commit("register vm-new", map[string]string{"sites/lab/nodes/vm-new.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: vm-new\nidentity: {serial: NEW-1}\n"})
	if code := d.hook("s3cret", sha); code != http.StatusAccepted {
		t.Fatalf("webhook: %d", code)
	}
	d.await("the pushed commit", func(s reconciler.Status) bool { return s.Applied.Revision == sha })
	if _, body := d.get("/ipxe?serial=new-1"); !strings.Contains(body, "bootops.node=vm-new") {
		t.Errorf("new node not served:\n%s", body)
	}
	// Bad signatures: 401, counted; nothing reconciled.
	if code := d.hook("wrong", sha); code != http.StatusUnauthorized {
		t.Errorf("bad signature: %d", code)
	}
	// A broken commit: refused with file:line, the last good one served.
	bad := rem.Commit("typo", map[string]string{"sites/lab/nodes/vm-new.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: vm-new\nidentity: {serial: NEW-1}\nprofle: x\n"})
	d.hook("s3cret", bad)
	st = d.await("the refused commit", func(s reconciler.Status) bool { return s.Attempted.Revision == bad })
	if st.Applied.Revision != sha || !st.Stale || len(st.Attempted.Errors) == 0 || !strings.HasPrefix(st.Attempted.Errors[0], "sites/lab/nodes/vm-new.yaml:5:1: profle: unknown field") {
		t.Errorf("after a broken commit: %+v", st)
	}
	code, out, _ := bootops(t, nil, "status", "--server", "http://"+d.addr)
	if code != 0 || !strings.Contains(out, "STALE:    the newest revision "+bad[:12]+" was refused") || !strings.Contains(out, "sites/lab/nodes/vm-new.yaml:5:1") || !regexp.MustCompile(`\d\d:\d\d:\d\d\s+`+sha[:12]+`\s+applied\s+4\s+\d+ ms\s+register vm-new`).MatchString(out) {
		t.Errorf("bootops status:\n%s", out)
	}

	_, m := d.get("/metrics")
	for series, want := range map[string]string{
		`bootops_webhook_requests_total{result="accepted"}`:          "2",
		`bootops_webhook_requests_total{result="unauthorized"}`:      "1",
		`bootops_source_revision_info{revision="` + sha + `"}`:       "1",
		`bootops_reconcile_failures_total{stage="compile"}`:          "1",
		`bootops_reconcile_duration_seconds_count{result="applied"}`: "2",
		`bootops_reconcile_duration_seconds_count{result="refused"}`: "1",
		`bootops_source_stale`: "1",
		`bootops_plan_nodes`:   "4",
	} {
		if got := metric(t, m, series); got != want {
			t.Errorf("%s = %q, want %s\n%s", series, got, want, m)
		}
	}
	if metric(t, m, `bootops_source_revision_info{revision="`+first+`"}`) != "" {
		t.Error("the old revision is still in bootops_source_revision_info")
	}

	// SIGHUP re-reads the config file: a short interval, then a push
	// without a webhook goes live by polling.
	write(t, etc, "bootops.yaml", "interval: 200ms\nwebhook-secret-file: "+filepath.Join(etc, "hook-secret")+"\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	for i := 0; i < 100 && !strings.Contains(d.stderr.String(), `"msg":"reload: settings re-read","interval":"200ms"`); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(d.stderr.String(), `"msg":"reload: settings re-read","interval":"200ms"`) {
		t.Fatalf("no reload in the log:\n%s", d.stderr.String())
	}
	fixed := rem.Commit("fix typo", map[string]string{"sites/lab/nodes/vm-new.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: vm-new\nidentity: {serial: NEW-2}\n"})
	d.await("the fix by polling", func(s reconciler.Status) bool { return s.Applied.Revision == fixed && !s.Stale })
	d.stop()

	// Restart with the Git server down: the kept plan is served at once.
	rem.Stop()
	d2 := startDaemon(t, map[string]string{"BOOTOPS_DHCP": "off"}, args...)
	if code, body := d2.get("/readyz"); code != 200 {
		t.Errorf("readyz right after a restart with Git down: %d %s", code, body)
	}
	if _, body := d2.get("/ipxe?serial=new-2"); !strings.Contains(body, "bootops.node=vm-new") {
		t.Errorf("kept plan not served:\n%s", body)
	}
	if code, body := d2.get("/artifacts/microos/default/initrd"); code != 200 || body != "initrd bytes" {
		t.Errorf("initrd after restart: %d %q", code, body)
	}
	st = d2.await("stale with Git down", func(s reconciler.Status) bool { return s.Stale })
	if st.Applied.Revision != fixed || !st.Restored || !strings.Contains(st.Reason, "cannot read the source") {
		t.Errorf("after restart: %+v", st)
	}
}

func TestServeConfigErrors(t *testing.T) {
	etc := t.TempDir()
	write(t, etc, "bad.yaml", "source: sites\nintervall: 1m\ninterval: soon\n")
	code, _, errs := bootops(t, nil, "serve", "--config", filepath.Join(etc, "bad.yaml"))
	if code != 2 || !strings.Contains(errs, `bad.yaml:2:1: unknown setting "intervall" (did you mean "interval"?)`) || !strings.Contains(errs, `bad.yaml:3:11: interval: invalid value "soon"`) {
		t.Errorf("exit %d:\n%s", code, errs)
	}
	code, _, errs = bootops(t, nil, "serve", "--source", "git@198.18.0.1:ops/fleet.git", "--state-dir", t.TempDir())
	if code != 2 || !strings.Contains(errs, "is an ssh URL: give the private key with --git-ssh-key") {
		t.Errorf("ssh without a key: %d %s", code, errs)
	}
	write(t, etc, "keys.asc", "not a key")
	code, _, errs = bootops(t, nil, "serve", "--source", "https://198.18.0.1/x.git", "--verify-commits", filepath.Join(etc, "keys.asc"), "--state-dir", t.TempDir())
	if code != 2 || !strings.Contains(errs, "--verify-commits "+filepath.Join(etc, "keys.asc")) {
		t.Errorf("bad keyring: %d %s", code, errs)
	}
}

// docs/gitops.md's example settings file is one serve accepts.
func TestReadmeConfigFile(t *testing.T) {
	readme, err := os.ReadFile("../../docs/gitops.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```yaml\n# /etc/bootops/serve.yaml\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("docs/gitops.md: no example settings file")
	}
	file := filepath.Join(t.TempDir(), "serve.yaml")
	write(t, filepath.Dir(file), "serve.yaml", block)
	c := serveCmd()
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	cfg, err := c.serveConfig(e, []string{"--config", file})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.source != "https://git.example.com/ops/fleet.git" || cfg.site != "store-0042" || cfg.interval != time.Minute || cfg.verifyCommits == "" {
		t.Errorf("settings read: %+v", cfg)
	}
}

// An unknown machine boots; `status --unknown` shows it with a Node to
// commit; `enroll` writes that Node; once it is in the repository the
// machine is that node. `logs` shows the timelines.
func TestUnknownEnrollLogs(t *testing.T) {
	repo := demoRepo(t)
	d := startDaemon(t, nil, "--source", repo, "--state-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--dhcp", "off", "--tftp-addr", "")
	server := "http://" + d.addr
	if _, body := d.get("/ipxe?mac=52:54:00:ab:cd:ef&serial=NEWBOX-7&site=lab"); !strings.Contains(body, "bootops.machine=mac:52:54:00:ab:cd:ef") {
		t.Fatalf("unknown machine's script:\n%s", body)
	}
	var code int
	var out, errs string
	for i := 0; i < 100 && !strings.Contains(out, "apiVersion"); i++ {
		time.Sleep(20 * time.Millisecond) // the event reaches the store
		code, out, errs = bootops(t, nil, "status", "--server", server, "--unknown")
	}
	want := "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: newbox-7\nsite: lab\nidentity:\n  serial: NEWBOX-7\n  mac: 52:54:00:ab:cd:ef\n"
	if code != 0 || !strings.Contains(out, "# mac:52:54:00:ab:cd:ef (booting)") || !strings.Contains(out, want) {
		t.Errorf("status --unknown: %d %s\n%s", code, errs, out)
	}
	nodes := filepath.Join(repo, "sites/lab/nodes")
	code, out, errs = bootops(t, nil, "enroll", "mac:52:54:00:ab:cd:ef", "--server", server, "-o", nodes)
	if code != 0 || !strings.Contains(out, "wrote "+filepath.Join(nodes, "newbox-7.yaml")) {
		t.Fatalf("enroll: %d %s %s", code, out, errs)
	}
	// Enrolling again would overwrite: refused.
	if code, _, errs := bootops(t, nil, "enroll", "newbox-7", "--server", server, "-o", nodes); code != 1 || !strings.Contains(errs, "file exists") {
		t.Errorf("second enroll: %d %s", code, errs)
	}
	// The daemon follows the folder: the machine is now node newbox-7.
	var body string
	for i := 0; i < 100 && !strings.Contains(body, "bootops.node=newbox-7"); i++ {
		time.Sleep(50 * time.Millisecond)
		_, body = d.get("/ipxe?mac=52:54:00:ab:cd:ef&serial=NEWBOX-7&site=lab")
	}
	if !strings.Contains(body, "bootops.node=newbox-7") {
		t.Fatalf("the enrolled node is not served:\n%s", body)
	}
	for i := 0; i < 100 && !strings.Contains(out, "served the Micro-OS script"); i++ {
		time.Sleep(20 * time.Millisecond)
		code, out, errs = bootops(t, nil, "logs", "newbox-7", "--server", server)
	}
	if code != 0 || !regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}   script \[booting\] served the Micro-OS script of profile demo-disk`).MatchString(out) {
		t.Errorf("logs: %d %s\n%s", code, errs, out)
	}
	// Its history as an unknown machine joined the node's.
	if !strings.Contains(out, "unknown machine: no registered node has mac 52:54:00:ab:cd:ef") {
		t.Errorf("the node's logs lack its unknown past:\n%s", out)
	}
	if code, _, errs := bootops(t, nil, "logs", "nope", "--server", server); code != 1 || !strings.Contains(errs, `no node "nope"`) {
		t.Errorf("logs nope: %d %s", code, errs)
	}
}

// status --watch redraws; logs -f prints what comes next.
func TestWatchAndFollow(t *testing.T) {
	repo := demoRepo(t)
	d := startDaemon(t, nil, "--source", repo, "--state-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--dhcp", "off", "--tftp-addr", "")
	server := "http://" + d.addr
	d.get("/ipxe?serial=demo-0001")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var watch, follow lockedBuffer
	e := func(out *lockedBuffer) *env {
		return &env{stdout: out, stderr: io.Discard, getenv: func(string) string { return "" }}
	}
	done := make(chan int, 2)
	go func() { done <- run(ctx, e(&watch), []string{"status", "--server", server, "--watch"}) }()
	go func() { done <- run(ctx, e(&follow), []string{"logs", "vm-serial", "--server", server, "-f"}) }()
	time.Sleep(1500 * time.Millisecond)
	d.get("/ipxe?serial=demo-0001&mac=52:54:00:00:00:42") // a second event while following
	<-done
	<-done
	if n := strings.Count(watch.String(), "\n--- "); n < 1 || strings.Count(watch.String(), "NODE ") < 2 {
		t.Errorf("status --watch drew %d times:\n%s", n+1, watch.String())
	}
	if n := strings.Count(follow.String(), "served the Micro-OS script"); n != 2 {
		t.Errorf("logs -f printed %d script events, want 2 (each once):\n%s", n, follow.String())
	}
}
