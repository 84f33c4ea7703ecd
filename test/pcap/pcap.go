// Package pcap reads the UDP datagrams of a capture file (tcpdump -w:
// classic pcap, Ethernet, IPv4) for the tests and their tools. A record
// cut short at the file's end (a capture still being written) ends it.
package pcap

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// UDP is one datagram as captured.
type UDP struct {
	At               time.Time
	Src              net.HardwareAddr // the Ethernet source
	SrcPort, DstPort uint16
	Payload          []byte
}

// ReadUDP reads every UDP datagram of the capture at path, in order.
func ReadUDP(path string) ([]UDP, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hdr [24]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if binary.BigEndian.Uint32(hdr[:4]) == 0xa1b2c3d4 {
		bo = binary.BigEndian
	}
	if bo.Uint32(hdr[20:24]) != 1 {
		return nil, fmt.Errorf("%s: not an Ethernet capture", path)
	}
	var out []UDP
	for {
		var rec [16]byte
		if _, err := io.ReadFull(f, rec[:]); err == io.EOF || err == io.ErrUnexpectedEOF {
			return out, nil
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
		out = append(out, UDP{
			At:      time.Unix(int64(bo.Uint32(rec[0:4])), int64(bo.Uint32(rec[4:8]))*1000),
			Src:     net.HardwareAddr(pkt[6:12]),
			SrcPort: binary.BigEndian.Uint16(udp[0:2]), DstPort: binary.BigEndian.Uint16(udp[2:4]),
			Payload: udp[8:],
		})
	}
}
