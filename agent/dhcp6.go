package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	"github.com/insomniacslk/dhcp/iana"
)

// Lease6 is an address the link's DHCPv6 server gave the Micro-OS, with
// what renewing it takes. `bootops-agent dhcp6 IFACE` writes it to
// Lease6Dir; the agent keeps it for as long as the Micro-OS runs (KeepV6).
type Lease6 struct {
	Iface    string     `json:"iface"`
	Addr     netip.Addr `json:"addr"`
	ClientID []byte     `json:"clientID"` // the DUID-LLT the address is bound to
	ServerID []byte     `json:"serverID"`
	IAID     [4]byte    `json:"iaid"`
	// T1, T2 and Valid count from Got: when to Renew, when to Rebind,
	// when the address is no longer ours.
	T1    time.Duration `json:"t1"`
	T2    time.Duration `json:"t2"`
	Valid time.Duration `json:"valid"`
	Got   time.Time     `json:"got"`
}

// Lease6Dir is where the Micro-OS keeps its DHCPv6 leases, a file per
// interface (the IPv4 ones are the udhcpc script's, beside them).
const Lease6Dir = "/run/bootops-microos"

// LeaseV6 asks the link's DHCPv6 server for an address (IA_NA) on iface,
// as a DUID-LLT of the interface's MAC (the boot server knows the machine
// by it): what the Micro-OS does when the link's router says "managed"
// (M) and advertises no autonomous prefix, so SLAAC gives no address.
// Busybox has no DHCPv6 client; /init runs `bootops-agent dhcp6 IFACE`
// and configures what it prints.
func LeaseV6(ctx context.Context, iface string) (*Lease6, error) {
	c, err := client6(iface)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return leaseV6(ctx, c, nil)
}

func client6(iface string) (*nclient6.Client, error) {
	c, err := nclient6.New(iface, nclient6.WithTimeout(3*time.Second), nclient6.WithRetry(4))
	if err != nil {
		return nil, fmt.Errorf("dhcpv6 on %s: %w", iface, err)
	}
	return c, nil
}

// leaseV6 is LeaseV6's exchange: Solicit, Request, the address of the
// Reply's IA_NA, as clientID (nil: a new DUID-LLT). The messages are
// built here, not by the library's constructors, because those draw
// transaction IDs from crypto/rand: getrandom blocks until the kernel's
// random pool is ready, which under emulation (no RDRAND) took the
// Micro-OS minutes into its boot. Transaction IDs need no secrecy.
func leaseV6(ctx context.Context, c *nclient6.Client, clientID dhcpv6.DUID) (*Lease6, error) {
	hw := c.InterfaceAddr()
	if len(hw) < 4 {
		return nil, fmt.Errorf("dhcpv6: hardware address %q is too short", hw)
	}
	if clientID == nil {
		clientID = &dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: dhcpv6.GetTime(), LinkLayerAddr: hw}
	}
	var iaid [4]byte
	copy(iaid[:], hw[len(hw)-4:])
	solicit := message(dhcpv6.MessageTypeSolicit, dhcpv6.OptClientID(clientID), dhcpv6.OptElapsedTime(0),
		&dhcpv6.OptIANA{IaId: iaid}, dhcpv6.OptRequestedOption(dhcpv6.OptionDNSRecursiveNameServer))
	adv, err := c.SendAndRead(ctx, c.RemoteAddr(), solicit, nclient6.IsMessageType(dhcpv6.MessageTypeAdvertise))
	if err != nil {
		return nil, fmt.Errorf("dhcpv6 solicit: %w", err)
	}
	if _, err := addressOf(adv); err != nil {
		return nil, fmt.Errorf("dhcpv6 advertise: %w", err)
	}
	sid := adv.Options.ServerID()
	if sid == nil {
		return nil, errors.New("dhcpv6 advertise: no server identifier")
	}
	request := message(dhcpv6.MessageTypeRequest, dhcpv6.OptClientID(clientID), dhcpv6.OptServerID(sid), dhcpv6.OptElapsedTime(0),
		adv.Options.OneIANA(), dhcpv6.OptRequestedOption(dhcpv6.OptionDNSRecursiveNameServer))
	reply, err := c.SendAndRead(ctx, c.RemoteAddr(), request, nclient6.IsMessageType(dhcpv6.MessageTypeReply))
	if err != nil {
		return nil, fmt.Errorf("dhcpv6 request: %w", err)
	}
	l := &Lease6{ClientID: clientID.ToBytes(), IAID: iaid}
	if err := l.take(reply, time.Now()); err != nil {
		return nil, fmt.Errorf("dhcpv6 reply: %w", err)
	}
	return l, nil
}

