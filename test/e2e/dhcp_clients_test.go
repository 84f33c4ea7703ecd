//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/lease"
	"github.com/bootops/bootops/internal/testutil"
)

// A reservation-mode site with a pool of ten addresses on an isolated LAN:
// 200 DISCOVERs from random MACs must not use it up — a real ISC dhclient
// and a real busybox udhcpc that come after each get an address, and only
// those two leases are written down. Packets no real client can send (a
// multicast or all-zero client hardware address, which the kernel refuses
// on an interface; a REQUEST with a 3-byte option 50) get no answer.
func TestReservationPoolFlood(t *testing.T) {
	t.Parallel()
	l := newClientLab(t)
	l.serveDHCPOnly(vars{"LeaseSeconds": "600"})
	l.port("flood", "52:54:00:e2:f0:01")
	l.port("dhcl", "52:54:00:e2:f0:02")
	l.port("udhcp", "52:54:00:e2:f0:03")
	time.Sleep(time.Second) // let the new ports settle

	flood := filepath.Join(l.dir, "dhcpflood")
	if out, err := exec.Command("go", "build", "-o", flood, "./dhcpflood").CombinedOutput(); err != nil {
		t.Fatalf("build dhcpflood: %v\n%s", err, out)
	}
	floodRun := func(args ...string) (sent, replies int) {
		t.Helper()
		out := run(t, "timeout", append([]string{"60", "ip", "netns", "exec", l.dhc, flood, "-i", "flood"}, args...)...)
		if _, err := fmt.Sscanf(strings.TrimSpace(out), "sent %d replies %d", &sent, &replies); err != nil {
			t.Fatalf("dhcpflood %v: %q", args, out)
		}
		return sent, replies
	}
	// The flood: every DISCOVER is answered (an offer gives way to the
	// next when the pool is full), and nothing is written down.
	sent, replies := floodRun("-n", "200", "-wait", "3s")
	t.Logf("flood: %d DISCOVERs, %d offers", sent, replies)
	if replies < 180 {
		t.Errorf("only %d of 200 flood DISCOVERs got an offer: is the server answering at all?", replies)
	}
	leases := filepath.Join(l.dir, "state", "leases-lab.json")
	if b, err := os.ReadFile(leases); err == nil && strings.Contains(string(b), `"ip"`) {
		t.Errorf("the flood's DISCOVERs left leases:\n%s", b)
	}

	// Real clients, one after the other, right after the flood.
	dhclient := l.dhclient("dhcl")
	udhcpc := l.udhcpc("udhcp")
	pool := func(ip string) bool {
		a, err := netip.ParseAddr(ip)
		return err == nil && !a.Less(netip.MustParseAddr("198.18.0.100")) && !netip.MustParseAddr("198.18.0.109").Less(a)
	}
	if !pool(dhclient) || !pool(udhcpc) || dhclient == udhcpc {
		t.Errorf("dhclient got %q, udhcpc got %q: want two addresses of the pool", dhclient, udhcpc)
	}

	// What no real client can send: no answer.
	for _, args := range [][]string{
		{"-mac", "01:00:5e:00:00:01"},
		{"-mac", "00:00:00:00:00:00"},
		{"-mac", "ff:ff:ff:ff:ff:ff"},
		{"-opt50-len", "3"},
		{"-opt50-len", "0"},
	} {
		if _, replies := floodRun(append(args, "-n", "3", "-wait", "2s")...); replies != 0 {
			t.Errorf("dhcpflood %v: %d replies, want none", args, replies)
		}
	}

	// Only the real clients' leases are kept, and the drops are counted.
	b, _ := os.ReadFile(leases)
	kept, err := lease.Read(leases) // as a restart reads the journal
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if len(kept) != 2 || kept["52:54:00:e2:f0:02"].IP.String() != dhclient || kept["52:54:00:e2:f0:03"].IP.String() != udhcpc {
		t.Errorf("leases kept:\n%s\nwant only dhclient's %s and udhcpc's %s", b, dhclient, udhcpc)
	}
	metrics := run(t, "ip", "netns", "exec", l.lan, "busybox", "wget", "-qO-", "http://198.18.0.1:8080/metrics")
	for reason, want := range map[string]int{"multicast_mac": 3, "zero_mac": 3, "broadcast_mac": 3, "malformed_option": 6} {
		m := regexp.MustCompile(`bootops_dhcp_dropped_total\{reason="` + reason + `"\} (\d+)`).FindStringSubmatch(metrics)
		if m == nil || m[1] != fmt.Sprint(want) {
			t.Errorf("bootops_dhcp_dropped_total{reason=%q}: %v, want %d", reason, m, want)
		}
	}
	if !strings.Contains(metrics, `bootops_dhcp_pool_exhausted_total{site="lab"} 0`) {
		t.Errorf("pool exhausted, or the series is missing:\n%s", grepLines(metrics, "bootops_dhcp"))
	}
}

