package dhcp6

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/plan"
)

// A site as the compiler writes it: the plan's IPv6 network and a node's
// IPv6 reservation reach the replies.
func TestSiteConfig(t *testing.T) {
	site := &plan.Site{Name: "lab", UnknownNodes: plan.PolicyProvision,
		Network: plan.Network{HTTPPort: 8080, HTTPSPort: 8443, LeaseSeconds: 900, IPv6: &plan.NetworkV6{
			ServerAddress: "2001:db8:1::1", Prefix: "2001:db8:1::/64", DHCP: plan.DHCPReservation,
			DNS: []string{"2001:db8:1::53"}, Pool: &plan.Pool{Start: "2001:db8:1::100", End: "2001:db8:1::1ff"}}},
		Nodes:        []*plan.Node{{Name: "n1", Site: "lab", IPv6: "2001:db8:1::11", Identity: plan.Identity{MACs: []string{"52:54:00:00:00:01"}}}},
		Reservations: []plan.Reservation{{Node: "n1", MACs: []string{"52:54:00:00:00:01"}, IPv6: "2001:db8:1::11"}},
	}
	p := &plan.Plan{Sites: []*plan.Site{site}}
	cfg, err := SiteConfig(site, true, &Pool{Path: filepath.Join(t.TempDir(), "leases6-lab.json")})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ServerIP != netip.MustParseAddr("2001:db8:1::1") || cfg.Prefix.Bits() != 64 || cfg.LeaseTime != 15*time.Minute ||
		cfg.PoolFirst != netip.MustParseAddr("2001:db8:1::100") || cfg.PoolLast != netip.MustParseAddr("2001:db8:1::1ff") ||
		len(cfg.DNS) != 1 || cfg.Mode != plan.DHCPReservation || cfg.HTTPSPort != 8443 {
		t.Fatalf("config: %+v", cfg)
	}
	cfg.ServerID = serverID
	a := Reply(p, site, cfg, solicit(t, "52:54:00:00:00:01", pxe(iana.EFI_X86_64)...), opaquePeer)
	if a.Addr != netip.MustParseAddr("2001:db8:1::11") || a.Node == nil || a.Node.Name != "n1" || a.Boot != "tftp://[2001:db8:1::1]/snponly.efi" {
		t.Fatalf("reserved node: %v %v %q (%s)", a.Addr, a.Node, a.Boot, a.Why)
	}
	if !cfg.Reserved(p, "lab", netip.MustParseAddr("2001:db8:1::11")) || cfg.Reserved(p, "lab", netip.MustParseAddr("2001:db8:1::12")) {
		t.Fatal("Reserved does not read the plan")
	}
	for field, edit := range map[string]func(n *plan.NetworkV6){
		"serverAddress": func(n *plan.NetworkV6) { n.ServerAddress = "nope" },
		"prefix":        func(n *plan.NetworkV6) { n.Prefix = "2001:db8:1::" },
		"dns":           func(n *plan.NetworkV6) { n.DNS = []string{"x"} },
		"pool.start":    func(n *plan.NetworkV6) { n.Pool = &plan.Pool{Start: "", End: "2001:db8:1::1ff"} },
	} {
		bad := *site
		n := *site.Network.IPv6
		edit(&n)
		bad.Network.IPv6 = &n
		if _, err := SiteConfig(&bad, true, nil); err == nil || !strings.Contains(err.Error(), "network.ipv6."+field) || !strings.Contains(err.Error(), "site lab") {
			t.Errorf("%s: %v", field, err)
		}
	}
	v4 := *site
	v4.Network.IPv6 = nil
	if _, err := SiteConfig(&v4, true, nil); err == nil {
		t.Error("an IPv4-only site gave a DHCPv6 config")
	}
}
