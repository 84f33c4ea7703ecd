//go:build e2e

package dhcp6

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/lease"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// The real server in a network namespace, against ISC dhclient -6 in
// another one over a veth pair (2001:db8:6::/64; both removed
// afterwards; see lab). Needs root, ip and dhclient: it fails without them.
//
// Reservation mode: dhclient, looking like iPXE (user class "iPXE"), gets
// an address of the pool and the script URL; the lease survives a
// restart of the server; dhclient's Release frees it. Proxy mode: dhclient
// ignores an Advertise without an address (RFC 8415 §18.2.9) and takes a
// Reply to its Information-Request, boot file URL included.
func TestDhclient(t *testing.T) {
	needs(t, "ip", "iproute2", "dhclient", "isc-dhcp-client")
	l := newLab(t, "d6")
	cfg := l.cfg

	conf := filepath.Join(l.dir, "dhclient.conf")
	if err := os.WriteFile(conf, []byte(dhclientConf), 0o644); err != nil {
		t.Fatal(err)
	}
	// dhclient runs /bin/true instead of its script (it configures
	// nothing) and goes to the background once bound.
	dhclient := func(name string, args ...string) (lease string, ok bool) {
		lf, pf := filepath.Join(l.dir, name+".leases"), filepath.Join(l.dir, name+".pid")
		base := []string{"netns", "exec", l.cli, "timeout", "40", "dhclient", "-6", "-1", "-cf", conf, "-lf", lf, "-pf", pf, "-sf", "/bin/true"}
		out, err := exec.Command("ip", append(append(base, args...), "vcli")...).CombinedOutput()
		t.Cleanup(func() {
			if b, err := os.ReadFile(pf); err == nil {
				exec.Command("kill", strings.TrimSpace(string(b))).Run()
			}
		})
		b, _ := os.ReadFile(lf)
		t.Logf("dhclient %s %v: %v\n%s", name, args, err, out)
		return string(b), err == nil
	}
	iaaddr := regexp.MustCompile(`iaaddr (2001:db8:6::[0-9a-f]+) \{`)

	stop := l.serve(cfg)
	lease, ok := dhclient("first")
	m := iaaddr.FindStringSubmatch(lease)
	if !ok || m == nil {
		t.Fatalf("dhclient got no address:\n%s", lease)
	}
	addr := netip.MustParseAddr(m[1])
	if addr.Less(cfg.PoolFirst) || cfg.PoolLast.Less(addr) {
		t.Fatalf("address %v outside the pool", addr)
	}
	if !strings.Contains(lease, `option dhcp6.bootfile-url "http://[2001:db8:6::1]:8080/boot.ipxe?site=lab"`) {
		t.Errorf("lease lacks the script URL:\n%s", lease)
	}
	ev, ok := l.events.find(addr.String())
	if !ok || ev.Kind != status.KindDHCP || ev.Node != "n9" || ev.MAC != cliMAC || !strings.Contains(ev.Message, "DHCPv6") {
		t.Errorf("no event for the lease: %+v (all: %+v)", ev, l.events.all())
	}
	stop()
	exec.Command("ip", "netns", "exec", l.cli, "dhclient", "-6", "-x", "-pf", filepath.Join(l.dir, "first.pid")).Run()

	// Restart: a new server and pool on the same file; a fresh dhclient
	// (no lease file: a new Solicit) gets the same address.
	cfg.Leases = &Pool{Path: l.leases}
	stop = l.serve(cfg)
	lease, _ = dhclient("second")
	if m := iaaddr.FindStringSubmatch(lease); m == nil || m[1] != addr.String() {
		t.Fatalf("after restart: %v, want %v:\n%s", m, addr, lease)
	}
	// Release.
	run(t, "ip", "netns", "exec", l.cli, "timeout", "20", "dhclient", "-6", "-r", "-cf", conf, "-lf", filepath.Join(l.dir, "second.leases"), "-pf", filepath.Join(l.dir, "second.pid"), "-sf", "/bin/true", "vcli")
	if mac := cfg.Leases.(*Pool).MACOf(addr.String()); mac != "" {
		t.Errorf("after Release %v is still leased to %s", addr, mac)
	}
	stop()

	// Proxy mode: no address in the Advertise, so dhclient -6 takes none
	// (it gives up after its timeout); an Information-Request is answered.
	cfg.Mode, cfg.Leases = plan.DHCPProxy, nil
	stop = l.serve(cfg)
	defer stop()
	if err := os.WriteFile(conf, []byte("timeout 8;\n"+dhclientConf), 0o644); err != nil {
		t.Fatal(err)
	}
	if lease, ok := dhclient("proxy"); ok || iaaddr.MatchString(lease) {
		t.Errorf("dhclient took an Advertise without an address:\n%s", lease)
	}
	// A stateless client writes no lease: its script is given the options.
	env, script := filepath.Join(l.dir, "info.env"), filepath.Join(l.dir, "env.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nenv >> "+env+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, ok = dhclient("info", "-S", "-sf", script)
	b, _ := os.ReadFile(env)
	if !ok || !strings.Contains(string(b), "new_dhcp6_bootfile_url=http://[2001:db8:6::1]:8080/boot.ipxe?site=lab") {
		t.Errorf("Information-Request: ok %v\n%s", ok, b)
	}
}

// dhclientConf makes dhclient look like iPXE: user class "iPXE" (RFC 8415
// form: a 2-byte length, then the bytes), and asks for the boot file URL.
const dhclientConf = `option dhcp6.user-class code 15 = string;
option dhcp6.bootfile-url code 59 = text;
send dhcp6.user-class 00:04:69:50:58:45;
request dhcp6.bootfile-url;
`

// dhcpcd (Debian's dhcpcd-base), IPv6 only, in the client namespace:
// it solicits an IA_NA without waiting for a router advertisement (ia_na
// in its config), gets an address of the pool, renews or rebinds it with a
// restarted server and keeps it, and its release frees it in the lease
// file. Needs root, ip and dhcpcd: it fails without them.
//
// dhcpcd names itself with a DUID-LLT of vcli's MAC (the type it makes
// when the machine has no SMBIOS UUID; asked for explicitly here, as on a
// host with one it makes a DUID-UUID). vcli's link-local address is random
// (addr_gen_mode 3, as hosts with stable-privacy or random addresses have),
// so bootops can tell the machine only from the DUID-LLT: the events must
// name node n9 and the lease be kept under its MAC.
func TestDhcpcd(t *testing.T) {
	needs(t, "ip", "iproute2", "dhcpcd", "dhcpcd-base")
	l := newLab(t, "dc", "addr_gen_mode=3")
	ll := run(t, "ip", "-n", l.cli, "-6", "-o", "addr", "show", "dev", "vcli", "scope", "link")
	if m := regexp.MustCompile(`inet6 (fe80::[0-9a-f:]+)/`).FindStringSubmatch(ll); m == nil {
		t.Fatalf("vcli has no link-local address: %s", ll)
	} else if mac, ok := MACFromLinkLocal(netip.MustParseAddr(m[1])); ok {
		t.Fatalf("vcli's link-local %s carries MAC %s: the DUID would not be what identifies dhcpcd", m[1], mac)
	}
	d := newDhcpcd(t, l)
	cfg := l.cfg
	// T1 10 s and T2 16 s: dhcpcd renews, or rebinds, within the test.
	cfg.LeaseTime = 20 * time.Second
	stop := l.serve(cfg)

	start := time.Now()
	d.start()
	bound := d.wait("bound", func(r map[string]string) bool { return r["reason"] == "BOUND6" })
	addr, err := netip.ParseAddr(bound[d6addr])
	if err != nil {
		t.Fatalf("BOUND6 without an address (%v): %v", err, bound)
	}
	t.Logf("figure: dhcpcd bound to %v in %v", addr, time.Since(start).Round(10*time.Millisecond))
	boundAt := time.Now()
	if addr.Less(cfg.PoolFirst) || cfg.PoolLast.Less(addr) {
		t.Fatalf("address %v outside the pool", addr)
	}
	if out := run(t, "ip", "-n", l.cli, "-6", "addr", "show", "dev", "vcli"); !strings.Contains(out, addr.String()+"/") {
		t.Errorf("vcli lacks %v:\n%s", addr, out)
	}
	duid, err := os.ReadFile(filepath.Join(d.db, "duid"))
	if err != nil || !strings.HasPrefix(string(duid), "00:01:00:01:") || !strings.Contains(string(duid), cliMAC) {
		t.Errorf("dhcpcd's DUID is not a DUID-LLT of %s: %q (%v)", cliMAC, duid, err)
	}
	ev, ok := l.events.find(addr.String())
	if !ok || ev.Kind != status.KindDHCP || ev.Node != "n9" || ev.MAC != cliMAC || !strings.Contains(ev.Message, "DHCPv6") {
		t.Errorf("no event naming n9 for the lease: %+v (all: %+v)", ev, l.events.all())
	}
	first := leaseOf(t, l.leases, cliMAC)
	if first.IP.String() != addr.String() || !first.Expires.After(time.Now()) {
		t.Fatalf("lease file: %s has %+v, want %v, live", cliMAC, first, addr)
	}

	// Restart: the server is away past T1, so dhcpcd's Renew goes
	// unanswered at first; a new server and pool on the same file then
	// answer its Renew or Rebind with the same address.
	stop()
	time.Sleep(time.Until(boundAt.Add(cfg.LeaseTime/2 + 2*time.Second)))
	cfg.Leases = &Pool{Path: l.leases}
	stop = l.serve(cfg)
	defer stop()
	again := d.wait("renewed or rebound", func(r map[string]string) bool {
		return r["reason"] == "RENEW6" || r["reason"] == "REBIND6"
	})
	if again[d6addr] != addr.String() {
		t.Fatalf("after the restart, %s gave %s, want %v: %v", again["reason"], again[d6addr], addr, again)
	}
	t.Logf("figure: %s kept %v %v after it was bound", again["reason"], addr, time.Since(boundAt).Round(10*time.Millisecond))
	if lf := leaseOf(t, l.leases, cliMAC); lf.IP.String() != addr.String() || !lf.Expires.After(first.Expires) {
		t.Errorf("lease file after the renewal: %+v, want %v later than %v", lf, addr, first.Expires)
	}

	// Release: dhcpcd -k tells the running dhcpcd to release and stop.
	if out, err := d.command("-f", d.conf, "-k", "vcli").CombinedOutput(); err != nil {
		t.Fatalf("dhcpcd -k: %v\n%s\n%s: %v", err, out, d.rundir, entries(t, d.rundir))
	}
	d.wait("released", func(r map[string]string) bool { return r["reason"] == "RELEASE6" })
	deadline := time.Now().Add(10 * time.Second)
	for {
		lf := leaseOf(t, l.leases, cliMAC)
		if lf.IP.String() == addr.String() && !lf.Expires.After(time.Now()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after dhcpcd's release, the lease file still has %+v", lf)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if k := cfg.Leases.(*Pool).MACOf(addr.String()); k != "" {
		t.Errorf("after the release %v is still leased to %s", addr, k)
	}
	d.stop()
	d.checkHost()
}

// d6addr is the variable dhcpcd gives its script the first address of its
// first IA_NA in.
const d6addr = "new_dhcp6_ia_na1_ia_addr1"

// dhcpcdConf is dhcpcd's config: IPv6 only, DHCPv6 at once for an IA_NA
// (no router advertisement needed, none asked for), a DUID-LLT, no device
// manager (udev does not see inside a network namespace).
const dhcpcdConf = `ipv6only
noipv6rs
nodev
duid lt
interface vcli
ia_na 1
`

// dhcpcdScript, given the record file's path, appends each call's reason
// and variables to it, a blank line after each: it configures nothing (no
// resolv.conf, no hostname, no NTP, which Debian's hooks would touch).
const dhcpcdScript = `#!/bin/sh
{ env | grep -E '^(reason|interface|protocol|new_|old_)' | sort; echo; } >> %q
`

// leaseOf is key's lease in the pool's file (zero if none).
func leaseOf(t *testing.T, path, key string) lease.Record {
	t.Helper()
	m, err := lease.Read(path)
	if err != nil {
		t.Fatalf("lease file: %v", err)
	}
	return m[key]
}

// dhcpcdRun runs dhcpcd in the lab's client namespace with folders of its
// own: ip netns exec gives each command a mount namespace (a slave of the
// host's, so its mounts stay its own) in which db is bound over
// /var/lib/dhcpcd and rundir over /run/dhcpcd, dhcpcd's compiled-in
// folders. Its DUID, lease, pid file and control socket stay in the
// test's folder, and a dhcpcd -k finds the daemon's socket.
type dhcpcdRun struct {
	t                        *testing.T
	l                        *lab
	db, rundir, conf, script string
	record, log              string
	host                     map[string][]string // the host's folders' entries before
	cmd                      *exec.Cmd
	exited                   chan error
}

// hostDirs are dhcpcd's compiled-in folders.
var hostDirs = []string{"/var/lib/dhcpcd", "/run/dhcpcd"}

func newDhcpcd(t *testing.T, l *lab) *dhcpcdRun {
	t.Helper()
	d := &dhcpcdRun{t: t, l: l, db: filepath.Join(l.dir, "db"), rundir: filepath.Join(l.dir, "run"),
		conf: filepath.Join(l.dir, "dhcpcd.conf"), script: filepath.Join(l.dir, "record.sh"),
		record: filepath.Join(l.dir, "record"), log: filepath.Join(l.dir, "dhcpcd.log"), host: map[string][]string{}}
	for _, dir := range []string{d.db, d.rundir} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(d.conf, []byte(dhcpcdConf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.script, []byte(fmt.Sprintf(dhcpcdScript, d.record)), 0o755); err != nil {
		t.Fatal(err)
	}
	// The mount points: created (empty) where the host has none, and
	// removed afterwards.
	for _, dir := range hostDirs {
		if _, err := os.Stat(dir); err == nil {
			d.host[dir] = entries(t, dir)
			continue
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("mount point: %v", err)
		}
		t.Cleanup(func() {
			if err := os.Remove(dir); err != nil {
				t.Errorf("mount point: %v", err)
			}
		})
		d.host[dir] = nil
	}
	return d
}

// command is dhcpcd with args in the client namespace and its folders.
func (d *dhcpcdRun) command(args ...string) *exec.Cmd {
	sh := `mount --bind "$1" /var/lib/dhcpcd && mount --bind "$2" /run/dhcpcd && shift 2 && exec timeout 120 dhcpcd "$@"`
	return exec.Command("ip", append([]string{"netns", "exec", d.l.cli, "sh", "-c", sh, "sh", d.db, d.rundir}, args...)...)
}

// start runs dhcpcd in the foreground, its debug log in d.log.
func (d *dhcpcdRun) start() {
	d.t.Helper()
	f, err := os.Create(d.log)
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	d.cmd = d.command("-B", "-d", "-f", d.conf, "-c", d.script, "vcli")
	d.cmd.Stdout, d.cmd.Stderr = f, f
	// Its own process group (timeout, which ip and sh exec, makes one
	// too), so that a kill reaches dhcpcd's helpers.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.exited = make(chan error, 1)
	go func() { d.exited <- d.cmd.Wait() }()
	d.t.Cleanup(d.stop)
}

// stop ends dhcpcd if it still runs (SIGTERM, then SIGKILL to its
// process group after 10 s) and logs what it wrote.
func (d *dhcpcdRun) stop() {
	if d.cmd == nil {
		return
	}
	select {
	case <-d.exited:
	default:
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.exited
		}
	}
	d.cmd = nil
	b, _ := os.ReadFile(d.log)
	d.t.Logf("dhcpcd's log:\n%s", b)
}

// reports are the script's calls so far, each a map of its variables.
func (d *dhcpcdRun) reports() []map[string]string {
	b, _ := os.ReadFile(d.record)
	blocks := strings.Split(string(b), "\n\n")
	var rs []map[string]string
	for _, blk := range blocks[:len(blocks)-1] { // the last one is not finished
		r := map[string]string{}
		for _, line := range strings.Split(blk, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				r[k] = v
			}
		}
		rs = append(rs, r)
	}
	return rs
}

// wait returns the first report matching ok, within 60 s; what names it
// in the failure.
func (d *dhcpcdRun) wait(what string, ok func(map[string]string) bool) map[string]string {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Whether it exited is read before its reports: its last
		// report comes before it exits.
		var exited bool
		var err error
		select {
		case err = <-d.exited:
			d.exited <- err
			exited = true
		default:
		}
		for _, r := range d.reports() {
			if ok(r) {
				return r
			}
		}
		switch {
		case exited:
			d.t.Fatalf("dhcpcd exited (%v) and was not %s; it reported %v", err, what, d.reports())
		case time.Now().After(deadline):
			d.t.Fatalf("dhcpcd not %s within 60 s; it reported %v", what, d.reports())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkHost fails the test if dhcpcd's folders on the host changed.
func (d *dhcpcdRun) checkHost() {
	d.t.Helper()
	for dir, before := range d.host {
		if after := entries(d.t, dir); strings.Join(after, " ") != strings.Join(before, " ") {
			d.t.Errorf("dhcpcd wrote to the host's %s: %v, before %v", dir, after, before)
		}
	}
	if b, _ := os.ReadDir(d.db); len(b) == 0 {
		d.t.Errorf("dhcpcd wrote nothing in its own %s", d.db)
	}
}

// entries are the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// cliMAC is the client end of the lab's veth pair: node n9's MAC.
const cliMAC = "52:54:00:d6:00:02"

// lab is a server namespace and a client one joined by a veth pair (vsrv
// with 2001:db8:6::1/64, vcli with cliMAC; both namespaces are removed
// afterwards), a plan whose site "lab" knows node n9 by vcli's MAC, and
// the server's reservation config (pool 2001:db8:6::100–1ff, its leases in
// the test's folder).
type lab struct {
	t        *testing.T
	srv, cli string
	dir      string // the test's temporary folder
	leases   string // the pool's lease file
	cfg      Config
	plans    *boot.Live
	events   *recorder
}

// newLab makes the lab; tag keeps its namespaces apart from another
// test's. cliSysctls ("name=value" of net.ipv6.conf.vcli) are set before
// vcli comes up.
func newLab(t *testing.T, tag string, cliSysctls ...string) *lab {
	t.Helper()
	l := &lab{t: t, srv: fmt.Sprintf("bo-%ss-%d", tag, os.Getpid()), cli: fmt.Sprintf("bo-%sc-%d", tag, os.Getpid()), dir: t.TempDir(), events: &recorder{}}
	for _, ns := range []string{l.srv, l.cli} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "-n", l.srv, "link", "add", "vsrv", "address", "52:54:00:d6:00:01", "type", "veth", "peer", "name", "vcli", "address", cliMAC, "netns", l.cli)
	run(t, "ip", "-n", l.srv, "addr", "add", "2001:db8:6::1/64", "dev", "vsrv", "nodad")
	run(t, "ip", "-n", l.srv, "link", "set", "vsrv", "up")
	for _, s := range cliSysctls {
		run(t, "ip", "netns", "exec", l.cli, "sysctl", "-qw", "net.ipv6.conf.vcli."+s)
	}
	run(t, "ip", "-n", l.cli, "link", "set", "vcli", "up")
	waitLinkLocal(t, l.srv, "vsrv")
	waitLinkLocal(t, l.cli, "vcli")

	l.leases = filepath.Join(l.dir, "leases6-lab.json")
	l.plans = &boot.Live{}
	l.plans.Swap(&plan.Plan{Sites: []*plan.Site{{Name: "lab", UnknownNodes: plan.PolicyProvision,
		Nodes: []*plan.Node{{Name: "n9", Site: "lab", Identity: plan.Identity{MACs: []string{cliMAC}}}}}}})
	l.cfg = Config{ServerIP: netip.MustParseAddr("2001:db8:6::1"), Prefix: netip.MustParsePrefix("2001:db8:6::/64"),
		PoolFirst: netip.MustParseAddr("2001:db8:6::100"), PoolLast: netip.MustParseAddr("2001:db8:6::1ff"),
		LeaseTime: 10 * time.Minute, Mode: plan.DHCPReservation, HTTPPort: 8080, TFTP: true,
		Leases: &Pool{Path: l.leases}}
	return l
}

// serve runs the server with cfg in the server's namespace.
func (l *lab) serve(cfg Config) (stop func()) {
	return serveIn(l.t, l.srv, &Server{Plans: l.plans, Site: "lab", Config: cfg, Interface: "vsrv", Events: l.events,
		Log: slog.New(slog.NewTextHandler(tlog{l.t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
}

// needs fails t unless it runs as root (network namespaces) and finds
// each command; pairs of a command and its Debian package.
func needs(t *testing.T, cmdPkg ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces)")
	}
	for i := 0; i+1 < len(cmdPkg); i += 2 {
		if _, err := exec.LookPath(cmdPkg[i]); err != nil {
			t.Fatalf("needs %s (Debian package %s): %v", cmdPkg[i], cmdPkg[i+1], err)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitLinkLocal waits for dev's link-local address in ns.
func waitLinkLocal(t *testing.T, ns, dev string) {
	t.Helper()
	for range 50 {
		out := run(t, "ip", "-n", ns, "-6", "addr", "show", "dev", dev, "scope", "link")
		if strings.Contains(out, "fe80::") && !strings.Contains(out, "tentative") {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s in %s: no link-local address", dev, ns)
}

// serveIn runs s in network namespace ns: the socket is made on a thread
// moved into it (and never moved back: the thread ends with its
// goroutine). stop ends it and waits.
func serveIn(t *testing.T, ns string, s *Server) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		if err := testutil.EnterNetns(ns); err != nil {
			done <- err
			return
		}
		done <- s.Serve(ctx)
	}()
	select {
	case err := <-done:
		t.Fatalf("serve in %s: %v", ns, err)
	case <-time.After(300 * time.Millisecond):
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// tlog writes the server's log to the test's.
type tlog struct{ t *testing.T }

func (w tlog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// recorder keeps events.
type recorder struct {
	mu     sync.Mutex
	events []status.Event
}

func (r *recorder) Record(e status.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []status.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]status.Event(nil), r.events...)
}

// find is the first event giving ip, waiting a little for it: the server
// records a reply after sending it.
func (r *recorder) find(ip string) (status.Event, bool) {
	for range 50 {
		for _, e := range r.all() {
			if e.IP == ip {
				return e, true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return status.Event{}, false
}

// Finding 4 of the authority issue with a real client: while a host on the
// link floods the server with Requests from made-up DUIDs, each naming a
// pool address it was never offered (with the server's own identifier, as
// an attacker that saw one Advertise sends them), dhcpcd still binds, and
// the pool leases nothing but dhcpcd's address.
func TestDhcpcdDuringARequestFlood(t *testing.T) {
	needs(t, "ip", "iproute2", "dhcpcd", "dhcpcd-base")
	start := time.Now()
	l := newLab(t, "df", "addr_gen_mode=3")
	d := newDhcpcd(t, l)
	cfg := l.cfg
	pool := &Pool{Path: l.leases}
	cfg.Leases = pool
	stop := serveIn(t, l.srv, &Server{Plans: l.plans, Site: "lab", Config: cfg, Interface: "vsrv", Events: l.events,
		Log: slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		sent, replies, leased, refused int
		err                            error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.sent, r.replies, r.leased, r.refused, r.err = requestFlood(ctx, l.cli, cfg, 20000)
		done <- r
	}()
	time.Sleep(time.Second) // the flood is on
	began := time.Now()
	d.start()
	bound := d.wait("bound", func(r map[string]string) bool { return r["reason"] == "BOUND6" })
	t.Logf("figure: dhcpcd bound to %s in %v during the flood", bound[d6addr], time.Since(began).Round(10*time.Millisecond))
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("figure: the flood sent %d Requests, got %d Replies (%d NoAddrsAvail), %d of them with an address", r.sent, r.replies, r.refused, r.leased)
	if r.sent < 100 || r.replies == 0 {
		t.Fatalf("the flood sent %d and got %d Replies: it did not reach the server", r.sent, r.replies)
	}
	if r.leased != 0 || r.refused != r.replies {
		t.Errorf("%d made-up clients were leased an address they were never offered; %d of %d Replies said NoAddrsAvail, want all", r.leased, r.refused, r.replies)
	}
	if n := pool.Leases(); n != 1 {
		t.Errorf("the pool holds %d leases after the flood, want dhcpcd's one", n)
	}
	if lf := leaseOf(t, l.leases, cliMAC); lf.IP.String() != bound[d6addr] {
		t.Errorf("dhcpcd's lease in the file: %+v, want %s", lf, bound[d6addr])
	}
	d.stop()
	t.Logf("TestDhcpcdDuringARequestFlood: %s", time.Since(start).Round(time.Second))
}

// requestFlood sends, from network namespace ns, up to n Requests of
// made-up DUID-LL clients to All_DHCP_Relay_Agents_and_Servers on vcli,
// each naming the next address of cfg's pool, until ctx ends; it counts
// the Replies, and those that lease an address.
func requestFlood(ctx context.Context, ns string, cfg Config, n int) (sent, replies, leased, refused int, err error) {
	if err := testutil.EnterNetns(ns); err != nil { // the thread stays in ns and ends with its goroutine
		return 0, 0, 0, 0, err
	}
	conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6unspecified, Zone: "vcli"})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer conn.Close()
	dst := &net.UDPAddr{IP: net.ParseIP("ff02::1:2"), Port: 547, Zone: "vcli"}
	var mu sync.Mutex
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 1500)
		for {
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			m, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			msg, err := dhcpv6.MessageFromBytes(buf[:m])
			if err != nil || msg.Type() != dhcpv6.MessageTypeReply {
				continue
			}
			mu.Lock()
			replies++
			ia := msg.Options.OneIANA()
			if ia != nil {
				if a := ia.Options.OneAddress(); a != nil && a.ValidLifetime > 0 {
					leased++
				}
				if st := ia.Options.Status(); st != nil && st.StatusCode == iana.StatusNoAddrsAvail {
					refused++
				}
			}
			mu.Unlock()
		}
	}()
	sid := NewServerID(net.HardwareAddr{0x52, 0x54, 0, 0xd6, 0, 1})
	want := cfg.PoolFirst // the pool's addresses in turn
	for i := 0; i < n && ctx.Err() == nil; i, want = i+1, want.Next() {
		if cfg.PoolLast.Less(want) {
			want = cfg.PoolFirst
		}
		mac := net.HardwareAddr{0x52, 0x54, 0xaa, byte(i >> 16), byte(i >> 8), byte(i)}
		msg, err := dhcpv6.NewMessage(dhcpv6.WithClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: mac}),
			dhcpv6.WithServerID(sid), dhcpv6.WithIANA(dhcpv6.OptIAAddress{IPv6Addr: want.AsSlice(), PreferredLifetime: time.Hour, ValidLifetime: time.Hour}))
		if err != nil {
			return sent, 0, 0, 0, err
		}
		msg.MessageType = dhcpv6.MessageTypeRequest
		if _, err := conn.WriteToUDP(msg.ToBytes(), dst); err == nil {
			sent++
		}
		if i%200 == 199 {
			time.Sleep(20 * time.Millisecond) // about 10,000 a second at most
		}
	}
	<-ctx.Done()
	<-readDone
	mu.Lock()
	defer mu.Unlock()
	return sent, replies, leased, refused, nil
}
