package dhcp6

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

var (
	server   = netip.MustParseAddr("2001:db8::1")
	serverID = NewServerID(net.HardwareAddr{0x52, 0x54, 0x00, 0xaa, 0x00, 0x01})
	// A client's link-local address with no MAC in it (stable privacy).
	opaquePeer = netip.MustParseAddr("fe80::1234:5678:9abc:def0")
)

// testPlan is a site "lab" with n1 (registered by MAC 52:54:00:00:00:01,
// reserved 2001:db8::11), n2 (by SMBIOS UUID) and n3 (by MAC
// 52:54:00:00:00:03, its profile for arm64).
func testPlan(policy string) *plan.Plan {
	s := &plan.Site{Name: "lab", UnknownNodes: policy, Network: plan.Network{ServerAddress: "198.18.0.1", HTTPPort: 8080}}
	s.Nodes = []*plan.Node{
		{Name: "n1", Site: "lab", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:01"}}},
		{Name: "n2", Site: "lab", Identity: plan.Identity{UUID: "01020304-0506-0708-090a-0b0c0d0e0f10"}},
		{Name: "n3", Site: "lab", Profile: "arm", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:03"}}},
	}
	return &plan.Plan{Sites: []*plan.Site{s}, Profiles: []*plan.Profile{{Name: "arm", OS: plan.OS{Type: "immutable", Arch: "arm64"}}}}
}

var n1Reserved = netip.MustParseAddr("2001:db8::11")

func testConfig(t testing.TB, mode string) Config {
	t.Helper()
	cfg := Config{ServerIP: server, ServerID: serverID, Prefix: netip.MustParsePrefix("2001:db8::/64"),
		LeaseTime: 10 * time.Minute, Mode: mode, HTTPPort: 8080, TFTP: true,
		DNS: []netip.Addr{server},
		Reservation: func(p *plan.Plan, site, mac string) (Reservation, bool) {
			if site == "lab" && mac == "52:54:00:00:00:01" {
				return Reservation{Addr: n1Reserved, Node: "n1"}, true
			}
			return Reservation{}, false
		},
		Reserved: func(p *plan.Plan, site string, a netip.Addr) bool { return a == n1Reserved },
	}
	if mode == plan.DHCPReservation {
		cfg.PoolFirst, cfg.PoolLast = netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("2001:db8::1f")
		cfg.Leases = &Pool{Path: filepath.Join(t.TempDir(), "leases6-lab.json")}
	}
	return cfg
}

func mac(s string) net.HardwareAddr {
	hw, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return hw
}

func vendorClass(s string) dhcpv6.Modifier {
	return dhcpv6.WithOption(&dhcpv6.OptVendorClass{EnterpriseNumber: 343, Data: [][]byte{[]byte(s)}})
}

var ipxeUC = dhcpv6.WithUserClass([]byte("iPXE"))

// solicit is a Solicit as the library's client builds it (DUID-LLT of
// hw, one IA_NA, Elapsed Time, an ORO), plus mods.
func solicit(t testing.TB, hw string, mods ...dhcpv6.Modifier) *dhcpv6.Message {
	t.Helper()
	m, err := dhcpv6.NewSolicit(mac(hw), append([]dhcpv6.Modifier{dhcpv6.WithRequestedOptions(dhcpv6.OptionBootfileURL, dhcpv6.OptionDNSRecursiveNameServer)}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// pxe is an EDK2 UEFI PXE client's options; http its HTTP boot's.
func pxe(arch iana.Arch) []dhcpv6.Modifier {
	return []dhcpv6.Modifier{dhcpv6.WithArchType(arch), vendorClass("PXEClient:Arch:00007:UNDI:003016")}
}

func httpBoot(arch iana.Arch) []dhcpv6.Modifier {
	return []dhcpv6.Modifier{dhcpv6.WithArchType(arch), vendorClass("HTTPClient:Arch:00016:UNDI:003001")}
}

func cat(ms ...[]dhcpv6.Modifier) []dhcpv6.Modifier {
	var out []dhcpv6.Modifier
	for _, m := range ms {
		out = append(out, m...)
	}
	return out
}

// inner is the client message of a reply, relayed or not.
func inner(t testing.TB, d dhcpv6.DHCPv6) *dhcpv6.Message {
	t.Helper()
	// Through the wire format: what the client reads.
	back, err := dhcpv6.FromBytes(d.ToBytes())
	if err != nil {
		t.Fatalf("reply does not parse back: %v", err)
	}
	m, err := back.GetInnerMessage()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func iaAddr(m *dhcpv6.Message) netip.Addr {
	ia := m.Options.OneIANA()
	if ia == nil {
		return netip.Addr{}
	}
	ad := ia.Options.OneAddress()
	if ad == nil {
		return netip.Addr{}
	}
	a, _ := netip.AddrFromSlice(ad.IPv6Addr)
	return a
}

func vendorClassOf(m *dhcpv6.Message) string {
	var out []string
	for _, vc := range m.Options.VendorClasses() {
		for _, d := range vc.Data {
			out = append(out, string(d))
		}
	}
	return strings.Join(out, ",")
}

func TestBootOptions(t *testing.T) {
	for _, mode := range []string{plan.DHCPReservation, plan.DHCPProxy} {
		for name, c := range map[string]struct {
			mods   []dhcpv6.Modifier
			url    string // "" : no option 59
			class  string
			answer bool
		}{
			"efi x64 pxe":          {pxe(iana.EFI_X86_64), "tftp://[2001:db8::1]/snponly.efi", "PXEClient", true},
			"efi bc pxe":           {pxe(iana.EFI_BC), "tftp://[2001:db8::1]/snponly.efi", "PXEClient", true},
			"efi ia32 pxe":         {pxe(iana.EFI_IA32), "tftp://[2001:db8::1]/snponly.efi", "PXEClient", true},
			"efi arm64 pxe":        {pxe(iana.EFI_ARM64), "tftp://[2001:db8::1]/snp.efi", "PXEClient", true},
			"efi x64 http":         {httpBoot(iana.EFI_X86_64_HTTP), "http://[2001:db8::1]:8080/tftp/snponly.efi", "HTTPClient", true},
			"efi arm64 http":       {httpBoot(iana.EFI_ARM64_HTTP), "http://[2001:db8::1]:8080/tftp/snp.efi", "HTTPClient", true},
			"ipxe":                 {cat(pxe(iana.EFI_X86_64), []dhcpv6.Modifier{ipxeUC}), "http://[2001:db8::1]:8080/boot.ipxe?site=lab", "PXEClient", true},
			"ipxe, no vendor":      {[]dhcpv6.Modifier{ipxeUC}, "http://[2001:db8::1]:8080/boot.ipxe?site=lab", "", true},
			"bios arch":            {pxe(iana.INTEL_X86PC), "", "", mode == plan.DHCPReservation},
			"unknown arch":         {pxe(iana.Arch(0x7777)), "", "", mode == plan.DHCPReservation},
			"pxe without arch":     {[]dhcpv6.Modifier{vendorClass("PXEClient")}, "", "", mode == plan.DHCPReservation},
			"not a boot client":    {nil, "", "", mode == plan.DHCPReservation},
			"other vendor class":   {[]dhcpv6.Modifier{vendorClass("MSFT 5.0")}, "", "", mode == plan.DHCPReservation},
			"arch but no vendor":   {[]dhcpv6.Modifier{dhcpv6.WithArchType(iana.EFI_X86_64)}, "", "", mode == plan.DHCPReservation},
			"ipxe in other string": {[]dhcpv6.Modifier{dhcpv6.WithUserClass([]byte("iPXE-x"))}, "", "", mode == plan.DHCPReservation},
		} {
			t.Run(mode+"/"+name, func(t *testing.T) {
				p := testPlan(plan.PolicyProvision)
				cfg := testConfig(t, mode)
				a := Reply(p, p.Site("lab"), cfg, solicit(t, "52:54:00:00:00:09", c.mods...), opaquePeer)
				if a.Dropped != "" {
					t.Fatalf("dropped: %s %s", a.Dropped, a.Why)
				}
				if (a.Reply != nil) != c.answer {
					t.Fatalf("answered %v, want %v (%s)", a.Reply != nil, c.answer, a.Why)
				}
				if a.Reply == nil {
					return
				}
				m := inner(t, a.Reply)
				if m.Type() != dhcpv6.MessageTypeAdvertise {
					t.Fatalf("type %s, want Advertise", m.Type())
				}
				if got := m.Options.BootFileURL(); got != c.url {
					t.Errorf("boot file URL %q, want %q (%s)", got, c.url, a.Why)
				}
				// EDK2 takes "PXEClient" as a BINL offer, to ask again on
				// port 4011: only a proxy Advertise says it.
				class := c.class
				if mode == plan.DHCPReservation && class == "PXEClient" {
					class = ""
				}
				if got := vendorClassOf(m); got != class {
					t.Errorf("vendor class %q, want %q", got, class)
				}
				if !m.Options.ServerID().Equal(serverID) {
					t.Errorf("server ID %v", m.Options.ServerID())
				}
				addr := iaAddr(m)
				switch mode {
				case plan.DHCPReservation:
					if !addr.IsValid() || !cfg.Prefix.Contains(addr) {
						t.Errorf("reservation mode: address %v, want one of the pool", addr)
					}
					if m.Options.Preference() != 255 {
						t.Errorf("preference %d, want 255", m.Options.Preference())
					}
				case plan.DHCPProxy:
					if m.GetOneOption(dhcpv6.OptionIANA) != nil {
						t.Errorf("proxy mode offered an IA_NA: %v", m.Options.OneIANA())
					}
				}
			})
		}
	}
}

func TestOff(t *testing.T) {
	p := testPlan(plan.PolicyProvision)
	cfg := testConfig(t, plan.DHCPReservation)
	cfg.Mode = plan.DHCPOff
	if a := Reply(p, p.Site("lab"), cfg, solicit(t, "52:54:00:00:00:01", pxe(iana.EFI_X86_64)...), opaquePeer); a.Reply != nil || a.Dropped != "" {
		t.Fatalf("mode off answered: %s", a.Why)
	}
	s := &Server{Plans: nil, Config: cfg, Addr: testutil.FreeUDP(t, "udp6")}
	if err := s.Serve(t.Context()); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Fatalf("Serve in mode off: %v", err)
	}
}

func TestNoTFTP(t *testing.T) {
	p := testPlan(plan.PolicyProvision)
	cfg := testConfig(t, plan.DHCPProxy)
	cfg.TFTP = false
	a := Reply(p, p.Site("lab"), cfg, solicit(t, "52:54:00:00:00:09", pxe(iana.EFI_X86_64)...), opaquePeer)
	if a.Reply != nil || !strings.Contains(a.Why, "TFTP") {
		t.Fatalf("PXE without TFTP: %v, %q", a.Reply, a.Why)
	}
	// HTTP boot needs no TFTP.
	a = Reply(p, p.Site("lab"), cfg, solicit(t, "52:54:00:00:00:09", httpBoot(iana.EFI_X86_64_HTTP)...), opaquePeer)
	if a.Boot != "http://[2001:db8::1]:8080/tftp/snponly.efi" {
		t.Fatalf("HTTP boot without TFTP: %q (%s)", a.Boot, a.Why)
	}
}

func TestChains(t *testing.T) {
	for _, c := range []struct {
		chain      string
		mods       []dhcpv6.Modifier
		url        string
		httpsBoots bool
	}{
		{plan.ChainShim, pxe(iana.EFI_X86_64), "", false},
		{plan.ChainShim, httpBoot(iana.EFI_X86_64_HTTP), "", false},
		{plan.ChainUKI, pxe(iana.EFI_X86_64), "", false},
		{plan.ChainUKI, httpBoot(iana.EFI_X86_64_HTTP), "http://[2001:db8::1]:8080/artifacts/microos/m/uki", false},
		{plan.ChainUKI, httpBoot(iana.EFI_X86_64_HTTP), "https://[2001:db8::1]:8443/artifacts/microos/m/uki", true},
	} {
		p := testPlan(plan.PolicyProvision)
		p.MicroOS = []*plan.MicroOS{{Name: "m", Chain: c.chain, HTTPSBoot: c.httpsBoots}}
		p.Profiles = []*plan.Profile{{Name: "pr", MicroOS: "m"}}
		p.Sites[0].Nodes[0].Profile = "pr"
		cfg := testConfig(t, plan.DHCPProxy)
		cfg.HTTPSPort = 8443
		a := Reply(p, p.Site("lab"), cfg, solicit(t, "52:54:00:00:00:01", c.mods...), opaquePeer)
		if a.Node == nil || a.Node.Name != "n1" {
			t.Fatalf("%s: node %v (%s)", c.chain, a.Node, a.Why)
		}
		if a.Boot != c.url {
			t.Errorf("%s: boot %q, want %q (%s)", c.chain, a.Boot, c.url, a.Why)
		}
		if c.chain == plan.ChainShim && !strings.Contains(a.Why, "over IPv4 only") {
			t.Errorf("shim: no reason on the timeline: %s", a.Why)
		}
	}
}

func TestRapidCommit(t *testing.T) {
	p := testPlan(plan.PolicyProvision)
	cfg := testConfig(t, plan.DHCPReservation)
	a := Reply(p, p.Site("lab"), cfg, solicit(t, "52:54:00:00:00:09", cat(pxe(iana.EFI_X86_64), []dhcpv6.Modifier{dhcpv6.WithRapidCommit})...), opaquePeer)
	m := inner(t, a.Reply)
	if m.Type() != dhcpv6.MessageTypeReply || m.GetOneOption(dhcpv6.OptionRapidCommit) == nil {
		t.Fatalf("rapid commit: %s", m.Summary())
	}
	if got := cfg.Leases.(*Pool).MACOf(iaAddr(m).String()); got != "52:54:00:00:00:09" {
		t.Fatalf("rapid commit did not lease %v: leased to %q", iaAddr(m), got)
	}
	// Proxy mode never commits: a Reply would bind the client to a
	// server with no address for it.
	cfg = testConfig(t, plan.DHCPProxy)
	a = Reply(p, p.Site("lab"), cfg, solicit(t, "52:54:00:00:00:09", cat(pxe(iana.EFI_X86_64), []dhcpv6.Modifier{dhcpv6.WithRapidCommit})...), opaquePeer)
	if m := inner(t, a.Reply); m.Type() != dhcpv6.MessageTypeAdvertise {
		t.Fatalf("proxy mode, rapid commit: %s", m.Summary())
	}
}

// request is the client's Request for adv's address.
func request(t testing.TB, adv dhcpv6.DHCPv6, mods ...dhcpv6.Modifier) *dhcpv6.Message {
	t.Helper()
	r, err := dhcpv6.NewRequestFromAdvertise(inner(t, adv), mods...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// follow is a client message after a lease: Renew, Rebind, Release or
// Confirm, with its IA_NA naming addr.
func follow(t testing.TB, mt dhcpv6.MessageType, hw string, addr netip.Addr) *dhcpv6.Message {
	t.Helper()
	m, err := dhcpv6.NewMessage()
	if err != nil {
		t.Fatal(err)
	}
	m.MessageType = mt
	m.AddOption(dhcpv6.OptClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: mac(hw)}))
	if mt == dhcpv6.MessageTypeRenew || mt == dhcpv6.MessageTypeRelease {
		m.AddOption(dhcpv6.OptServerID(serverID))
	}
	ia := &dhcpv6.OptIANA{IaId: [4]byte{0, 0, 0, 9}}
	ia.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: addr.AsSlice()})
	m.AddOption(ia)
	return m
}

func TestLeaseCycle(t *testing.T) {
	p := testPlan(plan.PolicyProvision)
	site := p.Site("lab")
	cfg := testConfig(t, plan.DHCPReservation)
	const hw = "52:54:00:00:00:09"
	adv := Reply(p, site, cfg, solicit(t, hw, pxe(iana.EFI_X86_64)...), opaquePeer)
	offered := iaAddr(inner(t, adv.Reply))
	if offered.Less(cfg.PoolFirst) || cfg.PoolLast.Less(offered) || offered == n1Reserved {
		t.Fatalf("offered %v, want a free address of the pool", offered)
	}
	rep := Reply(p, site, cfg, request(t, adv.Reply, pxe(iana.EFI_X86_64)...), opaquePeer)
	m := inner(t, rep.Reply)
	if m.Type() != dhcpv6.MessageTypeReply || iaAddr(m) != offered {
		t.Fatalf("Request: %s", m.Summary())
	}
	ia := m.Options.OneIANA()
	if ia.T1 != 5*time.Minute || ia.T2 != 8*time.Minute || ia.Options.OneAddress().ValidLifetime != 10*time.Minute {
		t.Errorf("lifetimes: %s", ia)
	}
	if m.Options.BootFileURL() != "tftp://[2001:db8::1]/snponly.efi" {
		t.Errorf("Reply to Request lacks the boot file: %q", m.Options.BootFileURL())
	}
	if len(m.Options.DNS()) != 1 {
		t.Errorf("DNS asked for, not given: %v", m.Options.DNS())
	}
	for _, mt := range []dhcpv6.MessageType{dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind} {
		a := Reply(p, site, cfg, follow(t, mt, hw, offered), opaquePeer)
		if got := iaAddr(inner(t, a.Reply)); got != offered {
			t.Fatalf("%s: %v, want %v (%s)", mt, got, offered, a.Why)
		}
	}
	// Another machine renewing this one's address is told to drop it.
	a := Reply(p, site, cfg, follow(t, dhcpv6.MessageTypeRenew, "52:54:00:00:00:0a", offered), opaquePeer)
	out := inner(t, a.Reply).Options.OneIANA().Options.OneAddress()
	if out == nil || out.ValidLifetime != 0 {
		t.Fatalf("renew of another's address: %v (%s)", out, a.Why)
	}
	// Confirm: on link, then off it.
	a = Reply(p, site, cfg, follow(t, dhcpv6.MessageTypeConfirm, hw, offered), opaquePeer)
	if st := inner(t, a.Reply).Options.Status(); st == nil || st.StatusCode != iana.StatusSuccess {
		t.Fatalf("Confirm on link: %v", st)
	}
	a = Reply(p, site, cfg, follow(t, dhcpv6.MessageTypeConfirm, hw, netip.MustParseAddr("2001:db8:1::5")), opaquePeer)
	if st := inner(t, a.Reply).Options.Status(); st == nil || st.StatusCode != iana.StatusNotOnLink {
		t.Fatalf("Confirm off link: %v", st)
	}
	// Release: the address goes to the next machine once the pool has
	// nothing fresher.
	a = Reply(p, site, cfg, follow(t, dhcpv6.MessageTypeRelease, hw, offered), opaquePeer)
	if st := inner(t, a.Reply).Options.Status(); st == nil || st.StatusCode != iana.StatusSuccess || a.Addr != offered {
		t.Fatalf("Release: %v %v (%s)", st, a.Addr, a.Why)
	}
	if got := cfg.Leases.(*Pool).MACOf(offered.String()); got != "" {
		t.Fatalf("released address still leased to %q", got)
	}
}

func TestPoolExhaustionAndRestart(t *testing.T) {
	p := testPlan(plan.PolicyProvision)
	site := p.Site("lab")
	cfg := testConfig(t, plan.DHCPReservation)
	path := cfg.Leases.(*Pool).Path
	// Three addresses, one of them n1's reservation: two for the pool.
	cfg.PoolFirst, cfg.PoolLast = netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("2001:db8::12")
	lease := func(cfg Config, hw string) Answer {
		adv := Reply(p, site, cfg, solicit(t, hw, pxe(iana.EFI_X86_64)...), opaquePeer)
		if adv.Reply == nil {
			t.Fatalf("%s: no Advertise: %s", hw, adv.Why)
		}
		if !iaAddr(inner(t, adv.Reply)).IsValid() {
			return adv
		}
		return Reply(p, site, cfg, request(t, adv.Reply), opaquePeer)
	}
	got := map[string]netip.Addr{}
	for _, hw := range []string{"52:54:00:00:00:0a", "52:54:00:00:00:0b"} {
		a := lease(cfg, hw)
		got[hw] = a.Addr
		if a.Addr == n1Reserved || !a.Addr.IsValid() {
			t.Fatalf("%s got %v (%s)", hw, a.Addr, a.Why)
		}
	}
	if got["52:54:00:00:00:0a"] == got["52:54:00:00:00:0b"] {
		t.Fatalf("same address twice: %v", got)
	}
	full := lease(cfg, "52:54:00:00:00:0c")
	ia := inner(t, full.Reply).Options.OneIANA()
	if !full.Exhausted || ia.Options.Status() == nil || ia.Options.Status().StatusCode != iana.StatusNoAddrsAvail || full.Addr.IsValid() {
		t.Fatalf("third machine: exhausted %v, %s (%s)", full.Exhausted, ia, full.Why)
	}
	// The reserved machine still gets its own address.
	if a := lease(cfg, "52:54:00:00:00:01"); a.Addr != n1Reserved || a.Node == nil || a.Node.Name != "n1" {
		t.Fatalf("n1: %v %v (%s)", a.Addr, a.Node, a.Why)
	}
	// Restart: a new pool on the same file keeps the leases.
	cfg.Leases = &Pool{Path: path}
	for hw, want := range got {
		if a := lease(cfg, hw); a.Addr != want {
			t.Fatalf("after restart %s got %v, want %v (%s)", hw, a.Addr, want, a.Why)
		}
	}
	if a := lease(cfg, "52:54:00:00:00:0c"); !a.Exhausted {
		t.Fatalf("after restart a new machine got %v: leases were lost", a.Addr)
	}
}

func TestUnknownPolicy(t *testing.T) {
	p := testPlan(plan.PolicyIgnore)
	site := p.Site("lab")
	cfg := testConfig(t, plan.DHCPReservation)
	a := Reply(p, site, cfg, solicit(t, "52:54:00:00:00:09", pxe(iana.EFI_X86_64)...), opaquePeer)
	if iaAddr(inner(t, a.Reply)).IsValid() || !strings.Contains(a.Why, "ignores unknown") {
		t.Fatalf("ignored unknown machine got an address (%s)", a.Why)
	}
	cfg = testConfig(t, plan.DHCPProxy)
	if a := Reply(p, site, cfg, solicit(t, "52:54:00:00:00:09", pxe(iana.EFI_X86_64)...), opaquePeer); a.Reply != nil {
		t.Fatalf("proxy mode answered an ignored unknown machine (%s)", a.Why)
	}
	if a := Reply(p, site, cfg, solicit(t, "52:54:00:00:00:01", pxe(iana.EFI_X86_64)...), opaquePeer); a.Reply == nil {
		t.Fatalf("proxy mode did not answer n1 (%s)", a.Why)
	}
}

func TestProxyRequestAndInformation(t *testing.T) {
	p := testPlan(plan.PolicyProvision)
	site := p.Site("lab")
	cfg := testConfig(t, plan.DHCPProxy)
	adv := Reply(p, site, cfg, solicit(t, "52:54:00:00:00:01", pxe(iana.EFI_X86_64)...), opaquePeer)
	// The client picked us after all: boot options, and no address.
	advMsg := inner(t, adv.Reply)
	advMsg.AddOption(&dhcpv6.OptIANA{IaId: [4]byte{0, 0, 0, 1}})
	a := Reply(p, site, cfg, request(t, advMsg, pxe(iana.EFI_X86_64)...), opaquePeer)
	m := inner(t, a.Reply)
	if st := m.Options.OneIANA().Options.Status(); st == nil || st.StatusCode != iana.StatusNoAddrsAvail || m.Options.BootFileURL() == "" {
		t.Fatalf("proxy Request: %s", m.Summary())
	}
	info, _ := dhcpv6.NewMessage(append(pxe(iana.EFI_X86_64), ipxeUC)...)
	info.MessageType = dhcpv6.MessageTypeInformationRequest
	info.AddOption(dhcpv6.OptClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: mac("52:54:00:00:00:01")}))
	a = Reply(p, site, cfg, info, opaquePeer)
	if m := inner(t, a.Reply); m.Type() != dhcpv6.MessageTypeReply || m.Options.BootFileURL() != "http://[2001:db8::1]:8080/boot.ipxe?site=lab" {
		t.Fatalf("proxy Information-Request: %s (%s)", m.Summary(), a.Why)
	}
	// Proxy mode leaves Renew, Rebind, Confirm to the site's server.
	for _, mt := range []dhcpv6.MessageType{dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind, dhcpv6.MessageTypeConfirm} {
		f := follow(t, mt, "52:54:00:00:00:01", netip.MustParseAddr("2001:db8::99"))
		for _, o := range pxe(iana.EFI_X86_64) {
			o(f)
		}
		if a := Reply(p, site, cfg, f, opaquePeer); a.Reply != nil || a.Dropped != "" {
			t.Errorf("proxy mode answered %s (%s %s)", mt, a.Dropped, a.Why)
		}
	}
}

func TestDrops(t *testing.T) {
	p := testPlan(plan.PolicyProvision)
	site := p.Site("lab")
	cfg := testConfig(t, plan.DHCPReservation)
	build := func(mt dhcpv6.MessageType, mods ...dhcpv6.Modifier) *dhcpv6.Message {
		m, err := dhcpv6.NewMessage(mods...)
		if err != nil {
			t.Fatal(err)
		}
		m.MessageType = mt
		return m
	}
	cid := dhcpv6.WithClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: mac("52:54:00:00:00:09")})
	for name, c := range map[string]struct {
		pkt  []byte
		want string
	}{
		"garbage":              {[]byte{1, 2}, DropMalformed},
		"empty":                {nil, DropMalformed},
		"truncated option":     {append(solicit(t, "52:54:00:00:00:09").ToBytes(), 0, 1, 0, 9, 1), DropMalformed},
		"advertise to server":  {build(dhcpv6.MessageTypeAdvertise, cid).ToBytes(), DropNotClient},
		"reply to server":      {build(dhcpv6.MessageTypeReply, cid).ToBytes(), DropNotClient},
		"relay-reply":          {relayed(t, build(dhcpv6.MessageTypeSolicit, cid), dhcpv6.MessageTypeRelayReply, nil).ToBytes(), DropMalformed},
		"solicit without cid":  {build(dhcpv6.MessageTypeSolicit).ToBytes(), DropNoClientID},
		"solicit with sid":     {build(dhcpv6.MessageTypeSolicit, cid, dhcpv6.WithServerID(serverID)).ToBytes(), DropServerID},
		"request without sid":  {build(dhcpv6.MessageTypeRequest, cid).ToBytes(), DropServerID},
		"release without sid":  {build(dhcpv6.MessageTypeRelease, cid).ToBytes(), DropServerID},
		"info-request with ia": {build(dhcpv6.MessageTypeInformationRequest, cid, dhcpv6.WithIAID([4]byte{1, 2, 3, 4})).ToBytes(), DropIAInformation},
		"zero mac duid":        {build(dhcpv6.MessageTypeSolicit, dhcpv6.WithClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: make(net.HardwareAddr, 6)})).ToBytes(), DropLinkAddress},
		"multicast mac duid":   {build(dhcpv6.MessageTypeSolicit, dhcpv6.WithClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: mac("01:00:5e:00:00:01")})).ToBytes(), DropLinkAddress},
		"relay broadcast lla": {relayed(t, build(dhcpv6.MessageTypeSolicit, cid), dhcpv6.MessageTypeRelayForward,
			dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, mac("ff:ff:ff:ff:ff:ff"))).ToBytes(), DropLinkAddress},
	} {
		t.Run(name, func(t *testing.T) {
			a := Handle(p, site, cfg, c.pkt, opaquePeer)
			if a.Dropped != c.want || a.Reply != nil {
				t.Fatalf("dropped %q (%s), reply %v; want %q", a.Dropped, a.Why, a.Reply != nil, c.want)
			}
			if a.Why == "" {
				t.Error("no reason given")
			}
		})
	}
	// A Request for another server is not invalid, and not answered.
	other := build(dhcpv6.MessageTypeRequest, cid, dhcpv6.WithServerID(NewServerID(mac("52:54:00:bb:00:01"))), dhcpv6.WithIAID([4]byte{0, 0, 0, 1}))
	if a := Reply(p, site, cfg, other, opaquePeer); a.Dropped != "" || a.Reply != nil || !strings.Contains(a.Why, "another server") {
		t.Fatalf("Request for another server: %q %v %s", a.Dropped, a.Reply != nil, a.Why)
	}
}

