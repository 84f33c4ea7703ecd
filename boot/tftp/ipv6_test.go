package tftp

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// TFTP over IPv6 (PXE over IPv6: the boot file URL of DHCPv6 names
// tftp://[addr]/file), on [::1].

func TestIPv6TransferWithPinClient(t *testing.T) {
	efi := random(850_528)
	r := startOn(t, "udp6", "[::1]:0", Files{"ipxe.efi": efi}, nil)
	if !strings.HasPrefix(r.addr, "[::1]:") {
		t.Fatalf("listening on %s", r.addr)
	}
	for _, blksize := range []int{0, 1428, 8192} {
		if got := fetch(t, r.addr, "ipxe.efi", blksize, true); !bytes.Equal(got, efi) {
			t.Fatalf("blksize %d: %d bytes, not identical", blksize, len(got))
		}
	}
	testutil.WaitFor(t, "three events of [::1]", 5*time.Second, func() bool { return len(r.mem.Events("ip:::1")) == 3 })
	if ev := r.mem.Events("ip:::1"); !strings.HasPrefix(ev[0].Message, "tftp: sent ipxe.efi in ") || ev[0].IP != "::1" {
		t.Errorf("events %+v", ev)
	}
}

// TestIPv6Window: RFC 7440 over IPv6 (pin/tftp's client asks for no
// windowsize, so a raw client does): a window of 8 blocks per ACK, every
// packet from the address the request went to.
func TestIPv6Window(t *testing.T) {
	file := random(1024*20 + 3)
	for _, listen := range []string{"[::1]:0", "[::]:0"} { // [::]: the reply's source comes from IPV6_PKTINFO
		t.Run(listen, func(t *testing.T) {
			r := startOn(t, "udp6", listen, Files{"f": file}, nil)
			_, port, _ := net.SplitHostPort(r.addr)
			p := dial(t, "[::1]:"+port)
			p.send(rq(opRRQ, "f", "octet", "blksize", "1024", "windowsize", "8"))
			oack := p.expect(opOACK, 0)
			if !bytes.Contains(oack, []byte("windowsize\x008\x00")) || !bytes.Contains(oack, []byte("blksize\x001024\x00")) {
				t.Fatalf("OACK %q", oack[2:])
			}
			if from := p.srv.AddrPort().Addr(); from != netip.IPv6Loopback() {
				t.Fatalf("OACK from %s", from)
			}
			var got []byte
			acks := 0
			p.ack(0)
			for k := uint16(1); len(got) < len(file); k++ {
				got = append(got, p.expect(opDATA, k)[4:]...)
				if k%8 == 0 || len(got) == len(file) {
					p.ack(k)
					acks++
				}
			}
			if !bytes.Equal(got, file) || acks != 3 {
				t.Fatalf("got %d bytes (identical %v) after %d ACKs, want %d after 3", len(got), bytes.Equal(got, file), acks, len(file))
			}
			if from := p.srv.AddrPort().Addr(); from != netip.IPv6Loopback() {
				t.Fatalf("blocks from %s", from)
			}
		})
	}
}

func TestIPv6BlockSizeFitsTheLink(t *testing.T) {
	l := &listener{mtu: map[int]mtuSeen{}}
	if v4, v6 := l.maxBlksize(0, false), l.maxBlksize(0, true); v4 != 1468 || v6 != 1448 {
		t.Errorf("unknown MTU: IPv4 %d, IPv6 %d; want 1468, 1448 (1500 less the headers)", v4, v6)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skip("no lo")
	}
	if v4, v6 := l.maxBlksize(lo.Index, false), l.maxBlksize(lo.Index, true); v4-v6 != 20 || v4 != lo.MTU-32 {
		t.Errorf("lo (MTU %d): IPv4 %d, IPv6 %d", lo.MTU, v4, v6)
	}
}
