package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"golang.org/x/sync/errgroup"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// Server answers on port 67 and, in proxy mode, 4011: bound to 0.0.0.0
// (a socket bound to the interface's own address misses broadcast
// DISCOVERs) and to the interface with SO_BINDTODEVICE.
type Server struct {
	Plans     boot.Plans
	Site      string
	Config    Config
	Interface string // "" binds to no interface (tests)
	// Ports to listen on; default 67 and, in proxy mode, 4011.
	Ports  []int
	Events status.Recorder
	Log    *slog.Logger
}

// Serve answers until ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	ports := s.Ports
	if len(ports) == 0 {
		ports = []int{dhcpv4.ServerPort}
		if s.Config.Mode == plan.DHCPProxy {
			ports = append(ports, 4011)
		}
	}
	g, ctx := errgroup.WithContext(ctx)
	for _, port := range ports {
		conn, err := server4.NewIPv4UDPConn(s.Interface, &net.UDPAddr{Port: port})
		if err != nil {
			return fmt.Errorf("dhcp: listen on port %d: %w", port, err)
		}
		g.Go(func() error {
			<-ctx.Done()
			return conn.Close()
		})
		g.Go(func() error { return s.loop(ctx, conn, port) })
	}
	return g.Wait()
}

// Addr is the local address of a listening socket, for tests that listen
// on port 0.
func (s *Server) loop(ctx context.Context, conn *net.UDPConn, port int) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	buf := make([]byte, 4096)
	for {
		n, peer, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("dhcp: read: %w", err)
		}
		req, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			log.Debug("dhcp: bad packet", "peer", peer.String(), "err", err)
			continue
		}
		p := s.Plans.Current()
		if p == nil {
			continue
		}
		site := p.Site(s.Site)
		if site == nil {
			continue
		}
		a := Reply(p, site, s.Config, req, port)
		if a.Reply == nil {
			log.Debug("dhcp: no answer", "mac", req.ClientHWAddr.String(), "why", a.Why)
			continue
		}
		dst := destination(req, peer, port)
		if _, err := conn.WriteToUDPAddrPort(a.Reply.ToBytes(), dst); err != nil {
			log.Warn("dhcp: send", "to", dst.String(), "err", err)
			continue
		}
		ev := status.Event{Kind: status.KindDHCP, Site: site.Name, MAC: plan.NormalizeMAC(req.ClientHWAddr.String()), State: status.StateDiscovered, Message: a.Why}
		if a.Node != nil {
			ev.Node = a.Node.Name
		}
		if s.Events != nil {
			s.Events.Record(ev)
		}
		log.Info("dhcp", "mac", ev.MAC, "node", ev.Node, "type", a.Reply.MessageType().String(), "boot", a.Boot, "to", dst.String())
	}
}

// destination is where a reply goes: the relay, the client's address when
// it has one (and always for port 4011), or the broadcast address.
func destination(req *dhcpv4.DHCPv4, peer netip.AddrPort, port int) netip.AddrPort {
	if gi, ok := netip.AddrFromSlice(req.GatewayIPAddr.To4()); ok && !gi.IsUnspecified() {
		return netip.AddrPortFrom(gi, dhcpv4.ServerPort)
	}
	if port == 4011 || !peer.Addr().Unmap().IsUnspecified() {
		return peer
	}
	if ci, ok := netip.AddrFromSlice(req.ClientIPAddr.To4()); ok && !ci.IsUnspecified() {
		return netip.AddrPortFrom(ci, dhcpv4.ClientPort)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), dhcpv4.ClientPort)
}
