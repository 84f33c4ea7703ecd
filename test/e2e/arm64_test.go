//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// A 64-bit ARM machine provisions like an x86 one: QEMU's virt machine
// (cortex-a57 under TCG) with AAVMF, Debian's UEFI for it, PXE-boots
// through bootops, the LAN's DHCP server (reservation mode: GRUB takes its
// network from the DHCP server's answer, and a proxy's goes unread): the
// answer gives its reserved address and names Debian's signed arm64 shim
// (shimaa64.efi) for its architecture type (11), shim loads grubaa64.efi,
// GRUB the node's config over TFTP, all under Secure Boot with the
// Microsoft keys (shim checks GRUB and Debian's kernel), then the arm64
// Micro-OS (Debian's arm64 kernel, busybox and tools, the agent
// cross-compiled) installs the Debian arm64 image (test/image, arm64.sh)
// on its disk. Powered on again, network first, bootops' GRUB script sends
// it to its disk, where shimaa64 at the removable path starts Debian
// (Secure Boot still on), whose cloud-init and report make it running;
// powered on once more, the network is still tried first: nothing the
// install or the OS did put the disk ahead of it, so a reinstall by
// rollout works. Its timeline shows the arm64 path; its agent checked in
// as arm64. A mixed site: an x86_64 UEFI VM installs from the same daemon
// at the same time, by its own chain (ipxe.efi, the x86 Micro-OS) — the
// small test image in make test; with the tag armbench
// (test/bench/arm64.sh) the Debian amd64 image, run to running, so
// power-on to running is timed for both families in one run; then an x86
// VM with the MAC of a node registered arm64 is refused, the reason on
// that node's timeline.
func TestARM64(t *testing.T) {
	t.Parallel()
	began := time.Now()
	root := arm64Root(t)
	l := newLab(t, false)
	agent := filepath.Join(l.dir, "bootops-agent-arm64")
	build := exec.Command("go", "build", "-trimpath", "-o", agent, "../../cmd/bootops-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH=arm64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the arm64 agent: %v\n%s", err, out)
	}
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	// a1: the Debian arm64 image. x1: the test image in make test, with
	// armbench the Debian amd64 image.
	armDir, armSHA := debianImageARM64(t)
	armProfile, x86Profile, x86SHA := "arm-debian", "test-os", gzSHA
	os.Symlink(filepath.Join(armDir, "debian.raw.gz"), filepath.Join(imgDir, "debian-arm64.raw.gz"))
	if x86Running {
		x86Dir, sum := debianImage(t)
		x86Profile, x86SHA = "x86-debian", sum
		os.Symlink(filepath.Join(x86Dir, "debian.raw.gz"), filepath.Join(imgDir, "debian-amd64.raw.gz"))
	}
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")
	repo := filepath.Join(l.dir, "repo")
	kernels, _ := filepath.Glob(filepath.Join(root, "boot/vmlinuz-*-arm64"))
	if len(kernels) != 1 {
		t.Fatalf("the arm64 kernel under %s: %v", root, kernels)
	}
	run(t, bootops, "microos", "build", "--arch", "arm64", "--root", root, "--kernel", kernels[0], "--agent", agent, "-o", filepath.Join(repo, "microos/arm64"))
	run(t, bootops, "microos", "build", "--kernel", kernel(t), "--agent", agentBin, "-o", filepath.Join(repo, "microos"))
	writeRepo(t, repo, vars{"Images": images4, "ImageSHA": gzSHA, "ARMProfile": armProfile, "ARMSHA": armSHA, "X86Profile": x86Profile, "X86SHA": x86SHA}, "base-provision", "arm64")
	l.serve(repo, "--shim-arm64", filepath.Join(root, "usr/lib/shim/shimaa64.efi.signed"),
		"--grub-arm64", filepath.Join(root, "usr/lib/grub/arm64-efi-signed/grubnetaa64.efi.signed"))
	t.Logf("timing: the arm64 pieces (Debian's packages and image, the agent, the Micro-OS) ready: %s", time.Since(began).Round(time.Second))

	l.vms(2)
	armDisk, x86Disk := disk(t, l, "a1"), disk(t, l, "x1")
	disks := map[string]string{"a1": armDisk, "x1": x86Disk}
	os.Truncate(armDisk, 3<<30) // Debian's root grows into the rest
	if x86Running {
		os.Truncate(x86Disk, 3<<30)
	}
	// Each power-on: the network first, then the disk, the NVRAM kept (a
	// machine's). Secure Boot on, the Microsoft keys enrolled (as ARM
	// servers ship): shim (signed by Microsoft's UEFI CA) checks GRUB and
	// Debian's kernel. x1 without IPv6, so OVMF does not wait for a PXEv6
	// answer before its disk.
	arm := func(round string) *vm {
		return l.arm64VM("a1"+round, "52:54:00:a6:40:01", "/usr/share/AAVMF/AAVMF_VARS.ms.fd", bootDisk(armDisk)...)
	}
	x86 := func(round string) *vm {
		return l.uefiBoot("x1"+round, "52:54:00:a6:40:02", ",romfile=,bootindex=1", slices.Concat(noIPv6, bootDisk(x86Disk))...)
	}
	start := time.Now()
	v, x := arm("-install"), x86("-install")
	out := v.wait(t, "bootops-microos: starting bootops-agent", 12*time.Minute)
	if !strings.Contains(out, "starting on kernel 6.") || !strings.Contains(out, "-arm64") {
		t.Errorf("a1 did not boot the arm64 Micro-OS:\n%s", testutil.Tail(out, 30))
	}
	if !strings.Contains(out, "UEFI Secure Boot is enabled") {
		t.Errorf("a1's kernel did not start under Secure Boot:\n%s", testutil.Tail(out, 40))
	}
	t.Logf("timing: arm64 under TCG, VM start (AAVMF, PXE, shim, GRUB over TFTP) → agent running: %s", time.Since(start).Round(time.Second))
	provisioned := map[string]time.Duration{}
	running := map[string]time.Duration{}
	vms := map[string]*vm{"a1": v, "x1": x}
	boot := map[string]func(string) *vm{"a1": arm, "x1": x86}
	// Each node: provisioned (its agent's reboot ends QEMU), powered on
	// again, running (x1: in make test, provisioned is its end, and its
	// VM slot goes back).
	runs := map[string]bool{"a1": true, "x1": x86Running}
	if !testutil.Poll(40*time.Minute, every, func() bool {
		done := true
		for _, n := range []string{"a1", "x1"} {
			s, _ := nodeState(l, "lab/"+n)
			if provisioned[n] == 0 && (s == "provisioned" || s == "running") {
				provisioned[n] = time.Since(start).Round(time.Second)
				if runs[n] {
					waitVMs(2*time.Minute, vms[n]) // the agent's reboot ends QEMU (-no-reboot)
					vms[n] = boot[n]("-disk")
				} else {
					vms[n].cmd.Process.Kill()
					waitVMs(time.Minute, vms[n])
					l.vms(1)
				}
			}
			if running[n] == 0 && s == "running" {
				running[n] = time.Since(start).Round(time.Second)
			}
			done = done && provisioned[n] > 0 && (running[n] > 0 || !runs[n])
		}
		return done
	}) {
		for n, v := range vms {
			v.cmd.Process.Kill()
			waitVMs(time.Minute, v)
			if runs[n] && provisioned[n] > 0 && running[n] == 0 {
				t.Errorf("%s provisioned, not running after 40m0s; its console:\n%s\nwhat its installed system logged:\n%s",
					n, testutil.Tail(mustRead(v.console), 20), installedLogs(t, disks[n], ""))
			}
		}
		t.Fatalf("a1 and x1 not done after 40m0s: provisioned %v, running %v", provisioned, running)
	}
	if x86Running {
		t.Logf("timing: under TCG, same run, power-on → provisioned: arm64 %s, x86_64 %s; power-on → running (install, power-on again, Debian's first boot): arm64 %s, x86_64 %s",
			provisioned["a1"], provisioned["x1"], running["a1"], running["x1"])
	} else {
		t.Logf("timing: under TCG, same run, power-on → provisioned: arm64 (Debian) %s, x86_64 (the test image) %s; power-on → running (install, power-on again, Debian's first boot): arm64 %s",
			provisioned["a1"], provisioned["x1"], running["a1"])
		checkDisk(t, x86Disk, rawSHA)
	}
	for n, arch := range map[string]string{"a1": "arm64", "x1": "amd64"} {
		if !runs[n] {
			continue
		}
		m, _ := l.machine("lab/" + n)
		if m.Hostname != "e2e-"+map[string]string{"a1": "arm", "x1": "x86"}[n] || !strings.HasSuffix(m.Kernel, "-"+arch) {
			t.Errorf("%s: hostname %q, kernel %q in the status, want Debian's %s kernel", n, m.Hostname, m.Kernel, arch)
		}
		if tl := l.logs("lab/" + n); !strings.Contains(tl, "served local-disk script") {
			t.Errorf("%s: its boot from disk is not on its timeline:\n%s", n, tl)
		}
	}
	if c := mustRead(vms["a1"].console); !strings.Contains(c, "UEFI Secure Boot is enabled") || !strings.Contains(c, "Debian GNU/Linux 12") {
		t.Errorf("a1's installed Debian did not boot with Secure Boot on:\n%s", testutil.Tail(c, 40))
	}
	tl := l.logs("lab/a1")
	for _, want := range []string{"served the Micro-OS GRUB script of profile " + armProfile, "agent checked in: arm64, ", "provisioned (generation 0)"} {
		if !strings.Contains(tl, want) {
			t.Errorf("a1's timeline lacks %q:\n%s", want, tl)
		}
	}
	if log := l.log("bootops"); !strings.Contains(log, "file=shimaa64.efi") || !strings.Contains(log, "file=grubaa64.efi") || !strings.Contains(log, "file=ipxe.efi") {
		t.Errorf("shimaa64.efi, grubaa64.efi (a1) and ipxe.efi (x1) were not all fetched over TFTP:\n%s", testutil.Tail(log, 30))
	}
	if tl := l.logs("lab/x1"); !strings.Contains(tl, "agent checked in: x86_64, ") {
		t.Errorf("x1's agent did not check in as x86_64:\n%s", tl)
	}
	for _, v := range vms {
		v.cmd.Process.Kill()
		waitVMs(time.Minute, v)
	}
	if tl := l.logs("lab/x1"); !strings.Contains(tl, "provisioned (generation 0)") {
		t.Errorf("x1 was not provisioned:\n%s", tl)
	}

	// The boot order after Debian ran: a1 powered on once more tries the
	// network first (a second local-disk script), then its disk.
	l.vms(1)
	before := strings.Count(l.logs("lab/a1"), "served local-disk script")
	again := arm("-again")
	waitFor(t, "a1's network boot before its disk", 8*time.Minute, func() bool {
		return strings.Count(l.logs("lab/a1"), "served local-disk script") > before
	})
	again.wait(t, "Debian 12 e2e image", 5*time.Minute) // its ESP's GRUB config
	again.cmd.Process.Kill()
	waitVMs(time.Minute, again)

	// An x86 machine with a3's MAC, a3 registered arm64: refused.
	liar := l.uefiVM("a3-x86", "52:54:00:a6:40:03")
	waitFor(t, "a3's refusal on its timeline", 5*time.Minute, func() bool {
		return strings.Contains(l.logs("lab/a3"), "refused: the firmware announces x86_64 (architecture type 7, EFI x86-64) and node a3 is registered arm64 (profile arm-os, os.arch)")
	})
	if s, _ := nodeState(l, "lab/a3"); s != "mismatch" {
		t.Errorf("a3's state: %q, want mismatch", s)
	}
	liar.cmd.Process.Kill()
	t.Logf("timing: TestARM64 %s", time.Since(began).Round(time.Second))
}

