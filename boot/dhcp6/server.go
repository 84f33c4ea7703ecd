package dhcp6

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/server6"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/ipv6"
	"golang.org/x/sync/errgroup"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/dhcp"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// Server answers DHCPv6 on UDP [::]:547, joined to
// All_DHCP_Relay_Agents_and_Servers (ff02::1:2) on Interface and bound to
// it (SO_BINDTODEVICE).
type Server struct {
	Plans     boot.Plans
	Site      string
	Config    Config
	Interface string // "" binds to no interface and joins no group (tests: unicast only)
	// Addr is where to listen (zero: [::]:547; tests: [::1] and a free port).
	Addr netip.AddrPort
	// BootServiceAddr is where, in proxy mode, UEFI PXE asks again for its
	// boot file after a proxy Advertise (zero: [::]:4011).
	BootServiceAddr netip.AddrPort
	Events          status.Recorder
	Log             *slog.Logger
	// Metrics counts what is dropped and when the pool runs out (nil:
	// nothing counted).
	Metrics *Metrics
	// Newcomers and Known bound the sightings of machines the status
	// store does not know, relayed or from the local link, as the DHCPv4
	// server does.
	Newcomers *status.Newcomers
	Known     func(key string) bool

	lastFull, refused atomic.Int64
	repeating         atomic.Int64 // boot-service Replies with repeats pending
	gateOnce          sync.Once
	gate              *status.EventGate
}

// Metrics are the DHCPv6 server's Prometheus series. A nil *Metrics counts
// nothing.
type Metrics struct {
	dropped    *prometheus.CounterVec
	exhausted  *prometheus.CounterVec
	suppressed prometheus.Counter
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bootops_dhcp6_dropped_total",
			Help: "DHCPv6 packets dropped unanswered as invalid, by reason: malformed, not_client_message, no_client_id, server_id, bad_link_address, ia_in_information.",
		}, []string{"reason"}),
		exhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bootops_dhcp6_pool_exhausted_total",
			Help: "DHCPv6 clients that got no address because every address of the site's IPv6 pool is leased, by site.",
		}, []string{"site"}),
		suppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bootops_dhcp6_events_suppressed_total",
			Help: "DHCPv6 replies sent but not written to the status store: a machine's same answer again within 5 s, or past 2,000 events a second.",
		}),
	}
	reg.MustRegister(m.dropped, m.exhausted, m.suppressed)
	for _, r := range DropReasons() {
		m.dropped.WithLabelValues(r)
	}
	return m
}

// Site starts the site's exhaustion count at 0.
func (m *Metrics) Site(name string) {
	if m != nil {
		m.exhausted.WithLabelValues(name)
	}
}

func (m *Metrics) drop(reason string) {
	if m != nil {
		m.dropped.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) exhaust(site string) {
	if m != nil {
		m.exhausted.WithLabelValues(site).Inc()
	}
}

func (m *Metrics) suppress() {
	if m != nil {
		m.suppressed.Inc()
	}
}

// fullEvery is the least time between two pool-exhausted events.
const fullEvery = 10 * time.Second

func (s *Server) events() *status.EventGate {
	s.gateOnce.Do(func() { s.gate = status.NewEventGate() })
	return s.gate
}

// Serve answers until ctx ends. Without Config.ServerID it uses the
// DUID-LL of Interface.
func (s *Server) Serve(ctx context.Context) error {
	addr := s.Addr
	if !addr.IsValid() {
		addr = netip.AddrPortFrom(netip.IPv6Unspecified(), dhcpv6.DefaultServerPort)
	}
	var ifi *net.Interface
	if s.Interface != "" {
		var err error
		if ifi, err = net.InterfaceByName(s.Interface); err != nil {
			return fmt.Errorf("dhcp6: interface %s: %w", s.Interface, err)
		}
		if s.Config.ServerID == nil {
			if len(ifi.HardwareAddr) == 0 {
				return fmt.Errorf("dhcp6: interface %s has no hardware address for a DUID-LL server identifier", s.Interface)
			}
			s.Config.ServerID = NewServerID(ifi.HardwareAddr)
		}
	}
	if s.Config.ServerID == nil {
		return errors.New("dhcp6: no server identifier: give Config.ServerID or an Interface")
	}
	if s.Config.Mode != plan.DHCPProxy && s.Config.Mode != plan.DHCPReservation {
		return fmt.Errorf("dhcp6: mode %q: want proxy or reservation (off: start no server)", s.Config.Mode)
	}
	if s.Config.Mode == plan.DHCPReservation {
		s.Metrics.Site(s.Site)
	}
	conn, err := server6.NewIPv6UDPConn(s.Interface, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return fmt.Errorf("dhcp6: listen on %s: %w", addr, err)
	}
	conns := []*net.UDPConn{conn}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if ifi != nil {
		group := &net.UDPAddr{IP: dhcpv6.AllDHCPRelayAgentsAndServers}
		if err := ipv6.NewPacketConn(conn).JoinGroup(ifi, group); err != nil {
			return fmt.Errorf("dhcp6: join %s on %s: %w", group.IP, s.Interface, err)
		}
	}
	if s.Config.Mode == plan.DHCPProxy {
		bs := s.BootServiceAddr
		if !bs.IsValid() {
			bs = netip.AddrPortFrom(netip.IPv6Unspecified(), 4011)
		}
		c, err := server6.NewIPv6UDPConn(s.Interface, net.UDPAddrFromAddrPort(bs))
		if err != nil {
			return fmt.Errorf("dhcp6: listen on %s: %w", bs, err)
		}
		conns = append(conns, c)
	}
	g, ctx := errgroup.WithContext(ctx)
	for i, c := range conns {
		g.Go(func() error {
			<-ctx.Done()
			return c.Close()
		})
		g.Go(func() error { return s.loop(ctx, c, i == 1) }) // conns[1]: the boot-service port
	}
	return g.Wait()
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

// loop reads packets and hands them to a worker per core, dropping what
// does not fit the queue (the client retransmits); a registered node's
// packets take the first lane (dhcp.Lanes), so a flood of unknown clients
// does not delay them. On the boot-service port (bootService) Replies are
// repeated.
func (s *Server) loop(ctx context.Context, conn *net.UDPConn, bootService bool) error {
	log := s.log()
	_ = conn.SetReadBuffer(8 << 20)
	type packet struct {
		buf  []byte
		peer netip.AddrPort
	}
	pool := sync.Pool{New: func() any { b := make([]byte, 1500); return &b }}
	work := dhcp.NewLanes[packet](4096)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p, ok := work.Next(); ok; p, ok = work.Next() {
				if ctx.Err() == nil { // stopping: what is queued goes unanswered
					s.answer(ctx, conn, bootService, p.buf, p.peer, log)
				}
				b := p.buf[:cap(p.buf)]
				pool.Put(&b)
			}
		}()
	}
	defer func() {
		work.Close()
		wg.Wait()
	}()
	for {
		bp := pool.Get().(*[]byte)
		n, peer, err := conn.ReadFromUDPAddrPort(*bp)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("dhcp6: read: %w", err)
		}
		if !work.Put(packet{(*bp)[:n], peer}, s.registered((*bp)[:n], peer.Addr())) {
			pool.Put(bp)
		}
	}
}

