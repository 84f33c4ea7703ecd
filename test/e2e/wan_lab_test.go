//go:build e2e

package e2e

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/test/bench/wan/wanem"
)

// The WAN lab: a store (an edge site) whose machines reach the bootops
// server only across the Internet, through the store router's NAT.
//
//	store  bo-lan-ID   br0 198.18.60.2/24, the VMs' taps
//	                     │ (a port of br0)
//	router bo-dhcp-ID  eth0 198.18.60.1/24: dnsmasq (addresses only)
//	                   eth1 198.19.61.2/24: default route, masquerade
//	                     │
//	wan    bo-wan-ID   rtr 198.19.61.1/24, srv 198.19.60.1/24: routes,
//	                     │ shaped and cut (package wanem)
//	server bo-srv-ID   eth0 198.19.60.10/24: bootops serve
//
// The store is a lab (newLabNS) with other addresses: namespace lan holds
// br0 and the VMs (the vm helpers work unchanged), namespace dhc is the
// router. The server has a route to the WAN's 198.19.0.0/16 only, the wan
// namespace none to the store's LAN: a packet from a store address that
// escaped the NAT would get no answer. The link's delay, loss and rate
// apply to each direction (wanem: this kernel has no netem).
type wanLab struct {
	*lab
	srv, wan string // the server's and the WAN's namespaces
	link     *wanem.Link
}

const (
	wanServer   = "198.19.60.10"                  // the bootops server, across the WAN
	wanRouter   = "198.19.61.2"                   // the store router's WAN address: the only source the server sees
	storeRouter = "198.18.60.1"                   // the router on the store LAN: its gateway and DHCP server
	storeHost   = "198.18.60.2"                   // br0's own address: a store machine for tests without VMs
	urlWAN      = "http://" + wanServer + ":8080" // bootops, as wanLab.serve starts it
	imagesWAN   = "http://" + wanServer + ":8081" // TestWANLab's image server
)

// newWANLab builds the WAN lab with the link shaped s; with dhcp, dnsmasq
// on the router hands out 198.18.60.100–199 (the router the gateway),
// without, nothing answers DHCP on the store LAN. Its cleanup ends the
// link, kills what runs in the namespaces, removes them, and shows the
// link's counters on failure.
func newWANLab(t *testing.T, s wanem.Shape, dhcp bool) *wanLab {
	t.Helper()
	needWAN(t)
	w := &wanLab{}
	t.Cleanup(w.close) // registered first, so it runs after the lab's own cleanup: the processes are dead by then
	w.lab = newLabNS(t, true)
	id := strings.TrimPrefix(w.lan, "bo-lan-")
	w.srv, w.wan = "bo-srv-"+id, "bo-wan-"+id
	w.storeLAN()
	w.wanLinks()
	w.masquerade()
	link, err := wanem.Start(w.wan, "srv", "rtr", s)
	if err != nil {
		t.Fatal(err)
	}
	w.link = link
	if dhcp {
		w.start("dnsmasq", "ip", "netns", "exec", w.dhc, "dnsmasq", "--keep-in-foreground", "--no-daemon", "--port=0",
			"--interface=eth0", "--bind-interfaces", "--dhcp-range=198.18.60.100,198.18.60.199,255.255.255.0,10m",
			"--dhcp-leasefile="+filepath.Join(w.dir, "leases"), "--log-dhcp", "--pid-file="+filepath.Join(w.dir, "dnsmasq.pid"))
		w.started("dnsmasq", "DHCP, IP range", 10*time.Second)
	}
	return w
}

// needWAN fails the test unless it runs as root with the WAN lab's tools.
func needWAN(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the WAN lab needs root (network namespaces, TUN devices, NAT): run it as root, as CI does")
	}
	for bin, pkg := range map[string]string{"ip": "iproute2", "nft": "nftables", "dnsmasq": "dnsmasq-base", "busybox": "busybox-static"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing: run `make e2e`, which installs %s", bin, pkg)
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Fatalf("the WAN link needs TUN devices: %v", err)
	}
}