// debianImageARM64 is the Debian arm64 test image (test/image/cached.sh
// arm64, cached by the script's version) and its sha256.
func debianImageARM64(t *testing.T) (dir, gzSHA string) {
	t.Helper()
	t0 := time.Now()
	cmd := exec.Command("bash", "../image/cached.sh", "arm64")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the Debian arm64 image (test/image/cached.sh arm64): %v\n%s", err, testutil.Tail(stderr.String(), 40))
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Logf("timing: the Debian arm64 image ready after %s (built, or waited for)", d.Round(time.Second))
	}
	dir = strings.TrimSpace(string(out))
	sum, err := fileDigest(filepath.Join(dir, "debian.raw.gz"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, sum
}

// arm64Root is Debian's arm64 packages the Micro-OS and the shim chain
// come from, unpacked (test/arm64/root.sh, cached by their versions).
func arm64Root(t *testing.T) string {
	t.Helper()
	cache := filepath.Join(cacheDir(), "arm64")
	if out, err := exec.Command("bash", "../arm64/root.sh", cache).CombinedOutput(); err != nil {
		t.Fatalf("Debian's arm64 packages (test/arm64/root.sh): %v\n%s", err, out)
	}
	return filepath.Join(cache, "root")
}

// arm64VM boots QEMU's 64-bit ARM virt machine with AAVMF (Debian package
// qemu-efi-aarch64) from the network: its own UEFI PXE client (no option
// ROM; first in the boot order, a disk given with bootDisk after it), its
// NVRAM made from varsTemplate (AAVMF_VARS.ms.fd: the Microsoft
// keys enrolled, Secure Boot on) and kept per MAC, the PL011 UART its
// console.
func (l *lab) arm64VM(name, mac, varsTemplate string, extra ...string) *vm {
	l.t.Helper()
	vars := l.nvram("aavmf", mac, varsTemplate, "qemu-efi-aarch64")
	machine := []string{"qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a57", "-accel", "tcg", "-m", "1024",
		"-drive", "if=pflash,format=raw,readonly=on,file=/usr/share/AAVMF/AAVMF_CODE.fd",
		"-drive", "if=pflash,format=raw,file=" + vars}
	return l.guest(name, machine, "virtio-net-pci,netdev=n0,romfile=,bootindex=1,mac="+mac, extra...)
}

// cacheDir is the user's cache of bootops' slow builds, as
// test/image/cached.sh keeps them.
func cacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "bootops")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "bootops")
}