// minRenew is the least time from a lease to its Renew: a server that
// says T1 0 and a preferred lifetime 0 would have the agent renew without
// pause.
const minRenew = 2 * time.Second

// take sets l from a Reply that gives an address: the address, its
// server, its times (T1 and T2 as the server says, else half and four
// fifths of the preferred lifetime, RFC 8415 §21.4; T1 at least minRenew).
func (l *Lease6) take(m *dhcpv6.Message, now time.Time) error {
	a, err := addressOf(m)
	if err != nil {
		return err
	}
	sid := m.Options.ServerID()
	if sid == nil {
		return errors.New("no server identifier")
	}
	ia := m.Options.OneIANA()
	var pref, valid time.Duration
	for _, ad := range ia.Options.Addresses() {
		if ip, ok := netip.AddrFromSlice(ad.IPv6Addr); ok && ip == a {
			pref, valid = ad.PreferredLifetime, ad.ValidLifetime
			break
		}
	}
	t1, t2 := ia.T1, ia.T2
	if t1 <= 0 || t1 > valid {
		t1 = pref / 2
	}
	if t2 <= 0 || t2 < t1 || t2 > valid {
		t2 = pref * 4 / 5
	}
	t1 = max(t1, minRenew)
	l.Addr, l.ServerID, l.T1, l.T2, l.Valid, l.Got = a, sid.ToBytes(), t1, max(t2, t1), valid, now
	return nil
}

// Save writes l to dir as dhcp6-IFACE.json.
func (l *Lease6) Save(dir string) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f := filepath.Join(dir, "dhcp6-"+l.Iface+".json")
	if err := os.WriteFile(f+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(f+".tmp", f)
}

