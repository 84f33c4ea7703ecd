package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/dhcp"
	"github.com/bootops/bootops/boot/dhcp6"
	"github.com/bootops/bootops/boot/floatip"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/boot/tftp"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/sitecluster"
)

// bootPlane is what DHCP and TFTP serve from and report to.
type bootPlane struct {
	plans    boot.Plans
	events   status.Recorder
	httpSrv  *bhttp.Server
	httpAddr string
	metrics  *dhcp.Metrics
	metrics6 *dhcp6.Metrics
	pools    *leasePools
	log      *slog.Logger
	// tftp6: a TFTP listener takes IPv6 (DHCPv6 then hands PXE clients a
	// tftp:// URL).
	tftp6 bool
	// binaries are the iPXE builds served (nil: none).
	binaries tftp.Files
	// member, in a site of more than one daemon: its DHCP answers come
	// from the one member holding the site's DHCP role (nil: this one).
	member *sitecluster.Member
}

// dhcpRole is whether this daemon answers a site's DHCP now: always for a
// site's one daemon; in a cluster, while it holds the site's DHCP role —
// and then, for the IPv4 role, it holds the site's server address (float,
// when valid) on iface too (boot/floatip).
func (b *bootPlane) dhcpRole(ctx context.Context, site, iface string, v6 bool, float netip.Addr) func() bool {
	if b.member == nil {
		return nil
	}
	role, dhcp := "dhcp."+site, "DHCP"
	if v6 {
		role, dhcp = role+".6", "DHCPv6"
	}
	if float.IsValid() {
		if err := floatip.Give(iface, float); err != nil { // left by a crash: not ours until the role is
			b.log.Warn("cluster: the site's address", "site", site, "address", float, "err", err)
		}
	}
	r := b.member.Campaign(ctx, role, func(active bool) {
		switch {
		case active && float.IsValid():
			if err := floatip.Take(iface, float); err != nil {
				b.log.Error("cluster: this member answers the site's "+dhcp+", and could not take its address", "site", site, "address", float, "interface", iface, "err", err)
				return
			}
			b.log.Info("cluster: this member answers the site's "+dhcp+" now, at the site's address", "site", site, "address", float, "interface", iface)
		case active:
			b.log.Info("cluster: this member answers the site's "+dhcp+" now", "site", site)
		case float.IsValid():
			if err := floatip.Give(iface, float); err != nil {
				b.log.Error("cluster: could not give the site's address back", "site", site, "address", float, "err", err)
			}
			b.log.Info("cluster: this member stopped answering the site's "+dhcp+" (another member holds it)", "site", site)
		default:
			b.log.Info("cluster: this member stopped answering the site's "+dhcp, "site", site)
		}
	})
	go func() {
		// While it holds the role, the member says again every
		// reannounce that it holds the address.
		t := time.NewTicker(reannounce)
		defer t.Stop()
		for {
			select {
			case <-r.Done(): // the daemon stops: the address goes with the role
				if float.IsValid() {
					floatip.Give(iface, float)
				}
				return
			case <-t.C:
				if float.IsValid() && r.Active() {
					if err := floatip.Announce(iface, float); err != nil {
						b.log.Debug("cluster: announcing the site's address again", "site", site, "address", float, "err", err)
					}
				}
			}
		}
	}()
	return r.Active
}

// servedSites are the first Plan's sites this daemon serves.
func servedSites(names []string, p *plan.Plan) []*plan.Site {
	if len(names) == 0 {
		return p.Sites // every site: each one's DHCP on its own interface
	}
	var sites []*plan.Site
	for _, n := range names {
		if s := p.Site(n); s != nil {
			sites = append(sites, s)
		}
	}
	return sites
}

