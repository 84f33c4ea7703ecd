package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	"github.com/insomniacslk/dhcp/iana"
)

// LeaseV6 asks the link's DHCPv6 server for an address (IA_NA) on iface,
// as a DUID-LLT of the interface's MAC (the boot server knows the machine
// by it): what the Micro-OS does when the link's router says "managed"
// (M) and advertises no autonomous prefix, so SLAAC gives no address.
// Busybox has no DHCPv6 client; /init runs `bootops-agent dhcp6 IFACE`
// and configures what it prints.
func LeaseV6(ctx context.Context, iface string) (netip.Addr, error) {
	c, err := nclient6.New(iface, nclient6.WithTimeout(3*time.Second), nclient6.WithRetry(4))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("dhcpv6 on %s: %w", iface, err)
	}
	defer c.Close()
	return leaseV6(ctx, c)
}

// leaseV6 is LeaseV6's exchange: Solicit, Request, the address of the
// Reply's IA_NA. The messages are built here, not by the library's
// constructors, because those draw transaction IDs from crypto/rand:
// getrandom blocks until the kernel's random pool is ready, which under
// emulation (no RDRAND) took the Micro-OS minutes into its boot.
// Transaction IDs need no secrecy.
func leaseV6(ctx context.Context, c *nclient6.Client) (netip.Addr, error) {
	hw := c.InterfaceAddr()
	if len(hw) < 4 {
		return netip.Addr{}, fmt.Errorf("dhcpv6: hardware address %q is too short", hw)
	}
	duid := &dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: dhcpv6.GetTime(), LinkLayerAddr: hw}
	var iaid [4]byte
	copy(iaid[:], hw[len(hw)-4:])
	solicit := message(dhcpv6.MessageTypeSolicit, dhcpv6.OptClientID(duid), dhcpv6.OptElapsedTime(0),
		&dhcpv6.OptIANA{IaId: iaid}, dhcpv6.OptRequestedOption(dhcpv6.OptionDNSRecursiveNameServer))
	adv, err := c.SendAndRead(ctx, c.RemoteAddr(), solicit, nclient6.IsMessageType(dhcpv6.MessageTypeAdvertise))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("dhcpv6 solicit: %w", err)
	}
	if _, err := addressOf(adv); err != nil {
		return netip.Addr{}, fmt.Errorf("dhcpv6 advertise: %w", err)
	}
	sid := adv.Options.ServerID()
	if sid == nil {
		return netip.Addr{}, errors.New("dhcpv6 advertise: no server identifier")
	}
	request := message(dhcpv6.MessageTypeRequest, dhcpv6.OptClientID(duid), dhcpv6.OptServerID(sid), dhcpv6.OptElapsedTime(0),
		adv.Options.OneIANA(), dhcpv6.OptRequestedOption(dhcpv6.OptionDNSRecursiveNameServer))
	reply, err := c.SendAndRead(ctx, c.RemoteAddr(), request, nclient6.IsMessageType(dhcpv6.MessageTypeReply))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("dhcpv6 request: %w", err)
	}
	a, err := addressOf(reply)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("dhcpv6 reply: %w", err)
	}
	return a, nil
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
		if ip, ok := netip.AddrFromSlice(a.IPv6Addr); ok && a.ValidLifetime > 0 {
			return ip.Unmap(), nil
		}
	}
	return netip.Addr{}, errors.New("no address in the IA_NA")
}
