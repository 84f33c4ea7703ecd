//go:build e2e

package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
// the sha256 of the raw image outside its partition (the GPT and the gap
// before the partition, the backup GPT after it): the cloud-init action
// writes into the partition, so only its files can be checked there.
func osImage(t *testing.T, dir string) (gzSHA, rawSHA string) {
	t.Helper()
	root := filepath.Join(dir, "rootfs")
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/bootops-test-image"), []byte(imageMarker), 0o644)
	part := filepath.Join(dir, "part.img")
	run(t, "mkfs.ext4", "-q", "-F", "-L", "testroot", "-E", "root_owner=0:0", "-d", root, part, "32M")
	raw := filepath.Join(dir, "test.raw")
	f, err := os.Create(raw)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(imageSize) // room for the backup GPT
	f.Close()
	cmd := exec.Command("sfdisk", "-q", raw)
	cmd.Stdin = strings.NewReader("label: gpt\nstart=2048, size=65536, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	p, _ := os.ReadFile(part)
	f, _ = os.OpenFile(raw, os.O_WRONLY, 0)
	f.WriteAt(p, imagePartStart)
	f.Close()
	b, _ := os.ReadFile(raw)
	rs := outsidePartition(b, len(b))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(b)
	zw.Close()
	os.WriteFile(filepath.Join(dir, "test.raw.gz"), gz.Bytes(), 0o644)
	gs := sha256.Sum256(gz.Bytes())
	return hex.EncodeToString(gs[:]), rs
}

// imageSize is the raw image's length.
const imageSize = imagePartStart + imagePartSize + 1<<20

func outsidePartition(b []byte, n int) string {
	h := sha256.New()
	h.Write(b[:imagePartStart])
	h.Write(b[imagePartStart+imagePartSize : n])
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
		"microos/default.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\nkernel: {path: microos/vmlinuz}\ninitrd: {path: microos/initrd.img}\ncmdline: console=ttyS0,115200 panic=-1\n",
		"profiles/test-os.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: test-os\nos: {type: immutable}\n" +
			"image: {url: \"http://198.18.0.1:8081/test.raw.gz\", sha256: " + imageSHA + ", compression: gz}\n" +
			"cloudInit: {hostname: e2e}\n",
		"sites/lab/site.yaml": proxySite,
	}
	for i, n := range nodes {
		files[fmt.Sprintf("sites/lab/nodes/n%d.yaml", i)] = n
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body), 0o644)
	}
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
	if outsidePartition(b, imageSize) != rawSHA {
		t.Errorf("%s: the written region's sha256 (outside the partition) is not the image's", path)
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
func nodeState(l *lab, key string) (state, msg string) {
	doc := l.status()
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
