package dhcp

import (
	"testing"
	"time"

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

func TestEventGate(t *testing.T) {
	g := newEventGate()
	now := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	if !g.allow("a", "offer", now) || g.allow("a", "offer", now.Add(time.Second)) {
		t.Error("a repeat within 5 s was recorded")
	}
	if !g.allow("a", "another answer", now.Add(2*time.Second)) || !g.allow("a", "another answer", now.Add(8*time.Second)) {
		t.Error("a new answer, or the same after 5 s, was not recorded")
	}
	// 10,000 distinct machines in one second: the burst (4,000), no more.
	g = newEventGate()
	n := 0
	for i := range 10000 {
		if g.allow(string(rune(i+1000)), "offer", now) {
			n++
		}
	}
	if n != 4000 || g.Suppressed() != 6000 {
		t.Errorf("recorded %d, suppressed %d", n, g.Suppressed())
	}
	// A second later the bucket holds 2,000 more.
	n = 0
	for i := range 5000 {
		if g.allow(string(rune(i+20000)), "offer", now.Add(time.Second)) {
			n++
		}
	}
	if n != 2000 {
		t.Errorf("after a second: %d recorded", n)
	}
}