// storeLAN readdresses the lab: br0 becomes a store machine behind the
// router, the DHCP namespace's eth0 the router's LAN side.
func (w *wanLab) storeLAN() {
	t := w.t
	run(t, "ip", "-n", w.lan, "addr", "del", "198.18.0.1/24", "dev", "br0")
	run(t, "ip", "-n", w.lan, "addr", "add", storeHost+"/24", "dev", "br0")
	run(t, "ip", "-n", w.lan, "route", "add", "default", "via", storeRouter)
	run(t, "ip", "-n", w.dhc, "addr", "del", "198.18.0.2/24", "dev", "eth0")
	run(t, "ip", "-n", w.dhc, "addr", "add", storeRouter+"/24", "dev", "eth0")
}

// wanLinks makes the server's and the WAN's namespaces and joins router,
// WAN and server.
func (w *wanLab) wanLinks() {
	t := w.t
	for _, ns := range []string{w.srv, w.wan} {
		run(t, "ip", "netns", "add", ns)
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "-n", w.wan, "link", "add", "name", "rtr", "type", "veth", "peer", "name", "eth1", "netns", w.dhc)
	run(t, "ip", "-n", w.wan, "link", "add", "name", "srv", "type", "veth", "peer", "name", "eth0", "netns", w.srv)
	for _, a := range [][3]string{{w.wan, "rtr", "198.19.61.1/24"}, {w.wan, "srv", "198.19.60.1/24"},
		{w.dhc, "eth1", wanRouter + "/24"}, {w.srv, "eth0", wanServer + "/24"}} {
		run(t, "ip", "-n", a[0], "addr", "add", a[2], "dev", a[1])
		run(t, "ip", "-n", a[0], "link", "set", a[1], "up")
	}
	run(t, "ip", "-n", w.dhc, "route", "add", "default", "via", "198.19.61.1")
	run(t, "ip", "-n", w.srv, "route", "add", "198.19.0.0/16", "via", "198.19.60.1")
}