// start starts TFTP and DHCP for the sites served.
func (b *bootPlane) start(ctx context.Context, g *errgroup.Group, cfg Config, p *plan.Plan) error {
	sites := servedSites(cfg.Source.Sites, p)
	// The iPXE builds are needed for TFTP and for UEFI HTTP boot (GET
	// /tftp/…), which DHCPv4 and DHCPv6 offer.
	dhcpSites, needBinaries := 0, cfg.TFTP.Addr != ""
	for _, s := range sites {
		if mode(cfg.DHCP, s) != plan.DHCPOff {
			dhcpSites++
		}
		needBinaries = needBinaries || mode(cfg.DHCP, s) != plan.DHCPOff || servesDHCP6(cfg.DHCP, s)
	}
	if dhcpSites > 1 && cfg.DHCP.Interface != "" {
		return configErrf("--interface names one network, but %d sites need DHCP: pick one with --site, or set network.interface in each site", dhcpSites)
	}
	for _, s := range sites {
		if (mode(cfg.DHCP, s) != plan.DHCPOff && s.Network.ServerAddress != "") || servesDHCP6(cfg.DHCP, s) {
			if err := checkInterface(s.Name, dhcpInterface(cfg.DHCP, s)); err != nil {
				return err
			}
		}
	}
	if needBinaries {
		var err error
		if b.binaries, err = loadBinaries(cfg.TFTP, b.log); err != nil {
			return err
		}
		b.httpSrv.Files.Binaries = b.binaries
	}
	var tftpAddrs []string
	for _, a := range Addrs(cfg.TFTP.Addr) {
		conn, err := net.ListenPacket(udpNetwork(a), a)
		if err != nil {
			return fmt.Errorf("%w (--tftp-addr \"\": no TFTP)", listenErr("tftp-addr", a, err))
		}
		tftpAddrs = append(tftpAddrs, conn.LocalAddr().String())
		ts := &tftp.Server{Files: b.binaries, Dynamic: b.httpSrv.TFTPFile, Events: b.events, Log: b.log, DrainTimeout: cfg.DrainTimeout}
		g.Go(func() error { return ts.Serve(ctx, conn) })
	}
	tftpAddr := strings.Join(tftpAddrs, ",")
	b.tftp6 = servesIPv6(tftpAddrs)
	// DHCP's sightings of machines new to the store: a whole link (or
	// relay) shares one budget, so it is 50 times an address's.
	newcomers := &status.Newcomers{Burst: 50 * cfg.HTTP.NewBurst, Every: cfg.HTTP.NewEvery / 50}
	for _, site := range sites {
		iface, err := b.serveSite(ctx, g, cfg, site, newcomers)
		if err != nil {
			return err
		}
		b.log.Info("serving", "site", site.Name, "plan", p.Hash, "http", b.httpAddr, "tftp", tftpAddr, "dhcp", mode(cfg.DHCP, site), "interface", iface)
	}
	return nil
}

