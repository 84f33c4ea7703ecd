package dhcp

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/boot"
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
	}
	s.Reservations = []plan.Reservation{{Node: "n1", MACs: []string{"52:54:00:00:00:01"}, IP: "198.18.0.11", Hostname: "n1"}}
	return &plan.Plan{Sites: []*plan.Site{s}}
}

// pxeDiscover is a DISCOVER as a PXE ROM sends it.
func pxeDiscover(t *testing.T, mac string, arch iana.Arch, class string, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
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
		"arm64":          {pxeDiscover(t, "52:54:00:00:00:09", iana.EFI_ARM64, "PXEClient:Arch:00011:UNDI:003000", withGUID), 67, dhcpv4.MessageTypeOffer, "snp.efi", "PXEClient", "n2"},
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

// A real socket on loopback: DISCOVER in, OFFER out, event recorded.
func TestServerOnLoopback(t *testing.T) {
	live := &boot.Live{}
	live.Swap(testPlan(plan.DHCPProxy, plan.PolicyProvision))
	mem := &status.Memory{}
	probe, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := probe.LocalAddr().(*net.UDPAddr).Port
	probe.Close()
	s := &Server{Plans: live, Site: "lab", Config: Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPProxy}, Ports: []int{port}, Events: mem}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	client, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
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
}

func FuzzReply(f *testing.F) {
	hw, _ := net.ParseMAC("52:54:00:00:00:01")
	d, _ := dhcpv4.NewDiscovery(hw, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")), dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 7}))
	f.Add(d.ToBytes(), uint16(67))
	f.Add([]byte{1, 1, 6, 0}, uint16(4011))
	pp := testPlan(plan.DHCPProxy, plan.PolicyProvision)
	pr := testPlan(plan.DHCPReservation, plan.PolicyHold)
	f.Fuzz(func(t *testing.T, pkt []byte, port uint16) {
		req, err := dhcpv4.FromBytes(pkt)
		if err != nil {
			return
		}
		for _, p := range []*plan.Plan{pp, pr} {
			a := Reply(p, p.Sites[0], Config{ServerIP: server, HTTPPort: 8080, Mode: p.Sites[0].Network.DHCP}, req, int(port))
			if a.Reply != nil {
				a.Reply.ToBytes()
			}
		}
	})
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

func TestPoolForUnknownMachines(t *testing.T) {
	p := testPlan(plan.DHCPReservation, plan.PolicyProvision)
	p.Sites[0].Network.Pool = &plan.Pool{Start: "198.18.0.10", End: "198.18.0.12"}
	leases := filepath.Join(t.TempDir(), "leases.json")
	cfg := Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPReservation, Leases: &Pool{Path: leases}}
	offer := func(cfg Config, mac string) string {
		a := Reply(p, p.Sites[0], cfg, pxeDiscover(t, mac, iana.INTEL_X86PC, "PXEClient"), 67)
		if a.Reply == nil {
			return "none: " + a.Why
		}
		return a.Reply.YourIPAddr.String()
	}
	// .11 is n1's reservation: skipped.
	for _, c := range [][2]string{{"52:54:00:aa:00:01", "198.18.0.10"}, {"52:54:00:aa:00:02", "198.18.0.12"}, {"52:54:00:aa:00:01", "198.18.0.10"}} {
		if got := offer(cfg, c[0]); got != c[1] {
			t.Errorf("%s: %s, want %s", c[0], got, c[1])
		}
	}
	if got := offer(cfg, "52:54:00:aa:00:03"); got != "none: dhcp: pool exhausted" {
		t.Errorf("full pool: %s", got)
	}
	// A restart keeps every machine's address.
	cfg.Leases = &Pool{Path: leases}
	if got := offer(cfg, "52:54:00:aa:00:02"); got != "198.18.0.12" {
		t.Errorf("after restart: %s", got)
	}
	// A site that ignores unknown machines leases nothing.
	p.Sites[0].UnknownNodes = plan.PolicyIgnore
	if got := offer(cfg, "52:54:00:aa:00:09"); !strings.HasPrefix(got, "none: unknown machine") {
		t.Errorf("ignore policy: %s", got)
	}
}
