//go:build e2e

package e2e

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// rolloutVMs are the machines of TestRollout, in the rollout's order (by
// name).
var rolloutVMs = []string{"r1", "r2"}

// Day 2 from Git (the longest VM test: first in the VM slots' line), on
// two VMs with IPMI BMCs (ipmi_sim) running the real Debian image: a
// commit to image v2 under rolling, maxUnavailable 1, canary 1 reinstalls
// them one at a time through their BMCs, the canary first (never both
// down at once, from their timelines), and both end running and in sync;
// a commit to a broken image fails the first, halts the rollout and
// leaves the other alone; the revert reinstalls the failed one with v2
// and touches nobody else. Two machines, not three: each is a Debian
// install and first boot under TCG (CI's e2e stage is CPU-bound); the
// waves after the canary, maxUnavailable within a wave and the halt over
// many nodes are daemon/rollout_test.go's, against simulated BMCs.
func TestRollout(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing (Debian packages openipmi, ipmitool; make test installs them)", bin)
		}
	}
	debDir, v1SHA := debianImage(t)
	l := newLab(t, true)
	l.vms(2)
	// v1 is the Debian image; v2 the same with a second gzip member (a
	// few bytes after the image on the disk): another sha256, the same
	// OS, no second build.
	imgDir := t.TempDir()
	os.Symlink(filepath.Join(debDir, "debian.raw.gz"), filepath.Join(imgDir, "v1.raw.gz"))
	v2SHA := appendGzipMember(t, filepath.Join(debDir, "debian.raw.gz"), filepath.Join(imgDir, "v2.raw.gz"))
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")

	secrets := filepath.Join(l.dir, "secrets")
	os.MkdirAll(secrets, 0o700)
	os.WriteFile(filepath.Join(secrets, "lab-bmc"), []byte("admin:secret\nallow: 198.18.0.1\n"), 0o600)
	repo := provisionRepo(t, images4, v1SHA, "rollout", nil)
	// Each commit of the test: the profile's image, written again.
	profile := func(url, sha string) {
		writeRepo(t, repo, vars{"DebianURL": url, "DebianSHA": sha}, "rollout-profile")
	}
	profile("http://198.18.0.1:8081/v1.raw.gz", v1SHA)
	for i, name := range rolloutVMs {
		// The MAC and BMC port rollout.txtar gives the node.
		mac := fmt.Sprintf("52:54:00:e2:60:%02x", i+1)
		port := 9631 + i
		// Its disk, its tap, and its BMC, which starts QEMU (a machine
		// that reboots as machines do; the network once when told).
		dir := filepath.Join(l.dir, "bmc-"+name)
		os.MkdirAll(dir, 0o755)
		d := filepath.Join(dir, "disk")
		f, _ := os.Create(d)
		f.Truncate(3 << 30)
		f.Close()
		tap := "tap-" + name
		run(t, "ip", "-n", l.lan, "tuntap", "add", "dev", tap, "mode", "tap")
		run(t, "ip", "-n", l.lan, "link", "set", tap, "master", "br0", "up")
		control := filepath.Join(dir, "chassis-control")
		os.WriteFile(control, []byte(fmt.Sprintf(chassisControl, dir, tap, mac, d, "", "once=n,order=c")), 0o755)
		t.Cleanup(func() {
			if b, err := os.ReadFile(filepath.Join(dir, "vm.pid")); err == nil {
				exec.Command("kill", "-9", strings.TrimSpace(string(b))).Run()
			}
		})
		l.ipmiSim("bmc-"+name, port, control)
	}
	start := time.Now()
	l.serve(repo, "--secrets-dir", secrets, "--power-interval", "3s", "--bmc-timeout", "8s")

	// power: auto installs the new nodes at once: both running v1.
	waitFor(t, "both nodes running v1", 20*time.Minute, func() bool { return allSync(l, "in sync") })
	t.Logf("timing: daemon start → two nodes running v1 (installed at once through IPMI): %s", time.Since(start).Round(time.Second))
	// From here one reinstall at a time (maxUnavailable 1): one machine
	// busy, the other idle at its login prompt.
	l.resting(1)
	l.vms(1)

	// v2: every node out of date, then reinstalled one at a time.
	v2At := time.Now()
	profile("http://198.18.0.1:8081/v2.raw.gz", v2SHA)
	waitFor(t, "the nodes out of date", time.Minute, func() bool {
		for _, n := range rolloutVMs {
			if !strings.Contains(syncOf(l, n), "out of date: image") {
				return false
			}
		}
		return true
	})
	waitFor(t, "the v2 rollout", 30*time.Minute, func() bool { return allSync(l, "in sync") })
	t.Logf("timing: commit of v2 → two nodes reinstalled one at a time, running and in sync: %s", time.Since(v2At).Round(time.Second))
	down := downtimes(t, l, v2At)
	for i := range down {
		for j := i + 1; j < len(down); j++ {
			if down[i].overlaps(down[j]) {
				t.Errorf("two nodes down at once: %s and %s", down[i], down[j])
			}
		}
	}
	if len(down) != 2 || down[0].node != "r1" {
		t.Errorf("reinstalls: %v (want r1, the canary, first, then r2)", down)
	}
	if log := l.logs("lab/r1"); !strings.Contains(log, "rollout: reinstalling (canary)") {
		t.Errorf("r1 was not the canary:\n%s", testutil.Tail(log, 30))
	}

	// A broken image: the first node fails, the rollout halts, the other
	// is not touched.
	v3At := time.Now()
	profile("http://198.18.0.1:8081/missing.raw.gz", strings.Repeat("ab", 32))
	waitFor(t, "the rollout halted", 15*time.Minute, func() bool { return strings.HasPrefix(halted(l), "r1: ") })
	t.Logf("timing: commit of a broken image → halted on r1: %s (%s)", time.Since(v3At).Round(time.Second), halted(l))
	time.Sleep(20 * time.Second) // four more rounds: nothing more starts
	for _, n := range []string{"r2"} {
		if got := reinstallsSince(t, l, n, v3At); got != 0 {
			t.Errorf("%s was reinstalled %d times while r1's install failed", n, got)
		}
	}
	if out := run(t, "ip", "netns", "exec", l.lan, bootops, "status", "--server", "http://198.18.0.1:8080"); !strings.Contains(out, "halted: r1: ") {
		t.Errorf("bootops status does not show the halt:\n%s", out)
	}

	// The revert: the halt lifts, r1 (whose install failed) is reinstalled
	// with v2, and nobody else.
	revertAt := time.Now()
	profile("http://198.18.0.1:8081/v2.raw.gz", v2SHA)
	waitFor(t, "r1 back on v2", 15*time.Minute, func() bool { return allSync(l, "in sync") && halted(l) == "" })
	t.Logf("timing: revert → r1 reinstalled with v2, running and in sync: %s", time.Since(revertAt).Round(time.Second))
	for _, n := range []string{"r2"} {
		if got := reinstallsSince(t, l, n, v3At); got != 0 {
			t.Errorf("%s was reinstalled %d times after the revert", n, got)
		}
	}
	if got := reinstallsSince(t, l, "r1", revertAt); got != 1 {
		t.Errorf("r1 reinstalled %d times after the revert, want 1", got)
	}
}

