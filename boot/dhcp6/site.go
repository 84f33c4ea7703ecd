package dhcp6

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/bootops/bootops/plan"
)

// SiteConfig maps a site of the plan onto a Config: network.ipv6 (server
// address, prefix, DHCPv6 mode, DNS, pool), the network's lease time and
// HTTP(S) ports, and the nodes' IPv6 reservations (read from the plan
// being served at each packet), and on a dual-stack site which machines'
// firmware booted over IPv6 (Firmware). tftp says TFTP is served on the IPv6
// address; leases keeps the pool (nil: no pool). ServerID is left for
// Server.Serve to take from its interface.
func SiteConfig(site *plan.Site, tftp bool, leases Leaser) (Config, error) {
	n := site.Network.IPv6
	if n == nil {
		return Config{}, fmt.Errorf("dhcp6: site %s has no network.ipv6", site.Name)
	}
	cfg := Config{Mode: n.DHCP, HTTPPort: site.Network.HTTPPort, HTTPSPort: site.Network.HTTPSPort, TFTP: tftp,
		LeaseTime: time.Duration(site.Network.LeaseSeconds) * time.Second, Leases: leases,
		Reservation: func(p *plan.Plan, site, mac string) (Reservation, bool) {
			r, ok := p.ReservationV6(site, mac)
			if !ok {
				return Reservation{}, false
			}
			a, err := netip.ParseAddr(r.IPv6)
			return Reservation{Addr: a, Node: r.Node}, err == nil
		},
		Reserved:  func(p *plan.Plan, site string, a netip.Addr) bool { return p.Reserved(site, a.String()) },
		DualStack: site.Network.ServerAddress != "", Firmware: &Firmware{},
	}
	var err error
	if cfg.ServerIP, err = netip.ParseAddr(n.ServerAddress); err != nil {
		return Config{}, fmt.Errorf("dhcp6: site %s: network.ipv6.serverAddress: %w", site.Name, err)
	}
	if cfg.Prefix, err = netip.ParsePrefix(n.Prefix); err != nil {
		return Config{}, fmt.Errorf("dhcp6: site %s: network.ipv6.prefix: %w", site.Name, err)
	}
	for _, s := range n.DNS {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return Config{}, fmt.Errorf("dhcp6: site %s: network.ipv6.dns: %w", site.Name, err)
		}
		cfg.DNS = append(cfg.DNS, a)
	}
	if n.Pool != nil {
		if cfg.PoolFirst, err = netip.ParseAddr(n.Pool.Start); err != nil {
			return Config{}, fmt.Errorf("dhcp6: site %s: network.ipv6.pool.start: %w", site.Name, err)
		}
		if cfg.PoolLast, err = netip.ParseAddr(n.Pool.End); err != nil {
			return Config{}, fmt.Errorf("dhcp6: site %s: network.ipv6.pool.end: %w", site.Name, err)
		}
	}
	return cfg, nil
}
