package dhcp

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/lease"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

var server = netip.MustParseAddr("198.18.0.1")

// withGUID adds option 97 with node n2's SMBIOS UUID
// (01020304-0506-0708-090a-0b0c0d0e0f10), in the byte order firmware uses.
var withGUID = dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, []byte{0, 4, 3, 2, 1, 6, 5, 8, 7, 9, 10, 11, 12, 13, 14, 15, 16})

func testPlan(mode, policy string) *plan.Plan {
	s := &plan.Site{Name: "lab", UnknownNodes: policy, Network: plan.Network{ServerAddress: "198.18.0.1", HTTPPort: 8080, DHCP: mode,
		Subnet: "198.18.0.0/24", Gateway: "198.18.0.254", DNS: []string{"198.18.0.1"}, LeaseSeconds: 600}}
	s.Nodes = []*plan.Node{
		{Name: "n1", Site: "lab", IP: "198.18.0.11", Hostname: "n1", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:01"}}},
		{Name: "n2", Site: "lab", Identity: plan.Identity{UUID: "01020304-0506-0708-090a-0b0c0d0e0f10"}},
		{Name: "n3", Site: "lab", Profile: "arm", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:03"}}},
	}
	s.Reservations = []plan.Reservation{{Node: "n1", MACs: []string{"52:54:00:00:00:01"}, IP: "198.18.0.11", Hostname: "n1"}}
	return &plan.Plan{Sites: []*plan.Site{s}, Profiles: []*plan.Profile{{Name: "arm", OS: plan.OS{Type: "immutable", Arch: "arm64"}}}}
}

// pxeDiscover is a DISCOVER as a PXE ROM sends it.
func pxeDiscover(t testing.TB, mac string, arch iana.Arch, class string, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	hw, _ := net.ParseMAC(mac)
	all := append([]dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier(class)),
		dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{byte(arch >> 8), byte(arch)}),
	}, mods...)
	d, err := dhcpv4.NewDiscovery(hw, all...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestProxyReplies(t *testing.T) {
	p := testPlan(plan.DHCPProxy, plan.PolicyProvision)
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPProxy}
	ipxeUC := dhcpv4.WithGeneric(dhcpv4.OptionUserClassInformation, []byte("iPXE"))
	for name, c := range map[string]struct {
		req   *dhcpv4.DHCPv4
		port  int
		mt    dhcpv4.MessageType
		file  string
		class string
		node  string
	}{
		"bios":           {pxeDiscover(t, "52:54:00:00:00:01", iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001"), 67, dhcpv4.MessageTypeOffer, "undionly.kpxe", "PXEClient", "n1"},
		"uefi x86-64":    {pxeDiscover(t, "52:54:00:00:00:09", iana.EFI_X86_64, "PXEClient:Arch:00007:UNDI:003016", withGUID), 67, dhcpv4.MessageTypeOffer, "ipxe.efi", "PXEClient", "n2"},
		"uefi bc":        {pxeDiscover(t, "52:54:00:00:00:09", iana.EFI_BC, "PXEClient:Arch:00009:UNDI:003016", withGUID), 67, dhcpv4.MessageTypeOffer, "ipxe.efi", "PXEClient", "n2"},
		"arm64":          {pxeDiscover(t, "52:54:00:00:00:03", iana.EFI_ARM64, "PXEClient:Arch:00011:UNDI:003000"), 67, dhcpv4.MessageTypeOffer, "snp.efi", "PXEClient", "n3"},
		"arm64 http":     {pxeDiscover(t, "52:54:00:00:00:03", iana.EFI_ARM64_HTTP, "HTTPClient:Arch:00019:UNDI:003001"), 67, dhcpv4.MessageTypeOffer, "http://198.18.0.1:8080/tftp/snp.efi", "HTTPClient", "n3"},
		"uefi http boot": {pxeDiscover(t, "52:54:00:00:00:09", iana.EFI_X86_64_HTTP, "HTTPClient:Arch:00016:UNDI:003001", withGUID), 67, dhcpv4.MessageTypeOffer, "http://198.18.0.1:8080/tftp/ipxe.efi", "HTTPClient", "n2"},
		"ipxe":           {pxeDiscover(t, "52:54:00:00:00:01", iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001", ipxeUC), 67, dhcpv4.MessageTypeOffer, "http://198.18.0.1:8080/boot.ipxe?site=lab", "PXEClient", "n1"},
		"port 4011":      {pxeDiscover(t, "52:54:00:00:00:01", iana.EFI_X86_64, "PXEClient:Arch:00007:UNDI:003016", dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest)), 4011, dhcpv4.MessageTypeAck, "ipxe.efi", "PXEClient", "n1"},
	} {
		t.Run(name, func(t *testing.T) {
			a := Reply(p, p.Sites[0], cfg, c.req, c.port)
			r := a.Reply
			if r == nil {
				t.Fatalf("no reply: %s", a.Why)
			}
			if r.MessageType() != c.mt || r.BootFileName != c.file || r.ClassIdentifier() != c.class {
				t.Errorf("reply %s file %q class %q", r.MessageType(), r.BootFileName, r.ClassIdentifier())
			}
			if !r.YourIPAddr.IsUnspecified() || !r.ServerIPAddr.Equal(server.AsSlice()) || !r.ServerIdentifier().Equal(server.AsSlice()) || r.ServerHostName != "198.18.0.1" {
				t.Errorf("addresses: yiaddr %v siaddr %v sid %v sname %q", r.YourIPAddr, r.ServerIPAddr, r.ServerIdentifier(), r.ServerHostName)
			}
			if o43 := r.GetOneOption(dhcpv4.OptionVendorSpecificInformation); !bytes.Equal(o43, []byte{6, 1, 8, 255}) {
				t.Errorf("option 43: % x", o43)
			}
			if r.TransactionID != c.req.TransactionID || !bytes.Equal(r.ClientHWAddr, c.req.ClientHWAddr) {
				t.Errorf("xid/chaddr not echoed")
			}
			if a.Node == nil || a.Node.Name != c.node {
				t.Errorf("node %v, want %s", a.Node, c.node)
			}
		})
	}
}

func TestProxyStaysQuiet(t *testing.T) {
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPProxy}
	p := testPlan(plan.DHCPProxy, plan.PolicyProvision)
	hw, _ := net.ParseMAC("52:54:00:00:00:01")
	plain, _ := dhcpv4.NewDiscovery(hw)
	for name, c := range map[string]struct {
		p    *plan.Plan
		req  *dhcpv4.DHCPv4
		port int
	}{
		"not pxe":       {p, plain, 67},
		"request on 67": {p, pxeDiscover(t, "52:54:00:00:00:01", iana.INTEL_X86PC, "PXEClient", dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest)), 67},
		"no arch": {p, func() *dhcpv4.DHCPv4 {
			d := pxeDiscover(t, "52:54:00:00:00:01", 0, "PXEClient")
			d.Options.Del(dhcpv4.OptionClientSystemArchitectureType)
			return d
		}(), 67},
		"unknown arch":          {p, pxeDiscover(t, "52:54:00:00:00:01", iana.S390_BASIC, "PXEClient"), 67},
		"unknown, site ignores": {func() *plan.Plan { q := testPlan(plan.DHCPProxy, plan.PolicyIgnore); return q }(), pxeDiscover(t, "52:54:00:99:99:99", iana.INTEL_X86PC, "PXEClient"), 67},
	} {
		t.Run(name, func(t *testing.T) {
			if a := Reply(c.p, c.p.Sites[0], cfg, c.req, c.port); a.Reply != nil {
				t.Errorf("answered %s (%s)", a.Reply.MessageType(), a.Why)
			}
		})
	}
}

func TestReservation(t *testing.T) {
	p := testPlan(plan.DHCPReservation, plan.PolicyIgnore)
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPReservation}
	a := Reply(p, p.Sites[0], cfg, pxeDiscover(t, "52:54:00:00:00:01", iana.INTEL_X86PC, "PXEClient"), 67)
	r := a.Reply
	if r == nil || r.MessageType() != dhcpv4.MessageTypeOffer || !r.YourIPAddr.Equal(net.ParseIP("198.18.0.11")) {
		t.Fatalf("offer: %v (%s)", r, a.Why)
	}
	if r.SubnetMask().String() != "ffffff00" || !r.Router()[0].Equal(net.ParseIP("198.18.0.254")) || !r.DNS()[0].Equal(net.ParseIP("198.18.0.1")) ||
		r.IPAddressLeaseTime(0) != 600*time.Second || r.HostName() != "n1" || r.BootFileName != "undionly.kpxe" {
		t.Errorf("offer options: %s", r.Summary())
	}
	req, _ := dhcpv4.NewRequestFromOffer(r)
	if a := Reply(p, p.Sites[0], cfg, req, 67); a.Reply == nil || a.Reply.MessageType() != dhcpv4.MessageTypeAck {
		t.Errorf("request: %v", a.Why)
	}
	req.UpdateOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("198.18.0.99")))
	if a := Reply(p, p.Sites[0], cfg, req, 67); a.Reply == nil || a.Reply.MessageType() != dhcpv4.MessageTypeNak {
		t.Errorf("wrong address requested: %v", a.Why)
	}
	if a := Reply(p, p.Sites[0], cfg, pxeDiscover(t, "52:54:00:77:77:77", iana.INTEL_X86PC, "PXEClient"), 67); a.Reply != nil {
		t.Errorf("answered an unreserved MAC")
	}
}

