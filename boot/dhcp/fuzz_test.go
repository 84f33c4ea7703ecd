package dhcp

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/plan"
)

// FuzzReply drives the packet → reply path the server takes
// (dhcpv4.FromBytes, then Reply) with any bytes, in both modes and on both
// ports, a pool behind reservation mode. It must not panic, and whatever
// it sends must be a BOOTREPLY for the same transaction and client
// hardware address that parses again as the same message type: an OFFER,
// ACK or NAK (proxy mode: an OFFER or ACK with no address in it; never
// both a reply and a drop). Seeds: the packets of testdata/captured and
// ones built as PXE ROMs, iPXE and UEFI HTTP boot send them.
//
//	go test ./boot/dhcp -run '^$' -fuzz FuzzReply -fuzztime 60s
func FuzzReply(f *testing.F) {
	files, _ := filepath.Glob("testdata/captured/*.bin")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, req := range []*dhcpv4.DHCPv4{
		pxeDiscover(f, "52:54:00:00:00:01", iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001"),
		pxeDiscover(f, "52:54:00:00:00:02", iana.EFI_X86_64, "PXEClient:Arch:00007:UNDI:003016", withGUID),
		pxeDiscover(f, "52:54:00:aa:00:01", iana.EFI_X86_64_HTTP, "HTTPClient:Arch:00016:UNDI:003001", dhcpv4.WithUserClass("iPXE", false)),
		pxeDiscover(f, "52:54:00:aa:00:02", iana.EFI_ARM64, "PXEClient:Arch:00011:UNDI:003016",
			dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(198, 18, 0, 10))),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server.AsSlice()))),
	} {
		f.Add(req.ToBytes())
	}
	f.Add([]byte{1, 1, 6, 0})

	pool := &Pool{Path: filepath.Join(f.TempDir(), "leases.json")}
	cases := []struct {
		mode, policy string
		leases       Leaser
	}{
		{plan.DHCPProxy, plan.PolicyProvision, nil},
		{plan.DHCPReservation, plan.PolicyProvision, pool},
		{plan.DHCPReservation, plan.PolicyHold, nil},
	}
	subnet := netip.MustParsePrefix("198.18.0.0/24")
	f.Fuzz(func(t *testing.T, pkt []byte) {
		req, err := dhcpv4.FromBytes(pkt)
		if err != nil {
			return // the server drops what does not parse, before Reply
		}
		for _, c := range cases {
			p := poolPlan(c.policy)
			p.Sites[0].Network.DHCP = c.mode
			cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: c.mode, Leases: c.leases}
			for _, port := range []int{67, 4011} {
				a := Reply(p, p.Sites[0], cfg, req, port)
				if a.Reply == nil {
					continue
				}
				if a.Dropped != "" {
					t.Fatalf("%s, port %d: dropped (%s) and answered", c.mode, port, a.Dropped)
				}
				checkReply(t, c.mode, req, a.Reply, subnet)
			}
		}
	})
}

// checkReply fails t unless reply, sent in mode, answers req as FuzzReply
// says.
func checkReply(t *testing.T, mode string, req, reply *dhcpv4.DHCPv4, subnet netip.Prefix) {
	t.Helper()
	back, err := dhcpv4.FromBytes(reply.ToBytes())
	if err != nil {
		t.Fatalf("%s: the reply does not parse: %v\n%s", mode, err, reply.Summary())
	}
	mt := back.MessageType()
	switch {
	case back.OpCode != dhcpv4.OpcodeBootReply:
		t.Fatalf("%s: op %s, want a BOOTREPLY", mode, back.OpCode)
	case back.TransactionID != req.TransactionID:
		t.Fatalf("%s: reply for transaction %s, asked %s", mode, back.TransactionID, req.TransactionID)
	case !bytes.Equal(back.ClientHWAddr, req.ClientHWAddr):
		t.Fatalf("%s: reply to %s, asked by %s", mode, back.ClientHWAddr, req.ClientHWAddr)
	case mt != reply.MessageType():
		t.Fatalf("%s: sent %s, parses back as %s", mode, reply.MessageType(), mt)
	case mt != dhcpv4.MessageTypeOffer && mt != dhcpv4.MessageTypeAck && mt != dhcpv4.MessageTypeNak:
		t.Fatalf("%s: sent %s", mode, mt)
	}
	yours, _ := netip.AddrFromSlice(back.YourIPAddr.To4())
	switch {
	case mode == plan.DHCPProxy && (mt == dhcpv4.MessageTypeNak || !yours.IsUnspecified()):
		t.Fatalf("proxy mode sent %s with address %s", mt, yours)
	case mode == plan.DHCPReservation && mt != dhcpv4.MessageTypeNak && !subnet.Contains(yours):
		t.Fatalf("reservation mode gave %s, outside the site's subnet", yours)
	}
}
