package dhcp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/boot/udpserve"
	"github.com/bootops/bootops/plan"
)

// Server answers on port 67 and, in proxy mode, 4011: bound to 0.0.0.0
// (a socket bound to the interface's own address misses broadcast
// DISCOVERs) and to the interface with SO_BINDTODEVICE. The packets move
// through boot/udpserve, the core it shares with the DHCPv6 server.
type Server struct {
	Plans     boot.Plans
	Site      string
	Config    Config
	Interface string // "" binds to no interface (tests)
	// Ports to listen on; default 67 and, in proxy mode, 4011.
	Ports  []int
	Events status.Recorder
	Log    *slog.Logger
	// Metrics counts what is dropped and when the pool runs out (nil:
	// nothing counted).
	Metrics *Metrics
	// Newcomers, when set, bounds how many machines the status store does
	// not know (Known) relayed requests, or the local link, may have recorded:
	// past it their replies still go, their sightings are not kept.
	Newcomers *status.Newcomers
	Known     func(key string) bool
	// Active, when set, says whether this server answers now (a site of
	// more than one daemon: the one holding its DHCP role).
	Active func() bool

	bookOnce sync.Once
	book     *udpserve.Book
}

// books is the server's Book, made from its settings at first use.
func (s *Server) books() *udpserve.Book {
	s.bookOnce.Do(func() {
		s.book = &udpserve.Book{Name: "dhcp", Events: s.Events, Log: s.Log, Metrics: s.Metrics, Newcomers: s.Newcomers, Known: s.Known}
	})
	return s.book
}

// SuppressedEvents is how many replies were not recorded as status events
// (a machine's same answer again within 5 s, or past 2,000 events a second).
func (s *Server) SuppressedEvents() uint64 { return s.books().Suppressed() }

// Metrics are the DHCP server's Prometheus series. A nil *Metrics counts
// nothing.
type Metrics = udpserve.Metrics

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return udpserve.NewMetrics(reg, udpserve.Series{
		Dropped: prometheus.CounterOpts{
			Name: "bootops_dhcp_dropped_total",
			Help: "DHCP packets dropped unanswered as invalid, by reason: bad_hardware (not Ethernet), zero_mac, broadcast_mac, multicast_mac, malformed_option.",
		},
		Exhausted: prometheus.CounterOpts{
			Name: "bootops_dhcp_pool_exhausted_total",
			Help: "Unknown machines that got no address because every address of the site's pool is leased, by site.",
		},
		Suppressed: prometheus.CounterOpts{
			Name: "bootops_dhcp_events_suppressed_total",
			Help: "DHCP replies sent but not written to the status store: a machine's same answer again within 5 s, or past 2,000 events a second (a flood must not become a flood of disk writes).",
		},
		QueueFull: prometheus.CounterOpts{
			Name: "bootops_dhcp_queue_full_total",
			Help: "DHCP packets read but dropped unanswered because the workers' queue was full (a burst beyond what the workers answer; the client retransmits).",
		},
		Reasons: DropReasons(),
	})
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
	if s.Config.Mode == plan.DHCPReservation {
		s.Metrics.Site(s.Site) // the series exists before it counts
	}
	var accept func([]byte) bool
	if s.Config.Mode == plan.DHCPProxy {
		accept = bootClient // proxy mode has nothing for the rest
	}
	var socks []udpserve.Socket
	for _, port := range ports {
		conn, err := server4.NewIPv4UDPConn(s.Interface, &net.UDPAddr{Port: port})
		if err != nil {
			udpserve.Close(socks)
			return fmt.Errorf("dhcp: listen on port %d: %w", port, err)
		}
		socks = append(socks, udpserve.Socket{Conn: conn, Accept: accept, First: s.registered, Metrics: s.Metrics, Active: s.Active,
			Handle: func(pkt []byte, peer netip.AddrPort) { s.answer(conn, port, pkt, peer) }})
	}
	return udpserve.Serve(ctx, "dhcp", socks...)
}

// registered says a raw packet comes from a node the plan knows: its
// packets take the first lane.
func (s *Server) registered(pkt []byte, _ netip.AddrPort) bool {
	p := s.Plans.Current()
	return p != nil && p.Registered(ClientMAC(pkt))
}

// answer replies to one packet.
func (s *Server) answer(conn *net.UDPConn, port int, pkt []byte, peer netip.AddrPort) {
	book := s.books()
	log := book.Logger()
	req, err := dhcpv4.FromBytes(pkt)
	if err != nil {
		log.Debug("dhcp: bad packet", "peer", peer.String(), "err", err)
		return
	}
	p, site := udpserve.Site(s.Plans, s.Site)
	if site == nil {
		return
	}
	a := Reply(p, site, s.Config, req, port)
	mac := plan.NormalizeMAC(req.ClientHWAddr.String())
	switch {
	case a.Dropped != "":
		book.Dropped(a.Dropped, a.Why, peer)
		return
	case a.Exhausted:
		book.Exhausted(site.Name, mac, slog.String("mac", mac))
	}
	if a.Refused && a.Reply == nil {
		// Not booted, and its timeline says why.
		book.Record(status.Event{Kind: status.KindDHCP, Site: site.Name, MAC: mac, Node: a.nodeName(), State: status.StateMismatch, Error: true, Message: a.Why},
			mac+"|refused", source(req))
		return
	}
	if a.Reply == nil {
		log.Debug("dhcp: no answer", "mac", req.ClientHWAddr.String(), "why", a.Why)
		return
	}
	dst := destination(req, peer, port)
	if _, err := conn.WriteToUDPAddrPort(a.Reply.ToBytes(), dst); err != nil {
		log.Warn("dhcp: send", "to", dst.String(), "err", err)
		return
	}
	ev := status.Event{Kind: status.KindDHCP, Site: site.Name, MAC: mac, State: status.StateDiscovered, Message: a.Why, Node: a.nodeName()}
	if a.Refused {
		ev.State, ev.Error = status.StateMismatch, true
	}
	book.Record(ev, ev.MAC+"|"+strconv.Itoa(port), source(req))
	// One line per reply would cost more than the reply: events keep them.
	log.Debug("dhcp", "mac", ev.MAC, "node", ev.Node, "type", a.Reply.MessageType().String(), "boot", a.Boot, "to", dst.String())
}

// source is who a request came through, for the newcomers' budget: one
// budget for every relayed request, another for the local link. Neither
// key is the sender's to choose: a relay's address (giaddr, or the UDP
// source) is, so a budget per relay address would let one host on the link
// mint as many budgets as it makes up relays.
func source(req *dhcpv4.DHCPv4) string {
	if gi := req.GatewayIPAddr.To4(); gi != nil && !gi.IsUnspecified() {
		return "relayed"
	}
	return "link"
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