// relayed wraps m in a relay message of type mt carrying opt (if any).
func relayed(t testing.TB, m *dhcpv6.Message, mt dhcpv6.MessageType, opt dhcpv6.Option) *dhcpv6.RelayMessage {
	t.Helper()
	r, err := dhcpv6.EncapsulateRelay(m, mt, net.ParseIP("2001:db8:5::1"), net.ParseIP("fe80::1234:5678:9abc:def0"))
	if err != nil {
		t.Fatal(err)
	}
	if opt != nil {
		r.AddOption(opt)
	}
	return r
}

func TestRelay(t *testing.T) {
	p := testPlan(plan.PolicyProvision)
	site := p.Site("lab")
	cfg := testConfig(t, plan.DHCPReservation)
	// The client's DUID names another NIC than the relay saw: the relay's
	// option 79 wins, and it is n1's.
	sol := solicit(t, "52:54:00:00:00:77", pxe(iana.EFI_X86_64)...)
	r := relayed(t, sol, dhcpv6.MessageTypeRelayForward, dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, mac("52:54:00:00:00:01")))
	r.AddOption(dhcpv6.OptInterfaceID([]byte("port7")))
	a := Handle(p, site, cfg, r.ToBytes(), netip.MustParseAddr("2001:db8:5::1"))
	if a.Client.MAC != "52:54:00:00:00:01" || a.Client.MACFrom != "relay" || a.Node == nil || a.Node.Name != "n1" {
		t.Fatalf("client %+v node %v (%s)", a.Client, a.Node, a.Why)
	}
	back, err := dhcpv6.FromBytes(a.Reply.ToBytes())
	if err != nil {
		t.Fatal(err)
	}
	rr, ok := back.(*dhcpv6.RelayMessage)
	if !ok || rr.Type() != dhcpv6.MessageTypeRelayReply || string(rr.Options.InterfaceID()) != "port7" || !rr.PeerAddr.Equal(r.PeerAddr) {
		t.Fatalf("relay reply: %s", back.Summary())
	}
	if m := inner(t, back); m.TransactionID != sol.TransactionID || iaAddr(m) != n1Reserved {
		t.Fatalf("inner: %s", m.Summary())
	}
}

