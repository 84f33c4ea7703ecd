package dhcp6

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

func TestMACFromDUID(t *testing.T) {
	hw := net.HardwareAddr{0x52, 0x54, 0x00, 0xAB, 0xCD, 0xEF}
	for name, c := range map[string]struct {
		raw  []byte // the DUID as the wire has it
		want string
	}{
		"duid-ll":            {(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: hw}).ToBytes(), "52:54:00:ab:cd:ef"},
		"duid-llt":           {(&dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: 700000000, LinkLayerAddr: hw}).ToBytes(), "52:54:00:ab:cd:ef"},
		"duid-llt, raw":      {[]byte{0, 1, 0, 1, 0x29, 0xb8, 0x4e, 0x10, 0x52, 0x54, 0x00, 0xab, 0xcd, 0xef}, "52:54:00:ab:cd:ef"},
		"duid-en":            {(&dhcpv6.DUIDEN{EnterpriseNumber: 43793, EnterpriseIdentifier: []byte{1, 2, 3, 4, 5, 6, 7, 8}}).ToBytes(), ""},
		"duid-uuid":          {(&dhcpv6.DUIDUUID{UUID: [16]byte{1, 2, 3}}).ToBytes(), ""},
		"infiniband duid-ll": {(&dhcpv6.DUIDLL{HWType: iana.HWTypeInfiniband, LinkLayerAddr: hw}).ToBytes(), ""},
		"eui-64 duid-ll":     {(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: append(hw, 1, 2)}).ToBytes(), ""},
		"zero mac":           {(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: make(net.HardwareAddr, 6)}).ToBytes(), ""},
		"broadcast mac":      {(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{255, 255, 255, 255, 255, 255}}).ToBytes(), ""},
		"multicast mac":      {(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}}).ToBytes(), ""},
		"unknown type":       {[]byte{0, 9, 0x52, 0x54, 0, 0xab, 0xcd, 0xef}, ""},
	} {
		d, err := dhcpv6.DUIDFromBytes(c.raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, ok := MACFromDUID(d)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: %q %v, want %q", name, got, ok, c.want)
		}
	}
	if _, ok := MACFromDUID(nil); ok {
		t.Error("nil DUID gave a MAC")
	}
}

func TestMACFromLinkLocal(t *testing.T) {
	for addr, want := range map[string]string{
		"fe80::5054:ff:feab:cdef":      "52:54:00:ab:cd:ef",
		"fe80::5054:ff:feab:cdef%eth0": "52:54:00:ab:cd:ef",
		"fe80::1234:5678:9abc:def0":    "", // stable privacy
		"2001:db8::5054:ff:feab:cdef":  "", // not link-local
		"fe80::200:ff:fe00:0":          "", // 00:00:00:00:00:00
		"fe80::301:ff:fe00:1":          "", // 01:01:00:00:00:01: multicast
		"::ffff:198.18.0.1":            "",
	} {
		a := netip.MustParseAddr(addr)
		got, ok := MACFromLinkLocal(a.WithZone(""))
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", addr, got, ok, want)
		}
	}
}