func TestDestination(t *testing.T) {
	bcast := netip.MustParseAddrPort("0.0.0.0:68")
	d := pxeDiscover(t, "52:54:00:00:00:01", iana.INTEL_X86PC, "PXEClient")
	if got := destination(d, bcast, 67); got.String() != "255.255.255.255:68" {
		t.Errorf("broadcast: %s", got)
	}
	d.GatewayIPAddr = net.ParseIP("198.18.5.1")
	if got := destination(d, netip.MustParseAddrPort("198.18.5.1:67"), 67); got.String() != "198.18.5.1:67" {
		t.Errorf("relay: %s", got)
	}
	d.GatewayIPAddr = net.IPv4zero
	if got := destination(d, netip.MustParseAddrPort("198.18.0.50:4011"), 4011); got.String() != "198.18.0.50:4011" {
		t.Errorf("4011: %s", got)
	}
}

// serveLoopback runs s on a free loopback port until the test ends and
// returns a client socket connected to it.
func serveLoopback(t *testing.T, s *Server) *net.UDPConn {
	t.Helper()
	probe, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := probe.LocalAddr().(*net.UDPAddr).Port
	probe.Close()
	s.Ports = []int{port}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	conn, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A real socket on loopback: DISCOVER in, OFFER out, event recorded.
func TestServerOnLoopback(t *testing.T) {
	live := &boot.Live{}
	live.Swap(testPlan(plan.DHCPProxy, plan.PolicyProvision))
	mem := &status.Memory{}
	client := serveLoopback(t, &Server{Plans: live, Site: "lab", Config: Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPProxy}, Events: mem})
	req := pxeDiscover(t, "52:54:00:00:00:01", iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001")
	buf := make([]byte, 1500)
	var reply *dhcpv4.DHCPv4
	for i := 0; i < 20 && reply == nil; i++ { // the server may not be listening yet
		client.Write(req.ToBytes())
		client.Write([]byte{1, 2, 3}) // garbage in between must not stop it
		client.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := client.Read(buf); err == nil {
			reply, err = dhcpv4.FromBytes(buf[:n])
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if reply == nil || reply.MessageType() != dhcpv4.MessageTypeOffer || reply.BootFileName != "undionly.kpxe" {
		t.Fatalf("reply: %v", reply)
	}
	// The event is recorded once the reply is sent: it may come a moment
	// after the reply.
	var ev []status.Event
	for i := 0; i < 100 && len(ev) == 0; i++ {
		if ev = mem.Events("lab/n1"); len(ev) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if len(ev) == 0 || ev[0].Kind != status.KindDHCP || ev[0].State != status.StateDiscovered {
		t.Errorf("events: %+v", ev)
	}
	// n3, registered arm64, announcing x86: no reply; its timeline says why.
	client.Write(pxeDiscover(t, "52:54:00:00:00:03", iana.EFI_X86_64, "PXEClient:Arch:00007:UNDI:003016").ToBytes())
	client.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := client.Read(buf); err == nil {
		t.Errorf("a reply to n3's x86 firmware: % x", buf[:n])
	}
	ev = nil
	for i := 0; i < 100 && len(ev) == 0; i++ {
		if ev = mem.Events("lab/n3"); len(ev) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if len(ev) != 1 || ev[0].State != status.StateMismatch || !ev[0].Error || !strings.Contains(ev[0].Message, "the firmware announces x86_64") {
		t.Errorf("n3's timeline: %+v", ev)
	}
}

// Packets captured from real firmware by test/capture.sh: QEMU's iPXE ROM
// under SeaBIOS (000-002), OVMF's own PXE client (003-004), and iPXE for
// EFI loaded by it (005-006).
func TestCapturedPackets(t *testing.T) {
	p := testPlan(plan.DHCPProxy, plan.PolicyProvision)
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPProxy}
	for file, c := range map[string]struct {
		mt   dhcpv4.MessageType // 0: no answer
		boot string
		node string
		uuid string
	}{
		"000-67.bin": {dhcpv4.MessageTypeOffer, "http://198.18.0.1:8080/boot.ipxe?site=lab", "", ""},
		"002-67.bin": {0, "", "", ""}, // REQUEST to the site's DHCP server
		"003-67.bin": {dhcpv4.MessageTypeOffer, "ipxe.efi", "n2", "01020304-0506-0708-090a-0b0c0d0e0f10"},
		"004-67.bin": {0, "", "n2", "01020304-0506-0708-090a-0b0c0d0e0f10"},
		"005-67.bin": {dhcpv4.MessageTypeOffer, "http://198.18.0.1:8080/boot.ipxe?site=lab", "n2", "01020304-0506-0708-090a-0b0c0d0e0f10"},
	} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata/captured", file))
			if err != nil {
				t.Fatal(err)
			}
			req, err := dhcpv4.FromBytes(b)
			if err != nil {
				t.Fatal(err)
			}
			if got := machine(req).UUID; got != c.uuid {
				t.Errorf("uuid %q, want %q", got, c.uuid)
			}
			a := Reply(p, p.Sites[0], cfg, req, 67)
			switch {
			case c.mt == 0 && a.Reply != nil:
				t.Errorf("answered %s", a.Reply.MessageType())
			case c.mt != 0 && (a.Reply == nil || a.Reply.MessageType() != c.mt || a.Reply.BootFileName != c.boot):
				t.Errorf("reply %v (%s), want %s %s", a.Reply, a.Why, c.mt, c.boot)
			}
			if node := a.nodeName(); node != c.node {
				t.Errorf("node %q, want %q", node, c.node)
			}
		})
	}
}

// poolPlan is a reservation-mode site whose pool is .10-.12 (.11 is n1's
// reservation: skipped), with a 600 s lease time.
func poolPlan(policy string) *plan.Plan {
	p := testPlan(plan.DHCPReservation, policy)
	p.Sites[0].Network.Pool = &plan.Pool{Start: "198.18.0.10", End: "198.18.0.12"}
	return p
}

// clock is a Pool's clock that tests move by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time         { return c.t }
func (c *clock) add(d time.Duration)    { c.t = c.t.Add(d) }
func newClock() *clock                  { return &clock{time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }
func (c *clock) pool(path string) *Pool { return &Pool{Path: path, Now: c.now} }
func leasesFile(t *testing.T) string    { return filepath.Join(t.TempDir(), "leases.json") }

// client plays one DHCP client against Reply.
type client struct {
	t   *testing.T
	p   *plan.Plan
	cfg Config
	hw  net.HardwareAddr
}

func newClient(t *testing.T, p *plan.Plan, cfg Config, mac string) *client {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t, p, cfg, hw}
}

// roundTrip sends req as bytes, the way the server gets it.
func (c *client) roundTrip(req *dhcpv4.DHCPv4) Answer {
	c.t.Helper()
	in, err := dhcpv4.FromBytes(req.ToBytes())
	if err != nil {
		c.t.Fatal(err)
	}
	return Reply(c.p, c.p.Sites[0], c.cfg, in, 67)
}

// discover returns the offered address, or "none: why".
func (c *client) discover() (string, Answer) {
	c.t.Helper()
	d, err := dhcpv4.NewDiscovery(c.hw)
	if err != nil {
		c.t.Fatal(err)
	}
	a := c.roundTrip(d)
	switch {
	case a.Reply == nil:
		return "none: " + a.Why, a
	case a.Reply.MessageType() != dhcpv4.MessageTypeOffer:
		return a.Reply.MessageType().String(), a
	}
	return a.Reply.YourIPAddr.String(), a
}

// request asks for ip (as after an OFFER of this server) and returns
// "ACK <ip>", "NAK" or "none: why".
func (c *client) request(ip string, mods ...dhcpv4.Modifier) string {
	c.t.Helper()
	all := append([]dhcpv4.Modifier{
		dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithHwAddr(c.hw),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP(ip))),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server.AsSlice())),
	}, mods...)
	r, err := dhcpv4.New(all...)
	if err != nil {
		c.t.Fatal(err)
	}
	a := c.roundTrip(r)
	switch {
	case a.Reply == nil:
		return "none: " + a.Why
	case a.Reply.MessageType() == dhcpv4.MessageTypeAck:
		return "ACK " + a.Reply.YourIPAddr.String()
	}
	return a.Reply.MessageType().String()
}

