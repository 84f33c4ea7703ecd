//go:build e2e

// Package e2e boots real firmware against bootops: QEMU (TCG) VMs on a LAN
// made of network namespaces, where dnsmasq plays the site's own DHCP
// server. It needs root, iproute2, QEMU, dnsmasq and a kernel; `make e2e`
// (and `make test`) install them. Missing any of them fails the tests: they
// never skip.
//
// The harness the tests share, by file:
//   - lab_test.go: a lab — its network namespaces, bridge and DHCP
//     server, the processes started in it (killed, and their logs shown
//     on failure, at cleanup) — and waiting on them (waitFor, started);
//   - vm_test.go: QEMU guests on the lab's bridge (BIOS, UEFI, Secure
//     Boot), their consoles, disks and the Micro-OS's kernel;
//   - daemon_test.go: the binaries built once (TestMain) and bootops
//     serve started in a lab;
//   - status_test.go: the daemon's status and timelines, read from inside
//     the lab into the types the daemon serves (statusClient);
//   - repo_test.go: the test repositories, txtar archives in testdata/
//     written with the values only a run knows (writeRepo);
//   - image_test.go: the OS images the machines install (the small test
//     image, the real Debian one) and the checks of a disk after;
//   - ipv6_lab_test.go, swtpm_test.go and power_test.go add IPv6 (radvd,
//     reference DHCPv6), software TPMs and IPMI BMCs to a lab;
//   - wan_lab_test.go: the WAN lab, a store LAN behind its router's NAT,
//     the server across a shaped WAN link that can be cut (wanLab).
//
// The other files hold the tests, each with the helpers only it uses.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
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
	guests   []*vm // the VMs lab.boot started
	slots    int   // the VM slots it holds (lab.vms)
	rest     int   // its live guests at rest, not counted (lab.resting)
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
		if len(f) == 0 || !slices.ContainsFunc([]string{"bo-lan-", "bo-dhcp-", "bo-srv-", "bo-wan-"}, func(p string) bool { return strings.HasPrefix(f[0], p) }) {
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
	l.releaseSlots()
	// What its guests cost the machine: the e2e stage is CPU-bound (TCG),
	// so this, not the wall clock, is what a test adds to CI's time.
	var cpu time.Duration
	for _, v := range l.guests {
		if ps := v.cmd.ProcessState; ps != nil {
			cpu += ps.UserTime() + ps.SystemTime()
		}
	}
	if len(l.guests) > 0 {
		l.t.Logf("timing: its %d VMs used %s of CPU (a BMC's own QEMU not counted)", len(l.guests), cpu.Round(time.Second))
	}
	if l.t.Failed() {
		// Every process's log: bootops first, then the rest (DHCP
		// servers, radvd, BMCs, image servers) by name.
		logs, _ := filepath.Glob(filepath.Join(l.dir, "*.log"))
		sort.SliceStable(logs, func(i, j int) bool {
			return strings.HasSuffix(logs[i], "/bootops.log") && !strings.HasSuffix(logs[j], "/bootops.log")
		})
		for _, f := range logs {
			name := strings.TrimSuffix(filepath.Base(f), ".log")
			l.t.Logf("---- %s log\n%s", name, testutil.Tail(l.log(name), 60))
		}
		consoles, _ := filepath.Glob(filepath.Join(l.dir, "*.console"))
		for _, c := range consoles {
			b, _ := os.ReadFile(c)
			l.t.Logf("---- %s\n%s", filepath.Base(c), testutil.Tail(string(b), 40))
		}
	}
}

// started waits (at most d) until process name's log says marker, and
// fails the test with that log when it does not.
func (l *lab) started(name, marker string, d time.Duration) {
	l.t.Helper()
	if !testutil.Poll(d, 100*time.Millisecond, func() bool { return strings.Contains(l.log(name), marker) }) {
		l.t.Fatalf("%s did not start in %s (its log never said %q):\n%s", name, d, marker, l.log(name))
	}
}

// newClientLab is the lab without VMs: namespace lan with br0 (the
// server), and namespace dhc for the DHCP clients. It needs root,
// iproute2, ISC dhclient and busybox, and fails without them.
func newClientLab(t *testing.T) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the end-to-end tests need root (network namespaces): run them as root, as CI does")
	}
	for bin, pkg := range map[string]string{"ip": "iproute2", "dhclient": "isc-dhcp-client", "busybox": "busybox-static", "timeout": "coreutils"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing: run `make e2e`, which installs %s", bin, pkg)
		}
	}
	id := labID()
	l := &lab{t: t, lan: "bo-lan-" + id, dhc: "bo-cli-" + id, dir: t.TempDir()}
	t.Cleanup(l.close)
	run(t, "ip", "netns", "add", l.lan)
	run(t, "ip", "netns", "add", l.dhc)
	run(t, "ip", "-n", l.lan, "link", "set", "lo", "up")
	run(t, "ip", "-n", l.dhc, "link", "set", "lo", "up")
	run(t, "ip", "-n", l.lan, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", l.lan, "addr", "add", "198.18.0.1/24", "dev", "br0")
	run(t, "ip", "-n", l.lan, "link", "set", "br0", "up")
	return l
}

// port gives a client a veth named name in namespace dhc (the clients'
// side), with mac unless "", whose peer v<name> is a port of br0.
func (l *lab) port(name, mac string) {
	l.t.Helper()
	run(l.t, "ip", "-n", l.lan, "link", "add", "v"+name, "type", "veth", "peer", "name", name, "netns", l.dhc)
	run(l.t, "ip", "-n", l.lan, "link", "set", "v"+name, "master", "br0", "up")
	if mac != "" {
		run(l.t, "ip", "-n", l.dhc, "link", "set", name, "address", mac)
	}
	run(l.t, "ip", "-n", l.dhc, "link", "set", name, "up")
}

func grepLines(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// every is how often the tests ask the daemon, a VM or a log how things
// stand while they wait: each ask may run a process (the bootops CLI in
// the lab's namespace).
const every = 2 * time.Second

// waitFor asks cond every 2 s until it holds, and fails the test after d.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	testutil.WaitEvery(t, what, d, every, cond)
}