func TestUUIDIdentity(t *testing.T) {
	p := testPlan(plan.PolicyProvision)
	site := p.Site("lab")
	cfg := testConfig(t, plan.DHCPProxy)
	for name, u := range map[string][16]byte{
		"smbios order":  {4, 3, 2, 1, 6, 5, 8, 7, 9, 10, 11, 12, 13, 14, 15, 16},
		"network order": {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
	} {
		m, _ := dhcpv6.NewMessage(cat(pxe(iana.EFI_X86_64), []dhcpv6.Modifier{dhcpv6.WithClientID(&dhcpv6.DUIDUUID{UUID: u}), dhcpv6.WithIAID([4]byte{1})})...)
		a := Reply(p, site, cfg, m, opaquePeer)
		if a.Node == nil || a.Node.Name != "n2" || a.UUID != "01020304-0506-0708-090a-0b0c0d0e0f10" || a.Client.MAC != "" {
			t.Errorf("%s: node %v uuid %q client %+v (%s)", name, a.Node, a.UUID, a.Client, a.Why)
		}
		if !strings.HasPrefix(a.Client.Key, "duid:0004") {
			t.Errorf("%s: lease key %q", name, a.Client.Key)
		}
	}
}

// On a dual-stack site iPXE gets a DHCPv6 boot URL only after the same
// machine's firmware booted over IPv6 (within the TTL); its address it
// gets either way. On an IPv6-only site it always gets one.
func TestDualStackIPXE(t *testing.T) {
	p := testPlan(plan.PolicyProvision)
	now := time.Unix(1_800_000_000, 0)
	fw := &Firmware{TTL: time.Minute, now: func() time.Time { return now }}
	cfg := testConfig(t, plan.DHCPReservation)
	cfg.DualStack, cfg.Firmware = true, fw
	ipxe := append(pxe(iana.EFI_X86_64), ipxeUC)
	const m1, m2 = "52:54:00:00:00:01", "52:54:00:00:00:02"

	a := Reply(p, p.Site("lab"), cfg, solicit(t, m1, ipxe...), opaquePeer)
	if a.Boot != "" || !a.Addr.IsValid() || !strings.Contains(a.Why, "dual-stack") {
		t.Fatalf("iPXE whose firmware did not boot over IPv6: boot %q, addr %v (%s)", a.Boot, a.Addr, a.Why)
	}
	if a := Reply(p, p.Site("lab"), cfg, solicit(t, m1, pxe(iana.EFI_X86_64)...), opaquePeer); a.Boot != "tftp://[2001:db8::1]/snponly.efi" {
		t.Fatalf("firmware: boot %q (%s)", a.Boot, a.Why)
	}
	if a := Reply(p, p.Site("lab"), cfg, solicit(t, m1, ipxe...), opaquePeer); !strings.HasSuffix(a.Boot, "/boot.ipxe?site=lab") {
		t.Fatalf("iPXE after its firmware booted over IPv6: boot %q (%s)", a.Boot, a.Why)
	}
	if a := Reply(p, p.Site("lab"), cfg, solicit(t, m2, ipxe...), opaquePeer); a.Boot != "" {
		t.Fatalf("another machine's iPXE: boot %q", a.Boot)
	}
	now = now.Add(time.Minute)
	if a := Reply(p, p.Site("lab"), cfg, solicit(t, m1, ipxe...), opaquePeer); a.Boot != "" {
		t.Fatalf("iPXE a TTL after its firmware: boot %q", a.Boot)
	}
	cfg.DualStack = false
	if a := Reply(p, p.Site("lab"), cfg, solicit(t, m2, ipxe...), opaquePeer); a.Boot == "" {
		t.Fatalf("IPv6-only site: iPXE got no boot URL (%s)", a.Why)
	}
}

// The memory is bounded: past Max the oldest machine is forgotten first,
// expired ones before it.
func TestFirmwareBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := &Firmware{Max: 3, TTL: time.Hour, now: func() time.Time { return now }}
	for i := 0; i < 5; i++ {
		f.Booted(fmt.Sprintf("m%d", i))
		now = now.Add(time.Second)
	}
	if len(f.seen) != 3 || f.BootedV6("m0") || f.BootedV6("m1") || !f.BootedV6("m2") || !f.BootedV6("m4") {
		t.Fatalf("after 5 of max 3: %v", f.seen)
	}
	now = now.Add(time.Hour)
	f.Booted("m5")
	if len(f.seen) != 1 || !f.BootedV6("m5") {
		t.Fatalf("expired entries kept: %v", f.seen)
	}
	// A full memory makes room for a quarter of Max at once, the oldest
	// going first.
	f = &Firmware{Max: 100, TTL: time.Hour, now: func() time.Time { return now }}
	for i := 0; i <= 100; i++ {
		f.Booted(fmt.Sprintf("n%d", i))
		now = now.Add(time.Second)
	}
	if len(f.seen) != 76 || f.BootedV6("n24") || !f.BootedV6("n25") || !f.BootedV6("n100") {
		t.Fatalf("after 101 of max 100: %d kept, n24 %v, n25 %v", len(f.seen), f.BootedV6("n24"), f.BootedV6("n25"))
	}
}

