//go:build e2e

// Package e2e boots real firmware against bootops: QEMU (TCG) VMs on a LAN
// made of network namespaces, where dnsmasq plays the site's own DHCP
// server. It needs root, iproute2, QEMU, dnsmasq and a kernel; `make e2e`
// (and `make test`) install them. Missing any of them fails the tests: they
// never skip.
package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	microos "github.com/bootops/bootops/test/microos/initramfs"
)

// lab is one provisioning LAN: namespace lan holds bridge br0
// (198.18.0.1/24, where bootops listens) and the VMs' tap devices;
// namespace dhcp holds dnsmasq at 198.18.0.2, joined to the bridge by a
// veth pair, handing out 198.18.0.100-199 without any PXE option.
type lab struct {
	t        *testing.T
	lan, dhc string
	dir      string
	procs    []*exec.Cmd
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// labs numbers the labs of this run: the tests run in parallel, each in
// namespaces of its own.
var labs atomic.Int64

// labID names a lab's namespaces: unique on the machine (the process) and
// in the run (the counter).
// killNetns kills every process in network namespace ns.
func killNetns(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// sweepLabs removes the labs of test runs that were killed before their
// cleanup ran (a timeout, a kill -9): their namespaces, and the VMs and
// servers still running in them. A lab's name carries its run's pid.
func sweepLabs() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !(strings.HasPrefix(f[0], "bo-lan-") || strings.HasPrefix(f[0], "bo-dhcp-")) {
			continue
		}
		parts := strings.Split(f[0], "-")
		if len(parts) != 4 {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + parts[2] + "/comm"); err == nil && strings.HasPrefix(string(comm), "e2e.test") && parts[2] != strconv.Itoa(os.Getpid()%100000) {
			continue // another run's, still going
		}
		killNetns(f[0])
		exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

func labID() string {
	return fmt.Sprintf("%d-%d", os.Getpid()%100000, labs.Add(1))
}

func need(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the end-to-end tests need root (network namespaces, tap devices): run them as root, as CI does")
	}
	for _, bin := range []string{"ip", "qemu-system-x86_64", "dnsmasq"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing: run `make e2e`, which installs it", bin)
		}
	}
}

func newLab(t *testing.T, withDHCP bool) *lab {
	l := newLabNS(t, withDHCP)
	if withDHCP {
		l.start("dnsmasq", "ip", "netns", "exec", l.dhc, "dnsmasq", "--keep-in-foreground", "--no-daemon", "--port=0",
			"--interface=eth0", "--bind-interfaces", "--dhcp-range=198.18.0.100,198.18.0.199,255.255.255.0,10m",
			"--dhcp-leasefile="+filepath.Join(l.dir, "leases"), "--log-dhcp", "--pid-file="+filepath.Join(l.dir, "dnsmasq.pid"))
	}
	return l
}