// get is DISCOVER then REQUEST of what was offered.
func (c *client) get() string {
	c.t.Helper()
	ip, _ := c.discover()
	if strings.HasPrefix(ip, "none") {
		return ip
	}
	return c.request(ip)
}

// fileLeases reads the lease file as a restart would: MAC → "ip expires".
func fileLeases(t *testing.T, path string) map[string]string {
	t.Helper()
	m, err := lease.Read(path)
	if err != nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("%v\n%s", err, b)
	}
	out := map[string]string{}
	for mac, l := range m {
		out[mac] = l.IP.String() + " " + l.Expires.Format(time.RFC3339)
	}
	return out
}

func TestPoolForUnknownMachines(t *testing.T) {
	p := poolPlan(plan.PolicyProvision)
	path := leasesFile(t)
	clk := newClock()
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPReservation, Leases: clk.pool(path)}
	a, b, c := newClient(t, p, cfg, "52:54:00:aa:00:01"), newClient(t, p, cfg, "52:54:00:aa:00:02"), newClient(t, p, cfg, "52:54:00:aa:00:03")
	for _, step := range []struct {
		c    *client
		want string
	}{{a, "ACK 198.18.0.10"}, {b, "ACK 198.18.0.12"}, {a, "ACK 198.18.0.10"}} {
		if got := step.c.get(); got != step.want {
			t.Errorf("%s: %s, want %s", step.c.hw, got, step.want)
		}
	}
	got, ans := c.discover()
	if got != "none: dhcp: pool exhausted" || !ans.Exhausted {
		t.Errorf("full pool: %s (exhausted %v)", got, ans.Exhausted)
	}
	// A restart keeps every acknowledged lease, with its expiry.
	want := map[string]string{"52:54:00:aa:00:01": "198.18.0.10 2030-01-02T03:14:05Z", "52:54:00:aa:00:02": "198.18.0.12 2030-01-02T03:14:05Z"}
	if got := fileLeases(t, path); !maps.Equal(got, want) {
		t.Errorf("lease file %v, want %v", got, want)
	}
	cfg.Leases = clk.pool(path)
	b.cfg = cfg
	if got, _ := b.discover(); got != "198.18.0.12" {
		t.Errorf("after restart: %s", got)
	}
	// Another machine's address is refused; an address outside the pool
	// too.
	if got := b.request("198.18.0.10"); got != "NAK" {
		t.Errorf("request of another machine's address: %s", got)
	}
	if got := b.request("198.18.0.99"); got != "NAK" {
		t.Errorf("request outside the pool: %s", got)
	}
	// A REQUEST for another server's offer leaves the pool alone.
	if got := c.request("198.18.0.10", dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(198, 18, 0, 2)))); !strings.HasPrefix(got, "none: REQUEST for another server") {
		t.Errorf("request for another server: %s", got)
	}
	// A site that ignores unknown machines leases nothing.
	p.Sites[0].UnknownNodes = plan.PolicyIgnore
	if got, _ := newClient(t, p, cfg, "52:54:00:aa:00:09").discover(); !strings.HasPrefix(got, "none: unknown machine") {
		t.Errorf("ignore policy: %s", got)
	}
}