// masquerade makes the router forward the store's packets to the WAN with
// its own WAN address as their source (nftables).
func (w *wanLab) masquerade() {
	conf := filepath.Join(w.dir, "nat.nft")
	os.WriteFile(conf, []byte(`table ip nat {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "eth1" masquerade
	}
}
`), 0o644)
	run(w.t, "ip", "netns", "exec", w.dhc, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	run(w.t, "ip", "netns", "exec", w.dhc, "nft", "-f", conf)
}

// shape changes the link's delay, loss and rate (each direction).
func (w *wanLab) shape(s wanem.Shape) { w.link.Set(s) }

// cut cuts the link now (every packet dropped, in flight or new; no
// connection is told) and restores it after d; the channel closes once it
// is back.
func (w *wanLab) cut(d time.Duration) <-chan struct{} {
	w.link.Down()
	back := make(chan struct{})
	time.AfterFunc(d, func() {
		w.link.Up()
		close(back)
	})
	return back
}

// serve starts bootops in the server's namespace, HTTP (and TFTP) on
// wanServer, no DHCP (none crosses a WAN); flags after these win.
func (w *wanLab) serve(repo string, flags ...string) {
	w.t.Helper()
	w.serveIn(w.srv, "eth0", repo, wanServer+":8080", wanServer+":69", append([]string{"--dhcp", "off"}, flags...)...)
}

// inStore runs argv in the store's namespace (as storeHost) and returns
// its output and error.
func (w *wanLab) inStore(argv ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", w.lan}, argv...)...).CombinedOutput()
	return string(out), err
}

// fetch gets url from the store into file (busybox wget), killed after d:
// busybox 1.35's own wget -T crashes.
func (w *wanLab) fetch(d time.Duration, url, file string) (string, error) {
	return w.inStore("timeout", fmt.Sprint(d.Seconds()), "busybox", "wget", "-q", "-O", file, url)
}

// dhcpClient runs busybox udhcpc (at most 3 tries, 2 s apart) on a new
// port of br0 in the store and returns what its script was told once bound
// (its environment), or nil when no server answered.
func (w *wanLab) dhcpClient(name string) map[string]string {
	w.t.Helper()
	run(w.t, "ip", "-n", w.lan, "link", "add", "name", "v"+name, "type", "veth", "peer", "name", name)
	run(w.t, "ip", "-n", w.lan, "link", "set", "v"+name, "master", "br0", "up")
	run(w.t, "ip", "-n", w.lan, "link", "set", name, "up")
	out := filepath.Join(w.dir, name+".env")
	script := filepath.Join(w.dir, name+"-script")
	os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = bound ] && env > "+out+"\nexit 0\n"), 0o755)
	w.inStore("timeout", "30", "busybox", "udhcpc", "-f", "-i", name, "-n", "-q", "-t", "3", "-T", "2", "-s", script)
	b, err := os.ReadFile(out)
	if err != nil {
		return nil
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

func (w *wanLab) close() {
	if w.link != nil {
		ab, ba := w.link.Stats()
		if w.t.Failed() {
			w.t.Logf("---- WAN link (%s)\nserver → store: %+v\nstore → server: %+v", w.link.Shape(), ab, ba)
		}
		w.link.Close()
	}
	for _, ns := range []string{w.srv, w.wan} {
		if ns != "" {
			killNetns(ns)
			exec.Command("ip", "netns", "del", ns).Run()
		}
	}
}

// minRTT pings the server from the store and fails t unless even the
// fastest round trip took twice delay.
func (w *wanLab) minRTT(t *testing.T, delay time.Duration) {
	t.Helper()
	out, err := w.inStore("busybox", "ping", "-c", "5", "-q", wanServer)
	m := regexp.MustCompile(`min/avg/max = ([0-9.]+)/`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("ping from the store: %v\n%s", err, out)
	}
	minRTT, _ := strconv.ParseFloat(m[1], 64)
	if want := 2 * delay.Seconds() * 1000; minRTT < want {
		t.Errorf("round trip %.1f ms, want at least %.0f ms (2 × %s):\n%s", minRTT, want, delay, out)
	}
}

// wanShape is the WAN the tests assume unless they say otherwise: 50 ms
// each way, 1 % loss, 20 Mbit/s.
var wanShape = wanem.Shape{Delay: 50 * time.Millisecond, Loss: 0.01, Rate: 20_000_000}

// TestWANLab checks the lab itself, without a VM: a store machine fetches
// a file from a server across the WAN; the server sees the router's WAN
// address, never a store address; the link is as slow and as far as
// shaped; a cut stops traffic and the link comes back after it.
func TestWANLab(t *testing.T) {
	w := newWANLab(t, wanShape, true)
	files := filepath.Join(w.dir, "files")
	os.MkdirAll(files, 0o755)
	blob := make([]byte, 4<<20)
	rand.Read(blob)
	os.WriteFile(filepath.Join(files, "blob"), blob, 0o644)
	w.start("images", "ip", "netns", "exec", w.srv, imageServer, "-dir", files, "-addr", wanServer+":8081")
	waitFor(t, "the server answering across the WAN", 30*time.Second, func() bool {
		_, err := w.fetch(5*time.Second, imagesWAN+"/", "/dev/null")
		return err == nil || strings.Contains(w.log("images"), "GET /")
	})

	repo := writeRepo(t, filepath.Join(w.dir, "repo"), nil, "base-placeholder")
	testutil.WriteFile(t, repo, "sites/store/site.yaml", `apiVersion: bootops.dev/v1alpha1
kind: Site
name: store
network: {interface: eth0, serverAddress: `+wanServer+`, dhcp: proxy}
defaultProfile: test-os
`)
	w.serve(repo, "--tftp-addr", "")

	t.Run("DHCP hands out addresses only", func(t *testing.T) {
		env := w.dhcpClient("cli")
		if env == nil {
			t.Fatalf("no DHCP lease on the store LAN; dnsmasq:\n%s", w.log("dnsmasq"))
		}
		if ip := env["ip"]; !strings.HasPrefix(ip, "198.18.60.1") || len(ip) != len("198.18.60.100") {
			t.Errorf("leased %q, want an address of 198.18.60.100-199", ip)
		}
		if env["router"] != storeRouter {
			t.Errorf("gateway %q, want the router %s", env["router"], storeRouter)
		}
		for _, boot := range []string{"boot_file", "bootfile", "tftp", "sname", "opt43", "opt60"} {
			if v, ok := env[boot]; ok {
				t.Errorf("the lease carries a boot option: %s=%s", boot, v)
			}
		}
	})

	t.Run("bootops serves across the WAN", func(t *testing.T) {
		out, err := w.inStore("timeout", "20", "busybox", "wget", "-q", "-O", "-", urlWAN+"/healthz")
		if err != nil || strings.TrimSpace(out) != "ok" {
			t.Fatalf("GET /healthz from the store: %v %q", err, out)
		}
	})

	t.Run("fetch through the NAT", func(t *testing.T) {
		got := filepath.Join(w.dir, "got")
		start := time.Now()
		if out, err := w.fetch(60*time.Second, imagesWAN+"/blob", got); err != nil {
			t.Fatalf("wget from the store: %v\n%s", err, out)
		}
		took := time.Since(start)
		if b, _ := os.ReadFile(got); string(b) != string(blob) {
			t.Fatalf("the store got %d bytes, not the server's 4 MiB", len(b))
		}
		// The rate bounds the time from below, whatever the machine's load.
		if least := time.Duration(len(blob)*8) * time.Second / time.Duration(wanShape.Rate); took < least {
			t.Errorf("4 MiB in %s, faster than %d bit/s allow (%s)", took, wanShape.Rate, least)
		}
		from := regexp.MustCompile(`GET /blob .*from=(\S+):\d+`).FindAllStringSubmatch(w.log("images"), -1)
		if len(from) == 0 {
			t.Fatalf("the server logged no GET /blob:\n%s", w.log("images"))
		}
		for _, m := range from {
			if m[1] != wanRouter {
				t.Errorf("the server saw the store as %s, want the router's WAN address %s", m[1], wanRouter)
			}
		}
		if log := w.log("images"); strings.Contains(log, "from=198.18.") {
			t.Errorf("a store address reached the server:\n%s", log)
		}
	})

	t.Run("round trip at least twice the delay", func(t *testing.T) {
		w.minRTT(t, wanShape.Delay)
		// Reshaped, and back.
		far := wanShape
		far.Delay = 150 * time.Millisecond
		w.shape(far)
		w.minRTT(t, far.Delay)
		w.shape(wanShape)
	})

	t.Run("a cut stops traffic, then it comes back", func(t *testing.T) {
		_, before := w.link.Stats()
		back := w.cut(3 * time.Second)
		out, err := w.fetch(time.Second, imagesWAN+"/blob", "/dev/null")
		select {
		case <-back:
			t.Fatal("the cut was over before the fetch during it ended: the machine is too slow for this check")
		default:
		}
		if err == nil {
			t.Errorf("a fetch during the cut succeeded:\n%s", out)
		}
		<-back
		if _, after := w.link.Stats(); after.Cut <= before.Cut {
			t.Errorf("the link dropped nothing during the cut (store → server, cut: %d before, %d after)", before.Cut, after.Cut)
		}
		var last string
		if !testutil.Poll(30*time.Second, 500*time.Millisecond, func() bool {
			out, err := w.fetch(20*time.Second, imagesWAN+"/blob", "/dev/null")
			last = fmt.Sprint(err, " ", out)
			return err == nil
		}) {
			t.Fatalf("the link did not come back within 30 s of the cut's end: %s", last)
		}
	})

	t.Run("no DHCP when asked for none", func(t *testing.T) {
		quiet := newWANLab(t, wanShape, false)
		if env := quiet.dhcpClient("cli"); env != nil {
			t.Errorf("a DHCP server answered on a store LAN without one: %v", env)
		}
	})
}