// newLabNS builds the namespaces; with dhcpNS, the second one is there for
// a DHCP server the test starts itself.
func newLabNS(t *testing.T, withDHCP bool) *lab {
	need(t)
	id := labID()
	l := &lab{t: t, lan: "bo-lan-" + id, dhc: "bo-dhcp-" + id, dir: t.TempDir()}
	t.Cleanup(l.close)
	run(t, "ip", "netns", "add", l.lan)
	run(t, "ip", "-n", l.lan, "link", "set", "lo", "up")
	run(t, "ip", "-n", l.lan, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", l.lan, "addr", "add", "198.18.0.1/24", "dev", "br0")
	run(t, "ip", "-n", l.lan, "link", "set", "br0", "up")
	if withDHCP {
		run(t, "ip", "netns", "add", l.dhc)
		run(t, "ip", "-n", l.lan, "link", "add", "vdhcp", "type", "veth", "peer", "name", "eth0", "netns", l.dhc)
		run(t, "ip", "-n", l.lan, "link", "set", "vdhcp", "master", "br0", "up")
		run(t, "ip", "-n", l.dhc, "addr", "add", "198.18.0.2/24", "dev", "eth0")
		run(t, "ip", "-n", l.dhc, "link", "set", "eth0", "up")
		run(t, "ip", "-n", l.dhc, "link", "set", "lo", "up")
	}
	return l
}

// start runs a process in the background, its output in dir/<name>.log.
func (l *lab) start(name string, argv ...string) *exec.Cmd {
	l.t.Helper()
	f, err := os.Create(filepath.Join(l.dir, name+".log"))
	if err != nil {
		l.t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, killed whole at cleanup; and killed by the
	// kernel should this test process die first (a timeout, a signal), so
	// no VM outlives its test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("start %s: %v", name, err)
	}
	l.procs = append(l.procs, cmd)
	return cmd
}

func (l *lab) log(name string) string {
	b, _ := os.ReadFile(filepath.Join(l.dir, name+".log"))
	return string(b)
}

func (l *lab) close() {
	for _, p := range l.procs {
		if p.Process != nil {
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL) // the group: QEMU under ip netns exec, and anything it started
			p.Process.Kill()
			p.Wait()
		}
	}
	// What escaped the groups (a BMC's chassis control starts its QEMU
	// with setsid) still runs in the namespace.
	killNetns(l.lan)
	killNetns(l.dhc)
	exec.Command("ip", "netns", "del", l.lan).Run()
	exec.Command("ip", "netns", "del", l.dhc).Run()
	if l.t.Failed() {
		// Every process's log: bootops first, then the rest (DHCP
		// servers, radvd, BMCs, image servers) by name.
		logs, _ := filepath.Glob(filepath.Join(l.dir, "*.log"))
		sort.SliceStable(logs, func(i, j int) bool {
			return strings.HasSuffix(logs[i], "/bootops.log") && !strings.HasSuffix(logs[j], "/bootops.log")
		})
		for _, f := range logs {
			name := strings.TrimSuffix(filepath.Base(f), ".log")
			l.t.Logf("---- %s log\n%s", name, tail(l.log(name), 60))
		}
		consoles, _ := filepath.Glob(filepath.Join(l.dir, "*.console"))
		for _, c := range consoles {
			b, _ := os.ReadFile(c)
			l.t.Logf("---- %s\n%s", filepath.Base(c), tail(string(b), 40))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

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
	// One NVRAM per machine (by MAC), kept across its power cycles.
	vars := filepath.Join(l.dir, "nvram-"+strings.ReplaceAll(mac, ":", "")+".fd")
	if _, err := os.Stat(vars); err != nil {
		b, err := os.ReadFile("/usr/share/OVMF/OVMF_VARS_4M.fd")
		if err != nil {
			l.t.Fatalf("OVMF is missing (Debian package ovmf): %v", err)
		}
		os.WriteFile(vars, b, 0o644)
	}
	fw := []string{"-drive", "if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd",
		"-drive", "if=pflash,format=raw,file=" + vars}
	return l.boot(name, mac, nicOpts, append(fw, extra...)...)
}

// started waits (at most d) until process name's log says marker, and
// fails the test with that log when it does not.
func (l *lab) started(name, marker string, d time.Duration) {
	l.t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(l.log(name), marker) {
		if time.Now().After(deadline) {
			l.t.Fatalf("%s did not start in %s (its log never said %q):\n%s", name, d, marker, l.log(name))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *lab) boot(name, mac, nicOpts string, extra ...string) *vm {
	l.t.Helper()
	tap := "tap-" + name
	if len(tap) > 15 {
		tap = tap[:15]
	}
	run(l.t, "ip", "-n", l.lan, "tuntap", "add", "dev", tap, "mode", "tap")
	run(l.t, "ip", "-n", l.lan, "link", "set", tap, "master", "br0", "up")
	console := filepath.Join(l.dir, name+".console")
	args := []string{"netns", "exec", l.lan, "qemu-system-x86_64", "-accel", "tcg", "-m", "512", "-nographic", "-no-reboot",
		"-serial", "file:" + console, "-monitor", "none",
		"-netdev", "tap,id=n0,ifname=" + tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=" + mac + nicOpts, "-boot", "n"}
	args = append(args, extra...)
	cmd := l.start(name, append([]string{"ip"}, args...)...)
	return &vm{name: name, console: console, cmd: cmd}
}

// wait reads the VM's console until it shows a whole line with want (the
// console file is written as the guest prints: a line may be cut short),
// or a prompt, or fails after d.
func (v *vm) wait(t *testing.T, want string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(v.console)
		if i := bytes.Index(b, []byte(want)); i >= 0 && (bytes.IndexByte(b[i:], '\n') >= 0 || prompt(want)) {
			return string(b)
		}
		time.Sleep(time.Second)
	}
	b, _ := os.ReadFile(v.console)
	t.Fatalf("%s: %q not on its console after %s; console:\n%s", v.name, want, d, tail(string(b), 40))
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
