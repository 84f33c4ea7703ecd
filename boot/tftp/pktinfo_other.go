//go:build !linux

package tftp

import (
	"net"
	"net/netip"
)

// enablePktinfo is Linux-only: elsewhere replies leave from the address
// the kernel picks and blocks stay at most 1468 bytes.
func enablePktinfo(*net.UDPConn) bool { return false }

func pktinfo([]byte) (netip.Addr, int) { return netip.Addr{}, 0 }
