package tftp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"syscall"
)

// enablePktinfo asks the kernel to say, with each datagram on conn, which
// local address it was sent to and on which interface (IP_PKTINFO on an
// IPv4 socket, IPV6_RECVPKTINFO on an IPv6 one): a transfer then answers
// from the address the client talked to even when conn listens on
// 0.0.0.0 or [::], and its block size stays within that interface's MTU.
// It reports whether that worked.
func enablePktinfo(conn *net.UDPConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	level, opt := syscall.IPPROTO_IP, syscall.IP_PKTINFO
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() == nil {
		level, opt = syscall.IPPROTO_IPV6, syscall.IPV6_RECVPKTINFO
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), level, opt, 1)
	}); err != nil {
		return false
	}
	return serr == nil
}

// pktinfo reads the local address and interface index out of a
// datagram's control messages; zero values when they are not there. An
// IPv6 link-local address carries the interface as its zone, so that a
// reply can leave from it.
func pktinfo(oob []byte) (netip.Addr, int) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, 0
	}
	for _, m := range msgs {
		switch {
		// struct in_pktinfo { int ipi_ifindex; struct in_addr ipi_spec_dst, ipi_addr; }
		// ipi_spec_dst is the local address a reply should come from (the
		// interface's own address when the request was broadcast).
		case m.Header.Level == syscall.IPPROTO_IP && m.Header.Type == syscall.IP_PKTINFO && len(m.Data) >= 12:
			index := int(int32(binary.NativeEndian.Uint32(m.Data)))
			return netip.AddrFrom4([4]byte(m.Data[4:8])), index
		// struct in6_pktinfo { struct in6_addr ipi6_addr; unsigned int ipi6_ifindex; }
		// ipi6_addr is the request's destination: TFTP over IPv6 is
		// unicast (or multicast, which no client we know sends).
		case m.Header.Level == syscall.IPPROTO_IPV6 && m.Header.Type == syscall.IPV6_PKTINFO && len(m.Data) >= 20:
			index := int(binary.NativeEndian.Uint32(m.Data[16:20]))
			local := netip.AddrFrom16([16]byte(m.Data[:16]))
			if local.IsLinkLocalUnicast() && index > 0 {
				local = local.WithZone(strconv.Itoa(index))
			}
			return local.Unmap(), index
		}
	}
	return netip.Addr{}, 0
}
