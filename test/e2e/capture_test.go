//go:build e2e

package e2e

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// dhcpReply is a DHCPv4 reply a capture saw: who sent it (its Ethernet
// source), its transaction and type, and its server identifier.
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
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hdr [24]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return nil, err
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if binary.BigEndian.Uint32(hdr[:4]) == 0xa1b2c3d4 {
		bo = binary.BigEndian
	}
	if bo.Uint32(hdr[20:24]) != 1 {
		return nil, fmt.Errorf("%s: not an Ethernet capture", path)
	}
	var out []dhcpReply
	for {
		var rec [16]byte
		if _, err := io.ReadFull(f, rec[:]); err == io.EOF || err == io.ErrUnexpectedEOF {
			return out, nil // a capture cut at its end
		} else if err != nil {
			return nil, err
		}
		pkt := make([]byte, bo.Uint32(rec[8:12]))
		if _, err := io.ReadFull(f, pkt); err != nil {
			return out, nil
		}
		if len(pkt) < 14+20+8 || binary.BigEndian.Uint16(pkt[12:14]) != 0x0800 {
			continue
		}
		ip := pkt[14:]
		ihl := int(ip[0]&0x0f) * 4
		if ip[9] != 17 || len(ip) < ihl+8 {
			continue
		}
		udp := ip[ihl:]
		if sport := binary.BigEndian.Uint16(udp[0:2]); sport != 67 && sport != 4011 {
			continue
		}
		m, err := dhcpv4.FromBytes(udp[8:])
		if err != nil || m.OpCode != dhcpv4.OpcodeBootReply {
			continue
		}
		r := dhcpReply{at: time.Unix(int64(bo.Uint32(rec[0:4])), int64(bo.Uint32(rec[4:8]))*1000), src: net.HardwareAddr(pkt[6:12]).String(),
			xid: m.TransactionID, msgType: m.MessageType()}
		if sid := m.ServerIdentifier(); sid != nil {
			r.serverID = sid.String()
		}
		out = append(out, r)
	}
}
