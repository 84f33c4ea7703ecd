// Package udpserve is the serving core both DHCP servers (boot/dhcp,
// boot/dhcp6) plug their answers into. It moves the packets: sockets read
// into pooled buffers, a bounded queue in two lanes (a registered node's
// packets first), a worker per core, and what does not fit dropped at once
// (the client retransmits). And it keeps the books both servers keep the
// same way (Book): the Prometheus series of dropped packets and pool
// exhaustion, a throttled pool-exhausted event, and the status events of
// replies within the event gate and the newcomers' budget. It knows
// neither protocol: it imports neither boot/dhcp nor boot/dhcp6.
package udpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/plan"
)

// Socket is one listening socket and what to do with its packets.
type Socket struct {
	Conn *net.UDPConn
	// Accept, when set, says whether a packet is worth a worker at all:
	// the rest is dropped as it is read, before any allocation (proxy
	// mode keeps only boot clients' packets).
	Accept func(pkt []byte) bool
	// First, when set, says a packet takes the first lane: a node the
	// plan knows, answered before a flood of unknown clients.
	First func(pkt []byte, peer netip.AddrPort) bool
	// Handle answers one packet, on a worker. pkt is the core's buffer,
	// valid only during the call.
	Handle func(pkt []byte, peer netip.AddrPort)
	// Metrics count the packets the queue had no room for (nil: none).
	Metrics *Metrics
	// Active, when set, says whether this server answers now: a site of
	// more than one daemon answers from one (sitecluster's role); the
	// others drop what they read.
	Active func() bool
}

// The queue and the buffers.
const (
	laneLen    = 4096    // packets per lane
	packetSize = 1500    // an Ethernet MTU: DHCP packets are not fragmented
	readBuffer = 8 << 20 // the socket's room for a burst while the workers catch up
)

// Serve reads every socket until ctx ends, then closes them; name ("dhcp",
// "dhcp6") begins its errors. A read error other than the close ends
// them all.
func Serve(ctx context.Context, name string, socks ...Socket) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, s := range socks {
		g.Go(func() error {
			<-ctx.Done()
			return s.Conn.Close()
		})
		g.Go(func() error { return s.loop(ctx, name) })
	}
	return g.Wait()
}

// Close closes the sockets of a server that fails before it serves them.
func Close(socks []Socket) {
	for _, s := range socks {
		s.Conn.Close()
	}
}

// packet is a read packet and its sender, queued for a worker.
type packet struct {
	buf  []byte
	peer netip.AddrPort
}

// loop reads packets and hands them to a worker per core: an answer costs
// more than a read, and a burst of a thousand machines must not queue
// behind one goroutine. Once ctx ends what is queued goes unanswered.
func (s Socket) loop(ctx context.Context, name string) error {
	_ = s.Conn.SetReadBuffer(readBuffer)
	bufs := sync.Pool{New: func() any { b := make([]byte, packetSize); return &b }}
	work := NewLanes[packet](laneLen)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for p, ok := work.Next(); ok; p, ok = work.Next() {
				if ctx.Err() == nil {
					s.Handle(p.buf, p.peer)
				}
				b := p.buf[:cap(p.buf)]
				bufs.Put(&b)
			}
		})
	}
	defer func() {
		work.Close()
		wg.Wait()
	}()
	for {
		bp := bufs.Get().(*[]byte)
		n, peer, err := s.Conn.ReadFromUDPAddrPort(*bp)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("%s: read: %w", name, err)
		}
		pkt := (*bp)[:n]
		if s.Active != nil && !s.Active() || s.Accept != nil && !s.Accept(pkt) {
			bufs.Put(bp)
			continue
		}
		if !work.Put(packet{pkt, peer}, s.First != nil && s.First(pkt, peer)) {
			// Full: dropped here rather than grow without bound, and
			// counted; the client retransmits.
			s.Metrics.full()
			bufs.Put(bp)
		}
	}
}

// Site is the live plan and its site name, which a packet is answered
// from; nil before the first plan, or when the plan has no such site:
// then there is nothing to answer.
func Site(plans boot.Plans, name string) (*plan.Plan, *plan.Site) {
	p := plans.Current()
	if p == nil {
		return nil, nil
	}
	return p, p.Site(name)
}
