// Package floatip moves a site's service address between the daemons of
// a site cluster (docs/cluster.md): the member answering the site's DHCP
// holds network.serverAddress on the site's interface, as a /32 beside the
// interface's own address, and announces it with gratuitous ARP so the
// LAN's switches and machines send it there at once; the member answering
// its DHCPv6 holds network.ipv6.serverAddress as a /128 (no duplicate
// address detection: the address is the role's, not the first asker's)
// and announces it with unsolicited Neighbor Advertisements that override
// what the LAN's neighbours had (RFC 4861 §7.2.6). Each gives its address
// back when it stops answering.
package floatip

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Announcements is how many gratuitous ARPs a taken address is announced
// with, Spacing apart (RFC 5227's two, and one more for a lossy LAN).
const (
	Announcements = 3
	Spacing       = 200 * time.Millisecond
)

// Take adds addr to the interface named iface (nothing when it has it
// already) and announces it.
func Take(iface string, addr netip.Addr) error {
	link, a, err := linkAddr(iface, addr)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(link, a); err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("floatip: add %s to %s: %w", addr, iface, err)
	}
	return announce(iface, addr)
}

// Announce says again that iface holds addr (Take does once): a member
// killed on a host that stays up leaves the address on that host's
// interface until it restarts, and that host answers ARP and Neighbor
// Solicitations for it too; the holder's announcements, now and then, keep
// the LAN's entries on the holder.
func Announce(iface string, addr netip.Addr) error { return announce(iface, addr) }

// Give removes addr from iface (nothing when it does not have it).
func Give(iface string, addr netip.Addr) error {
	link, a, err := linkAddr(iface, addr)
	if err != nil {
		return err
	}
	if err := netlink.AddrDel(link, a); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("floatip: remove %s from %s: %w", addr, iface, err)
	}
	return nil
}

// Has says whether iface holds addr.
func Has(iface string, addr netip.Addr) (bool, error) {
	link, err := netlink.LinkByName(iface)
	if err != nil {
		return false, fmt.Errorf("floatip: interface %s: %w", iface, err)
	}
	family := netlink.FAMILY_V4
	if addr.Is6() {
		family = netlink.FAMILY_V6
	}
	as, err := netlink.AddrList(link, family)
	if err != nil {
		return false, err
	}
	for _, a := range as {
		if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == addr {
			return true, nil
		}
	}
	return false, nil
}

func linkAddr(iface string, addr netip.Addr) (netlink.Link, *netlink.Addr, error) {
	link, err := netlink.LinkByName(iface)
	if err != nil {
		return nil, nil, fmt.Errorf("floatip: interface %s: %w", iface, err)
	}
	switch {
	case addr.Is4():
		return link, &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}, nil
	case addr.Is6() && !addr.IsLinkLocalUnicast():
		return link, &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}, nil
	}
	return nil, nil, fmt.Errorf("floatip: %s: an IPv4 or a global IPv6 address only", addr)
}

// announce sends Announcements gratuitous ARPs (requests whose sender and
// target are addr, RFC 5227's announcement) to the LAN's broadcast, or for
// an IPv6 address as many unsolicited Neighbor Advertisements to all nodes.
func announce(iface string, addr netip.Addr) error {
	if addr.Is6() {
		return advertise(iface, addr)
	}
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return fmt.Errorf("floatip: interface %s: %w", iface, err)
	}
	c, err := arp.Dial(ifi)
	if err != nil {
		return fmt.Errorf("floatip: announce %s on %s: %w", addr, iface, err)
	}
	defer c.Close()
	p, err := arp.NewPacket(arp.OperationRequest, ifi.HardwareAddr, addr, net.HardwareAddr{0, 0, 0, 0, 0, 0}, addr)
	if err != nil {
		return err
	}
	for i := range Announcements {
		if i > 0 {
			time.Sleep(Spacing)
		}
		if err := c.WriteTo(p, ethernet.Broadcast); err != nil {
			return fmt.Errorf("floatip: announce %s on %s: %w", addr, iface, err)
		}
	}
	return nil
}

// advertise sends Announcements unsolicited Neighbor Advertisements of
// addr (override set, this interface's hardware address) to ff02::1, from
// the interface's link-local address: every neighbour that had addr at
// another member's hardware address takes this one.
func advertise(iface string, addr netip.Addr) error {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return fmt.Errorf("floatip: interface %s: %w", iface, err)
	}
	c, _, err := ndp.Listen(ifi, ndp.LinkLocal)
	if err != nil {
		return fmt.Errorf("floatip: announce %s on %s: %w", addr, iface, err)
	}
	defer c.Close()
	na := &ndp.NeighborAdvertisement{Override: true, TargetAddress: addr,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: ifi.HardwareAddr}}}
	for i := range Announcements {
		if i > 0 {
			time.Sleep(Spacing)
		}
		if err := c.WriteTo(na, nil, netip.IPv6LinkLocalAllNodes()); err != nil {
			return fmt.Errorf("floatip: announce %s on %s: %w", addr, iface, err)
		}
	}
	return nil
}
