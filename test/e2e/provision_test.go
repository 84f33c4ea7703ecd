//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// Three VMs at once — by serial, by MAC, unknown — install the image,
// write the cloud-init seed, report and reboot; their next boot gets the
// local-disk script. The image server cuts the first download mid-stream,
// so one of them resumes with Range.
func TestProvisionThreeVMs(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	l.vms(3)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081", "-drop-after", "65536")
	l.serve(provisionRepo(t, images4, gzSHA, "provision-three-vms", nil))

	vms := []struct{ name, mac, serial, key string }{
		{"p-serial", "52:54:00:e2:10:01", "E2E-PROV-1", "lab/vm-serial"},
		{"p-mac", "52:54:00:e2:10:02", "E2E-PROV-2", "lab/vm-mac"},
		{"p-unknown", "52:54:00:e2:10:03", "E2E-PROV-3", "mac:52:54:00:e2:10:03"},
	}
	disks := map[string]string{}
	var wg sync.WaitGroup
	start := time.Now()
	for _, v := range vms {
		disks[v.name] = disk(t, l, v.name)
		vm := l.vm(v.name, v.mac, append(withDisk(disks[v.name]), "-smbios", "type=1,serial="+v.serial)...)
		wg.Go(func() {
			// -no-reboot: the agent's reboot ends QEMU.
			if vm.exit(8 * time.Minute) {
				t.Logf("timing: ipxe chain (BIOS, plain HTTP, 3 VMs at once), VM start → provisioned and rebooted: %s (%s)", time.Since(start).Round(time.Second), vm.name)
			}
		})
	}
	wg.Wait()
	for _, v := range vms {
		waitState(t, l, v.key, "provisioned", 30*time.Second)
		out := run(t, "ip", "netns", "exec", l.lan, bootops, "logs", v.key, "--server", "http://198.18.0.1:8080")
		for _, want := range []string{"[microos] agent checked in", "[provisioning] started 2/4 image-to-disk", "[provisioned] provisioned (generation 0)"} {
			if !strings.Contains(out, want) && !(v.key[0] == 'm' && strings.Contains(want, "checked in")) {
				t.Errorf("%s: the timeline lacks %q:\n%s", v.name, want, out)
			}
		}
		checkDisk(t, disks[v.name], rawSHA)
	}
	if log := l.log("images"); !strings.Contains(log, "dropped /test.raw.gz") || !strings.Contains(log, `range="bytes=`) {
		t.Errorf("no resumed download in the image server's log:\n%s", log)
	}
	// The next boot of a provisioned node is from its disk.
	again := l.vm("p-serial2", vms[0].mac, append(withDisk(disks["p-serial"]), "-smbios", "type=1,serial="+vms[0].serial)...)
	var out string
	if !testutil.Poll(3*time.Minute, every, func() bool {
		out = run(t, "ip", "netns", "exec", l.lan, bootops, "logs", "lab/vm-serial", "--server", "http://198.18.0.1:8080")
		return strings.Contains(out, "served local-disk script: provisioned at generation 0")
	}) {
		t.Fatalf("no local-disk script for the provisioned node:\n%s", testutil.Tail(out, 20))
	}
	again.cmd.Process.Kill()
}

// A wrong sha256 fails the node with the reason; the daemon killed with -9
// mid-workflow and restarted loses no event and the workflow finishes;
// raising reprovision reinstalls the node on its next boot.
func TestProvisionFailureCrashReprovision(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	l.vms(2)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	// Slow downloads (about 10 s): time to kill the daemon mid-workflow.
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081", "-rate", "4000")
	repo := provisionRepo(t, images4, gzSHA, "provision-crash", nil)
	daemon := l.serveAs("bootops", repo)

	crashDisk, badDisk := disk(t, l, "crash"), disk(t, l, "bad")
	crash := l.vm("crash", "52:54:00:e2:20:01", append(withDisk(crashDisk), "-smbios", "type=1,serial=E2E-CRASH")...)
	bad := l.vm("bad", "52:54:00:e2:20:02", append(withDisk(badDisk), "-smbios", "type=1,serial=E2E-BAD")...)

	// Mid-workflow: the image is downloading. Kill -9, restart.
	if !testutil.Poll(4*time.Minute, time.Second, func() bool { return strings.Contains(l.logs("lab/vm-crash"), "started 2/4 image-to-disk") }) {
		t.Fatalf("vm-crash never started its image:\n%s\n%s", l.logs("lab/vm-crash"), testutil.Tail(mustRead(crash.console), 20))
	}
	daemon.Process.Signal(os.Kill)
	daemon.Wait()
	time.Sleep(3 * time.Second) // the agents' events pile up unacknowledged
	l.serveAs("bootops-restarted", repo)

	waitState(t, l, "lab/vm-crash", "provisioned", 3*time.Minute)
	checkDisk(t, crashDisk, rawSHA)
	// No event lost: the agent numbers its events one by one, so the
	// stored ones are a run without gaps, from check-in to provisioned.
	var seqs []uint64
	for _, e := range timeline(t, l, "lab/vm-crash") {
		if e.Seq != 0 {
			seqs = append(seqs, e.Seq)
		}
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Errorf("agent events %d and %d stored next to each other: a gap (or a duplicate)", seqs[i-1], seqs[i])
		}
	}
	if len(seqs) < 8 {
		t.Errorf("only %d agent events stored", len(seqs))
	}
	for _, want := range []string{"started 1/4 wipe-disk", "done 2/4 image-to-disk", "done 3/4 cloud-init", "provisioned (generation 0)"} {
		if !strings.Contains(l.logs("lab/vm-crash"), want) {
			t.Errorf("vm-crash's timeline lacks %q", want)
		}
	}

	// The wrong sha256: failed, with the reason; not provisioned.
	msg := waitState(t, l, "lab/vm-bad", "failed", 3*time.Minute)
	if !strings.Contains(msg, "sha256 mismatch") {
		t.Errorf("vm-bad failed with %q", msg)
	}
	bad.cmd.Process.Kill()
	crash.cmd.Wait() // it rebooted: QEMU ended (-no-reboot)

	// reprovision raised: the next boot reinstalls, at generation 1.
	n := filepath.Join(repo, "sites/lab/nodes/n0.yaml")
	b, _ := os.ReadFile(n)
	os.WriteFile(n, append(b, "reprovision: 1\n"...), 0o644)
	time.Sleep(2 * time.Second) // the daemon compiles the edit
	again := l.vm("crash2", "52:54:00:e2:20:01", append(withDisk(crashDisk), "-smbios", "type=1,serial=E2E-CRASH")...)
	waitFor(t, "reinstalled at generation 1", 4*time.Minute, func() bool { return strings.Contains(l.logs("lab/vm-crash"), "provisioned (generation 1)") })
	again.cmd.Process.Kill()
}
