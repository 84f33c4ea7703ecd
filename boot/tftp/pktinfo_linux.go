package tftp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"syscall"
)

// enablePktinfo asks the kernel to say, with each datagram on conn, which
// local address it was sent to and on which interface (IP_PKTINFO): a
// transfer then answers from the address the client talked to even when
// conn listens on 0.0.0.0, and its block size stays within that
// interface's MTU. It reports whether that worked (IPv4 sockets only).
func enablePktinfo(conn *net.UDPConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_PKTINFO, 1)
	}); err != nil {
		return false
	}
	return serr == nil
}

// pktinfo reads the local address and interface index out of a
// datagram's control messages; zero values when they are not there.
func pktinfo(oob []byte) (netip.Addr, int) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, 0
	}
	for _, m := range msgs {
		// struct in_pktinfo { int ipi_ifindex; struct in_addr ipi_spec_dst, ipi_addr; }
		// ipi_spec_dst is the local address a reply should come from (the
		// interface's own address when the request was broadcast).
		if m.Header.Level != syscall.IPPROTO_IP || m.Header.Type != syscall.IP_PKTINFO || len(m.Data) < 12 {
			continue
		}
		index := int(int32(binary.NativeEndian.Uint32(m.Data)))
		return netip.AddrFrom4([4]byte(m.Data[4:8])), index
	}
	return netip.Addr{}, 0
}
