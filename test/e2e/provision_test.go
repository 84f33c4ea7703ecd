//go:build e2e

package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The test OS image: a GPT disk with one ext4 partition (at 1 MiB, 32 MiB
// long) holding /etc/bootops-test-image.
const (
	imagePartStart = 1 << 20
	imagePartSize  = 32 << 20
	imageMarker    = "bootops test image v1\n"
)

// osImage builds the image as dir/test.raw.gz and returns its sha256 and
// the sha256 of what the agent writes and leaves as it is outside the
// partition: the protective MBR's boot code and the primary GPT's
// partition entries (the headers change: the agent moves the backup to
// the disk's end; the cloud-init action writes into the partition, so
// only its files can be checked there).
func osImage(t *testing.T, dir string) (gzSHA, rawSHA string) {
	t.Helper()
	gzSHA, b := buildImage(t, dir, "test.raw", imageSize, "start=2048, size=65536, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\n", nil)
	return gzSHA, outsidePartition(b)
}

// buildImage writes dir/NAME.gz: a GPT disk image of size bytes with the
// partitions of table (sfdisk's syntax), the test's ext4 partition at
// 1 MiB, and whatever fill (if not nil) writes into it then. It returns
// the file's sha256 and the raw image.
func buildImage(t *testing.T, dir, name string, size int64, table string, fill func([]byte)) (string, []byte) {
	t.Helper()
	root := filepath.Join(dir, "rootfs")
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/bootops-test-image"), []byte(imageMarker), 0o644)
	part := filepath.Join(dir, "part.img")
	run(t, "mkfs.ext4", "-q", "-F", "-L", "testroot", "-E", "root_owner=0:0", "-d", root, part, "32M")
	raw := filepath.Join(dir, name)
	f, err := os.Create(raw)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size) // room for the backup GPT
	f.Close()
	cmd := exec.Command("sfdisk", "-q", raw)
	cmd.Stdin = strings.NewReader("label: gpt\n" + table)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(raw)
	p, _ := os.ReadFile(part)
	copy(b[imagePartStart:], p)
	if fill != nil {
		fill(b)
	}
	os.WriteFile(raw, b, 0o644)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(b)
	zw.Close()
	os.WriteFile(filepath.Join(dir, name+".gz"), gz.Bytes(), 0o644)
	gs := sha256.Sum256(gz.Bytes())
	return hex.EncodeToString(gs[:]), b
}

// imageSize is the raw image's length.
const imageSize = imagePartStart + imagePartSize + 1<<20

func outsidePartition(b []byte) string {
	h := sha256.New()
	h.Write(b[:446])          // the MBR's boot code
	h.Write(b[1024 : 34*512]) // the primary partition entries (LBA 2–33)
	return hex.EncodeToString(h.Sum(nil))
}

// provisionRepo is a repository whose Micro-OS is the real one (Debian's
// kernel, the agent) and whose profile installs the test image.
func provisionRepo(t *testing.T, imageSHA string, nodes ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	out := filepath.Join(dir, "microos")
	run(t, bootops, "microos", "build", "--kernel", kernel(t), "--agent", agentBin, "-o", out)
	files := map[string]string{
		"microos/default.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\nkernel: {path: microos/vmlinuz}\ninitrd: {path: microos/initrd.img}\ncmdline: console=ttyS0,115200 panic=-1 no_timer_check\n",
		"profiles/test-os.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: test-os\nos: {type: immutable}\n" +
			"image: {url: \"http://198.18.0.1:8081/test.raw.gz\", sha256: " + imageSHA + ", compression: gz}\n" +
			"cloudInit: {hostname: e2e}\n",
		"sites/lab/site.yaml": proxySite,
	}
	writeRepo(dir, files, nodes)
	return dir
}

// disk makes a blank 256 MiB disk for a VM.
func disk(t *testing.T, l *lab, name string) string {
	p := filepath.Join(l.dir, name+".disk")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(256 << 20)
	f.Close()
	return p
}

func withDisk(path string) []string {
	return []string{"-drive", "file=" + path + ",if=virtio,format=raw"}
}

// checkDisk inspects a provisioned disk on the host: the written region's
// checksum, the partition table, the image's file and the cloud-init seed.
func checkDisk(t *testing.T, path, rawSHA string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if outsidePartition(b) != rawSHA {
		t.Errorf("%s: the written region's sha256 (outside the partition) is not the image's", path)
	}
	// The backup GPT moved to the disk's end: nothing for sfdisk to fix.
	if out := run(t, "sfdisk", "--verify", path); !strings.Contains(out, "No errors detected") || strings.Contains(out, "not on the end") {
		t.Errorf("%s: sfdisk --verify:\n%s", path, out)
	}
	table := run(t, "sfdisk", "-d", path)
	if !strings.Contains(table, "label: gpt") || !strings.Contains(table, "start=        2048, size=       65536") {
		t.Errorf("%s: partition table:\n%s", path, table)
	}
	part := path + ".p1"
	os.WriteFile(part, b[imagePartStart:imagePartStart+imagePartSize], 0o644)
	if got := run(t, "debugfs", "-R", "cat /etc/bootops-test-image", part); !strings.Contains(got, strings.TrimSpace(imageMarker)) {
		t.Errorf("%s: /etc/bootops-test-image: %q", path, got)
	}
	seed := run(t, "debugfs", "-R", "ls -l /var/lib/cloud/seed/nocloud", part)
	for _, f := range []string{"user-data", "meta-data"} {
		if !strings.Contains(seed, f) {
			t.Errorf("%s: cloud-init seed lacks %s:\n%s", path, f, seed)
		}
	}
}

