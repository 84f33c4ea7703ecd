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
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// The Micro-OS's DHCPv6 client against bootops' own DHCPv6 server on
// loopback: in reservation mode the machine gets its node's reserved
// address (known by the MAC in its DUID); in proxy mode, where bootops
// gives no addresses, it says so.
func TestLeaseV6(t *testing.T) {
	reserved := netip.MustParseAddr("2001:db8::11")
	cfg := config6(t, 1, reserved)
	for _, c := range []struct {
		mode, want, err string
	}{
		{plan.DHCPReservation, reserved.String(), ""},
		{plan.DHCPProxy, "", "solicit"}, // no Advertise for a client that is no boot client
	} {
		cfg.Mode = c.mode
		srvAddr := testutil.FreeUDP(t, "udp6")
		stop := serve6(t, cfg, srvAddr)
		cl := client6At(t, srvAddr, 300*time.Millisecond, 2)
		var a netip.Addr
		l, err := leaseV6(context.Background(), cl, nil)
		if err == nil {
			a = l.Addr
		}
		cl.Close()
		stop()
		switch {
		case c.err == "" && (err != nil || a.String() != c.want):
			t.Errorf("%s: %v, %v; want %s", c.mode, a, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, %v; want an error saying %q", c.mode, a, err, c.err)
		}
	}
}

// config6 is bootops' DHCPv6 server in reservation mode for site lab,
// whose one node n1 (MAC 52:54:00:00:00:01) has reserved; serverMAC makes
// the server identifier. Its leases are written in a folder of the test.
func config6(t *testing.T, serverMAC byte, reserved netip.Addr) dhcp6.Config {
	return dhcp6.Config{Mode: plan.DHCPReservation, ServerIP: netip.MustParseAddr("2001:db8::1"), Prefix: netip.MustParsePrefix("2001:db8::/64"),
		ServerID: dhcp6.NewServerID(net.HardwareAddr{0x52, 0x54, 0, 0xaa, 0, serverMAC}), HTTPPort: 8080,
		PoolFirst: netip.MustParseAddr("2001:db8::100"), PoolLast: netip.MustParseAddr("2001:db8::1ff"),
		Leases: &dhcp6.Pool{Path: filepath.Join(t.TempDir(), "leases6-lab.json")},
		Reservation: func(_ *plan.Plan, site, mac string) (dhcp6.Reservation, bool) {
			return dhcp6.Reservation{Addr: reserved, Node: "n1"}, mac == "52:54:00:00:00:01"
		},
		Reserved: func(_ *plan.Plan, _ string, a netip.Addr) bool { return a == reserved },
	}
}

// serve6 runs bootops' DHCPv6 server with cfg on addr, until stop.
func serve6(t *testing.T, cfg dhcp6.Config, addr netip.AddrPort) (stop func()) {
	t.Helper()
	site := &plan.Site{Name: "lab", UnknownNodes: plan.PolicyProvision, Network: plan.Network{HTTPPort: 8080}}
	site.Nodes = []*plan.Node{{Name: "n1", Site: "lab", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:01"}}}}
	plans := &boot.Live{}
	plans.Swap(&plan.Plan{Sites: []*plan.Site{site}})
	s := &dhcp6.Server{Plans: plans, Site: "lab", Config: cfg, Addr: addr, BootServiceAddr: testutil.FreeUDP(t, "udp6")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	time.Sleep(100 * time.Millisecond)
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// client6At is the Micro-OS's DHCPv6 client as n1, on loopback, sending to
// srv (in place of the multicast group).
func client6At(t *testing.T, srv netip.AddrPort, timeout time.Duration, retry int) *nclient6.Client {
	t.Helper()
	conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := nclient6.NewWithConn(conn, net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1},
		nclient6.WithBroadcastAddr(net.UDPAddrFromAddrPort(srv)), nclient6.WithTimeout(timeout), nclient6.WithRetry(retry))
	if err != nil {
		t.Fatal(err)
	}
	return cl
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
		// What a server on the link must not make the agent configure.
		{[]dhcpv6.Option{iaWith(&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP("fe80::5"), ValidLifetime: time.Hour})}, "fe80::5 is no global unicast"},
		{[]dhcpv6.Option{iaWith(&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP("ff02::1"), ValidLifetime: time.Hour})}, "ff02::1 is no global unicast"},
		{[]dhcpv6.Option{iaWith(&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP("::ffff:198.18.0.5"), ValidLifetime: time.Hour})}, "no global unicast"},
		{[]dhcpv6.Option{iaWith(&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP("::1"), ValidLifetime: time.Hour})}, "::1 is no global unicast"},
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

// The agent keeps its DHCPv6 lease against bootops' own server (a 6 s
// lease: Renew at 3 s, Rebind from four fifths, in the wire's whole
// seconds): Renews are answered; a server that is another (a new server
// identifier) ignores the Renew and answers the Rebind; with no server the
// lease ends, and the agent asks anew as the same client and moves to the
// address it gets.
func TestKeepV6(t *testing.T) {
	testutil.Slow(t)
	r1, r2 := netip.MustParseAddr("2001:db8::11"), netip.MustParseAddr("2001:db8::12")
	config := func(serverMAC byte, reserved netip.Addr) dhcp6.Config {
		cfg := config6(t, serverMAC, reserved)
		cfg.LeaseTime = 6 * time.Second
		return cfg
	}
	srvAddr := testutil.FreeUDP(t, "udp6")
	stop := serve6(t, config(1, r1), srvAddr)
	cl := client6At(t, srvAddr, 500*time.Millisecond, 1)
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := leaseV6(ctx, cl, nil)
	if err != nil || l.Addr != r1 || l.T1 != 3*time.Second || l.T2 < 4*time.Second || l.T2 > 5*time.Second || l.Valid != 6*time.Second {
		t.Fatalf("lease: %+v, %v", l, err)
	}
	l.Iface = "eth0"
	said := make(chan string, 100)
	moved := make(chan string, 1)
	kept := make(chan error, 1)
	go func() {
		kept <- keepV6(ctx, cl, l, 200*time.Millisecond,
			func(iface string, old, new netip.Addr) error {
				moved <- fmt.Sprint(iface, " ", old, " → ", new)
				return nil
			},
			func(format string, a ...any) { said <- fmt.Sprintf(format, a...) })
	}()
	await := func(want string, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case s := <-said:
				t.Log(s)
				if strings.Contains(s, want) {
					return
				}
			case <-deadline:
				t.Fatalf("in %s, the agent did not say %q", within, want)
			}
		}
	}
	await(r1.String()+" renewed (RENEW)", 8*time.Second)
	await(r1.String()+" renewed (RENEW)", 8*time.Second)

	stop()
	stop = serve6(t, config(2, r1), srvAddr) // another server
	await("RENEW: ", 8*time.Second)
	await(r1.String()+" renewed (REBIND)", 8*time.Second)

	stop()
	await("the lease of "+r1.String()+" ended without a Reply", 12*time.Second)
	stop = serve6(t, config(1, r2), srvAddr)
	defer stop()
	await("dhcpv6 on eth0: "+r2.String()+", until", 8*time.Second)
	select {
	case m := <-moved:
		if m != "eth0 "+r1.String()+" → "+r2.String() {
			t.Errorf("moved %s", m)
		}
	default:
		t.Error("the new address did not replace the old")
	}
	cancel()
	if err := <-kept; err != context.Canceled {
		t.Errorf("keepV6 ended with %v, want context.Canceled", err)
	}
}

