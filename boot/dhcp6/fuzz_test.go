package dhcp6

import (
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/plan"
)

// FuzzReply drives the packet → reply path with any bytes, in both modes:
// it must not panic, and whatever it sends must be a well-formed Advertise
// or Reply (or a Relay-Reply around one) for the same transaction, never
// both a reply and a drop. Seeds: messages built with the library as
// EDK2, iPXE and dhclient send them (testdata/fuzz/FuzzReply holds ones
// captured from dhclient -6 in the e2e test).
//
//	go test ./boot/dhcp6 -run '^$' -fuzz FuzzReply -fuzztime 60s
func FuzzReply(f *testing.F) {
	t := f
	hw := "52:54:00:00:00:09"
	sol := solicit(t, hw, pxe(iana.EFI_X86_64)...)
	f.Add(sol.ToBytes())
	f.Add(solicit(t, hw, httpBoot(iana.EFI_X86_64_HTTP)...).ToBytes())
	f.Add(solicit(t, "52:54:00:00:00:01", cat(pxe(iana.EFI_X86_64), []dhcpv6.Modifier{ipxeUC, dhcpv6.WithRapidCommit})...).ToBytes())
	adv, _ := dhcpv6.NewAdvertiseFromSolicit(sol, dhcpv6.WithServerID(serverID), dhcpv6.WithIANA(dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP("2001:db8::10")}))
	req, _ := dhcpv6.NewRequestFromAdvertise(adv)
	f.Add(req.ToBytes())
	for _, mt := range []dhcpv6.MessageType{dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind, dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeConfirm} {
		f.Add(follow(t, mt, hw, netip.MustParseAddr("2001:db8::10")).ToBytes())
	}
	info, _ := dhcpv6.NewMessage(ipxeUC)
	info.MessageType = dhcpv6.MessageTypeInformationRequest
	f.Add(info.ToBytes())
	r, _ := dhcpv6.EncapsulateRelay(sol, dhcpv6.MessageTypeRelayForward, net.ParseIP("2001:db8:5::1"), net.ParseIP("fe80::5054:ff:fe00:9"))
	r.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, mac(hw)))
	f.Add(r.ToBytes())
	f.Add([]byte{1, 0, 0, 0})

	p := testPlan(plan.PolicyProvision)
	site := p.Site("lab")
	cfgs := map[string]Config{}
	for _, mode := range []string{plan.DHCPReservation, plan.DHCPProxy} {
		cfgs[mode] = testConfig(f, mode)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		for mode, cfg := range cfgs {
			a := Handle(p, site, cfg, pkt, opaquePeer)
			if a.Dropped != "" && a.Reply != nil {
				t.Fatalf("%s: dropped (%s) and answered", mode, a.Dropped)
			}
			if a.Reply == nil {
				continue
			}
			out := a.Reply.ToBytes()
			back, err := dhcpv6.FromBytes(out)
			if err != nil {
				t.Fatalf("%s: reply does not parse: %v\n%x", mode, err, out)
			}
			m, err := back.GetInnerMessage()
			if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			if m.Type() != dhcpv6.MessageTypeAdvertise && m.Type() != dhcpv6.MessageTypeReply {
				t.Fatalf("%s: sent %s", mode, m.Type())
			}
			in, _ := dhcpv6.FromBytes(pkt)
			if msg, err := in.GetInnerMessage(); err == nil && msg.TransactionID != m.TransactionID {
				t.Fatalf("%s: reply for transaction %x, asked %x", mode, m.TransactionID, msg.TransactionID)
			}
			if mode == plan.DHCPProxy && iaAddr(m).IsValid() {
				t.Fatalf("proxy mode gave an address")
			}
		}
	})
}