// A registered node's firmware announcing another processor family than
// its profile is for gets no boot URL, and the answer says why (proxy
// mode: no answer at all; reservation mode: its address only); the right
// family is answered.
func TestArchRefused(t *testing.T) {
	for _, mode := range []string{plan.DHCPReservation, plan.DHCPProxy} {
		p := testPlan(plan.PolicyProvision)
		cfg := testConfig(t, mode)
		a := Reply(p, p.Site("lab"), cfg, solicit(t, "52:54:00:00:00:03", pxe(iana.EFI_X86_64)...), opaquePeer)
		if !a.Refused || a.Boot != "" || !strings.Contains(a.Why, "refused: the firmware announces x86_64 (architecture type 7, EFI x86-64) and node n3 is registered arm64") {
			t.Errorf("%s: x86 firmware on arm64 n3: refused %v, boot %q, why %q", mode, a.Refused, a.Boot, a.Why)
		}
		if (a.Reply != nil) != (mode == plan.DHCPReservation) {
			t.Errorf("%s: x86 firmware on arm64 n3: answered %v", mode, a.Reply != nil)
		}
		if a.Reply != nil && inner(t, a.Reply).Options.BootFileURL() != "" {
			t.Errorf("%s: a boot URL for the refused firmware", mode)
		}
		a = Reply(p, p.Site("lab"), cfg, solicit(t, "52:54:00:00:00:03", httpBoot(iana.EFI_ARM64_HTTP)...), opaquePeer)
		if a.Refused || a.Boot != "http://[2001:db8::1]:8080/tftp/snp.efi" {
			t.Errorf("%s: arm64 firmware on arm64 n3: refused %v, boot %q (%s)", mode, a.Refused, a.Boot, a.Why)
		}
	}
}
