package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/prometheus/client_golang/prometheus"
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
	// Metrics counts what is dropped and when the pool runs out (nil:
	// nothing counted).
	Metrics *Metrics
	// Newcomers, when set, bounds how many machines the status store does
	// not know (Known) relayed requests, or the local link, may have recorded:
	// past it their replies still go, their sightings are not kept.
	Newcomers *status.Newcomers
	Known     func(key string) bool

	// lastFull is when the last pool-exhausted event was recorded (unix
	// ns), refused how many machines went without an address since.
	lastFull, refused atomic.Int64
	gateOnce          sync.Once
	gate              *status.EventGate
}

func (s *Server) events() *status.EventGate {
	s.gateOnce.Do(func() { s.gate = status.NewEventGate() })
	return s.gate
}

// SuppressedEvents is how many replies were not recorded as status events
// (a machine's same answer again within 5 s, or past 2,000 events a second).
func (s *Server) SuppressedEvents() uint64 { return s.events().Suppressed() }

// Metrics are the DHCP server's Prometheus series. A nil *Metrics counts
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
			Name: "bootops_dhcp_dropped_total",
			Help: "DHCP packets dropped unanswered as invalid, by reason: bad_hardware (not Ethernet), zero_mac, broadcast_mac, multicast_mac, malformed_option.",
		}, []string{"reason"}),
		exhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bootops_dhcp_pool_exhausted_total",
			Help: "Unknown machines that got no address because every address of the site's pool is leased, by site.",
		}, []string{"site"}),
		suppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bootops_dhcp_events_suppressed_total",
			Help: "DHCP replies sent but not written to the status store: a machine's same answer again within 5 s, or past 2,000 events a second (a flood must not become a flood of disk writes).",
		}),
	}
	reg.MustRegister(m.dropped, m.exhausted, m.suppressed)
	for _, r := range DropReasons() {
		m.dropped.WithLabelValues(r)
	}
	return m
}

// Site starts the site's exhaustion count at 0, so a dashboard shows the
// site before its pool ever runs out.
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

func (m *Metrics) site(site string) {
	if m != nil {
		m.exhausted.WithLabelValues(site)
	}
}

// fullEvery is the least time between two pool-exhausted events of a
// server: a flood must not flood the status store too.
const fullEvery = 10 * time.Second

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
		s.Metrics.site(s.Site) // the series exists before it counts
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
// behind one goroutine. A registered node's packets take the first lane
// (Lanes): a flood of unknown clients does not delay them.
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
	proxy := s.Config.Mode == plan.DHCPProxy
	work := NewLanes[packet](4096)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p, ok := work.Next(); ok; p, ok = work.Next() {
				s.answer(conn, port, p.buf, p.peer, log)
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
			return fmt.Errorf("dhcp: read: %w", err)
		}
		if proxy && !bootClient((*bp)[:n]) {
			pool.Put(bp) // not a boot client: proxy mode has nothing for it
			continue
		}
		node := false
		if p := s.Plans.Current(); p != nil {
			node = p.Registered(ClientMAC((*bp)[:n]))
		}
		if !work.Put(packet{(*bp)[:n], peer}, node) {
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
	if a.Dropped != "" {
		s.Metrics.drop(a.Dropped)
		log.Debug("dhcp: dropped", "reason", a.Dropped, "why", a.Why, "peer", peer.String())
		return
	}
	if a.Exhausted {
		s.full(site.Name, plan.NormalizeMAC(req.ClientHWAddr.String()), log)
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
	ev := status.Event{Kind: status.KindDHCP, Site: site.Name, MAC: plan.NormalizeMAC(req.ClientHWAddr.String()), State: status.StateDiscovered, Message: a.Why}
	if a.Node != nil {
		ev.Node = a.Node.Name
	}
	if s.Events != nil {
		if ev.Node == "" && s.Newcomers != nil && (s.Known == nil || !s.Known(ev.Key())) && !s.Newcomers.Allow(source(req)) {
			if s.Metrics != nil {
				s.Metrics.suppressed.Inc()
			}
		} else if s.events().Allow(ev.MAC+"|"+strconv.Itoa(port), ev.Message, time.Now()) {
			s.Events.Record(ev)
		} else if s.Metrics != nil {
			s.Metrics.suppressed.Inc()
		}
	}
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

// full counts a machine refused for want of an address, and says so in
// an event and the log, at most once per fullEvery.
func (s *Server) full(site, mac string, log *slog.Logger) {
	s.Metrics.exhaust(site)
	n := s.refused.Add(1)
	now := time.Now().UnixNano()
	last := s.lastFull.Load()
	if now-last < int64(fullEvery) || !s.lastFull.CompareAndSwap(last, now) {
		return
	}
	s.refused.Add(-n)
	msg := fmt.Sprintf("pool exhausted: no address for %s (%d refused since the last such event)", mac, n)
	log.Warn("dhcp: pool exhausted", "site", site, "mac", mac, "refused", n)
	if s.Events != nil {
		s.Events.Record(status.Event{Kind: status.KindDHCP, Site: site, MAC: mac, Message: msg, Error: true})
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
