package compiler

import (
	"net/netip"
	"net/url"
	"strings"

	"github.com/bootops/bootops/plan"
)

// Edge nodes over the Internet: a site's remote section (the URLs its
// machines reach the server at) and a node's static network (a link with
// no DHCP), read into the Plan and checked with their positions.

// siteRemote is a site's remote section, nil for a LAN site. The URLs
// default to the site's own https address.
func siteRemote(o *object, nw plan.Network) *plan.Remote {
	rv := o.v.get("remote")
	if rv == nil {
		return nil
	}
	rm := &plan.Remote{URL: rv.get("url").String()}
	if rm.URL == "" && nw.ServerAddress != "" && nw.HTTPSPort != 0 {
		rm.URL = "https://" + plan.HostPort(nw.ServerAddress, nw.HTTPSPort)
	}
	return rm
}

// nodeNetwork is a node's static network, nil when it has none.
func nodeNetwork(n *nodeObj) *plan.NodeNetwork {
	v := n.v.get("network")
	if v == nil {
		return nil
	}
	nn := &plan.NodeNetwork{
		Address: v.get("address").String(),
		Gateway: v.get("gateway").String(),
		DNS:     v.get("dns").strs(),
		VLAN:    v.get("vlan").integer(),
	}
	if m := v.get("interface").String(); m != "" {
		nn.Interface = plan.NormalizeMAC(m)
	}
	return nn
}

// checkRemote checks the sites' remote sections and the nodes' static
// networks.
func (r *repo) checkRemote() {
	for _, name := range sortedKeys(r.sites) {
		r.checkSiteRemote(r.sites[name])
	}
	seen := map[string]string{} // site/address → node
	for _, n := range r.nodes {
		if n.v.get("network") != nil && n.site != "" {
			r.checkNodeNetwork(n, seen)
		}
	}
}

// checkSiteRemote: a remote site is served over TLS (httpsPort), its URLs
// are https, and it never installs a machine it does not know.
func (r *repo) checkSiteRemote(s *object) {
	rv := s.v.get("remote")
	if rv == nil {
		return
	}
	nw := s.v.get("network")
	if nw.get("httpsPort") == nil {
		r.errorf(s.pos("remote"), "remote", "a remote site needs network.httpsPort: over the Internet everything after the firmware goes over TLS, pinned to the site CA")
	}
	u := rv.get("url")
	if u == nil && nw.get("serverAddress") == nil {
		r.errorf(s.pos("remote"), "remote.url", "missing: the server's https URL as the machines reach it (the site has no serverAddress to default to)")
	}
	if u != nil {
		if why := remoteURL(u.str); why != "" {
			r.errorf(s.pos("remote", "url"), "remote.url", "%q: %s", u.str, why)
		}
	}
	if s.str("unknownNodes") == plan.PolicyProvision {
		r.errorf(s.pos("remote"), "unknownNodes", "a remote site never installs a machine it does not know (anyone on the Internet could ask): set unknownNodes: hold or ignore (provision is the default)")
	}
}

// remoteURL says what is wrong with a remote site's URL ("" if nothing).
func remoteURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a URL"
	case u.Scheme != "https":
		return "must be https: the agent pins the site CA, and nothing crosses the Internet in the clear"
	case u.Host == "":
		return "has no host"
	case u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/"):
		return "is a base URL: scheme, host and port only"
	}
	return ""
}

// checkNodeNetwork: the address is a host in its prefix, the gateway in
// the same prefix and not the node itself, the interface one of the
// node's MACs, no other node of the site has the address, and the node
// does not also ask for a DHCP reservation.
func (r *repo) checkNodeNetwork(n *nodeObj, seen map[string]string) {
	v := n.v.get("network")
	pos := func(f string) Pos { return n.pos("network", f) }
	if n.v.get("ip") != nil {
		r.errorf(n.pos("ip"), "ip", "the node has a static network too: ip is a reservation of the site's DHCP, network an address set on the node itself for a link with no DHCP; keep one")
	}
	pfx, err := netip.ParsePrefix(v.get("address").String())
	if err != nil {
		return // the schema said why
	}
	addr := pfx.Addr()
	switch {
	case pfx.Bits() < 31 && addr == pfx.Masked().Addr():
		r.errorf(pos("address"), "network.address", "%s is the network address of %s: give the node's own address with its prefix length (e.g. %s/%d)", addr, pfx.Masked(), addr.Next(), pfx.Bits())
	case pfx.Bits() < 31 && addr == lastAddr(pfx.Masked()):
		r.errorf(pos("address"), "network.address", "%s is the broadcast address of %s", addr, pfx.Masked())
	}
	if gw := v.get("gateway"); gw != nil {
		if g, err := netip.ParseAddr(gw.str); err == nil {
			switch {
			case !pfx.Contains(g):
				r.errorf(pos("gateway"), "network.gateway", "%s is outside the node's network %s: a gateway must be on the link", g, pfx.Masked())
			case g == addr:
				r.errorf(pos("gateway"), "network.gateway", "%s is the node's own address", g)
			}
		}
	}
	if m := v.get("interface"); m != nil {
		macs := n.v.lookup("identity", "mac").strs()
		want := plan.NormalizeMAC(m.str)
		found := len(macs) == 0
		for _, x := range macs {
			found = found || plan.NormalizeMAC(x) == want
		}
		if !found {
			r.errorf(pos("interface"), "network.interface", "%s is none of the node's MACs (identity.mac: %s)", want, strings.Join(macs, ", "))
		}
	}
	key := n.site + "/" + addr.String()
	if other, ok := seen[key]; ok {
		r.errorf(pos("address"), "network.address", "%s is node %s's address too", addr, other)
		return
	}
	seen[key] = n.name
}