// The Micro-OS's DHCP client keeps its lease: busybox udhcpc as /init
// runs it (no -q: it stays once bound; in the foreground here) renews
// from bootops' DHCPv4 pool at half the lease (60 s, the least a site
// may give), keeps its address, and bootops writes the later end down.
// A machine held in the Micro-OS for hours keeps an address the pool
// will not give to another.
func TestUdhcpcRenews(t *testing.T) {
	t.Parallel()
	l := newClientLab(t)
	l.serveDHCPOnly(vars{"LeaseSeconds": "60"})
	const mac = "52:54:00:e2:f0:04"
	l.port("udr", mac)
	time.Sleep(time.Second) // let the new port settle

	// The script writes down what udhcpc tells it and configures the
	// address, as the Micro-OS's does, so the renewal goes out unicast.
	events := filepath.Join(l.dir, "udhcpc.events")
	script := filepath.Join(l.dir, "udhcpc-script")
	os.WriteFile(script, []byte("#!/bin/sh\necho \"$(date +%s) $1 $ip\" >> "+events+"\n"+
		"[ \"$1\" = bound ] && ip addr add \"$ip/$mask\" dev \"$interface\"\nexit 0\n"), 0o755)
	start := time.Now()
	// 45 s: past the renewal at 30 s, bounded.
	log, _ := exec.Command("timeout", "45", "ip", "netns", "exec", l.dhc, "busybox", "udhcpc", "-f", "-i", "udr", "-n", "-t", "5", "-T", "2", "-s", script).CombinedOutput()
	b, _ := os.ReadFile(events)
	bound := regexp.MustCompile(`(?m)^(\d+) bound (\S+)$`).FindStringSubmatch(string(b))
	renew := regexp.MustCompile(`(?m)^(\d+) renew (\S+)$`).FindStringSubmatch(string(b))
	if bound == nil || renew == nil || renew[2] != bound[2] {
		t.Fatalf("want bound, then renew with the same address; script saw:\n%s\nudhcpc:\n%s", b, log)
	}
	var bt, rt int64
	fmt.Sscan(bound[1], &bt)
	fmt.Sscan(renew[1], &rt)
	t.Logf("bound %s %d s after the start, renewed %d s after that", bound[2], bt-start.Unix(), rt-bt)
	if d := rt - bt; d < 25 || d > 40 {
		t.Errorf("renewed %d s after bound, want about 30 (half the lease)", d)
	}
	leases, _ := os.ReadFile(filepath.Join(l.dir, "state", "leases-lab.json"))
	kept, err := lease.Read(filepath.Join(l.dir, "state", "leases-lab.json"))
	if err != nil {
		t.Fatalf("%v\n%s", err, leases)
	}
	if k := kept[mac]; k.IP.String() != bound[2] || k.Expires.Unix() < rt+55 {
		t.Errorf("bootops' lease of %s: %+v, want %s until at least the renewal + 55 s (%s)", mac, k, bound[2], time.Unix(rt+55, 0).UTC())
	}
}