// Leases6 are the leases saved in dir.
func Leases6(dir string) ([]*Lease6, error) {
	files, err := filepath.Glob(filepath.Join(dir, "dhcp6-*.json"))
	if err != nil {
		return nil, err
	}
	var out []*Lease6
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		l := new(Lease6)
		if err := json.Unmarshal(b, l); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// KeepV6 keeps l until ctx ends: a Renew to its server at T1, a Rebind to
// any server from T2, each asked again every renewRetry until a Reply
// gives the address again. A lease whose valid lifetime passes without one
// is lost: the kernel keeps the address (/init added it with no lifetime),
// so KeepV6 asks anew (Solicit) as the same client, and a new address
// replaces the old with move. say reports each step.
func KeepV6(ctx context.Context, l *Lease6, move func(iface string, old, new netip.Addr) error, say func(format string, a ...any)) error {
	c, err := client6(l.Iface)
	if err != nil {
		return err
	}
	defer c.Close()
	return keepV6(ctx, c, l, time.Minute, move, say)
}

func keepV6(ctx context.Context, c *nclient6.Client, l *Lease6, retry time.Duration, move func(iface string, old, new netip.Addr) error, say func(string, ...any)) error {
	for {
		err := renewV6(ctx, c, l, retry, say)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		say("dhcpv6 on %s: %v; asking for an address again", l.Iface, err)
		id, err := dhcpv6.DUIDFromBytes(l.ClientID)
		if err != nil {
			return fmt.Errorf("dhcpv6: the lease's client identifier: %w", err)
		}
		for {
			n, err := leaseV6(ctx, c, id)
			if err == nil {
				n.Iface = l.Iface
				if n.Addr != l.Addr {
					if err := move(l.Iface, l.Addr, n.Addr); err != nil {
						say("dhcpv6 on %s: %s in place of %s: %v", l.Iface, n.Addr, l.Addr, err)
					}
				}
				*l = *n
				say("dhcpv6 on %s: %s, until %s", l.Iface, l.Addr, l.Got.Add(l.Valid).UTC().Format(time.TimeOnly))
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			say("dhcpv6 on %s: %v", l.Iface, err)
			if !sleep(ctx, retry) {
				return ctx.Err()
			}
		}
	}
}

// renewV6 renews l at T1 (Renew) and from T2 (Rebind) until ctx ends or
// the lease does (an error).
func renewV6(ctx context.Context, c *nclient6.Client, l *Lease6, retry time.Duration, say func(string, ...any)) error {
	for {
		t1, t2, end := l.Got.Add(l.T1), l.Got.Add(l.T2), l.Got.Add(l.Valid)
		if !sleep(ctx, time.Until(t1)) {
			return ctx.Err()
		}
		for {
			now := time.Now()
			if !now.Before(end) {
				return fmt.Errorf("the lease of %s ended without a Reply", l.Addr)
			}
			ia := &dhcpv6.OptIANA{IaId: l.IAID}
			ia.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: l.Addr.AsSlice()})
			cid, err := dhcpv6.DUIDFromBytes(l.ClientID)
			if err != nil {
				return fmt.Errorf("the lease's client identifier: %w", err)
			}
			opts := []dhcpv6.Option{dhcpv6.OptClientID(cid), dhcpv6.OptElapsedTime(0), ia}
			mt := dhcpv6.MessageTypeRebind
			if now.Before(t2) {
				sid, err := dhcpv6.DUIDFromBytes(l.ServerID)
				if err != nil {
					return fmt.Errorf("the lease's server identifier: %w", err)
				}
				mt, opts = dhcpv6.MessageTypeRenew, append(opts, dhcpv6.OptServerID(sid))
			}
			actx, cancel := context.WithDeadline(ctx, end)
			reply, err := c.SendAndRead(actx, c.RemoteAddr(), message(mt, opts...), nclient6.IsMessageType(dhcpv6.MessageTypeReply))
			cancel()
			if err == nil {
				prev := l.Addr
				n := *l
				if err = n.take(reply, time.Now()); err == nil && n.Addr != prev {
					err = fmt.Errorf("the %s Reply gives %s, not %s", mt, n.Addr, prev)
				}
				if err == nil {
					*l = n
					say("dhcpv6 on %s: %s renewed (%s), until %s", l.Iface, l.Addr, mt, l.Got.Add(l.Valid).UTC().Format(time.TimeOnly))
					break
				}
				if ad, _ := addressOf(reply); !ad.IsValid() {
					// The server took the address back (lifetime 0, a
					// status): it is not ours any more.
					return fmt.Errorf("%s refused: %w", mt, err)
				}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			say("dhcpv6 on %s: %s: %v", l.Iface, mt, err)
			if !sleep(ctx, min(retry, time.Until(end))) {
				return ctx.Err()
			}
		}
	}
}

// message is a client message of type t with a fresh transaction ID.
func message(t dhcpv6.MessageType, opts ...dhcpv6.Option) *dhcpv6.Message {
	m := &dhcpv6.Message{MessageType: t}
	r := rand.Uint32()
	m.TransactionID = dhcpv6.TransactionID{byte(r >> 16), byte(r >> 8), byte(r)}
	for _, o := range opts {
		m.AddOption(o)
	}
	return m
}

// addressOf is the address an Advertise or Reply gives, or why none.
func addressOf(m *dhcpv6.Message) (netip.Addr, error) {
	if s := m.Options.Status(); s != nil && s.StatusCode != iana.StatusSuccess {
		return netip.Addr{}, fmt.Errorf("%s: %s", s.StatusCode, s.StatusMessage)
	}
	ia := m.Options.OneIANA()
	if ia == nil {
		return netip.Addr{}, errors.New("no IA_NA (a server giving boot options only)")
	}
	if s := ia.Options.Status(); s != nil && s.StatusCode != iana.StatusSuccess {
		return netip.Addr{}, fmt.Errorf("%s: %s", s.StatusCode, s.StatusMessage)
	}
	for _, a := range ia.Options.Addresses() {
		ip, ok := netip.AddrFromSlice(a.IPv6Addr)
		if !ok || a.ValidLifetime <= 0 {
			continue
		}
		// The agent configures it (ip -6 addr add): a global unicast
		// IPv6 address only, whatever a server on the link says.
		if ip.Is4In6() || !ip.IsGlobalUnicast() {
			return netip.Addr{}, fmt.Errorf("%s is no global unicast IPv6 address", ip)
		}
		return ip, nil
	}
	return netip.Addr{}, errors.New("no address in the IA_NA")
}
