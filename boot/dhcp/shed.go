package dhcp

import (
	"bytes"
	"net"
)

// bootClient says, from the raw packet and without parsing it, whether it
// may be a PXE or UEFI HTTP-boot client's BOOTREQUEST: op 1, the magic
// cookie, and option 60 starting "PXEClient" or "HTTPClient". In proxy
// mode nothing else gets an answer, so the rest is dropped here, before
// any allocation: a flood of ordinary DHCP costs a read and this scan.
func bootClient(pkt []byte) bool {
	if len(pkt) < 240 || pkt[0] != 1 || !bytes.Equal(pkt[236:240], []byte{99, 130, 83, 99}) {
		return false
	}
	for i := 240; i < len(pkt); {
		code := pkt[i]
		switch code {
		case 0: // pad
			i++
			continue
		case 255: // end
			return false
		}
		if i+1 >= len(pkt) {
			return false
		}
		n := int(pkt[i+1])
		if i+2+n > len(pkt) {
			return false
		}
		if code == 60 {
			v := pkt[i+2 : i+2+n]
			return bytes.HasPrefix(v, []byte("PXEClient")) || bytes.HasPrefix(v, []byte("HTTPClient"))
		}
		i += 2 + n
	}
	return false
}

// ClientMAC is a BOOTREQUEST's client hardware address read from the raw
// packet without parsing it ("" when it is no Ethernet one): how the read
// loop sorts packets into lanes before any allocation.
func ClientMAC(pkt []byte) string {
	if len(pkt) < 34 || pkt[0] != 1 || pkt[1] != 1 || pkt[2] != 6 {
		return ""
	}
	return net.HardwareAddr(pkt[28:34]).String()
}