func TestIdentifyOrder(t *testing.T) {
	sol, err := dhcpv6.NewSolicit(net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0x0d})
	if err != nil {
		t.Fatal(err)
	}
	// The source's EUI-64 beats a DUID-LLT (which may name another NIC).
	c := identify(sol, nil, netip.MustParseAddr("fe80::5054:ff:fe00:e"))
	if c.MAC != "52:54:00:00:00:0e" || c.MACFrom != "link-local" || c.Key != c.MAC {
		t.Errorf("link-local: %+v", c)
	}
	c = identify(sol, nil, netip.MustParseAddr("fe80::1234:5678:9abc:def0"))
	if c.MAC != "52:54:00:00:00:0d" || c.MACFrom != "duid" {
		t.Errorf("duid: %+v", c)
	}
	// A DUID-LL names the NIC itself: it beats the source (perfdhcp's
	// clients, or a relay's, all share one).
	ll, _ := dhcpv6.NewMessage(dhcpv6.WithClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0x0f}}))
	c = identify(ll, nil, netip.MustParseAddr("fe80::5054:ff:fe00:e"))
	if c.MAC != "52:54:00:00:00:0f" || c.MACFrom != "duid" {
		t.Errorf("duid-ll: %+v", c)
	}
	// iPXE on a machine without an SMBIOS UUID sends a DUID-UUID of zeros:
	// no UUID, the MAC from its EUI-64 source.
	zero, _ := dhcpv6.NewMessage(dhcpv6.WithClientID(&dhcpv6.DUIDUUID{}))
	c = identify(zero, nil, netip.MustParseAddr("fe80::5054:ff:fee2:6001"))
	if c.MAC != "52:54:00:e2:60:01" || len(c.UUIDs) != 0 || c.Key != c.MAC {
		t.Errorf("zero duid-uuid: %+v", c)
	}
	// A DUID-EN from an opaque source: no MAC, leased by DUID.
	en, _ := dhcpv6.NewMessage(dhcpv6.WithClientID(&dhcpv6.DUIDEN{EnterpriseNumber: 43793, EnterpriseIdentifier: []byte{9, 9}}))
	c = identify(en, nil, netip.MustParseAddr("fe80::1234:5678:9abc:def0"))
	if c.MAC != "" || c.Key != "duid:00020000ab110909" {
		t.Errorf("duid-en: %+v", c)
	}
}

// The read loop's raw reading finds every MAC identify would take the
// client's from: a relay's option, a DUID-LL or DUID-LLT, an EUI-64 source.
func TestRawMACs(t *testing.T) {
	mac := func(b byte) net.HardwareAddr { return net.HardwareAddr{0x52, 0x54, 0, 0, 0, b} }
	sol, err := dhcpv6.NewSolicit(mac(0x0d)) // DUID-LLT
	if err != nil {
		t.Fatal(err)
	}
	ll, _ := dhcpv6.NewMessage(dhcpv6.WithClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: mac(0x0f)}))
	uuid, _ := dhcpv6.NewMessage(dhcpv6.WithClientID(&dhcpv6.DUIDUUID{UUID: [16]byte{1}}))
	relay, err := dhcpv6.EncapsulateRelay(uuid, dhcpv6.MessageTypeRelayForward, net.ParseIP("2001:db8::1"), net.ParseIP("fe80::5054:ff:fe00:11"))
	if err != nil {
		t.Fatal(err)
	}
	relay.Options.Add(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, mac(0x10)))
	twice, err := dhcpv6.EncapsulateRelay(relay, dhcpv6.MessageTypeRelayForward, net.ParseIP("2001:db8:1::1"), net.ParseIP("2001:db8::1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		pkt  dhcpv6.DHCPv6
		peer string
		want []string
	}{
		{"duid-llt", sol, "fe80::1234:5678:9abc:def0", []string{"52:54:00:00:00:0d"}},
		{"duid-llt and eui-64", sol, "fe80::5054:ff:fe00:e", []string{"52:54:00:00:00:0d", "52:54:00:00:00:0e"}},
		{"duid-ll", ll, "2001:db8::5", []string{"52:54:00:00:00:0f"}},
		{"duid-uuid", uuid, "fe80::1234:5678:9abc:def0", nil},
		{"relayed twice", twice, "2001:db8:1::1", []string{"52:54:00:00:00:10", "52:54:00:00:00:11"}},
		{"cut short", dhcpv6.DHCPv6(nil), "fe80::1", nil},
	} {
		var b []byte
		if c.pkt != nil {
			b = c.pkt.ToBytes()
		} else {
			b = sol.ToBytes()[:7]
		}
		got := rawMACs(b, netip.MustParseAddr(c.peer))
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
