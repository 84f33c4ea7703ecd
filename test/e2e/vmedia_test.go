//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVirtualMedia: a node whose Redfish BMC boots it by virtual media
// (bmc.boot: virtual-media), on a LAN where nothing answers a network
// boot. The BMC is test/redfishvm's, in front of a SeaBIOS VM it runs
// and drives over QMP. power: auto has the daemon insert the node's ISO
// (GET /media/lab/nodes/vm-vmedia/media.iso) through bmclib, set a
// one-time boot from the CD and power the VM on; the VM boots the ISO's
// Micro-OS, installs, and once it is provisioned the CD is ejected. A
// raised reprovision reinstalls it the same way.
func TestVirtualMedia(t *testing.T) {
	t.Parallel()
	start := time.Now()
	l := newLab(t, true)
	l.vms(1)
	state := filepath.Join(l.dir, "state")
	run(t, bootops, "ca", "init", "--host", "198.18.0.1", "--state-dir", state)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")
	repo := filepath.Join(t.TempDir(), "repo")
	run(t, bootops, "microos", "build", "--kernel", kernel(t), "--agent", agentBin, "-o", filepath.Join(repo, "microos"))
	writeRepo(t, repo, vars{"ImageSHA": gzSHA, "Reprovision": "0"}, "vmedia")
	secrets := filepath.Join(l.dir, "secrets")
	os.MkdirAll(secrets, 0o700)
	os.WriteFile(filepath.Join(secrets, "vmedia-bmc"), []byte("root:calvin\nallow: 198.18.0.5\n"), 0o600)

	// The BMC at 198.18.0.5, its VM's NIC on the lab's bridge; the VM is
	// off until the BMC is told to power it on. No -no-reboot: the BMC
	// takes a boot override with a reset of the paused VM, which would
	// end it.
	run(t, "ip", "-n", l.lan, "addr", "add", "198.18.0.5/24", "dev", "br0")
	run(t, "ip", "-n", l.lan, "tuntap", "add", "dev", "tap-vmedia", "mode", "tap")
	run(t, "ip", "-n", l.lan, "link", "set", "tap-vmedia", "master", "br0", "up")
	vmDisk := disk(t, l, "vmedia")
	console := filepath.Join(l.dir, "vm-vmedia.console")
	bmcDir, err := os.MkdirTemp("", "rfvm-") // a short path: QMP's socket is in it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bmcDir) })
	l.start("bmc", "ip", "netns", "exec", l.lan, redfishVMD, "-addr", "198.18.0.5:8443", "-dir", bmcDir, "-console", console, "-hdd", "disk0", "--",
		"-accel", "tcg", "-m", "512", "-nographic", "-monitor", "none",
		"-netdev", "tap,id=n0,ifname=tap-vmedia,script=no,downscript=no", "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:e4:00:01,romfile=",
		"-drive", "file="+vmDisk+",if=none,id=d0,format=raw", "-device", "virtio-blk-pci,drive=d0,id=disk0,bootindex=1")
	l.started("bmc", "serving on", 20*time.Second)
	l.serve(repo, "--https-addr", "198.18.0.1:8443", "--secrets-dir", secrets, "--power-interval", "3s", "--bmc-timeout", "20s", "--bmc-insecure-tls-allowed")

	waitState(t, l, "lab/vm-vmedia", "provisioned", 10*time.Minute)
	t.Logf("timing: virtual media, daemon start → provisioned: %s", time.Since(start).Round(time.Second))
	media := "http://198.18.0.1:8080/media/lab/nodes/vm-vmedia/media.iso"
	waitLog(t, l, "bmc", "VirtualMedia.EjectMedia", 2*time.Minute)
	checkDisk(t, vmDisk, rawSHA)
	logs := l.logs("lab/vm-vmedia")
	for _, want := range []string{"power: virtual CD " + media + " inserted (asked by power: auto)", "power: set next boot cdrom (once)",
		"power: booted its virtual medium for generation 0 (a new node)", "[provisioned] provisioned (generation 0)",
		"power: virtual CD ejected: the node is provisioned at generation 0"} {
		if !strings.Contains(logs, want) {
			t.Errorf("vm-vmedia's timeline lacks %q:\n%s", want, logs)
		}
	}
	if m, _ := l.machine("lab/vm-vmedia"); m.Boot != "bios, media, tls" {
		t.Errorf("vm-vmedia booted %q, want bios, media, tls", m.Boot)
	}
	bmc := l.log("bmc")
	for _, want := range []string{"VirtualMedia.InsertMedia " + media, "BootSourceOverrideTarget=Cd", "Reset On (boot Cd first)", "VirtualMedia.EjectMedia"} {
		if !strings.Contains(bmc, want) {
			t.Errorf("the BMC was not told %q:\n%s", want, bmc)
		}
	}
	if c := mustRead(console); !strings.Contains(c, "ISOLINUX") || !strings.Contains(c, "bootops-microos: starting bootops-agent") {
		t.Errorf("the VM did not boot the ISO's Micro-OS:\n%s", c)
	}

	// A reinstall: reprovision raised in Git, the same way again.
	again := time.Now()
	writeRepo(t, repo, vars{"ImageSHA": gzSHA, "Reprovision": "1"}, "vmedia")
	waitLogs(t, l, "lab/vm-vmedia", "power: virtual CD ejected: the node is provisioned at generation 1", 10*time.Minute)
	t.Logf("timing: virtual media, reprovision raised → provisioned again and ejected: %s", time.Since(again).Round(time.Second))
	if logs := l.logs("lab/vm-vmedia"); !strings.Contains(logs, "power: booted its virtual medium for generation 1 (reprovision raised to 1)") {
		t.Errorf("the reinstall did not go by virtual media:\n%s", logs)
	}
	if n := strings.Count(l.log("bmc"), "VirtualMedia.InsertMedia "+media); n != 2 {
		t.Errorf("the BMC inserted the medium %d times, want 2:\n%s", n, l.log("bmc"))
	}
	t.Logf("timing: TestVirtualMedia %s", time.Since(start).Round(time.Second))
}

// waitLog waits until the log of the lab's process name shows want.
func waitLog(t *testing.T, l *lab, name, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(l.log(name), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s's log lacks %q after %s:\n%s", name, want, d, l.log(name))
		}
		time.Sleep(time.Second)
	}
}

// waitLogs waits until key's timeline shows want.
func waitLogs(t *testing.T, l *lab, key, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(l.logs(key), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s's timeline lacks %q after %s:\n%s", key, want, d, l.logs(key))
		}
		time.Sleep(2 * time.Second)
	}
}