// serveDHCPOnly runs bootops serve on br0 with the reservation-pool
// repository (placeholderRepo), its lease time in v: DHCP and HTTP, no
// TFTP, as the clients here never boot.
func (l *lab) serveDHCPOnly(v vars) {
	l.t.Helper()
	repo, ipxe := l.placeholderRepo("reservation-pool", v)
	l.serve(repo, "--tftp-addr", "", "--ipxe-dir", ipxe) // the later flags win
}

// dhclient runs ISC dhclient on iface in namespace dhc until it is bound
// (at most 60 s) and returns its address. Its script only writes down what
// it is told: nothing outside the namespace changes (no resolv.conf).
func (l *lab) dhclient(iface string) string {
	l.t.Helper()
	return l.runDhclient(iface, "dhclient", "-4", "BOUND", "new_ip_address")
}

// dhclient6 is dhclient -6 (stateful: IA_NA), once iface has a usable
// link-local address to send from.
func (l *lab) dhclient6(iface string) string {
	l.t.Helper()
	l.linkLocal(l.dhc, iface)
	return l.runDhclient(iface, "dhclient6", "-6", "BOUND6", "new_ip6_address")
}

// runDhclient runs dhclient with family flag (-4, -6) as process name until
// its script sees reason bound, and returns the script's variable addr.
func (l *lab) runDhclient(iface, name, family, bound, addr string) string {
	l.t.Helper()
	out := filepath.Join(l.dir, name+".events")
	script := filepath.Join(l.dir, name+"-script")
	os.WriteFile(script, []byte("#!/bin/sh\necho \"$reason $"+addr+"\" >> "+out+"\n"), 0o755)
	conf := filepath.Join(l.dir, name+".conf")
	os.WriteFile(conf, []byte("timeout 60;\nretry 5;\n"), 0o644)
	// ip netns exec execs dhclient: the lab's cleanup kills it.
	l.start(name, "ip", "netns", "exec", l.dhc, "dhclient", family, "-d", "-1", "-v", "-cf", conf, "-sf", script,
		"-lf", filepath.Join(l.dir, name+".leases"), "-pf", filepath.Join(l.dir, name+".pid"), iface)
	re := regexp.MustCompile(`(?m)^` + bound + ` (\S+)$`)
	var got string
	if testutil.Poll(60*time.Second, 200*time.Millisecond, func() bool {
		b, _ := os.ReadFile(out)
		if m := re.FindSubmatch(b); m != nil {
			got = string(m[1])
		}
		return got != ""
	}) {
		return got
	}
	b, _ := os.ReadFile(out)
	l.t.Errorf("dhclient %s got no address in 60 s; script saw:\n%s\nlog:\n%s", family, b, testutil.Tail(l.log(name), 30))
	return ""
}

// udhcpc runs busybox udhcpc on iface in namespace dhc: it quits once
// bound (-q) or after its tries (-n), and its script only writes down the
// address.
func (l *lab) udhcpc(iface string) string {
	l.t.Helper()
	out := filepath.Join(l.dir, "udhcpc.events")
	script := filepath.Join(l.dir, "udhcpc-script")
	os.WriteFile(script, []byte("#!/bin/sh\necho \"$1 $ip\" >> "+out+"\n"), 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log, err := exec.CommandContext(ctx, "ip", "netns", "exec", l.dhc, "busybox", "udhcpc", "-f", "-i", iface, "-n", "-q", "-t", "10", "-T", "3", "-s", script).CombinedOutput()
	b, _ := os.ReadFile(out)
	if m := regexp.MustCompile(`(?m)^bound (\S+)$`).FindSubmatch(b); m != nil {
		return string(m[1])
	}
	l.t.Errorf("udhcpc got no address (%v); script saw:\n%s\nlog:\n%s", err, b, log)
	return ""
}
