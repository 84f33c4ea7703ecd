package dhcp

import (
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

func TestBootClientPrefilter(t *testing.T) {
	mk := func(class string, op dhcpv4.OpcodeType) []byte {
		req, _ := dhcpv4.NewDiscovery([]byte{0x52, 0x54, 0, 0, 0, 1})
		req.OpCode = op
		if class != "" {
			req.UpdateOption(dhcpv4.OptClassIdentifier(class))
		}
		return req.ToBytes()
	}
	for _, c := range []struct {
		pkt  []byte
		want bool
	}{
		{mk("PXEClient:Arch:00000:UNDI:002001", dhcpv4.OpcodeBootRequest), true},
		{mk("HTTPClient:Arch:00016:UNDI:003000", dhcpv4.OpcodeBootRequest), true},
		{mk("MSFT 5.0", dhcpv4.OpcodeBootRequest), false},
		{mk("", dhcpv4.OpcodeBootRequest), false},
		{mk("PXEClient", dhcpv4.OpcodeBootReply), false},
		{[]byte{1, 2, 3}, false},
	} {
		if got := bootClient(c.pkt); got != c.want {
			t.Errorf("bootClient(%d bytes, op %d) = %v", len(c.pkt), c.pkt[0], got)
		}
	}
	// An option running past the packet's end is not read past it.
	p := mk("PXEClient", dhcpv4.OpcodeBootRequest)
	p = append(p[:240], 60, 200, 'P')
	if bootClient(p) {
		t.Error("a truncated option 60 passed")
	}
	if n := testing.AllocsPerRun(100, func() { bootClient(p) }); n != 0 {
		t.Errorf("bootClient allocates: %v", n)
	}
}

func TestClientMAC(t *testing.T) {
	b := pxeDiscover(t, "52:54:00:AB:00:01", iana.INTEL_X86PC, "PXEClient").ToBytes()
	if got := ClientMAC(b); got != "52:54:00:ab:00:01" {
		t.Errorf("ClientMAC = %q", got)
	}
	b[1] = 6 // IEEE 802 token ring, not Ethernet
	if got := ClientMAC(b); got != "" {
		t.Errorf("not Ethernet: %q", got)
	}
	if got := ClientMAC(b[:20]); got != "" {
		t.Errorf("cut short: %q", got)
	}
}
