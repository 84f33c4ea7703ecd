package dhcp6

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/plan"
)

// MACFromDUID is the Ethernet address a DUID-LL or DUID-LLT carries,
// normalised ("52:54:00:12:34:56"); false for other DUID types, another
// hardware type, or an address no interface has (zero, broadcast,
// multicast). A DUID-LLT is made once from one of the host's interfaces and
// kept: on a machine with several NICs it may name another one than the
// NIC that sent the packet.
func MACFromDUID(d dhcpv6.DUID) (string, bool) {
	var ht iana.HWType
	var hw net.HardwareAddr
	switch d := d.(type) {
	case *dhcpv6.DUIDLL:
		ht, hw = d.HWType, d.LinkLayerAddr
	case *dhcpv6.DUIDLLT:
		ht, hw = d.HWType, d.LinkLayerAddr
	default:
		return "", false
	}
	if ht != iana.HWTypeEthernet {
		return "", false
	}
	return ethernet(hw)
}

// MACFromLinkLocal is the Ethernet address a modified EUI-64 link-local
// address was made from (fe80::5054:ff:fe12:3456 → 52:54:00:12:34:56), as
// firmware and iPXE make theirs; false for any other address (a
// stable-privacy or random interface identifier has no MAC in it).
func MACFromLinkLocal(a netip.Addr) (string, bool) {
	if !a.Is6() || !a.IsLinkLocalUnicast() {
		return "", false
	}
	b := a.As16()
	if b[11] != 0xff || b[12] != 0xfe {
		return "", false
	}
	return ethernet(net.HardwareAddr{b[8] ^ 0x02, b[9], b[10], b[13], b[14], b[15]})
}

// ethernet normalises hw, refusing what no Ethernet interface has.
func ethernet(hw net.HardwareAddr) (string, bool) {
	switch {
	case len(hw) != 6,
		bytes.Count(hw, []byte{0}) == 6,
		bytes.Count(hw, []byte{0xff}) == 6,
		hw[0]&1 != 0:
		return "", false
	}
	return plan.NormalizeMAC(hw.String()), true
}

// Client is who sent a message, as far as it says or its relay saw.
type Client struct {
	// MAC is the client's Ethernet address: from the relay's client
	// link-layer address option (79), else a DUID-LL, else a modified
	// EUI-64 link-local source, else a DUID-LLT. "" when none says.
	MAC string
	// MACFrom says which of "relay", "link-local" or "duid" MAC came from.
	MACFrom string
	// UUIDs are the SMBIOS UUID candidates of a DUID-UUID, in the order to
	// try: EDK2 (OVMF) copies the GUID as SMBIOS stores it (the first three
	// fields little-endian, like DHCPv4 option 97), iPXE writes it in
	// network order as RFC 6355 says; both readings are tried. Both send a
	// DUID-UUID, so their MAC comes from the EUI-64 link-local source.
	UUIDs []string
	// Key names the client in the lease file: its MAC, else "duid:" and
	// the DUID in hex.
	Key string
}

