//go:build e2e

package e2e

import (
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/bootops/bootops/test/pcap"
)

// dhcpReply is a DHCPv4 reply a capture saw: when, who sent it (its
// Ethernet source), its transaction and type, and its server identifier.
type dhcpReply struct {
	at       time.Time
	src      string
	xid      dhcpv4.TransactionID
	msgType  dhcpv4.MessageType
	serverID string
}

// dhcpReplies reads the DHCPv4 replies (UDP from port 67 or 4011) of a
// pcap file (tcpdump -w, Ethernet).
func dhcpReplies(path string) ([]dhcpReply, error) {
	udp, err := pcap.ReadUDP(path)
	if err != nil {
		return nil, err
	}
	var out []dhcpReply
	for _, u := range udp {
		if u.SrcPort != 67 && u.SrcPort != 4011 {
			continue
		}
		m, err := dhcpv4.FromBytes(u.Payload)
		if err != nil || m.OpCode != dhcpv4.OpcodeBootReply {
			continue
		}
		r := dhcpReply{at: u.At, src: u.Src.String(), xid: m.TransactionID, msgType: m.MessageType()}
		if sid := m.ServerIdentifier(); sid != nil {
			r.serverID = sid.String()
		}
		out = append(out, r)
	}
	return out, nil
}
