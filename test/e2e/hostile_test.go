//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/test/procstat"
)

// attacker adds a host to the lab's LAN with the given addresses (in
// 198.18.0.0/24), in a namespace of its own.
func (l *lab) attacker(ns string, first, last int) {
	l.t.Helper()
	run(l.t, "ip", "netns", "add", ns)
	l.t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run(l.t, "ip", "-n", l.lan, "link", "add", "vatk", "type", "veth", "peer", "name", "eth0", "netns", ns)
	run(l.t, "ip", "-n", l.lan, "link", "set", "vatk", "master", "br0", "up")
	for a := first; a <= last; a++ {
		run(l.t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("198.18.0.%d/24", a), "dev", "eth0")
	}
	run(l.t, "ip", "-n", ns, "link", "set", "eth0", "up")
	run(l.t, "ip", "-n", ns, "link", "set", "lo", "up")
}

// Nothing on the LAN can wipe a disk or starve the daemon: one VM is
// provisioned; while a second installs, a host on the LAN floods the
// daemon from 50 addresses with 50,000 made-up machines (script requests,
// check-ins with the tokens they got and with forged ones), holds 1,000
// idle keep-alive connections and 200 bodies sent a byte at a time, against
// a daemon limited to 1,024 open files. Afterwards the provisioned VM
// boots from its disk, the second finishes, both timelines are whole, and
// the daemon's memory and open files stayed bounded; a probe from another
// address was answered throughout.
func TestHostileLAN(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	l.vms(1)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")
	repo := provisionRepo(t, images4, gzSHA, "hostile-lan", nil)
	args := []string{"prlimit", "--nofile=1024:1024", "ip", "netns", "exec", l.lan, bootops, "serve", "--open-reads", "--source", repo, "--state-dir", filepath.Join(l.dir, "state"),
		"--http-addr", "198.18.0.1:8080", "--tftp-addr", "198.18.0.1:69", "--interface", "br0", "--ipxe-dir", "/usr/lib/ipxe", "--log-format", "text",
		"--unknown-max", "1000"}
	daemon := l.start("bootops", args...)
	waitFor(t, "the daemon to serve", 30*time.Second, func() bool { return strings.Contains(l.log("bootops"), "msg=serving") })
	pid := daemon.Process.Pid
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != "bootops" {
		t.Fatalf("pid %d is %q, not the daemon", pid, comm)
	}
	if limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid)); !strings.Contains(string(limits), "Max open files            1024") {
		t.Fatalf("the daemon's open-files limit:\n%s", limits)
	}

	// vm-done installs first.
	start := time.Now()
	doneDisk, instDisk := disk(t, l, "done"), disk(t, l, "inst")
	done := l.vm("done", "52:54:00:e2:50:01", append(withDisk(doneDisk), "-smbios", "type=1,serial=E2E-DONE")...)
	done.ended(t, 8*time.Minute)
	waitState(t, l, "lab/vm-done", "provisioned", 30*time.Second)
	t.Logf("timing: vm-done provisioned in %s", time.Since(start).Round(time.Second))
	before := timeline(t, l, "lab/vm-done")
	idleRSS, _ := procstat.Mem(pid)
	idleFDs := procstat.OpenFiles(pid)

	// vm-inst installs while the LAN attacks.
	flood := filepath.Join(l.dir, "lanflood")
	if out, err := exec.Command("go", "build", "-o", flood, "./lanflood").CombinedOutput(); err != nil {
		t.Fatalf("build lanflood: %v\n%s", err, out)
	}
	atk := "bo-atk-" + labID()
	l.attacker(atk, 200, 250)
	inst := l.vm("inst", "52:54:00:e2:50:02", append(withDisk(instDisk), "-smbios", "type=1,serial=E2E-INST")...)
	peak := procstat.Peak(pid, 500*time.Millisecond) // the daemon while it is attacked
	attackStart := time.Now()
	out, err := exec.Command("ip", "netns", "exec", atk, flood, "-server", "http://198.18.0.1:8080", "-sources", "198.18.0.200-198.18.0.249",
		"-identities", "50000", "-idle", "1000", "-slow", "200", "-hold", "60s", "-deadline", "8m",
		"-probe-source", "198.18.0.250", "-probe", "/ipxe?serial=E2E-DONE&site=lab").Output()
	peakRSS, peakFDs := peak()
	if err != nil {
		t.Fatalf("lanflood: %v\n%s", err, out)
	}
	var sum struct {
		Scripts, CheckIns, Forged                          map[string]int
		Errors, IdleOpened, IdleClosedByServer, SlowOpened int
		SlowClosedByServer, Probes, ProbeFailures          int
		SlowLongest, ProbeMax, ProbeMedian, Elapsed        string
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		t.Fatalf("lanflood's summary: %v\n%s", err, out)
	}
	t.Logf("attack (%s): %s", time.Since(attackStart).Round(time.Second), out)
	rss, _ := procstat.Mem(pid)
	t.Logf("daemon: RSS idle %d kB, peak under attack %d kB, after %d kB; open files idle %d, peak %d (limit 1024)", idleRSS, peakRSS, rss, idleFDs, peakFDs)

	// What the attack met.
	requests := 0
	for _, n := range sum.Scripts {
		requests += n
	}
	if requests+sum.Errors < 50000 || sum.Scripts["429"] < 40000 {
		t.Errorf("scripts: %v (%d errors): the flood was not turned away at the door", sum.Scripts, sum.Errors)
	}
	if sum.Forged["200"] != 0 || sum.Forged["401"] == 0 {
		t.Errorf("check-ins with forged tokens: %v", sum.Forged)
	}
	if sum.SlowClosedByServer < sum.SlowOpened || sum.SlowOpened == 0 {
		t.Errorf("slow bodies: %d of %d cut off by the server", sum.SlowClosedByServer, sum.SlowOpened)
	}
	if sum.Probes == 0 || sum.ProbeFailures != 0 {
		t.Errorf("the probe from another address: %d of %d failed", sum.ProbeFailures, sum.Probes)
	}
	if peakFDs >= 1024 || strings.Contains(l.log("bootops"), "too many open files") {
		t.Errorf("the daemon ran out of file descriptors (peak %d)", peakFDs)
	}
	if peakRSS > 2*idleRSS {
		t.Errorf("RSS under attack %d kB, more than twice idle (%d kB)", peakRSS, idleRSS)
	}

	// vm-inst finishes; vm-done boots from its disk; nothing of either
	// was lost or touched by the flood.
	inst.ended(t, 8*time.Minute)
	waitState(t, l, "lab/vm-inst", "provisioned", time.Minute)
	checkDisk(t, instDisk, rawSHA)
	again := l.vm("done2", "52:54:00:e2:50:01", append(withDisk(doneDisk), "-smbios", "type=1,serial=E2E-DONE")...)
	waitFor(t, "vm-done's local-disk script after the attack", 3*time.Minute, func() bool {
		evs := timeline(t, l, "lab/vm-done")
		for _, e := range evs[len(before):] {
			// The probe (198.18.0.250) asked as vm-done too: the VM's own
			// request comes from the address dnsmasq gave it.
			if e.IP != "198.18.0.250" && strings.Contains(e.Message, "served local-disk script: provisioned at generation 0") {
				return true
			}
		}
		return false
	})
	again.cmd.Process.Kill()
	after := timeline(t, l, "lab/vm-done")
	for i, e := range before {
		if !sameEvent(after[i], e) {
			t.Fatalf("vm-done's timeline changed at %d: %+v, was %+v", i, after[i], e)
		}
	}
	for _, m := range messages(after[len(before):]) {
		if strings.Contains(m, "Micro-OS") || strings.Contains(m, "wipe") {
			t.Errorf("vm-done was offered a reinstall after the attack: %q", m)
		}
	}
	inTimeline := strings.Join(messages(timeline(t, l, "lab/vm-inst")), "\n")
	for _, want := range []string{"agent checked in", "done 1/4 wipe-disk", "done 2/4 image-to-disk", "provisioned (generation 0)"} {
		if !strings.Contains(inTimeline, want) {
			t.Errorf("vm-inst's timeline lacks %q", want)
		}
	}
	checkDisk(t, doneDisk, rawSHA)
	metrics := run(t, "ip", "netns", "exec", l.lan, "busybox", "wget", "-q", "-O", "-", "http://198.18.0.1:8080/metrics")
	for _, m := range []string{"bootops_newcomers_refused_total", "bootops_http_conns_refused_total", "bootops_unknown_machines"} {
		t.Logf("%s", grepLines(metrics, m))
	}
}
