package tftp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"unsafe"
)

// cmsg is one control message as the kernel writes it.
func cmsg(level, typ int, data []byte) []byte {
	b := make([]byte, syscall.CmsgSpace(len(data)))
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = int32(level), int32(typ)
	h.SetLen(syscall.CmsgLen(len(data)))
	copy(b[syscall.CmsgLen(0):], data)
	return b
}

func TestPktinfo(t *testing.T) {
	in4 := binary.NativeEndian.AppendUint32(nil, 3)
	in4 = append(in4, 198, 18, 0, 1, 198, 18, 0, 255)
	in6 := func(a string, index uint32) []byte {
		return binary.NativeEndian.AppendUint32(netip.MustParseAddr(a).AsSlice(), index)
	}
	for name, tc := range map[string]struct {
		oob   []byte
		local string
		index int
	}{
		"IPv4":                 {cmsg(syscall.IPPROTO_IP, syscall.IP_PKTINFO, in4), "198.18.0.1", 3},
		"IPv6 global":          {cmsg(syscall.IPPROTO_IPV6, syscall.IPV6_PKTINFO, in6("2001:db8::1", 7)), "2001:db8::1", 7},
		"IPv6 link-local":      {cmsg(syscall.IPPROTO_IPV6, syscall.IPV6_PKTINFO, in6("fe80::1", 7)), "fe80::1%7", 7},
		"IPv6 short":           {cmsg(syscall.IPPROTO_IPV6, syscall.IPV6_PKTINFO, in6("2001:db8::1", 7)[:16]), "invalid IP", 0},
		"another message only": {cmsg(syscall.IPPROTO_IPV6, syscall.IPV6_HOPLIMIT, []byte{64, 0, 0, 0}), "invalid IP", 0},
	} {
		local, index := pktinfo(tc.oob)
		if local.String() != tc.local || index != tc.index {
			t.Errorf("%s: %s on %d, want %s on %d", name, local, index, tc.local, tc.index)
		}
	}
}

func TestPktinfoEnabledOnBothFamilies(t *testing.T) {
	for _, a := range []string{"127.0.0.1:0", "[::1]:0"} {
		conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(a)))
		if err != nil {
			t.Fatal(err)
		}
		if !enablePktinfo(conn) {
			t.Errorf("%s: no packet info", a)
		}
		conn.Close()
	}
}
