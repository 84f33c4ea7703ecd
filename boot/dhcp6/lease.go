package dhcp6

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/boot/lease"
	"github.com/bootops/bootops/plan"
)

// defaultLease is the lifetime of an address when Config gives none.
const defaultLease = time.Hour

// Leaser hands machines addresses of the site's IPv6 pool: a Solicit gets
// an offer held in memory, a Request (or Rapid Commit) a lease written
// down, a Release gives it back.
type Leaser interface {
	Offer(key string, r lease.Range) (netip.Addr, error)
	Confirm(key string, want netip.Addr, r lease.Range, d time.Duration) (netip.Addr, error)
	Release(key string, a netip.Addr) error
}

// Pool is where a site's DHCPv6 leases are kept: the lease store both
// families share (boot/lease), which walks an IPv6 range from a hash of
// the client's key, so it may be huge.
type Pool = lease.Store

var _ Leaser = (*Pool)(nil)

// reservation answers msg as the link's DHCPv6 server: a machine's
// reserved address, else one of the pool, in its first IA_NA. A Solicit
// only gets an offer (held in memory), unless it asks for Rapid Commit;
// Request, Renew and Rebind write the lease down; Release lets it expire.
func reservation(p *plan.Plan, site *plan.Site, cfg Config, msg *dhcpv6.Message, d plan.Decision, a *Answer, mods []dhcpv6.Modifier) (*dhcpv6.Message, error) {
	reply, err := reservationReply(msg, mods)
	if err != nil {
		return nil, err
	}
	switch msg.Type() {
	case dhcpv6.MessageTypeInformationRequest:
		return reply, nil
	case dhcpv6.MessageTypeConfirm:
		confirm(reply, msg, cfg, a)
		return reply, nil
	case dhcpv6.MessageTypeRelease:
		release(reply, msg, cfg, a)
		return reply, nil
	}
	ia := msg.Options.OneIANA()
	if ia == nil {
		// Nothing to lease: boot options only (a client that wants
		// only, say, a prefix).
		a.Why = reply.Type().String() + " without an address: no IA_NA asked for"
		return reply, nil
	}
	reply.AddOption(leaseIA(p, site, cfg, msg, ia, d, a, reply.Type()))
	return reply, nil
}

// reservationReply is the message msg gets in reservation mode: an
// Advertise to a Solicit (a Reply when it asks for Rapid Commit), a Reply
// to the rest it answers.
func reservationReply(msg *dhcpv6.Message, mods []dhcpv6.Modifier) (*dhcpv6.Message, error) {
	switch mt := msg.Type(); mt {
	case dhcpv6.MessageTypeSolicit:
		if msg.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
			return dhcpv6.NewReplyFromMessage(msg, mods...)
		}
		return dhcpv6.NewAdvertiseFromSolicit(msg, mods...)
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind,
		dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeConfirm, dhcpv6.MessageTypeInformationRequest:
		return dhcpv6.NewReplyFromMessage(msg, mods...)
	default:
		return nil, fmt.Errorf("reservation mode does not answer %s", mt)
	}
}

// confirm answers a Confirm (RFC 8415 §18.3.3): are the client's
// addresses on this link?
func confirm(reply, msg *dhcpv6.Message, cfg Config, a *Answer) {
	st := &dhcpv6.OptStatusCode{StatusCode: iana.StatusSuccess, StatusMessage: "on link"}
	for _, i := range msg.Options.IANA() {
		for _, ad := range i.Options.Addresses() {
			if x, ok := netip.AddrFromSlice(ad.IPv6Addr); !ok || !cfg.Prefix.Contains(x.Unmap()) {
				st = &dhcpv6.OptStatusCode{StatusCode: iana.StatusNotOnLink, StatusMessage: ad.IPv6Addr.String() + " is not on this link"}
			}
		}
	}
	reply.AddOption(st)
	a.Why = "Reply to Confirm: " + st.StatusCode.String()
}

// release answers a Release: the client's leases of the addresses of its
// first IA_NA end now.
func release(reply, msg *dhcpv6.Message, cfg Config, a *Answer) {
	if ia := msg.Options.OneIANA(); ia != nil && cfg.Leases != nil && a.Client.Key != "" {
		for _, ad := range ia.Options.Addresses() {
			if x, ok := netip.AddrFromSlice(ad.IPv6Addr); ok {
				if cfg.Leases.Release(a.Client.Key, x) == nil {
					a.Addr = x
				}
			}
		}
	}
	reply.AddOption(&dhcpv6.OptStatusCode{StatusCode: iana.StatusSuccess, StatusMessage: "released"})
	a.Why = "Reply to Release"
	if a.Addr.IsValid() {
		a.Why += " of " + a.Addr.String()
	}
}

