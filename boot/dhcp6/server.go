package dhcp6

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/server6"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/ipv6"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/boot/udpserve"
	"github.com/bootops/bootops/plan"
)

// Server answers DHCPv6 on UDP [::]:547, joined to
// All_DHCP_Relay_Agents_and_Servers (ff02::1:2) on Interface and bound to
// it (SO_BINDTODEVICE). The packets move through boot/udpserve, the core it
// shares with the DHCPv4 server.
type Server struct {
	// Interface is where it listens: "" binds to no interface and joins
	// no group (tests: unicast only).
	Interface string
	// Addr is where to listen (zero: [::]:547; tests: [::1] and a free port).
	Addr netip.AddrPort
	// BootServiceAddr is where, in proxy mode, UEFI PXE asks again for its
	// boot file after a proxy Advertise (zero: [::]:4011).
	BootServiceAddr netip.AddrPort

	// What it answers: the site of the live plan.
	Plans  boot.Plans
	Site   string
	Config Config

	// What it writes down (udpserve.Book).
	Events status.Recorder
	Log    *slog.Logger
	// Metrics counts what is dropped and when the pool runs out (nil:
	// nothing counted).
	Metrics *Metrics
	// Newcomers and Known bound the sightings of machines the status
	// store does not know, relayed or from the local link, as the DHCPv4
	// server does.
	Newcomers *status.Newcomers
	Known     func(key string) bool
	// Active, when set, says whether this server answers now (a site of
	// more than one daemon: the one holding its DHCP role).
	Active func() bool

	repeating atomic.Int64 // boot-service Replies with repeats pending
	bookOnce  sync.Once
	book      *udpserve.Book
}

// Metrics are the DHCPv6 server's Prometheus series. A nil *Metrics counts
// nothing.
type Metrics = udpserve.Metrics

// series are the DHCPv6 names of the core's series.
var series = udpserve.Series{
	Dropped: prometheus.CounterOpts{Name: "bootops_dhcp6_dropped_total",
		Help: "DHCPv6 packets dropped unanswered as invalid, by reason: malformed, not_client_message, no_client_id, server_id, bad_link_address, ia_in_information."},
	Exhausted: prometheus.CounterOpts{Name: "bootops_dhcp6_pool_exhausted_total",
		Help: "DHCPv6 clients that got no address because every address of the site's IPv6 pool is leased, by site."},
	Suppressed: prometheus.CounterOpts{Name: "bootops_dhcp6_events_suppressed_total",
		Help: "DHCPv6 replies sent but not written to the status store: a machine's same answer again within 5 s, or past 2,000 events a second."},
	QueueFull: prometheus.CounterOpts{Name: "bootops_dhcp6_queue_full_total",
		Help: "DHCPv6 packets read but dropped unanswered because the workers' queue was full (a burst beyond what the workers answer; the client retransmits)."},
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	s := series
	s.Reasons = DropReasons()
	return udpserve.NewMetrics(reg, s)
}

// books is the server's Book, made from its settings at first use.
func (s *Server) books() *udpserve.Book {
	s.bookOnce.Do(func() {
		s.book = &udpserve.Book{Name: "dhcp6", FullPrefix: "DHCPv6 ", Events: s.Events, Log: s.Log, Metrics: s.Metrics, Newcomers: s.Newcomers, Known: s.Known}
	})
	return s.book
}

// SuppressedEvents is how many replies were not recorded as status events.
func (s *Server) SuppressedEvents() uint64 { return s.books().Suppressed() }

// Serve answers until ctx ends. Without Config.ServerID it uses the
// DUID-LL of Interface.
func (s *Server) Serve(ctx context.Context) error {
	ifi, err := s.ready()
	if err != nil {
		return err
	}
	if s.Config.Mode == plan.DHCPReservation {
		s.Metrics.Site(s.Site)
	}
	addrs := []netip.AddrPort{s.Addr}
	if !s.Addr.IsValid() {
		addrs[0] = netip.AddrPortFrom(netip.IPv6Unspecified(), dhcpv6.DefaultServerPort)
	}
	if s.Config.Mode == plan.DHCPProxy {
		bs := s.BootServiceAddr
		if !bs.IsValid() {
			bs = netip.AddrPortFrom(netip.IPv6Unspecified(), 4011)
		}
		addrs = append(addrs, bs)
	}
	var socks []udpserve.Socket
	for i, addr := range addrs {
		conn, err := s.listen(addr, ifi, i == 0)
		if err != nil {
			udpserve.Close(socks)
			return err
		}
		bootService := i == 1
		socks = append(socks, udpserve.Socket{Conn: conn, First: s.registered, Metrics: s.Metrics, Active: s.Active,
			Handle: func(pkt []byte, peer netip.AddrPort) { s.answer(ctx, conn, bootService, pkt, peer) }})
	}
	return udpserve.Serve(ctx, "dhcp6", socks...)
}

// ready checks the Config and takes the server identifier from the
// interface when the Config has none; it returns the interface (nil
// without one).
func (s *Server) ready() (*net.Interface, error) {
	var ifi *net.Interface
	if s.Interface != "" {
		var err error
		if ifi, err = net.InterfaceByName(s.Interface); err != nil {
			return nil, fmt.Errorf("dhcp6: interface %s: %w", s.Interface, err)
		}
		if s.Config.ServerID == nil {
			if len(ifi.HardwareAddr) == 0 {
				return nil, fmt.Errorf("dhcp6: interface %s has no hardware address for a DUID-LL server identifier", s.Interface)
			}
			s.Config.ServerID = NewServerID(ifi.HardwareAddr)
		}
	}
	if s.Config.ServerID == nil {
		return nil, errors.New("dhcp6: no server identifier: give Config.ServerID or an Interface")
	}
	if s.Config.Mode != plan.DHCPProxy && s.Config.Mode != plan.DHCPReservation {
		return nil, fmt.Errorf("dhcp6: mode %q: want proxy or reservation (off: start no server)", s.Config.Mode)
	}
	return ifi, nil
}