// serveSite starts the site's DHCP server, unless its DHCP is off; it
// returns the interface it serves.
func (b *bootPlane) serveSite(ctx context.Context, g *errgroup.Group, cfg Config, site *plan.Site, newcomers *status.Newcomers) (string, error) {
	m := mode(cfg.DHCP, site)
	switch m {
	case plan.DHCPProxy, plan.DHCPReservation, plan.DHCPOff:
	default:
		return "", configErrf("--dhcp %q: want proxy, reservation or off", m)
	}
	b.metrics.Site(site.Name)
	iface := dhcpInterface(cfg.DHCP, site)
	if m != plan.DHCPOff && site.Network.ServerAddress == "" {
		// An IPv6-only site: nothing to answer over DHCPv4.
		b.log.Warn("site has no IPv4 serverAddress: no DHCPv4 for it", "site", site.Name, "dhcp", m)
	} else if m != plan.DHCPOff {
		serverIP, err := netip.ParseAddr(site.Network.ServerAddress)
		if err != nil {
			return "", fmt.Errorf("site %s: network.serverAddress: %w", site.Name, err)
		}
		pool := b.pools.get("leases-" + site.Name + ".json")
		ds := &dhcp.Server{Plans: b.plans, Site: site.Name, Interface: iface, Events: b.events, Log: b.log, Metrics: b.metrics,
			Newcomers: newcomers, Known: b.httpSrv.Machines.Known, Active: b.dhcpRole(ctx, site.Name, iface, false, serverIP),
			Config: dhcp.Config{ServerIP: serverIP, HTTPPort: site.Network.HTTPPort, Mode: m, Leases: pool}}
		g.Go(func() error {
			if err := ds.Serve(ctx); err != nil {
				return dhcpErr(site.Name, iface, err)
			}
			return nil
		})
	}
	if n := site.Network.IPv6; servesDHCP6(cfg.DHCP, site) {
		pool6 := b.pools.get("leases6-" + site.Name + ".json")
		c6, err := dhcp6.SiteConfig(site, b.tftp6, pool6)
		if err != nil {
			return "", err
		}
		b.metrics6.Site(site.Name)
		ds6 := &dhcp6.Server{Plans: b.plans, Site: site.Name, Interface: iface, Config: c6, Events: b.events, Log: b.log,
			Metrics: b.metrics6, Newcomers: newcomers, Known: b.httpSrv.Machines.Known, Active: b.dhcpRole(ctx, site.Name, iface, true, float6(n.ServerAddress))}
		g.Go(func() error { return ds6.Serve(ctx) })
		b.log.Info("serving DHCPv6", "site", site.Name, "dhcp6", n.DHCP, "server", n.ServerAddress, "tftp", b.tftp6)
		if _, ok := b.binaries.Lookup(dhcp6.UEFIFile); !ok {
			b.log.Warn("DHCPv6 offers x86 UEFI machines "+dhcp6.UEFIFile+", and --ipxe-dir has none: they will not boot over IPv6 (Debian's ipxe package has it)",
				"site", site.Name, "ipxe_dir", cfg.TFTP.IPXEDir)
		}
	}
	if site.TLS() && !httpsPortServed(cfg.HTTP.HTTPSAddr, site.Network.HTTPSPort) {
		b.log.Warn("site wants TLS, and no --https-addr serves its port: its agents cannot check in", "site", site.Name, "https_port", site.Network.HTTPSPort, "https_addr", cfg.HTTP.HTTPSAddr)
	}
	return iface, nil
}

// loadBinaries reads the iPXE binaries and, when Debian's packages are
// there, the shim chain's first stages.
func loadBinaries(cfg TFTPConfig, log *slog.Logger) (tftp.Files, error) {
	binaries, err := tftp.Load(cfg.IPXEDir)
	if err != nil {
		return nil, err
	}
	for name, file := range map[string]string{dhcp.ShimFile: cfg.Shim, dhcp.GRUBFile: cfg.GRUB, dhcp.ShimARM64File: cfg.ShimARM64, dhcp.GRUBARM64File: cfg.GRUBARM64} {
		if file == "" {
			continue
		}
		if b, err := os.ReadFile(file); err == nil {
			binaries[name] = b
		} else {
			log.Debug("shim chain", "file", file, "err", err)
		}
	}
	return binaries, nil
}

// servesDHCP6 says whether the daemon answers DHCPv6 for the site.
func servesDHCP6(cfg DHCPConfig, s *plan.Site) bool {
	n := s.Network.IPv6
	return n != nil && (n.DHCP == plan.DHCPProxy || n.DHCP == plan.DHCPReservation) && cfg.Mode != plan.DHCPOff
}

// dhcpInterface is the network interface the site's DHCP serves.
func dhcpInterface(cfg DHCPConfig, s *plan.Site) string {
	if cfg.Interface != "" {
		return cfg.Interface
	}
	return s.Network.Interface
}

func mode(cfg DHCPConfig, s *plan.Site) string {
	if cfg.Mode != "" {
		return cfg.Mode
	}
	return s.Network.DHCP
}

// servesIPv6 says whether one of the listeners' addresses takes IPv6.
func servesIPv6(addrs []string) bool {
	for _, a := range addrs {
		if ap, err := netip.ParseAddrPort(a); err == nil && ap.Addr().Is6() && !ap.Addr().Is4In6() {
			return true
		}
	}
	return false
}

// reannounce is how often the member holding a site's address announces
// it again (floatip.Announce).
const reannounce = 5 * time.Second

// float6 is a site's IPv6 server address as the member answering its
// DHCPv6 holds it: a global address (the site's own link-local one, if
// any, is each member's and does not move).
func float6(s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() || a.IsLinkLocalUnicast() {
		return netip.Addr{}
	}
	return a
}