// A flood of DISCOVERs from random MACs holds addresses only briefly and
// writes nothing; a real client that follows still gets an address.
func TestDiscoverFlood(t *testing.T) {
	p := poolPlan(plan.PolicyProvision)
	path := leasesFile(t)
	clk := newClock()
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPReservation, Leases: clk.pool(path)}
	rng := rand.New(rand.NewPCG(1, 2))
	offered := 0
	for range 200 {
		mac := net.HardwareAddr{0x02, byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}
		if ip, _ := newClient(t, p, cfg, mac.String()).discover(); !strings.HasPrefix(ip, "none") {
			offered++
		}
		clk.add(10 * time.Millisecond)
	}
	if offered != 200 {
		t.Errorf("%d of 200 DISCOVERs got an offer: an offer should give way to the next", offered)
	}
	if got := fileLeases(t, path); len(got) != 0 {
		t.Errorf("DISCOVERs alone wrote leases: %v", got)
	}
	// At once, and after a restart.
	if got := newClient(t, p, cfg, "52:54:00:bb:00:01").get(); !strings.HasPrefix(got, "ACK 198.18.0.1") {
		t.Errorf("a client after the flood: %s", got)
	}
	cfg.Leases = clk.pool(path)
	if got := newClient(t, p, cfg, "52:54:00:bb:00:02").get(); !strings.HasPrefix(got, "ACK 198.18.0.1") {
		t.Errorf("a client after the flood and a restart: %s", got)
	}
	if got := fileLeases(t, path); len(got) != 2 {
		t.Errorf("leases %v, want the two clients'", got)
	}
}

