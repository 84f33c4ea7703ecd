package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/dhcp6"
	"github.com/bootops/bootops/plan"
)

// The Micro-OS's DHCPv6 client against bootops' own DHCPv6 server on
// loopback: in reservation mode the machine gets its node's reserved
// address (known by the MAC in its DUID); in proxy mode, where bootops
// gives no addresses, it says so.
func TestLeaseV6(t *testing.T) {
	reserved := netip.MustParseAddr("2001:db8::11")
	site := &plan.Site{Name: "lab", UnknownNodes: plan.PolicyProvision, Network: plan.Network{HTTPPort: 8080}}
	site.Nodes = []*plan.Node{{Name: "n1", Site: "lab", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:01"}}}}
	plans := &boot.Live{}
	plans.Swap(&plan.Plan{Sites: []*plan.Site{site}})
	cfg := dhcp6.Config{ServerIP: netip.MustParseAddr("2001:db8::1"), Prefix: netip.MustParsePrefix("2001:db8::/64"),
		ServerID: dhcp6.NewServerID(net.HardwareAddr{0x52, 0x54, 0, 0xaa, 0, 1}), HTTPPort: 8080,
		PoolFirst: netip.MustParseAddr("2001:db8::100"), PoolLast: netip.MustParseAddr("2001:db8::1ff"),
		Leases: &dhcp6.Pool{Path: filepath.Join(t.TempDir(), "leases6-lab.json")},
		Reservation: func(_ *plan.Plan, site, mac string) (dhcp6.Reservation, bool) {
			return dhcp6.Reservation{Addr: reserved, Node: "n1"}, mac == "52:54:00:00:00:01"
		},
		Reserved: func(_ *plan.Plan, _ string, a netip.Addr) bool { return a == reserved },
	}
	for _, c := range []struct {
		mode, want, err string
	}{
		{plan.DHCPReservation, reserved.String(), ""},
		{plan.DHCPProxy, "", "solicit"}, // no Advertise for a client that is no boot client
	} {
		cfg.Mode = c.mode
		srvAddr := freeUDP6(t)
		s := &dhcp6.Server{Plans: plans, Site: "lab", Config: cfg, Addr: srvAddr, BootServiceAddr: freeUDP6(t)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx) }()
		time.Sleep(100 * time.Millisecond)

		conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := nclient6.NewWithConn(conn, net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1},
			nclient6.WithBroadcastAddr(net.UDPAddrFromAddrPort(srvAddr)), nclient6.WithTimeout(300*time.Millisecond), nclient6.WithRetry(2))
		if err != nil {
			t.Fatal(err)
		}
		a, err := leaseV6(ctx, cl)
		cl.Close()
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		switch {
		case c.err == "" && (err != nil || a.String() != c.want):
			t.Errorf("%s: %v, %v; want %s", c.mode, a, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, %v; want an error saying %q", c.mode, a, err, c.err)
		}
	}
}

func freeUDP6(t *testing.T) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// What an Advertise or Reply without a usable address says.
func TestAddressOf(t *testing.T) {
	iaWith := func(opts ...dhcpv6.Option) *dhcpv6.OptIANA {
		ia := &dhcpv6.OptIANA{IaId: [4]byte{0, 0, 0, 1}}
		for _, o := range opts {
			ia.Options.Add(o)
		}
		return ia
	}
	for _, c := range []struct {
		opts []dhcpv6.Option
		want string
	}{
		{nil, "no IA_NA"},
		{[]dhcpv6.Option{iaWith(&dhcpv6.OptStatusCode{StatusCode: iana.StatusNoAddrsAvail, StatusMessage: "proxy mode"})}, "proxy mode"},
		{[]dhcpv6.Option{iaWith(&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP("2001:db8::5")})}, "no address"}, // valid lifetime 0
		{[]dhcpv6.Option{iaWith(&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP("2001:db8::5"), ValidLifetime: time.Hour})}, "2001:db8::5"},
	} {
		m, _ := dhcpv6.NewMessage()
		for _, o := range c.opts {
			m.AddOption(o)
		}
		a, err := addressOf(m)
		if got := fmt.Sprint(a); err != nil {
			got = err.Error()
			if !strings.Contains(got, c.want) {
				t.Errorf("%v: %s, want %q", c.opts, got, c.want)
			}
		} else if got != c.want {
			t.Errorf("%v: %s, want %s", c.opts, got, c.want)
		}
	}
}