// A lease written by the dhcp6 command is the one the agent reads.
func TestLease6File(t *testing.T) {
	dir := t.TempDir()
	in := &Lease6{Iface: "eth0", Addr: netip.MustParseAddr("2001:db8::11"), ClientID: []byte{0, 1, 0, 1, 2, 3, 4, 5, 0x52, 0x54, 0, 0, 0, 1},
		ServerID: []byte{0, 3, 0, 1, 0x52, 0x54, 0, 0xaa, 0, 1}, IAID: [4]byte{0, 0, 0, 1}, T1: time.Minute, T2: 2 * time.Minute, Valid: time.Hour,
		Got: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	if err := in.Save(dir); err != nil {
		t.Fatal(err)
	}
	out, err := Leases6(dir)
	if err != nil || len(out) != 1 {
		t.Fatalf("%v, %v", out, err)
	}
	if a, b := fmt.Sprintf("%+v", *in), fmt.Sprintf("%+v", *out[0]); a != b {
		t.Errorf("read %s, wrote %s", b, a)
	}
}

// A Reply with T1 0 and a preferred lifetime 0 (a broken or hostile
// server) does not have the agent renew without pause.
func TestTakeBoundsRenew(t *testing.T) {
	m, _ := dhcpv6.NewMessage()
	m.MessageType = dhcpv6.MessageTypeReply
	m.AddOption(dhcpv6.OptServerID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{0x52, 0x54, 0, 0xaa, 0, 1}}))
	ia := &dhcpv6.OptIANA{IaId: [4]byte{0, 0, 0, 1}}
	ia.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP("2001:db8::5"), ValidLifetime: time.Hour})
	m.AddOption(ia)
	var l Lease6
	if err := l.take(m, time.Now()); err != nil {
		t.Fatal(err)
	}
	if l.T1 < minRenew || l.T2 < l.T1 || l.Valid != time.Hour {
		t.Errorf("T1 %s, T2 %s, valid %s: want T1 at least %s, T2 not before it", l.T1, l.T2, l.Valid, minRenew)
	}
}