// leaseIA is the IA_NA of the reply (of type rt) to a Solicit, Request,
// Renew or Rebind: the machine's address with its lifetimes, the client's
// addresses with lifetimes 0 when a Renew or Rebind may not keep them, or
// the status NoAddrsAvail and why.
func leaseIA(p *plan.Plan, site *plan.Site, cfg Config, msg *dhcpv6.Message, ia *dhcpv6.OptIANA, d plan.Decision, a *Answer, rt dhcpv6.MessageType) *dhcpv6.OptIANA {
	lt := cfg.LeaseTime
	if lt <= 0 {
		lt = defaultLease
	}
	addr, who, err := address(p, site, cfg, msg, ia, d, a.Client, lt, rt == dhcpv6.MessageTypeAdvertise)
	out := &dhcpv6.OptIANA{IaId: ia.IaId}
	switch mt := msg.Type(); {
	case err == nil:
		out.T1, out.T2 = lt/2, lt*4/5
		out.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: addr.AsSlice(), PreferredLifetime: lt, ValidLifetime: lt})
		a.Addr = addr
		a.Why = fmt.Sprintf("%s %s to %s", rt, addr, who)
	case errors.Is(err, lease.ErrUnavailable) && (mt == dhcpv6.MessageTypeRenew || mt == dhcpv6.MessageTypeRebind):
		// RFC 8415 §18.3.4: an address the client may no longer use
		// goes back with lifetimes 0.
		for _, ad := range ia.Options.Addresses() {
			out.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: ad.IPv6Addr})
		}
		a.Why = fmt.Sprintf("%s: %v", rt, err)
	default:
		a.Exhausted = errors.Is(err, lease.ErrPoolFull)
		out.Options.Add(&dhcpv6.OptStatusCode{StatusCode: iana.StatusNoAddrsAvail, StatusMessage: err.Error()})
		a.Why = fmt.Sprintf("%s without an address: %v", rt, err)
	}
	return out
}

// address is the machine's address: its reservation, else from the pool
// (offered for an Advertise, leased otherwise); and who it is for.
func address(p *plan.Plan, site *plan.Site, cfg Config, msg *dhcpv6.Message, ia *dhcpv6.OptIANA, d plan.Decision, c Client, lt time.Duration, offer bool) (netip.Addr, string, error) {
	if cfg.Reservation != nil && c.MAC != "" {
		if r, ok := cfg.Reservation(p, site.Name, c.MAC); ok {
			return r.Addr, r.Node, nil
		}
	}
	switch {
	case !cfg.PoolFirst.IsValid() || cfg.Leases == nil:
		return netip.Addr{}, "", fmt.Errorf("no reservation for %s and no pool", c)
	case c.Key == "":
		return netip.Addr{}, "", errors.New("no client identifier to lease to")
	case d.Outcome == plan.Mismatch:
		return netip.Addr{}, "", fmt.Errorf("no reservation for %s: %s", c, d.Reason)
	case d.Outcome == plan.Unknown && site.UnknownNodes == plan.PolicyIgnore:
		return netip.Addr{}, "", fmt.Errorf("unknown machine %s and site ignores unknown machines", c)
	}
	who := "unknown machine " + c.String()
	if d.Node != nil {
		who = d.Node.Name
	}
	r := poolRange(p, site, cfg)
	if offer {
		a, err := cfg.Leases.Offer(c.Key, r)
		return a, who, err
	}
	if msg.Type() == dhcpv6.MessageTypeSolicit {
		// Rapid Commit: offered and leased at once.
		a, err := cfg.Leases.Offer(c.Key, r)
		if err != nil {
			return a, who, err
		}
		a, err = cfg.Leases.Confirm(c.Key, a, r, lt)
		return a, who, err
	}
	var want netip.Addr
	if ad := ia.Options.OneAddress(); ad != nil {
		want, _ = netip.AddrFromSlice(ad.IPv6Addr)
	}
	a, err := cfg.Leases.Confirm(c.Key, want, r, lt)
	return a, who, err
}

// poolRange is the site's pool less the server's and reserved addresses.
func poolRange(p *plan.Plan, site *plan.Site, cfg Config) lease.Range {
	return lease.Range{First: cfg.PoolFirst, Last: cfg.PoolLast, Taken: func(a netip.Addr) bool {
		return a == cfg.ServerIP || cfg.Reserved != nil && cfg.Reserved(p, site.Name, a)
	}}
}
