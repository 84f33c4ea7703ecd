//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	microos "github.com/bootops/bootops/test/microos/initramfs"
)

// vm is a QEMU guest on the lab's bridge, its serial console in a file.
type vm struct {
	name    string
	console string
	cmd     *exec.Cmd
}

func (l *lab) vm(name, mac string, extra ...string) *vm {
	return l.boot(name, mac, "", extra...)
}

// uefiVM boots OVMF with the NIC's option ROM removed, so OVMF's own PXE
// client runs (and fetches iPXE over TFTP).
func (l *lab) uefiVM(name, mac string, extra ...string) *vm {
	return l.uefiBoot(name, mac, ",romfile=", extra...)
}

func (l *lab) uefiBoot(name, mac, nicOpts string, extra ...string) *vm {
	l.t.Helper()
	vars := l.nvram("nvram", mac, "/usr/share/OVMF/OVMF_VARS_4M.fd", "ovmf")
	fw := []string{"-drive", "if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd",
		"-drive", "if=pflash,format=raw,file=" + vars}
	return l.boot(name, mac, nicOpts, append(fw, extra...)...)
}

// nvram is a machine's UEFI variable store (by MAC), made from template
// (of Debian package pkg) at its first boot and kept across its power
// cycles.
func (l *lab) nvram(prefix, mac, template, pkg string) string {
	l.t.Helper()
	vars := filepath.Join(l.dir, prefix+"-"+strings.ReplaceAll(mac, ":", "")+".fd")
	if _, err := os.Stat(vars); err != nil {
		b, err := os.ReadFile(template)
		if err != nil {
			l.t.Fatalf("%s is missing (Debian package %s): %v", template, pkg, err)
		}
		os.WriteFile(vars, b, 0o644)
	}
	return vars
}

func (l *lab) boot(name, mac, nicOpts string, extra ...string) *vm {
	l.t.Helper()
	machine := []string{"qemu-system-x86_64", "-accel", "tcg", "-m", "512", "-boot", "n"}
	return l.guest(name, machine, "virtio-net-pci,netdev=n0,mac="+mac+nicOpts, extra...)
}

// guest starts a QEMU machine (its program and machine options) on the
// lab's bridge through a tap of its own, its NIC nic (netdev n0), its
// serial console in a file, extra options after.
func (l *lab) guest(name string, machine []string, nic string, extra ...string) *vm {
	l.t.Helper()
	l.checkSlot(name)
	tap := "tap-" + name
	if len(tap) > 15 {
		tap = tap[:15]
	}
	run(l.t, "ip", "-n", l.lan, "tuntap", "add", "dev", tap, "mode", "tap")
	run(l.t, "ip", "-n", l.lan, "link", "set", tap, "master", "br0", "up")
	console := filepath.Join(l.dir, name+".console")
	args := append([]string{"ip", "netns", "exec", l.lan}, machine...)
	args = append(args, "-nographic", "-no-reboot", "-serial", "file:"+console, "-monitor", "none",
		"-netdev", "tap,id=n0,ifname="+tap+",script=no,downscript=no", "-device", nic)
	cmd := l.start(name, append(args, extra...)...)
	v := &vm{name: name, console: console, cmd: cmd}
	l.guests = append(l.guests, v)
	return v
}

// wait reads the VM's console until it shows a whole line with want (the
// console file is written as the guest prints: a line may be cut short),
// or a prompt, or fails after d.
func (v *vm) wait(t *testing.T, want string, d time.Duration) string {
	t.Helper()
	var b []byte
	if testutil.Poll(d, time.Second, func() bool {
		b, _ = os.ReadFile(v.console)
		i := bytes.Index(b, []byte(want))
		return i >= 0 && (bytes.IndexByte(b[i:], '\n') >= 0 || prompt(want))
	}) {
		return string(b)
	}
	b, _ = os.ReadFile(v.console)
	t.Fatalf("%s: %q not on its console after %s; console:\n%s", v.name, want, d, testutil.Tail(string(b), 40))
	return ""
}

// prompt reports whether want is a prompt (getty's "host login:"): it
// waits for input, so no newline follows it unless something else writes
// to the console after it.
func prompt(want string) bool {
	return strings.HasSuffix(want, " login:")
}

// initramfs builds the test Micro-OS.
func initramfs(t *testing.T, path string) {
	t.Helper()
	if err := microos.Write(path, "/bin/busybox"); err != nil {
		t.Fatal(err)
	}
}

// kernel is the Debian kernel (package linux-image-amd64).
func kernel(t *testing.T) string {
	t.Helper()
	m, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(m) == 0 {
		t.Fatal("no kernel in /boot: install linux-image-amd64 (make e2e does)")
	}
	return m[len(m)-1]
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

func mustRead(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// bootDisk is a VM's disk, booted after its NIC (bootindex: the firmware
// tries the network first, then this disk).
func bootDisk(path string) []string {
	return []string{"-drive", "file=" + path + ",if=none,id=d0,format=raw", "-device", "virtio-blk-pci,drive=d0,bootindex=2"}
}

// secureVM boots OVMF with Secure Boot enforced: code and a fresh copy
// of the variables named, SMM on as the secure flash needs.
func (l *lab) secureVM(name, mac, code, vars string, extra ...string) *vm {
	l.t.Helper()
	b, err := os.ReadFile(vars)
	if err != nil {
		l.t.Fatalf("OVMF is missing (Debian package ovmf): %v", err)
	}
	copyVars := filepath.Join(l.dir, name+"-vars.fd")
	os.WriteFile(copyVars, b, 0o644)
	fw := []string{"-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on",
		"-drive", "if=pflash,format=raw,readonly=on,file=" + code, "-drive", "if=pflash,format=raw,file=" + copyVars}
	return l.boot(name, mac, ",romfile=", append(fw, extra...)...)
}

// exit waits (at most d) for the VM's QEMU to end (-no-reboot: a reboot
// or a power-off ends it) and reports whether it did; after d it kills the
// VM.
func (v *vm) exit(d time.Duration) bool {
	done := make(chan error, 1)
	go func() { done <- v.cmd.Wait() }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		v.cmd.Process.Kill()
		<-done
		return false
	}
}

// waitVMs waits for the VMs' QEMU to end, killing what is still running
// after d.
func waitVMs(d time.Duration, vms ...*vm) {
	var wg sync.WaitGroup
	for _, v := range vms {
		wg.Go(func() { v.exit(d) })
	}
	wg.Wait()
}

// ended waits (at most d) for the VM's QEMU to end: with -no-reboot, the
// agent's reboot after provisioning ends it. After d it kills the VM and
// fails the test.
func (v *vm) ended(t *testing.T, d time.Duration) {
	t.Helper()
	if !v.exit(d) {
		t.Fatalf("%s did not provision and reboot in %s; console:\n%s", v.name, d, testutil.Tail(mustRead(v.console), 40))
	}
}
