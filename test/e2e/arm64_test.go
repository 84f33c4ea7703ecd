//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
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
// Micro-OS (Debian's arm64 kernel, busybox and tools, the
// agent cross-compiled) installs the test image on its disk. Its timeline
// shows the arm64 path; its agent checked in as arm64. A mixed site: an
// x86_64 UEFI VM installs from the same daemon at the same time, by its
// own chain (ipxe.efi, the x86 Micro-OS); then an x86 VM with the MAC of
// a node registered arm64 is refused, the reason on that node's timeline.
// Each VM's power-on to provisioned is printed, side by side.
func TestARM64(t *testing.T) {
	t.Parallel()
	began := time.Now()
	l := newLab(t, false)
	root := arm64Root(t)
	agent := filepath.Join(l.dir, "bootops-agent-arm64")
	build := exec.Command("go", "build", "-trimpath", "-o", agent, "../../cmd/bootops-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH=arm64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the arm64 agent: %v\n%s", err, out)
	}
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")
	repo := filepath.Join(l.dir, "repo")
	kernels, _ := filepath.Glob(filepath.Join(root, "boot/vmlinuz-*-arm64"))
	if len(kernels) != 1 {
		t.Fatalf("the arm64 kernel under %s: %v", root, kernels)
	}
	run(t, bootops, "microos", "build", "--arch", "arm64", "--root", root, "--kernel", kernels[0], "--agent", agent, "-o", filepath.Join(repo, "microos/arm64"))
	run(t, bootops, "microos", "build", "--kernel", kernel(t), "--agent", agentBin, "-o", filepath.Join(repo, "microos"))
	writeRepo(t, repo, vars{"Images": images4, "ImageSHA": gzSHA}, "base-provision", "arm64")
	l.serve(repo, "--shim-arm64", filepath.Join(root, "usr/lib/shim/shimaa64.efi.signed"),
		"--grub-arm64", filepath.Join(root, "usr/lib/grub/arm64-efi-signed/grubnetaa64.efi.signed"))
	t.Logf("timing: the arm64 pieces (Debian's packages, the agent, the Micro-OS) ready: %s", time.Since(began).Round(time.Second))

	l.vms(2)
	vmDisk, x86Disk := disk(t, l, "a1"), disk(t, l, "x1")
	start := time.Now()
	// Secure Boot on, the Microsoft keys enrolled (as ARM servers ship):
	// shim (signed by Microsoft's UEFI CA) checks GRUB and Debian's kernel.
	v := l.arm64VM("a1", "52:54:00:a6:40:01", "/usr/share/AAVMF/AAVMF_VARS.ms.fd", withDisk(vmDisk)...)
	x1 := l.uefiVM("x1", "52:54:00:a6:40:02", withDisk(x86Disk)...)
	out := v.wait(t, "bootops-microos: starting bootops-agent", 12*time.Minute)
	if !strings.Contains(out, "starting on kernel 6.") || !strings.Contains(out, "-arm64") {
		t.Errorf("a1 did not boot the arm64 Micro-OS:\n%s", testutil.Tail(out, 30))
	}
	if !strings.Contains(out, "UEFI Secure Boot is enabled") {
		t.Errorf("a1's kernel did not start under Secure Boot:\n%s", testutil.Tail(out, 40))
	}
	t.Logf("timing: arm64 under TCG, VM start (AAVMF, PXE, shim, GRUB over TFTP) → agent running: %s", time.Since(start).Round(time.Second))
	waitState(t, l, "lab/a1", "provisioned", 12*time.Minute)
	t.Logf("timing: arm64 under TCG, VM start → provisioned: %s", time.Since(start).Round(time.Second))
	checkDisk(t, vmDisk, rawSHA)
	tl := l.logs("lab/a1")
	for _, want := range []string{"served the Micro-OS GRUB script of profile arm-os", "agent checked in: arm64, ", "provisioned (generation 0)"} {
		if !strings.Contains(tl, want) {
			t.Errorf("a1's timeline lacks %q:\n%s", want, tl)
		}
	}
	if log := l.log("bootops"); !strings.Contains(log, "file=shimaa64.efi") || !strings.Contains(log, "file=grubaa64.efi") {
		t.Errorf("shimaa64.efi and grubaa64.efi were not fetched over TFTP:\n%s", testutil.Tail(log, 30))
	}
	v.cmd.Process.Kill()
	waitState(t, l, "lab/x1", "provisioned", 12*time.Minute)
	t.Logf("timing: x86_64 under TCG beside it, VM start (OVMF, PXE, ipxe.efi, iPXE) → provisioned: %s", time.Since(start).Round(time.Second))
	checkDisk(t, x86Disk, rawSHA)
	if log := l.log("bootops"); !strings.Contains(log, "file=ipxe.efi") {
		t.Errorf("x1 did not get ipxe.efi, the x86 UEFI chain:\n%s", testutil.Tail(log, 30))
	}
	if tl := l.logs("lab/x1"); !strings.Contains(tl, "agent checked in: x86_64, ") {
		t.Errorf("x1's agent did not check in as x86_64:\n%s", tl)
	}
	x1.cmd.Process.Kill()

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
// ROM), its NVRAM made from varsTemplate (AAVMF_VARS.ms.fd: the Microsoft
// keys enrolled, Secure Boot on) and kept per MAC, the PL011 UART its
// console.
func (l *lab) arm64VM(name, mac, varsTemplate string, extra ...string) *vm {
	l.t.Helper()
	vars := l.nvram("aavmf", mac, varsTemplate, "qemu-efi-aarch64")
	machine := []string{"qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a57", "-accel", "tcg", "-m", "1024",
		"-drive", "if=pflash,format=raw,readonly=on,file=/usr/share/AAVMF/AAVMF_CODE.fd",
		"-drive", "if=pflash,format=raw,file=" + vars}
	return l.guest(name, machine, "virtio-net-pci,netdev=n0,romfile=,mac="+mac, extra...)
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
