//go:build e2e

package floatip

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// The site's addresses move between two members on one LAN, as seen by a
// machine there: three namespaces (a machine with the LAN's bridge, two
// members on it; 198.18.5.0/24 and 2001:db8:5::/64, removed afterwards).
// Needs root, ip and busybox (its ping); fails without them.
//
// Member a takes 198.18.5.1 and 2001:db8:5::1: the machine reaches both at
// a's hardware address. Then a dies without giving them back (kill -9:
// the kernel keeps them) and b takes them: the gratuitous ARP and the
// overriding Neighbor Advertisement move the machine's entries to b at
// once, no entry left to time out. a restarts and gives them back; b
// still answers.
func TestAddressesMove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces): run it in make test")
	}
	id := fmt.Sprint(os.Getpid() % 100000)
	lan, a, b := "fl-lan-"+id, "fl-a-"+id, "fl-b-"+id
	ip := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, ns := range []string{lan, a, b} {
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		ip("netns", "add", ns)
		ip("netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
		ip("-n", ns, "link", "set", "lo", "up")
	}
	ip("-n", lan, "link", "add", "br0", "type", "bridge")
	ip("-n", lan, "addr", "add", "198.18.5.254/24", "dev", "br0")
	ip("-n", lan, "addr", "add", "2001:db8:5::fe/64", "dev", "br0", "nodad")
	ip("-n", lan, "link", "set", "br0", "up")
	macs := map[string]string{}
	for i, m := range []string{a, b} {
		port := fmt.Sprintf("p%d", i)
		ip("-n", lan, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", m)
		ip("-n", lan, "link", "set", port, "master", "br0", "up")
		ip("-n", m, "addr", "add", fmt.Sprintf("198.18.5.%d/24", 11+i), "dev", "eth0")
		ip("-n", m, "addr", "add", fmt.Sprintf("2001:db8:5::%d/64", 11+i), "dev", "eth0", "nodad")
		ip("-n", m, "link", "set", "eth0", "up")
		f := strings.Fields(ip("-n", m, "-br", "link", "show", "dev", "eth0"))
		macs[m] = f[2]
	}
	v4, v6 := netip.MustParseAddr("198.18.5.1"), netip.MustParseAddr("2001:db8:5::1")
	// The members' link-local addresses, which the advertisements come from.
	for _, m := range []string{a, b} {
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(ip("-n", m, "-6", "addr", "show", "dev", "eth0", "scope", "link"), "fe80") || strings.Contains(ip("-n", m, "-6", "addr", "show", "dev", "eth0"), "tentative") {
			if time.Now().After(deadline) {
				t.Fatalf("%s has no link-local address after 20 s:\n%s", m, ip("-n", m, "-6", "addr"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	take := func(m string) {
		t.Helper()
		for _, addr := range []netip.Addr{v4, v6} {
			if err := inNetns(m, func() error { return Take("eth0", addr) }); err != nil {
				t.Fatalf("%s takes %s: %v", m, addr, err)
			}
		}
	}
	// reached pings addr from the machine and returns the hardware address
	// its neighbour table has for it.
	reached := func(addr netip.Addr) string {
		t.Helper()
		ping := "ping"
		if addr.Is6() {
			ping = "ping6"
		}
		if out, err := exec.Command("ip", "netns", "exec", lan, "busybox", ping, "-c", "1", "-W", "5", addr.String()).CombinedOutput(); err != nil {
			t.Errorf("the machine does not reach %s: %v\n%s", addr, err, out)
		}
		f := strings.Fields(ip("-n", lan, "neigh", "show", addr.String()))
		for i := range f {
			if f[i] == "lladdr" && i+1 < len(f) {
				return f[i+1]
			}
		}
		return ""
	}
	take(a)
	for _, addr := range []netip.Addr{v4, v6} {
		if got := reached(addr); got != macs[a] {
			t.Errorf("%s held by a: the machine has it at %q, want a's %s", addr, got, macs[a])
		}
		if has, err := inNetnsHas(a, addr); err != nil || !has {
			t.Errorf("a holds %s: %v %v", addr, has, err)
		}
	}
	// a dies keeping them; b takes them.
	take(b)
	for _, addr := range []netip.Addr{v4, v6} {
		f := strings.Fields(ip("-n", lan, "neigh", "show", addr.String()))
		if !strings.Contains(strings.Join(f, " "), "lladdr "+macs[b]) {
			t.Errorf("%s taken by b while a keeps it: the machine's entry %q, want b's %s at once", addr, strings.Join(f, " "), macs[b])
		}
		if got := reached(addr); got != macs[b] {
			t.Errorf("%s taken by b: the machine reaches it at %q, want b's %s", addr, got, macs[b])
		}
	}
	// a restarts: it gives them back; b answers still.
	for _, addr := range []netip.Addr{v4, v6} {
		if err := inNetns(a, func() error { return Give("eth0", addr) }); err != nil {
			t.Fatal(err)
		}
		if has, _ := inNetnsHas(a, addr); has {
			t.Errorf("a gave %s back and still has it", addr)
		}
		if got := reached(addr); got != macs[b] {
			t.Errorf("after a gave %s back: the machine reaches it at %q, want b's", addr, got)
		}
	}
}

func inNetnsHas(ns string, addr netip.Addr) (has bool, err error) {
	err = inNetns(ns, func() error {
		var e error
		has, e = Has("eth0", addr)
		return e
	})
	return has, err
}

// inNetns runs f on a thread of its own in namespace ns; the thread is
// never used again (it ends with its goroutine, still locked).
func inNetns(ns string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		if err := testutil.EnterNetns(ns); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	return <-done
}