func TestOffersExpire(t *testing.T) {
	p := poolPlan(plan.PolicyProvision)
	clk := newClock()
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPReservation, Leases: clk.pool(leasesFile(t))}
	a, b, c := newClient(t, p, cfg, "52:54:00:aa:00:01"), newClient(t, p, cfg, "52:54:00:aa:00:02"), newClient(t, p, cfg, "52:54:00:aa:00:03")
	for _, step := range []struct {
		c     *client
		after time.Duration
		want  string
	}{
		{a, 0, "198.18.0.10"},
		{b, 29 * time.Second, "198.18.0.12"}, // a's offer still held
		{a, 0, "198.18.0.10"},                // a asks again: the same offer
		{c, 31 * time.Second, "198.18.0.10"}, // both expired: the lowest again
	} {
		clk.add(step.after)
		if got, _ := step.c.discover(); got != step.want {
			t.Errorf("%s after %s: %s, want %s", step.c.hw, step.after, got, step.want)
		}
	}
	// A REQUEST is leased only what its client was offered (or leased):
	// a, whose offer expired, is refused; c, offered it now, gets it.
	if got := a.request("198.18.0.10"); got != "NAK" {
		t.Errorf("a, whose offer expired: %s", got)
	}
	if got := c.request("198.18.0.10"); got != "ACK 198.18.0.10" {
		t.Errorf("c, offered the address: %s", got)
	}
	// A made-up client that never sent a DISCOVER cannot take a free
	// pool address with a REQUEST alone (nor can b take c's).
	if got := newClient(t, p, cfg, "52:54:00:66:66:66").request("198.18.0.11"); got != "NAK" {
		t.Errorf("a REQUEST without a DISCOVER: %s", got)
	}
	if got := b.request("198.18.0.10"); got != "NAK" {
		t.Errorf("b, REQUESTing c's address: %s", got)
	}
}

func TestLeasesExpire(t *testing.T) {
	p := poolPlan(plan.PolicyProvision)
	path := leasesFile(t)
	clk := newClock()
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPReservation, Leases: clk.pool(path)}
	a, b, c := newClient(t, p, cfg, "52:54:00:aa:00:01"), newClient(t, p, cfg, "52:54:00:aa:00:02"), newClient(t, p, cfg, "52:54:00:aa:00:03")
	a.get()
	clk.add(time.Minute)
	b.get()
	// The HTTP server keys a machine with no identifier by its lease.
	pool := cfg.Leases.(*Pool)
	ps := &lease.Stores{}
	ps.Add(pool)
	if got := ps.MACOf("198.18.0.12"); got != "52:54:00:aa:00:02" {
		t.Errorf("MACOf(198.18.0.12): %q", got)
	}
	if got := ps.MACOf("198.18.0.200"); got != "" {
		t.Errorf("MACOf an address nobody leased: %q", got)
	}
	// a renews (ciaddr, no option 50) half-way: its lease lasts on.
	clk.add(5 * time.Minute)
	if got := a.request("0.0.0.0", dhcpv4.WithClientIP(net.ParseIP("198.18.0.10")), func(d *dhcpv4.DHCPv4) {
		d.Options.Del(dhcpv4.OptionRequestedIPAddress)
		d.Options.Del(dhcpv4.OptionServerIdentifier)
	}); got != "ACK 198.18.0.10" {
		t.Errorf("renewal: %s", got)
	}
	clk.add(5 * time.Minute) // b's lease has expired, a's not
	if got := pool.MACOf("198.18.0.12"); got != "" {
		t.Errorf("MACOf an expired lease: %q", got)
	}
	if got := c.get(); got != "ACK 198.18.0.12" {
		t.Errorf("c, when b's lease has expired: %s", got)
	}
	if got := fileLeases(t, path); got["52:54:00:aa:00:02"] != "" || len(got) != 2 {
		t.Errorf("b's lease not reclaimed: %v", got)
	}
	// b comes back: nothing free.
	if got, _ := b.discover(); got != "none: dhcp: pool exhausted" {
		t.Errorf("b: %s", got)
	}
	// Long after, a comes back to its old address although expired; c's
	// is expired too but still c's.
	clk.add(time.Hour)
	if got := a.get(); got != "ACK 198.18.0.10" {
		t.Errorf("a, back: %s", got)
	}
	if got := c.get(); got != "ACK 198.18.0.12" {
		t.Errorf("c, back: %s", got)
	}
}