// listen opens a socket on addr, bound to the interface, and joins
// All_DHCP_Relay_Agents_and_Servers on it when join (port 547) and there
// is an interface.
func (s *Server) listen(addr netip.AddrPort, ifi *net.Interface, join bool) (*net.UDPConn, error) {
	conn, err := server6.NewIPv6UDPConn(s.Interface, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("dhcp6: listen on %s: %w", addr, err)
	}
	if ifi != nil && join {
		group := &net.UDPAddr{IP: dhcpv6.AllDHCPRelayAgentsAndServers}
		if err := ipv6.NewPacketConn(conn).JoinGroup(ifi, group); err != nil {
			conn.Close()
			return nil, fmt.Errorf("dhcp6: join %s on %s: %w", group.IP, s.Interface, err)
		}
	}
	return conn, nil
}

// bootServiceRepeats are when a Reply on the boot-service port (4011) is
// sent again after the first. EDK2's PXE over IPv6 (PxeBcRequestBootService)
// sends its Request and only then opens the socket it reads the Reply on,
// for 3 s, and never asks again: a Reply that comes back before (a slow
// or busy machine; OVMF under a loaded host) is lost, and the firmware
// gives up with "PXE-E16: No valid offer received". The copies are the
// same message, so a client that got the first drops them; the last is
// 2 s after the first, so a client that opened its socket up to then
// still reads one within its 3 s.
var bootServiceRepeats = []time.Duration{250 * time.Millisecond, time.Second, 2 * time.Second}

// maxRepeating bounds the boot-service Replies whose repeats are pending;
// past it (a flood of Requests) a Reply is sent once.
const maxRepeating = 1024

// repeat sends b to dst again at bootServiceRepeats, unless ctx ends.
func (s *Server) repeat(ctx context.Context, conn *net.UDPConn, b []byte, dst netip.AddrPort) {
	if s.repeating.Add(1) > maxRepeating {
		s.repeating.Add(-1)
		return
	}
	go func() {
		defer s.repeating.Add(-1)
		start := time.Now()
		for _, d := range bootServiceRepeats {
			t := time.NewTimer(time.Until(start.Add(d)))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if _, err := conn.WriteToUDPAddrPort(b, dst); err != nil {
				return
			}
		}
	}()
}

// registered says whether a raw packet comes from a node the plan knows
// (by any MAC rawMACs finds): its packets take the first lane.
func (s *Server) registered(pkt []byte, peer netip.AddrPort) bool {
	p := s.Plans.Current()
	if p == nil {
		return false
	}
	for _, mac := range rawMACs(pkt, peer.Addr()) {
		if p.Registered(mac) {
			return true
		}
	}
	return false
}

// answer replies to one packet. On the boot-service port (bootService)
// Replies are repeated.
func (s *Server) answer(ctx context.Context, conn *net.UDPConn, bootService bool, pkt []byte, peer netip.AddrPort) {
	p, site := udpserve.Site(s.Plans, s.Site)
	if site == nil {
		return
	}
	book := s.books()
	a := Handle(p, site, s.Config, pkt, peer.Addr())
	switch {
	case a.Dropped != "":
		book.Dropped(a.Dropped, a.Why, peer)
		return
	case a.Exhausted:
		book.Exhausted(site.Name, a.Client.MAC, slog.String("client", a.Client.String()))
	}
	if a.Reply == nil && a.Refused {
		s.record(site.Name, a, peer) // not booted, and its timeline says why
		return
	}
	if a.Reply == nil {
		book.Logger().Debug("dhcp6: no answer", "client", a.Client.String(), "why", a.Why)
		return
	}
	dst := peer
	if a.Reply.IsRelay() {
		// RFC 8415 §19.3: Relay-Reply goes to the relay's port 547.
		dst = netip.AddrPortFrom(peer.Addr(), dhcpv6.DefaultServerPort)
	}
	b := a.Reply.ToBytes()
	if _, err := conn.WriteToUDPAddrPort(b, dst); err != nil {
		book.Logger().Warn("dhcp6: send", "to", dst.String(), "err", err)
		return
	}
	if bootService && !a.Reply.IsRelay() {
		s.repeat(ctx, conn, b, dst)
	}
	s.record(site.Name, a, peer)
}

// record writes the reply as a status event (kind dhcp, its message
// saying DHCPv6), within the event gate and the newcomers' budget.
func (s *Server) record(site string, a Answer, peer netip.AddrPort) {
	ev := status.Event{Kind: status.KindDHCP, Site: site, MAC: a.Client.MAC, UUID: a.UUID, State: status.StateDiscovered, Message: a.Why}
	if a.Refused {
		ev.State, ev.Error = status.StateMismatch, true
	}
	if a.Addr.IsValid() {
		ev.IP = a.Addr.String()
	}
	if a.Node != nil {
		ev.Node = a.Node.Name
	}
	s.books().Logger().Debug("dhcp6", "client", a.Client.String(), "node", ev.Node, "type", a.Type.String(), "addr", ev.IP, "boot", a.Boot, "peer", peer.String())
	if ev.MAC == "" && ev.UUID == "" && ev.Node == "" {
		return // nobody to put on a timeline
	}
	src := "link"
	if a.Reply != nil && a.Reply.IsRelay() {
		src = "relayed" // one budget: a relay's address is the sender's to make up
	}
	s.books().Record(ev, a.Client.Key, src)
}