// identify tells who sent msg. relay is the relay message closest to the
// client (nil when none), peer the packet's source address.
func identify(msg *dhcpv6.Message, relay *dhcpv6.RelayMessage, peer netip.Addr) Client {
	var c Client
	duid := msg.Options.ClientID()
	if relay != nil {
		if ht, hw := relay.Options.ClientLinkLayerAddress(); ht == iana.HWTypeEthernet {
			if mac, ok := ethernet(hw); ok {
				c.MAC, c.MACFrom = mac, "relay"
			}
		}
		if a, ok := netip.AddrFromSlice(relay.PeerAddr); ok {
			peer = a
		}
	}
	// A DUID-LL says "my NIC's address" (RFC 8415 §11.4: devices with no
	// storage to keep a DUID in, like firmware); a DUID-LLT is made once and
	// kept, so it may name another NIC, a replaced one, or be a clone's.
	if _, ll := duid.(*dhcpv6.DUIDLL); c.MAC == "" && ll {
		c.MAC, c.MACFrom = macOf(duid, "duid")
	}
	if c.MAC == "" {
		if mac, ok := MACFromLinkLocal(peer.WithZone("")); ok {
			c.MAC, c.MACFrom = mac, "link-local"
		}
	}
	if c.MAC == "" && duid != nil {
		c.MAC, c.MACFrom = macOf(duid, "duid")
	}
	if u, ok := duid.(*dhcpv6.DUIDUUID); ok && u.UUID != [16]byte{} && u.UUID != [16]byte{255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255} {
		b := u.UUID
		swapped := []byte{b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6]}
		swapped = append(swapped, b[8:]...)
		c.UUIDs = []string{plan.NormalizeUUID(fmt.Sprintf("%x", swapped)), plan.NormalizeUUID(fmt.Sprintf("%x", b[:]))}
	}
	switch {
	case c.MAC != "":
		c.Key = c.MAC
	case duid != nil:
		c.Key = fmt.Sprintf("duid:%x", duid.ToBytes())
	}
	return c
}

// macOf is MACFromDUID's MAC, and from when there is one.
func macOf(d dhcpv6.DUID, from string) (string, string) {
	if mac, ok := MACFromDUID(d); ok {
		return mac, from
	}
	return "", ""
}

// decide is the plan's decision for c, by MAC and, for a DUID-UUID, by
// each reading of the UUID until one names a node; and the UUID used.
func decide(p *plan.Plan, site string, c Client) (plan.Decision, string) {
	m := plan.Machine{MAC: c.MAC}
	if len(c.UUIDs) == 0 {
		return p.Decide(site, m), ""
	}
	for _, u := range c.UUIDs {
		m.UUID = u
		if d := p.Decide(site, m); d.Outcome != plan.Unknown {
			return d, u
		}
	}
	m.UUID = c.UUIDs[0]
	return p.Decide(site, m), m.UUID
}

// rawMACs are the Ethernet addresses a raw packet names its client by,
// read without parsing it: a relay's client link-layer option, the
// Client ID's DUID-LL or DUID-LLT, the sender's EUI-64 link-local address.
// How the read loop sorts packets into lanes before any allocation; the
// reply still decides by identify.
func rawMACs(pkt []byte, peer netip.Addr) []string {
	var out []string
	add := func(hw []byte) {
		if mac, ok := ethernet(net.HardwareAddr(hw)); ok {
			out = append(out, mac)
		}
	}
	for hops := 0; hops < 8 && len(pkt) > 0; hops++ {
		relayed := pkt[0] == byte(dhcpv6.MessageTypeRelayForward)
		opts, next := 4, []byte(nil)
		if relayed {
			opts = 34
			if len(pkt) >= 34 {
				if a, ok := netip.AddrFromSlice(pkt[18:34]); ok {
					peer = a
				}
			}
		}
		for i := opts; i+4 <= len(pkt); {
			code, n := int(pkt[i])<<8|int(pkt[i+1]), int(pkt[i+2])<<8|int(pkt[i+3])
			v := pkt[i+4 : min(i+4+n, len(pkt))]
			i += 4 + n
			switch {
			case relayed && code == int(dhcpv6.OptionClientLinkLayerAddr) && len(v) == 8 && v[0] == 0 && v[1] == 1:
				add(v[2:])
			case relayed && code == int(dhcpv6.OptionRelayMsg):
				next = v
			case !relayed && code == int(dhcpv6.OptionClientID) && len(v) == 14 && v[1] == 1 && v[3] == 1: // DUID-LLT, Ethernet
				add(v[8:])
			case !relayed && code == int(dhcpv6.OptionClientID) && len(v) == 10 && v[1] == 3 && v[3] == 1: // DUID-LL, Ethernet
				add(v[4:])
			}
		}
		if !relayed {
			break
		}
		pkt = next
	}
	if mac, ok := MACFromLinkLocal(peer.WithZone("")); ok {
		out = append(out, mac)
	}
	return out
}
