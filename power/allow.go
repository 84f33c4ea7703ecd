package power

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/bootops/bootops/plan"
)

// AllowList is where BMC credentials may be sent: networks, addresses and
// host names. It is the daemon's to say (a secret file's allow: lines, serve
// --bmc-allow), never Git's: a commit names a BMC's address, and without
// the list it could name a host of its own and collect the password.
type AllowList struct {
	Prefixes []netip.Prefix
	// Names are host names, lower case, without a final dot: a BMC named
	// so is reached at what the daemon's resolver says.
	Names []string
}

// ParseAllowList reads entries separated by commas or spaces: an address
// (10.1.2.7), a network as CIDR (10.1.2.0/24) or a host name
// (bmc-rack1.example).
func ParseAllowList(s string) (AllowList, error) {
	var a AllowList
	var errs []error
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		if err := a.add(e); err != nil {
			errs = append(errs, err)
		}
	}
	return a, errors.Join(errs...)
}

func (a *AllowList) add(e string) error {
	if strings.Contains(e, "/") {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return fmt.Errorf("%q: not an address, a network (CIDR) or a host name", e)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		a.Prefixes = append(a.Prefixes, p.Masked())
		return nil
	}
	if ip, err := netip.ParseAddr(e); err == nil {
		ip = ip.Unmap().WithZone("")
		a.Prefixes = append(a.Prefixes, netip.PrefixFrom(ip, ip.BitLen()))
		return nil
	}
	if strings.Contains(e, "*") {
		return fmt.Errorf("%q: no wildcards: name each BMC or give its network (CIDR)", e)
	}
	name := strings.ToLower(strings.TrimSuffix(e, "."))
	if !hostName(name) {
		return fmt.Errorf("%q: not an address, a network (CIDR) or a host name", e)
	}
	a.Names = append(a.Names, name)
	return nil
}

// hostName: letters, digits, hyphens and dots, a last label that is not
// all digits (10.1.2 is a mistyped address, not a name).
func hostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return strings.Trim(labels[len(labels)-1], "0123456789") != ""
}

// Empty says the list allows nothing.
func (a AllowList) Empty() bool { return len(a.Prefixes) == 0 && len(a.Names) == 0 }

func (a AllowList) String() string {
	var s []string
	for _, p := range a.Prefixes {
		s = append(s, p.String())
	}
	return strings.Join(append(s, a.Names...), ", ")
}

func (a AllowList) allowsIP(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	return slices.ContainsFunc(a.Prefixes, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// Resolver is how the daemon looks a host name up (net.DefaultResolver's
// LookupNetIP for "ip").
type Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

func lookupIP(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// destination is the one address b's credentials c may be sent to: b's
// address, resolved once here, that c's allow list (its secret file's
// allow: lines, or else the daemon's --bmc-allow) admits. The caller
// connects to it and nowhere else, so a name that resolves elsewhere
// later is never asked. The error says which credentials, where to, and
// what would allow it.
func (m *Manager) destination(ctx context.Context, b *plan.BMC, c Credentials) (netip.Addr, error) {
	allow, whose := c.Allow, ""
	switch {
	case !allow.Empty():
		whose = "its file " + c.file
	case c.file != "":
		allow, whose = m.Allow, "its file "+c.file+" has no allow: lines and the daemon's --bmc-allow"
	default:
		allow, whose = m.Allow, "the daemon's --bmc-allow"
	}
	refuse := func(to, why string, args ...any) (netip.Addr, error) {
		return netip.Addr{}, fmt.Errorf("%s may not be sent to %s: "+why, append([]any{c.ref, to}, args...)...)
	}
	host := b.Address
	if allow.Empty() {
		if c.file != "" {
			return refuse(host, "neither its file %s nor the daemon's --bmc-allow says where it may go: add a line \"allow: %s\" (or its network, as CIDR) to the file", c.file, host)
		}
		return refuse(host, "the daemon has no --bmc-allow (an age value comes from Git: only the daemon says where it may go); start it with --bmc-allow and the BMCs' networks")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !allow.allowsIP(ip) {
			return refuse(host, "%s allows only %s", whose, allow)
		}
		return ip, nil
	}
	byName := slices.Contains(allow.Names, strings.ToLower(strings.TrimSuffix(host, ".")))
	if !byName && len(allow.Prefixes) == 0 {
		return refuse(host, "%s allows only %s", whose, allow) // no need to ask the resolver
	}
	ips, err := m.resolve(ctx, host)
	if err == nil && len(ips) == 0 {
		err = errors.New("no address")
	}
	if err != nil {
		return refuse(host, "it does not resolve: %v", err)
	}
	for _, ip := range ips {
		if byName || allow.allowsIP(ip) {
			return ip.Unmap(), nil
		}
	}
	var all []string
	for _, ip := range ips {
		all = append(all, ip.Unmap().String())
	}
	return refuse(fmt.Sprintf("%s (%s)", host, strings.Join(all, ", ")), "%s allows only %s", whose, allow)
}

func (m *Manager) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, m.Timeout)
	defer cancel()
	return m.Resolve(ctx, host)
}

// tlsAllowed refuses a Redfish BMC that Git says not to verify, unless the
// daemon allows that (--bmc-insecure-tls-allowed): without verification,
// anyone on the path may take the BMC's place and its password.
func (m *Manager) tlsAllowed(b *plan.BMC) error {
	if b.Protocol != plan.BMCRedfish || b.TLSVerify || m.InsecureTLS {
		return nil
	}
	return fmt.Errorf("BMC %s (%s): tlsVerify: false in Git, and this daemon does not allow it: start it with --bmc-insecure-tls-allowed, or give the BMC a certificate the daemon verifies", b.Host(), b.Protocol)
}
