package boot

import (
	"net/netip"
	"strings"

	"github.com/bootops/bootops/plan"
)

// ForFamily makes what the compiler rendered with a site's URLs
// (plan.Site.ServerURL and AgentURL, the address a single URL names) name
// the server in the family of ip, the machine's address: a dual-stack
// site's machine that reached us over IPv6 is sent on over IPv6
// (http://[2001:db8::1]:8080/…), one that came over IPv4 over IPv4. The
// machine reached us there, so it can reach us there again. Anything else
// is left as it is.
func ForFamily(st *plan.Site, ip string) func(string) string {
	keep := func(s string) string { return s }
	a, err := netip.ParseAddr(ip)
	if st == nil || err != nil || !a.Unmap().Is6() || st.Network.IPv6 == nil || st.Network.ServerAddress == "" {
		return keep // IPv4, or a site with one family: its URLs are the ones rendered
	}
	pairs := []string{st.ServerURL(), st.ServerURLv6()}
	if st.TLS() {
		pairs = append(pairs, st.AgentURL(), st.AgentURLv6())
	}
	return strings.NewReplacer(pairs...).Replace
}

// BaseURL is the site's plain-HTTP URL in ip's family.
func BaseURL(st *plan.Site, ip string) string { return ForFamily(st, ip)(st.ServerURL()) }
