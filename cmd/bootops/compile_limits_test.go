package main

import (
	"os"
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
