package dhcp

import (
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
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
