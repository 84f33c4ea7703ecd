package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"

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

// loop reads packets and hands them to a worker per core: a reply costs
// more than a read, and a burst of a thousand machines must not queue
// behind one goroutine.
func (s *Server) loop(ctx context.Context, conn *net.UDPConn, port int) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Room for a burst while the workers catch up.
	_ = conn.SetReadBuffer(8 << 20)
	type packet struct {
		buf  []byte
		peer netip.AddrPort
	}
	pool := sync.Pool{New: func() any { b := make([]byte, 1500); return &b }}
	work := make(chan packet, 4096)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				s.answer(conn, port, p.buf, p.peer, log)
				b := p.buf[:cap(p.buf)]
				pool.Put(&b)
			}
		}()
	}
	defer func() {
		close(work)
		wg.Wait()
	}()
	for {
		bp := pool.Get().(*[]byte)
		n, peer, err := conn.ReadFromUDPAddrPort(*bp)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("dhcp: read: %w", err)
		}
		select {
		case work <- packet{(*bp)[:n], peer}:
		default:
			// Full: drop it here rather than grow without bound; the
			// client retransmits.
			pool.Put(bp)
		}
	}
}

// answer replies to one packet.
func (s *Server) answer(conn *net.UDPConn, port int, pkt []byte, peer netip.AddrPort, log *slog.Logger) {
	req, err := dhcpv4.FromBytes(pkt)
	if err != nil {
		log.Debug("dhcp: bad packet", "peer", peer.String(), "err", err)
		return
	}
	p := s.Plans.Current()
	if p == nil {
		return
	}
	site := p.Site(s.Site)
	if site == nil {
		return
	}
	a := Reply(p, site, s.Config, req, port)
	if a.Reply == nil {
		log.Debug("dhcp: no answer", "mac", req.ClientHWAddr.String(), "why", a.Why)
		return
	}
	dst := destination(req, peer, port)
	if _, err := conn.WriteToUDPAddrPort(a.Reply.ToBytes(), dst); err != nil {
		log.Warn("dhcp: send", "to", dst.String(), "err", err)
		return
	}
	ev := status.Event{Kind: status.KindDHCP, Site: site.Name, MAC: plan.NormalizeMAC(req.ClientHWAddr.String()), State: status.StateDiscovered, Message: a.Why}
	if a.Node != nil {
		ev.Node = a.Node.Name
	}
	if s.Events != nil {
		s.Events.Record(ev)
	}
	// One line per reply would cost more than the reply: events keep them.
	log.Debug("dhcp", "mac", ev.MAC, "node", ev.Node, "type", a.Reply.MessageType().String(), "boot", a.Boot, "to", dst.String())
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