// registered says whether a raw packet comes from a node the plan knows
// (by any MAC rawMACs finds).
func (s *Server) registered(pkt []byte, peer netip.Addr) bool {
	p := s.Plans.Current()
	if p == nil {
		return false
	}
	for _, mac := range rawMACs(pkt, peer) {
		if p.Registered(mac) {
			return true
		}
	}
	return false
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// answer replies to one packet.
func (s *Server) answer(ctx context.Context, conn *net.UDPConn, bootService bool, pkt []byte, peer netip.AddrPort, log *slog.Logger) {
	p := s.Plans.Current()
	if p == nil {
		return
	}
	site := p.Site(s.Site)
	if site == nil {
		return
	}
	a := Handle(p, site, s.Config, pkt, peer.Addr())
	if a.Dropped != "" {
		s.Metrics.drop(a.Dropped)
		log.Debug("dhcp6: dropped", "reason", a.Dropped, "why", a.Why, "peer", peer.String())
		return
	}
	if a.Exhausted {
		s.full(site.Name, a.Client, log)
	}
	if a.Reply == nil {
		log.Debug("dhcp6: no answer", "client", a.Client.String(), "why", a.Why)
		return
	}
	dst := peer
	if a.Reply.IsRelay() {
		// RFC 8415 §19.3: Relay-Reply goes to the relay's port 547.
		dst = netip.AddrPortFrom(peer.Addr(), dhcpv6.DefaultServerPort)
	}
	b := a.Reply.ToBytes()
	if _, err := conn.WriteToUDPAddrPort(b, dst); err != nil {
		log.Warn("dhcp6: send", "to", dst.String(), "err", err)
		return
	}
	if bootService && !a.Reply.IsRelay() {
		s.repeat(ctx, conn, b, dst)
	}
	s.record(site.Name, a, peer, log)
}

// record writes the reply as a status event (kind dhcp, its message
// saying DHCPv6), within the event gate and the newcomers' budget.
func (s *Server) record(site string, a Answer, peer netip.AddrPort, log *slog.Logger) {
	ev := status.Event{Kind: status.KindDHCP, Site: site, MAC: a.Client.MAC, UUID: a.UUID, State: status.StateDiscovered, Message: a.Why}
	if a.Addr.IsValid() {
		ev.IP = a.Addr.String()
	}
	if a.Node != nil {
		ev.Node = a.Node.Name
	}
	log.Debug("dhcp6", "client", a.Client.String(), "node", ev.Node, "type", a.Type.String(), "addr", ev.IP, "boot", a.Boot, "peer", peer.String())
	if s.Events == nil || ev.MAC == "" && ev.UUID == "" && ev.Node == "" {
		return // nobody to put on a timeline
	}
	src := "link"
	if a.Reply.IsRelay() {
		src = "relayed" // one budget: a relay's address is the sender's to make up
	}
	switch {
	case ev.Node == "" && s.Newcomers != nil && (s.Known == nil || !s.Known(ev.Key())) && !s.Newcomers.Allow(src):
		s.Metrics.suppress()
	case s.events().Allow(a.Client.Key, ev.Message, time.Now()):
		s.Events.Record(ev)
	default:
		s.Metrics.suppress()
	}
}

// full counts a machine refused for want of an address and says so, at
// most once per fullEvery.
func (s *Server) full(site string, c Client, log *slog.Logger) {
	s.Metrics.exhaust(site)
	n := s.refused.Add(1)
	now := time.Now().UnixNano()
	last := s.lastFull.Load()
	if now-last < int64(fullEvery) || !s.lastFull.CompareAndSwap(last, now) {
		return
	}
	s.refused.Add(-n)
	msg := fmt.Sprintf("DHCPv6 pool exhausted: no address for %s (%d refused since the last such event)", c, n)
	log.Warn("dhcp6: pool exhausted", "site", site, "client", c.String(), "refused", n)
	if s.Events != nil {
		s.Events.Record(status.Event{Kind: status.KindDHCP, Site: site, MAC: c.MAC, Message: msg, Error: true})
	}
}

// SuppressedEvents is how many replies were not recorded as status events.
func (s *Server) SuppressedEvents() uint64 { return s.events().Suppressed() }