// A lease file from before leases expired (MAC → address) still loads;
// those leases count as expired: their machines get them back, unless the
// pool needs them first.
func TestLegacyLeaseFile(t *testing.T) {
	p := poolPlan(plan.PolicyProvision)
	path := leasesFile(t)
	if err := os.WriteFile(path, []byte(`{"52:54:00:aa:00:01": "198.18.0.10", "52:54:00:aa:00:02": "198.18.0.12"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPReservation, Leases: clk.pool(path)}
	if got := newClient(t, p, cfg, "52:54:00:aa:00:02").get(); got != "ACK 198.18.0.12" {
		t.Errorf("old machine: %s", got)
	}
	if got := newClient(t, p, cfg, "52:54:00:aa:00:03").get(); got != "ACK 198.18.0.10" {
		t.Errorf("new machine, full pool of expired leases: %s", got)
	}
	want := map[string]string{"52:54:00:aa:00:02": "198.18.0.12 2030-01-02T03:14:05Z", "52:54:00:aa:00:03": "198.18.0.10 2030-01-02T03:14:05Z"}
	if got := fileLeases(t, path); !maps.Equal(got, want) {
		t.Errorf("lease file %v, want %v", got, want)
	}
}

// badPacket returns a copy of req with its raw bytes edited by edit.
func badPacket(t *testing.T, req *dhcpv4.DHCPv4, edit func(b []byte) []byte) *dhcpv4.DHCPv4 {
	t.Helper()
	out, err := dhcpv4.FromBytes(edit(req.ToBytes()))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// withOption appends option code with the raw value v, any length.
func withOption(code byte, v []byte) func(b []byte) []byte {
	return func(b []byte) []byte {
		end := bytes.LastIndexByte(b, 255)
		opt := append([]byte{code, byte(len(v))}, v...)
		return append(append(b[:end:end], opt...), 255)
	}
}

// Packets no client should send: every mode drops them unanswered, with
// the reason a metric counts.
func TestInvalidPacketsDropped(t *testing.T) {
	macReq := func(mac string, mt dhcpv4.MessageType) *dhcpv4.DHCPv4 {
		return pxeDiscover(t, mac, iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001", dhcpv4.WithMessageType(mt))
	}
	// A REQUEST of n1 (reserved .11) with its options taken out, so that
	// the test puts them back with any length.
	bare := func() *dhcpv4.DHCPv4 {
		r := macReq("52:54:00:00:00:01", dhcpv4.MessageTypeRequest)
		r.Options.Del(dhcpv4.OptionRequestedIPAddress)
		r.Options.Del(dhcpv4.OptionServerIdentifier)
		return r
	}
	ip11 := []byte{198, 18, 0, 11}
	sid := server.AsSlice()
	for name, c := range map[string]struct {
		req  *dhcpv4.DHCPv4
		want string
	}{
		"zero mac discover":      {macReq("00:00:00:00:00:00", dhcpv4.MessageTypeDiscover), DropZeroMAC},
		"zero mac request":       {macReq("00:00:00:00:00:00", dhcpv4.MessageTypeRequest), DropZeroMAC},
		"broadcast mac discover": {macReq("ff:ff:ff:ff:ff:ff", dhcpv4.MessageTypeDiscover), DropBroadcastMAC},
		"multicast mac discover": {macReq("01:00:5e:00:00:01", dhcpv4.MessageTypeDiscover), DropMulticastMAC},
		"multicast mac request":  {macReq("33:33:00:00:00:01", dhcpv4.MessageTypeRequest), DropMulticastMAC},
		"hlen 16":                {badPacket(t, macReq("52:54:00:00:00:01", dhcpv4.MessageTypeDiscover), func(b []byte) []byte { b[2] = 16; return b }), DropHardware},
		"hlen 0":                 {badPacket(t, macReq("52:54:00:00:00:01", dhcpv4.MessageTypeDiscover), func(b []byte) []byte { b[2] = 0; return b }), DropHardware},
		"htype token ring":       {badPacket(t, macReq("52:54:00:00:00:01", dhcpv4.MessageTypeDiscover), func(b []byte) []byte { b[1] = 6; return b }), DropHardware},
		"option 50 length 0":     {badPacket(t, bare(), withOption(50, nil)), DropMalformedOption},
		"option 50 length 3":     {badPacket(t, bare(), withOption(50, ip11[:3])), DropMalformedOption},
		"option 50 length 5":     {badPacket(t, bare(), withOption(50, append(ip11, 0))), DropMalformedOption},
		"option 50 twice":        {badPacket(t, badPacket(t, bare(), withOption(50, ip11)), withOption(50, ip11)), DropMalformedOption},
		"option 54 length 0":     {badPacket(t, badPacket(t, bare(), withOption(50, ip11)), withOption(54, nil)), DropMalformedOption},
		"option 54 length 5":     {badPacket(t, badPacket(t, bare(), withOption(50, ip11)), withOption(54, append(sid, 0))), DropMalformedOption},
		"option 53 length 2":     {badPacket(t, bare(), func(b []byte) []byte { return withOption(53, []byte{3, 3})(b) }), DropMalformedOption},
	} {
		t.Run(name, func(t *testing.T) {
			for _, mode := range []string{plan.DHCPReservation, plan.DHCPProxy} {
				p := poolPlan(plan.PolicyProvision)
				p.Sites[0].Network.DHCP = mode
				cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: mode, Leases: &Pool{Path: leasesFile(t)}}
				for _, port := range []int{67, 4011} {
					a := Reply(p, p.Sites[0], cfg, c.req, port)
					if a.Reply != nil || a.Dropped != c.want {
						t.Errorf("%s, port %d: reply %v, dropped %q (%s), want none, %q", mode, port, a.Reply != nil, a.Dropped, a.Why, c.want)
					}
				}
			}
		})
	}
	// The same REQUEST with well-formed options is answered: the cases
	// above fail for their option alone.
	p := poolPlan(plan.PolicyProvision)
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPReservation}
	good := badPacket(t, badPacket(t, bare(), withOption(50, ip11)), withOption(54, sid))
	if a := Reply(p, p.Sites[0], cfg, good, 67); a.Reply == nil || a.Reply.MessageType() != dhcpv4.MessageTypeAck {
		t.Errorf("well-formed REQUEST: %v (%s)", a.Reply, a.Why)
	}
}

// The server counts what it drops, and says once when the pool runs out.
func TestServerCounts(t *testing.T) {
	live := &boot.Live{}
	p := poolPlan(plan.PolicyProvision)
	p.Sites[0].Network.Pool.End = "198.18.0.10" // one address
	live.Swap(p)
	mem := &status.Memory{}
	reg := prometheus.NewRegistry()
	leases := leasesFile(t)
	conn := serveLoopback(t, &Server{Plans: live, Site: "lab", Events: mem, Metrics: NewMetrics(reg),
		Config: Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPReservation, Leases: &Pool{Path: leases}}})
	exchange := func(req *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
		buf := make([]byte, 1500)
		for range 20 { // the server may not be listening yet
			conn.Write(req.ToBytes())
			conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := conn.Read(buf)
			if err == nil {
				r, err := dhcpv4.FromBytes(buf[:n])
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				time.Sleep(50 * time.Millisecond) // refused: not listening yet
			}
		}
		return nil
	}
	// One machine takes the only address.
	hw, _ := net.ParseMAC("52:54:00:cc:00:01")
	d, _ := dhcpv4.NewDiscovery(hw)
	offer := exchange(d)
	if offer == nil {
		t.Fatal("no offer")
	}
	req, _ := dhcpv4.NewRequestFromOffer(offer)
	if ack := exchange(req); ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("no ACK: %v", ack)
	}
	for _, mac := range []string{"00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01"} {
		hw, _ := net.ParseMAC(mac)
		d, _ := dhcpv4.NewDiscovery(hw)
		conn.Write(d.ToBytes())
	}
	bad := badPacket(t, req, func(b []byte) []byte { return b })
	bad.Options.Del(dhcpv4.OptionRequestedIPAddress)
	conn.Write(badPacket(t, bad, withOption(50, []byte{198, 18, 0})).ToBytes())
	for _, mac := range []string{"52:54:00:cc:00:02", "52:54:00:cc:00:03"} {
		hw, _ := net.ParseMAC(mac)
		d, _ := dhcpv4.NewDiscovery(hw)
		conn.Write(d.ToBytes())
	}
	want := map[string]float64{
		`bootops_dhcp_dropped_total{reason="zero_mac"}`:         1,
		`bootops_dhcp_dropped_total{reason="broadcast_mac"}`:    1,
		`bootops_dhcp_dropped_total{reason="multicast_mac"}`:    1,
		`bootops_dhcp_dropped_total{reason="malformed_option"}`: 1,
		`bootops_dhcp_dropped_total{reason="bad_hardware"}`:     0,
		`bootops_dhcp_pool_exhausted_total{site="lab"}`:         2,
		`bootops_dhcp_events_suppressed_total{}`:                0,
		`bootops_dhcp_queue_full_total{}`:                       0,
	}
	var got map[string]float64
	for range 200 { // the workers may still be at it
		if got = counters(t, reg); maps.Equal(got, want) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !maps.Equal(got, want) {
		t.Errorf("counters %v, want %v", got, want)
	}
	var full []status.Event
	for _, mac := range []string{"52:54:00:cc:00:02", "52:54:00:cc:00:03"} {
		for _, e := range mem.Events("mac:" + mac) {
			if e.Error && strings.Contains(e.Message, "pool exhausted") {
				full = append(full, e)
			}
		}
	}
	if len(full) != 1 {
		t.Errorf("pool-exhausted events %+v, want one", full)
	}
	// Nothing was answered besides the first machine: its lease is the
	// only one.
	kept, _ := os.ReadFile(leases)
	if strings.Count(string(kept), `"ip"`) != 1 {
		t.Errorf("leases:\n%s", kept)
	}
}

// counters are the counter series of reg, as name{label="value"}.
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

// A 64-bit UEFI machine gets the first stage of its Micro-OS's chain, in
// both modes: the signed UKI by HTTP boot (PXE unanswered, so the
// firmware moves on to HTTP boot), shim over TFTP (HTTP boot unanswered:
// Debian's signed GRUB reads TFTP only); BIOS machines iPXE as ever.
func TestChainTargets(t *testing.T) {
	for _, mode := range []string{plan.DHCPProxy, plan.DHCPReservation} {
		p := testPlan(mode, plan.PolicyIgnore)
		p.MicroOS = []*plan.MicroOS{{Name: "uki", Chain: plan.ChainUKI, UKI: &plan.Artifact{Path: "microos/bootops.efi"}}, {Name: "shim", Chain: plan.ChainShim},
			{Name: "shim-arm", Chain: plan.ChainShim, Arch: "arm64"}}
		p.Profiles = []*plan.Profile{{Name: "uki-os", MicroOS: "uki"}, {Name: "shim-os", MicroOS: "shim"}, {Name: "arm", MicroOS: "shim-arm", OS: plan.OS{Arch: "arm64"}}}
		p.Sites[0].Nodes[0].Profile = "uki-os"  // n1, by MAC
		p.Sites[0].Nodes[1].Profile = "shim-os" // n2, by UUID
		// n3, by MAC, arm64: Debian's arm64 shim, which loads grubaa64.efi.
		cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: mode}
		for name, c := range map[string]struct {
			req  *dhcpv4.DHCPv4
			want string // "" for no answer
			// proxyOnly: n2 has no reservation, and an unanswered PXE
			// request in reservation mode still gets its address.
			proxyOnly bool
		}{
			"uki, http boot":   {pxeDiscover(t, "52:54:00:00:00:01", iana.EFI_X86_64_HTTP, "HTTPClient:Arch:00016:UNDI:003001"), "http://198.18.0.1:8080/artifacts/microos/uki/uki", false},
			"uki, pxe":         {pxeDiscover(t, "52:54:00:00:00:01", iana.EFI_X86_64, "PXEClient:Arch:00007:UNDI:003016"), "", true},
			"uki, bios":        {pxeDiscover(t, "52:54:00:00:00:01", iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001"), "undionly.kpxe", false},
			"shim, pxe":        {pxeDiscover(t, "52:54:00:00:00:02", iana.EFI_X86_64, "PXEClient:Arch:00007:UNDI:003016", withGUID), ShimFile, true},
			"shim, http":       {pxeDiscover(t, "52:54:00:00:00:02", iana.EFI_X86_64_HTTP, "HTTPClient:Arch:00016:UNDI:003001", withGUID), "", true},
			"arm64 shim, pxe":  {pxeDiscover(t, "52:54:00:00:00:03", iana.EFI_ARM64, "PXEClient:Arch:00011:UNDI:003000"), ShimARM64File, true},
			"arm64 shim, http": {pxeDiscover(t, "52:54:00:00:00:03", iana.EFI_ARM64_HTTP, "HTTPClient:Arch:00019:UNDI:003001"), "", true},
		} {
			if c.proxyOnly && mode == plan.DHCPReservation {
				continue
			}
			t.Run(mode+"/"+name, func(t *testing.T) {
				a := Reply(p, p.Sites[0], cfg, c.req, 67)
				switch {
				case c.want == "" && mode == plan.DHCPProxy && a.Reply != nil:
					t.Errorf("answered with %q; want no answer", a.Reply.BootFileName)
				case c.want == "" && mode == plan.DHCPProxy && !strings.Contains(a.Why, "not answered"):
					t.Errorf("why: %q", a.Why)
				case c.want != "" && (a.Reply == nil || a.Reply.BootFileName != c.want):
					t.Errorf("reply %v, want boot file %q (%s)", a.Reply, c.want, a.Why)
				case c.want != "" && strings.HasPrefix(c.want, "http") && a.Reply.ClassIdentifier() != "HTTPClient":
					t.Errorf("an HTTP-boot answer without option 60 HTTPClient")
				}
			})
		}
	}
}

// httpsBoot: the UKI's https URL on the site's httpsPort; without one the
// site has no TLS listener to point at, and the URL stays http.
func TestHTTPSBootTarget(t *testing.T) {
	p := testPlan(plan.DHCPProxy, plan.PolicyIgnore)
	p.MicroOS = []*plan.MicroOS{{Name: "uki", Chain: plan.ChainUKI, HTTPSBoot: true, UKI: &plan.Artifact{Path: "microos/bootops.efi"}}}
	p.Profiles = []*plan.Profile{{Name: "uki-os", MicroOS: "uki"}}
	p.Sites[0].Nodes[0].Profile = "uki-os"
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPProxy}
	req := pxeDiscover(t, "52:54:00:00:00:01", iana.EFI_X86_64_HTTP, "HTTPClient:Arch:00016:UNDI:003001")
	for port, want := range map[int]string{8443: "https://198.18.0.1:8443/artifacts/microos/uki/uki", 0: "http://198.18.0.1:8080/artifacts/microos/uki/uki"} {
		p.Sites[0].Network.HTTPSPort = port
		if a := Reply(p, p.Sites[0], cfg, req, 67); a.Reply == nil || a.Reply.BootFileName != want {
			t.Errorf("httpsPort %d: %v (%s), want %s", port, a.Reply, a.Why, want)
		}
	}
}

// A registered node's firmware that announces another processor family
// than its profile is for is not booted, and the answer says why: in
// proxy mode nothing is sent; in reservation mode the node gets its
// address and no boot file. An unknown machine is answered by its own
// architecture.
func TestArchRefused(t *testing.T) {
	p := testPlan(plan.DHCPProxy, plan.PolicyProvision)
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPProxy}
	for name, c := range map[string]struct {
		req  *dhcpv4.DHCPv4
		want string
	}{
		"x86 firmware, arm64 node":   {pxeDiscover(t, "52:54:00:00:00:03", iana.EFI_X86_64, "PXEClient:Arch:00007:UNDI:003016"), "the firmware announces x86_64 (architecture type 7, EFI x86-64) and node n3 is registered arm64 (profile arm, os.arch)"},
		"bios, arm64 node":           {pxeDiscover(t, "52:54:00:00:00:03", iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001"), "announces x86_64 (architecture type 0"},
		"arm64 firmware, x86 node":   {pxeDiscover(t, "52:54:00:00:00:01", iana.EFI_ARM64, "PXEClient:Arch:00011:UNDI:003000"), "the firmware announces arm64 (architecture type 11, EFI ARM64) and node n1 is registered x86_64"},
		"arm32 firmware, arm64 node": {pxeDiscover(t, "52:54:00:00:00:03", iana.EFI_ARM32, "PXEClient:Arch:00010:UNDI:003000"), "announces arm32"},
	} {
		t.Run(name, func(t *testing.T) {
			a := Reply(p, p.Sites[0], cfg, c.req, 67)
			if a.Reply != nil || !a.Refused || a.Node == nil || !strings.Contains(a.Why, c.want) {
				t.Errorf("answer %v, refused %v, node %v, why %q; want no reply, refused, %q", a.Reply, a.Refused, a.Node, a.Why, c.want)
			}
		})
	}
	if a := Reply(p, p.Sites[0], cfg, pxeDiscover(t, "52:54:00:00:00:77", iana.EFI_ARM64, "PXEClient:Arch:00011:UNDI:003000"), 67); a.Refused || a.Reply == nil || a.Boot != "snp.efi" {
		t.Errorf("an unknown arm64 machine: refused %v, boot %q (%s)", a.Refused, a.Boot, a.Why)
	}
	rp := testPlan(plan.DHCPReservation, plan.PolicyProvision)
	rcfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPReservation, Leases: &lease.Store{Path: filepath.Join(t.TempDir(), "leases.json")}}
	a := Reply(rp, rp.Sites[0], rcfg, pxeDiscover(t, "52:54:00:00:00:01", iana.EFI_ARM64, "PXEClient:Arch:00011:UNDI:003000"), 67)
	if a.Reply == nil || !a.Reply.YourIPAddr.Equal(net.ParseIP("198.18.0.11")) || a.Reply.BootFileName != "" || a.Boot != "" || !a.Refused ||
		!strings.Contains(a.Why, "OFFER 198.18.0.11 to n1; refused: the firmware announces arm64") {
		t.Errorf("reservation mode, arm64 firmware on x86 n1: %+v", a)
	}
}
