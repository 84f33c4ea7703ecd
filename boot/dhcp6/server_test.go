package dhcp6

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// The real server on loopback, proxy mode: a Solicit on the DHCPv6 port
// gets a proxy Advertise; the Request EDK2 then sends to port 4011 (its
// Request again, without IA, with this server's ID, from port 4011) gets
// a Reply from port 4011 with the boot file URL; garbage is counted as
// dropped.
func TestServeLoopback(t *testing.T) {
	plans := &boot.Live{}
	plans.Swap(testPlan(plan.PolicyProvision))
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	s := &Server{Plans: plans, Site: "lab", Config: testConfig(t, plan.DHCPProxy), Metrics: metrics,
		Addr: testutil.FreeUDP(t, "udp6"), BootServiceAddr: testutil.FreeUDP(t, "udp6")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(100 * time.Millisecond)

	exchange := func(from, to netip.AddrPort, pkt []byte) (*dhcpv6.Message, netip.AddrPort) {
		t.Helper()
		c, err := net.ListenUDP("udp6", net.UDPAddrFromAddrPort(from))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.WriteToUDPAddrPort(pkt, to); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 1500)
		n, src, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("no answer from %s: %v", to, err)
		}
		m, err := dhcpv6.MessageFromBytes(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		return m, src
	}
	loop0 := netip.AddrPortFrom(netip.IPv6Loopback(), 0)
	sol := solicit(t, "52:54:00:00:00:01", pxe(iana.EFI_X86_64)...)
	adv, _ := exchange(loop0, s.Addr, sol.ToBytes())
	if adv.Type() != dhcpv6.MessageTypeAdvertise || adv.Options.OneIANA() != nil || vendorClassOf(adv) != "PXEClient" {
		t.Fatalf("Advertise: %s", adv.Summary())
	}
	req, err := dhcpv6.NewMessage(pxe(iana.EFI_X86_64)...)
	if err != nil {
		t.Fatal(err)
	}
	req.MessageType = dhcpv6.MessageTypeRequest
	req.TransactionID = adv.TransactionID
	req.AddOption(sol.GetOneOption(dhcpv6.OptionClientID))
	req.AddOption(adv.GetOneOption(dhcpv6.OptionServerID))
	rep, src := exchange(testutil.FreeUDP(t, "udp6"), s.BootServiceAddr, req.ToBytes())
	if src != s.BootServiceAddr {
		t.Errorf("Reply from %s, want %s (EDK2 reads port 4011 only)", src, s.BootServiceAddr)
	}
	if rep.Type() != dhcpv6.MessageTypeReply || rep.Options.BootFileURL() != "tftp://[2001:db8::1]/snponly.efi" || rep.TransactionID != adv.TransactionID {
		t.Fatalf("Reply on 4011: %s", rep.Summary())
	}

	// EDK2 sends its Request to 4011 and only then opens the socket it
	// reads on: the Reply comes again, twice, for such a client.
	from := testutil.FreeUDP(t, "udp6")
	c4, err := net.ListenUDP("udp6", net.UDPAddrFromAddrPort(from))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c4.WriteToUDPAddrPort(req.ToBytes(), s.BootServiceAddr); err != nil {
		t.Fatal(err)
	}
	c4.Close()
	time.Sleep(50 * time.Millisecond) // the first Reply finds the port closed
	if c4, err = net.ListenUDP("udp6", net.UDPAddrFromAddrPort(from)); err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	c4.SetReadDeadline(time.Now().Add(3 * time.Second))
	var copies []string
	for buf := make([]byte, 1500); ; {
		n, _, err := c4.ReadFromUDPAddrPort(buf)
		if err != nil {
			break
		}
		m, err := dhcpv6.MessageFromBytes(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		copies = append(copies, m.Summary())
	}
	if len(copies) == 0 || len(copies) > len(bootServiceRepeats) {
		t.Errorf("a client that reads after sending got %d Replies, want 1 to %d (the repeats)", len(copies), len(bootServiceRepeats))
	}
	for _, m := range copies {
		if m != rep.Summary() {
			t.Errorf("repeat %s, want the Reply %s", m, rep.Summary())
		}
	}

	c, err := net.DialUDP("udp6", nil, net.UDPAddrFromAddrPort(s.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{1, 2, 3})
	// The series the dashboards query, by its name.
	malformed := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == "bootops_dhcp6_dropped_total" && m.GetLabel()[0].GetValue() == DropMalformed {
					return int(m.GetCounter().GetValue())
				}
			}
		}
		return -1
	}
	for range 50 {
		if malformed() == 1 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("malformed packet not counted: %v", malformed())
}