// nodeState reads a machine's state from `bootops status -o json`.
func nodeState(l *lab, key string) (state, msg string) { return nodeStateAt(l.t, l, url4, key) }

// nodeStateAt is a machine's state and last message, asked at server.
func nodeStateAt(t *testing.T, l *lab, server, key string) (state, msg string) {
	doc := statusAt(t, l, server)
	for _, list := range []string{"nodes", "unknown"} {
		ms, _ := doc[list].([]any)
		for _, m := range ms {
			mm := m.(map[string]any)
			if mm["key"] == key {
				last, _ := mm["last"].(map[string]any)
				s, _ := mm["state"].(string)
				lm, _ := last["message"].(string)
				return s, lm
			}
		}
	}
	return "", ""
}

func waitState(t *testing.T, l *lab, key, want string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	var state, msg string
	for time.Now().Before(deadline) {
		if state, msg = nodeState(l, key); state == want {
			return msg
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("%s: state %q (%s), want %q after %s\nbootops log:\n%s", key, state, msg, want, d, tail(l.log("bootops"), 30))
	return ""
}

// Three VMs at once — by serial, by MAC, unknown — install the image,
// write the cloud-init seed, report and reboot; their next boot gets the
// local-disk script. The image server cuts the first download mid-stream,
// so one of them resumes with Range.
func TestProvisionThreeVMs(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081", "-drop-after", "65536")
	l.serve(provisionRepo(t, gzSHA, node("vm-serial", "serial: E2E-PROV-1"), node("vm-mac", `mac: "52:54:00:e2:10:02"`)))

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
		wg.Add(1)
		go func() {
			defer wg.Done()
			// -no-reboot: the agent's reboot ends QEMU.
			done := make(chan error, 1)
			go func() { done <- vm.cmd.Wait() }()
			select {
			case <-done:
				t.Logf("timing: ipxe chain (BIOS, plain HTTP, 3 VMs at once), VM start → provisioned and rebooted: %s (%s)", time.Since(start).Round(time.Second), vm.name)
			case <-time.After(8 * time.Minute):
				vm.cmd.Process.Kill()
			}
		}()
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
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out := run(t, "ip", "netns", "exec", l.lan, bootops, "logs", "lab/vm-serial", "--server", "http://198.18.0.1:8080")
		if strings.Contains(out, "served local-disk script: provisioned at generation 0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no local-disk script for the provisioned node:\n%s", tail(out, 20))
		}
		time.Sleep(2 * time.Second)
	}
	again.cmd.Process.Kill()
	_ = io.Discard
}

// serveAs starts bootops in the lab under a log name of its own (a
// restarted daemon keeps the first one's log).
func (l *lab) serveAs(name, repo string) *exec.Cmd {
	l.t.Helper()
	cmd := l.start(name, "ip", "netns", "exec", l.lan, bootops, "serve", "--open-reads", "--source", repo, "--state-dir", filepath.Join(l.dir, "state"),
		"--http-addr", "198.18.0.1:8080", "--tftp-addr", "198.18.0.1:69", "--interface", "br0", "--ipxe-dir", "/usr/lib/ipxe", "--log-format", "text")
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(l.log(name), "msg=serving") {
			return cmd
		}
		time.Sleep(200 * time.Millisecond)
	}
	l.t.Fatalf("bootops did not start:\n%s", l.log(name))
	return nil
}

func (l *lab) logs(key string) string {
	return run(l.t, "ip", "netns", "exec", l.lan, bootops, "logs", key, "--server", "http://198.18.0.1:8080")
}

// A wrong sha256 fails the node with the reason; the daemon killed with -9
// mid-workflow and restarted loses no event and the workflow finishes;
// raising reprovision reinstalls the node on its next boot.
func TestProvisionFailureCrashReprovision(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	// Slow downloads (about 10 s): time to kill the daemon mid-workflow.
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081", "-rate", "4000")
	repo := provisionRepo(t, gzSHA, node("vm-crash", "serial: E2E-CRASH"))
	os.WriteFile(filepath.Join(repo, "profiles/bad-os.yaml"), []byte("apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: bad-os\nos: {type: immutable}\n"+
		"image: {url: \"http://198.18.0.1:8081/test.raw.gz\", sha256: "+strings.Repeat("ab", 32)+", compression: gz}\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "sites/lab/nodes/bad.yaml"), []byte(strings.Replace(node("vm-bad", "serial: E2E-BAD"), "profile: test-os", "profile: bad-os", 1)), 0o644)
	daemon := l.serveAs("bootops", repo)

	crashDisk, badDisk := disk(t, l, "crash"), disk(t, l, "bad")
	crash := l.vm("crash", "52:54:00:e2:20:01", append(withDisk(crashDisk), "-smbios", "type=1,serial=E2E-CRASH")...)
	bad := l.vm("bad", "52:54:00:e2:20:02", append(withDisk(badDisk), "-smbios", "type=1,serial=E2E-BAD")...)

	// Mid-workflow: the image is downloading. Kill -9, restart.
	deadline := time.Now().Add(4 * time.Minute)
	for !strings.Contains(l.logs("lab/vm-crash"), "started 2/4 image-to-disk") {
		if time.Now().After(deadline) {
			t.Fatalf("vm-crash never started its image:\n%s\n%s", l.logs("lab/vm-crash"), tail(mustRead(crash.console), 20))
		}
		time.Sleep(time.Second)
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
	var evs []struct {
		Kind string
		Seq  uint64
	}
	if err := json.Unmarshal([]byte(run(t, "ip", "netns", "exec", l.lan, bootops, "logs", "lab/vm-crash", "-o", "json", "--server", "http://198.18.0.1:8080")), &evs); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
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

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(2 * time.Second)
	}
}

func mustRead(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
