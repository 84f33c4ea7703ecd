//go:build e2e

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// debianImage is a real bootable Debian 12 image (BIOS and UEFI, cloud-init)
// that test/image/build-image.sh makes from Debian's packages: built once
// and kept under the user's cache directory, keyed by the script's hash.
// It returns the folder holding debian.raw.gz and that file's sha256.
func debianImage(t *testing.T) (dir, gzSHA string) {
	t.Helper()
	script, err := filepath.Abs("../image/build-image.sh")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(cache, "bootops", "debian-image", hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "debian.raw.gz")); err != nil {
		start := time.Now()
		tmp := dir + fmt.Sprintf(".tmp-%d", os.Getpid())
		os.RemoveAll(tmp)
		cmd := exec.Command("bash", script, tmp)
		log, _ := os.Create(filepath.Join(t.TempDir(), "build-image.log"))
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			log.Seek(0, io.SeekStart)
			out, _ := io.ReadAll(log)
			t.Fatalf("build the Debian test image (%s): %v\n%s", script, err, tail(string(out), 40))
		}
		os.Remove(filepath.Join(tmp, "debian.raw")) // the gzip is what is served
		os.RemoveAll(dir)
		if err := os.Rename(tmp, dir); err != nil {
			t.Fatal(err)
		}
		t.Logf("timing: built the Debian test image in %s (cached in %s)", time.Since(start).Round(time.Second), dir)
	}
	f, err := os.Open(filepath.Join(dir, "debian.raw.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return dir, hex.EncodeToString(h.Sum(nil))
}

// bootDisk is a VM's disk, booted after its NIC (bootindex: the firmware
// tries the network first, then this disk).
func bootDisk(path string) []string {
	return []string{"-drive", "file=" + path + ",if=none,id=d0,format=raw", "-device", "virtio-blk-pci,drive=d0,bootindex=2"}
}

// A BIOS VM installs a real Debian, reboots into it from its disk (the
// boot plane sends it on from PXE), cloud-init sets the hostname from the
// node's seed and the report script reports: running. A reboot keeps it
// running, without a reinstall; raising reprovision reinstalls it, and it
// is running again at generation 1. (UEFI: OVMF opens its setup menu when
// iPXE hands back instead of trying the disk; not solved yet.)
func TestRunningBIOS(t *testing.T) {
	imgDir, gzSHA := debianImage(t)
	l := newLab(t, true)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")
	repo := provisionRepo(t, gzSHA)
	os.WriteFile(filepath.Join(repo, "profiles/debian.yaml"), []byte("apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: debian\nos: {type: mutable}\n"+
		"image: {url: \"http://198.18.0.1:8081/debian.raw.gz\", sha256: "+gzSHA+", compression: gz}\n"+
		"workflow:\n  - {action: wipe-disk}\n  - {action: image-to-disk}\n  - {action: cloud-init, partition: 2}\n  - {action: reboot}\n"), 0o644)
	nodes := map[string]string{"vm-bios": "52:54:00:e2:40:01"}
	os.MkdirAll(filepath.Join(repo, "sites/lab/nodes"), 0o755)
	for name, mac := range nodes {
		os.WriteFile(filepath.Join(repo, "sites/lab/nodes", name+".yaml"), []byte(strings.Replace(node(name, `mac: "`+mac+`"`), "test-os", "debian", 1)+
			"hostname: e2e-"+strings.TrimPrefix(name, "vm-")+"\n"), 0o644)
	}
	l.serve(repo)

	disks := map[string]string{}
	for name := range nodes {
		disks[name] = filepath.Join(l.dir, name+".disk")
		f, _ := os.Create(disks[name])
		f.Truncate(3 << 30) // the image is 1.1 GiB: the root partition grows into the rest
		f.Close()
	}
	boot := func(round string) *vm {
		return l.boot("bios"+round, nodes["vm-bios"], ",bootindex=1", bootDisk(disks["vm-bios"])...)
	}
	start := time.Now()
	bios := boot("1")
	waitVMs(10*time.Minute, bios) // the agent's reboot ends QEMU (-no-reboot)
	for name := range nodes {
		waitState(t, l, "lab/"+name, "provisioned", time.Minute)
	}
	downloads := strings.Count(l.log("images"), "GET /debian.raw.gz")
	t.Logf("timing: BIOS, power-on → provisioned: %s", time.Since(start).Round(time.Second))

	// From the disk: the installed OS, its cloud-init, its report. On the
	// way, the nodes are provisioned, then running: never sent back.
	bios = boot("2")
	seen := map[string]map[string]bool{"vm-bios": {}}
	waitFor(t, "the node running", 8*time.Minute, func() bool {
		done := true
		for name := range nodes {
			s, _ := nodeState(l, "lab/"+name)
			seen[name][s] = true
			done = done && s == "running"
		}
		return done
	})
	t.Logf("timing: BIOS, power-on → running (install, reboot, first boot of the installed OS): %s", time.Since(start).Round(time.Second))
	for name, v := range map[string]*vm{"vm-bios": bios} {
		if len(seen[name]) != 2 || !seen[name]["provisioned"] {
			t.Errorf("%s went through %v between its install and its report; want provisioned, then running", name, seen[name])
		}
		host := "e2e-" + strings.TrimPrefix(name, "vm-")
		v.wait(t, host+" login:", 2*time.Minute)
		m := l.machine("lab/" + name)
		if m["hostname"] != host || !strings.HasPrefix(fmt.Sprint(m["kernel"]), "6.") {
			t.Errorf("%s: hostname %v, kernel %v in the status", name, m["hostname"], m["kernel"])
		}
		if log := l.logs("lab/" + name); !strings.Contains(log, "served local-disk script") {
			t.Errorf("%s: its boot from disk is not on its timeline:\n%s", name, log)
		}
	}
	bios.cmd.Process.Kill()
	waitVMs(time.Minute, bios)
	checkGrown(t, disks["vm-bios"])

	// Again: running, a second report, no reinstall, no download.
	reports := strings.Count(l.logs("lab/vm-bios"), "running: hostname")
	bios = boot("3")
	waitFor(t, "vm-bios's second report", 6*time.Minute, func() bool { return strings.Count(l.logs("lab/vm-bios"), "running: hostname") > reports })
	for name := range nodes {
		if s, _ := nodeState(l, "lab/"+name); s != "running" {
			t.Errorf("%s after a reboot: %s, want running", name, s)
		}
		if n := strings.Count(l.logs("lab/"+name), "started 2/4 image-to-disk"); n != 1 {
			t.Errorf("%s: installed %d times", name, n)
		}
	}
	if got := strings.Count(l.log("images"), "GET /debian.raw.gz"); got != downloads {
		t.Errorf("the image was downloaded again: %d downloads, %d before", got, downloads)
	}
	bios.cmd.Process.Kill()
	waitVMs(time.Minute, bios)

	// Git raises vm-bios's reprovision: reinstalled, running at generation 1.
	n := filepath.Join(repo, "sites/lab/nodes/vm-bios.yaml")
	b, _ := os.ReadFile(n)
	os.WriteFile(n, append(b, "reprovision: 1\n"...), 0o644)
	time.Sleep(3 * time.Second) // the daemon compiles the edit
	again := l.boot("bios4", nodes["vm-bios"], ",bootindex=1", bootDisk(disks["vm-bios"])...)
	waitVMs(10*time.Minute, again)
	waitState(t, l, "lab/vm-bios", "provisioned", time.Minute)
	again = l.boot("bios5", nodes["vm-bios"], ",bootindex=1", bootDisk(disks["vm-bios"])...)
	waitFor(t, "vm-bios running at generation 1", 8*time.Minute, func() bool {
		log := l.logs("lab/vm-bios")
		i := strings.Index(log, "provisioned (generation 1)")
		return i >= 0 && strings.Contains(log[i:], "running: hostname e2e-bios") && strings.Contains(log[i:], "instance-id vm-bios-1")
	})
	again.cmd.Process.Kill()
}

// checkGrown reads the installed disk's table: the backup GPT at its end
// and the root partition grown into the space the image did not cover.
func checkGrown(t *testing.T, disk string) {
	t.Helper()
	out := run(t, "sfdisk", "-d", disk)
	if !strings.Contains(out, "last-lba: 6291422") {
		t.Errorf("%s: the GPT does not reach the disk's end:\n%s", disk, out)
	}
	var size int64
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "name=\"root\"") {
			fmt.Sscanf(l[strings.Index(l, "size=")+5:], "%d", &size)
		}
	}
	if size*512 < 2<<30 {
		t.Errorf("%s: the root partition is %d MiB: not grown into the 3 GiB disk\n%s", disk, size>>11, out)
	}
}