// appendGzipMember writes src and then a second gzip member to dst and
// returns dst's sha256.
func appendGzipMember(t *testing.T, src, dst string) string {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	w := io.MultiWriter(out, h)
	if _, err := io.Copy(w, in); err != nil {
		t.Fatal(err)
	}
	z := gzip.NewWriter(w)
	z.Write([]byte(strings.Repeat("bootops e2e image v2\n", 24)))
	z.Close()
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// syncOf is a node's SYNC as the status API gives it.
func syncOf(l *lab, node string) string {
	m, _ := l.machine("lab/" + node)
	return m.Sync
}

// allSync: every node running, with this SYNC.
func allSync(l *lab, want string) bool {
	n := 0
	for _, m := range l.status().Nodes {
		if m.State == "running" && m.Sync == want {
			n++
		}
	}
	return n == len(rolloutVMs)
}

// halted is the rollout's halt ("" when none).
func halted(l *lab) string {
	for _, r := range l.status().Rollouts {
		if r.Halted != "" {
			return r.Halted
		}
	}
	return ""
}

func reinstallsSince(t *testing.T, l *lab, node string, since time.Time) int {
	n := 0
	for _, e := range timeline(t, l, "lab/"+node) {
		if e.Time.After(since) && strings.HasPrefix(e.Message, "rollout: reinstalling") {
			n++
		}
	}
	return n
}

// downtime is a node's reinstall: from its rollout's start to its report
// of running.
type downtime struct {
	node     string
	from, to time.Time
}

func (d downtime) overlaps(o downtime) bool { return d.from.Before(o.to) && o.from.Before(d.to) }
func (d downtime) String() string {
	return fmt.Sprintf("%s %s–%s", d.node, d.from.Format("15:04:05"), d.to.Format("15:04:05"))
}

// downtimes are the reinstalls since, from the nodes' timelines, by start.
func downtimes(t *testing.T, l *lab, since time.Time) []downtime {
	var out []downtime
	for _, n := range rolloutVMs {
		var d *downtime
		for _, e := range timeline(t, l, "lab/"+n) {
			switch {
			case !e.Time.After(since):
			case strings.HasPrefix(e.Message, "rollout: reinstalling"):
				d = &downtime{node: n, from: e.Time}
			case d != nil && e.State == "running":
				d.to = e.Time
				out = append(out, *d)
				d = nil
			}
		}
		if d != nil {
			t.Errorf("%s: a reinstall that never ended running", n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].from.Before(out[j].from) })
	return out
}
