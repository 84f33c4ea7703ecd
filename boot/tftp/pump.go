package tftp

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/ipv4"
)

// batch is how many datagrams one system call reads or writes.
const batch = 64

// pump drives many transfers over one UDP socket: one system call
// (recvmmsg) reads the ACKs that arrived from all its clients, the next
// (sendmmsg) sends the blocks they call for. The socket's port is the
// server's transfer ID (RFC 1350) for all of them; each client has its
// own port, which tells the transfers apart (dnsmasq's
// --tftp-single-port does the same on port 69).
type pump struct {
	l    *listener
	conn *net.UDPConn
	bc   *ipv4.PacketConn // batch I/O; works on IPv6 sockets too
	tick time.Duration    // how often deadlines are checked
	in   []ipv4.Message
	out  []ipv4.Message
	done chan struct{}
}

func newPump(l *listener, local netip.Addr, network string, tick time.Duration) (*pump, error) {
	var laddr *net.UDPAddr
	if local.IsValid() {
		laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)) // with its zone
	}
	conn, err := net.ListenUDP(network, laddr)
	if err != nil {
		return nil, err
	}
	p := &pump{l: l, conn: conn, bc: ipv4.NewPacketConn(conn), tick: tick, in: make([]ipv4.Message, batch), done: make(chan struct{})}
	for i := range p.in {
		p.in[i].Buffers = [][]byte{make([]byte, 516)} // an ACK, or an ERROR with its message
	}
	return p, nil
}

// run serves the pump's transfers until its socket is closed; the
// transfers still in flight then fail. Each turn reads a batch, and under
// the listener's lock moves the transfers it is for (receive) and, every
// tick, those whose deadline passed (expire); then it sends what they call
// for and finishes those that ended, the lock released.
func (p *pump) run() {
	defer close(p.done)
	var r round
	nextScan := time.Now().Add(p.tick)
	p.conn.SetReadDeadline(nextScan)
	for {
		n, err := p.bc.ReadBatch(p.in, 0)
		now := time.Now()
		if errors.Is(err, net.ErrClosed) {
			p.shutdown(r.ended[:0])
			return
		}
		if err != nil {
			n = 0
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				p.l.log.Debug("tftp: read", "err", err)
			}
		}
		r.out, r.ended, r.errs = p.out[:0], r.ended[:0], r.errs[:0]
		p.l.mu.Lock()
		p.receive(&r, p.in[:n], now)
		if !now.Before(nextScan) {
			p.expire(&r, now)
			nextScan = now.Add(p.tick)
			p.conn.SetReadDeadline(nextScan)
		}
		p.l.mu.Unlock()
		p.write(r.out)
		p.out = r.out[:0]
		for i, t := range r.ended {
			p.l.finish(t, r.errs[i])
		}
	}
}

// round is what one turn of run gathers under the listener's lock: the
// blocks to send, and the transfers that ended with why (errs[i] for
// ended[i]; nil: done). Its slices are reused turn after turn.
type round struct {
	out   []ipv4.Message
	ended []*transfer
	errs  []error
}

// end takes t, which ended with err, out of the active transfers.
// The listener's lock is held.
func (r *round) end(l *listener, t *transfer, err error) {
	delete(l.active, t.peer)
	r.ended = append(r.ended, t)
	r.errs = append(r.errs, err)
}

// receive moves this pump's transfers the datagrams in are for: the next
// window of blocks for one that moved, the end for one done or failed.
// Other datagrams are dropped. The listener's lock is held.
func (p *pump) receive(r *round, in []ipv4.Message, now time.Time) {
	for _, m := range in {
		a, ok := m.Addr.(*net.UDPAddr)
		if !ok {
			continue
		}
		peer := a.AddrPort()
		peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
		t := p.l.active[peer]
		if t == nil || t.pump != p {
			continue // a late packet of a transfer that ended, or a stranger's
		}
		moved, err := t.packet(m.Buffers[0][:m.N])
		switch {
		case err != nil:
		case !moved:
			continue
		case t.done():
		default:
			r.out = t.window(r.out, now)
			continue
		}
		r.end(p.l, t, err)
	}
}

// expire times out this pump's transfers whose deadline passed: each
// sends its window again, or ends. The listener's lock is held.
func (p *pump) expire(r *round, now time.Time) {
	for _, t := range p.l.active {
		if t.pump != p || now.Before(t.deadline) {
			continue
		}
		again, err := t.expired()
		if again {
			r.out = t.window(r.out, now)
			continue
		}
		r.end(p.l, t, err)
	}
}

// shutdown fails the pump's transfers still in flight, its socket closed;
// ended is scratch space.
func (p *pump) shutdown(ended []*transfer) {
	p.l.mu.Lock()
	for _, t := range p.l.active {
		if t.pump == p {
			delete(p.l.active, t.peer)
			ended = append(ended, t)
		}
	}
	p.l.mu.Unlock()
	for _, t := range ended {
		p.l.finish(t, errShutdown)
	}
}

// write sends ms, batch at a time. A message the kernel refuses (a
// route gone) is skipped: its transfer resends it on its timeout.
func (p *pump) write(ms []ipv4.Message) {
	for len(ms) > 0 {
		n, err := p.bc.WriteBatch(ms[:min(len(ms), batch)], 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			n = max(n, 0)
			p.l.log.Debug("tftp: send", "peer", ms[n].Addr.String(), "err", err)
			n++
		}
		ms = ms[n:]
	}
}
