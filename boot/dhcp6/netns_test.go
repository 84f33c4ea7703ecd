//go:build e2e

package dhcp6

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// The real server in a network namespace, against ISC dhclient -6 in
// another one over a veth pair (2001:db8:6::/64; both removed
// afterwards). Needs root, ip and dhclient: it fails without them.
//
// Reservation mode: dhclient, looking like iPXE (user class "iPXE"), gets
// an address of the pool and the script URL; the lease survives a
// restart of the server; dhclient's Release frees it. Proxy mode: dhclient
// ignores an Advertise without an address (RFC 8415 §18.2.9) and takes a
// Reply to its Information-Request, boot file URL included.
func TestDhclient(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces)")
	}
	for _, bin := range []string{"ip", "dhclient"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("needs %s: %v", bin, err)
		}
	}
	srv, cli := fmt.Sprintf("bo-d6s-%d", os.Getpid()), fmt.Sprintf("bo-d6c-%d", os.Getpid())
	for _, ns := range []string{srv, cli} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "-n", srv, "link", "add", "vsrv", "address", "52:54:00:d6:00:01", "type", "veth", "peer", "name", "vcli", "address", "52:54:00:d6:00:02", "netns", cli)
	run(t, "ip", "-n", srv, "addr", "add", "2001:db8:6::1/64", "dev", "vsrv", "nodad")
	run(t, "ip", "-n", srv, "link", "set", "vsrv", "up")
	run(t, "ip", "-n", cli, "link", "set", "vcli", "up")
	waitLinkLocal(t, srv, "vsrv")
	waitLinkLocal(t, cli, "vcli")

	dir := t.TempDir()
	leases := filepath.Join(dir, "leases6-lab.json")
	p := &plan.Plan{Sites: []*plan.Site{{Name: "lab", UnknownNodes: plan.PolicyProvision,
		Nodes: []*plan.Node{{Name: "n9", Site: "lab", Identity: plan.Identity{MACs: []string{"52:54:00:d6:00:02"}}}}}}}
	plans := &boot.Live{}
	plans.Swap(p)
	cfg := Config{ServerIP: netip.MustParseAddr("2001:db8:6::1"), Prefix: netip.MustParsePrefix("2001:db8:6::/64"),
		PoolFirst: netip.MustParseAddr("2001:db8:6::100"), PoolLast: netip.MustParseAddr("2001:db8:6::1ff"),
		LeaseTime: 10 * time.Minute, Mode: plan.DHCPReservation, HTTPPort: 8080, TFTP: true,
		Leases: &Pool{Path: leases}}
	events := &recorder{}
	serve := func(cfg Config) (stop func()) {
		return serveIn(t, srv, &Server{Plans: plans, Site: "lab", Config: cfg, Interface: "vsrv", Events: events,
			Log: slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	}

	conf := filepath.Join(dir, "dhclient.conf")
	if err := os.WriteFile(conf, []byte(dhclientConf), 0o644); err != nil {
		t.Fatal(err)
	}
	// dhclient runs /bin/true instead of its script (it configures
	// nothing) and goes to the background once bound.
	dhclient := func(name string, args ...string) (lease string, ok bool) {
		lf, pf := filepath.Join(dir, name+".leases"), filepath.Join(dir, name+".pid")
		base := []string{"netns", "exec", cli, "timeout", "40", "dhclient", "-6", "-1", "-cf", conf, "-lf", lf, "-pf", pf, "-sf", "/bin/true"}
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

	stop := serve(cfg)
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
	ev, ok := events.find(addr.String())
	if !ok || ev.Kind != status.KindDHCP || ev.Node != "n9" || ev.MAC != "52:54:00:d6:00:02" || !strings.Contains(ev.Message, "DHCPv6") {
		t.Errorf("no event for the lease: %+v (all: %+v)", ev, events.all())
	}
	stop()
	exec.Command("ip", "netns", "exec", cli, "dhclient", "-6", "-x", "-pf", filepath.Join(dir, "first.pid")).Run()

	// Restart: a new server and pool on the same file; a fresh dhclient
	// (no lease file: a new Solicit) gets the same address.
	cfg.Leases = &Pool{Path: leases}
	stop = serve(cfg)
	lease, _ = dhclient("second")
	if m := iaaddr.FindStringSubmatch(lease); m == nil || m[1] != addr.String() {
		t.Fatalf("after restart: %v, want %v:\n%s", m, addr, lease)
	}
	// Release.
	run(t, "ip", "netns", "exec", cli, "timeout", "20", "dhclient", "-6", "-r", "-cf", conf, "-lf", filepath.Join(dir, "second.leases"), "-pf", filepath.Join(dir, "second.pid"), "-sf", "/bin/true", "vcli")
	if mac := cfg.Leases.(*Pool).MACOf(addr.String()); mac != "" {
		t.Errorf("after Release %v is still leased to %s", addr, mac)
	}
	stop()

	// Proxy mode: no address in the Advertise, so dhclient -6 takes none
	// (it gives up after its timeout); an Information-Request is answered.
	cfg.Mode, cfg.Leases = plan.DHCPProxy, nil
	stop = serve(cfg)
	defer stop()
	if err := os.WriteFile(conf, []byte("timeout 8;\n"+dhclientConf), 0o644); err != nil {
		t.Fatal(err)
	}
	if lease, ok := dhclient("proxy"); ok || iaaddr.MatchString(lease) {
		t.Errorf("dhclient took an Advertise without an address:\n%s", lease)
	}
	// A stateless client writes no lease: its script is given the options.
	env, script := filepath.Join(dir, "info.env"), filepath.Join(dir, "env.sh")
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
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			done <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
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
