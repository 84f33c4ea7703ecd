package tftp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/bootops/bootops/boot/status"
)

// Server is the TFTP server: read requests only (RFC 1350), with option
// negotiation (RFC 2347) of blksize (RFC 2348), tsize and timeout (RFC
// 2349) and windowsize (RFC 7440).
//
// It is bootops's own rather than github.com/pin/tftp's, for speed. Under
// the boot-storm benchmark (200 fetches of ipxe.efi, 100 at a time,
// test/bench/boot.sh, 2 cores) pin/tftp summed 719 MB/s over 8 rounds
// against dnsmasq's 744: it spends a socket and three system calls per
// block (sendto, a recvfrom that finds nothing yet, the recvfrom of the
// ACK) and 85 % of its time in them, which nothing outside the library
// can change. Here a few pumps each carry many transfers on one socket,
// reading the ACKs of all their clients with one recvmmsg and sending
// the blocks they call for, straight from the file in memory, with one
// sendmmsg. BENCHMARKS.md has the figures.
type Server struct {
	Files Files
	// Dynamic, when set, answers names Files lacks (the shim chain's GRUB
	// configs and Micro-OS files), given the client's address.
	Dynamic func(name, peer string) ([]byte, bool)
	Events  status.Recorder
	Log     *slog.Logger
	// Timeout per packet before a resend (default 2 s: one lost packet
	// should not cost a boot storm 5 s). A client's "timeout" option
	// overrides it for its transfer.
	Timeout time.Duration
	// Retries bounds how many times a packet is sent again before the
	// transfer fails (default 5).
	Retries int
	// MaxTransfers bounds the transfers in flight; requests beyond it are
	// refused with an error packet (default 1024).
	MaxTransfers int
	// DrainTimeout bounds how long transfers in flight may finish once
	// the context ends (default 10 s).
	DrainTimeout time.Duration
}

// fallbackBlksize caps blksize when the interface's MTU is unknown: the
// largest block an Ethernet frame carries unfragmented (1500 - 20 - 8 - 4).
const fallbackBlksize = 1468

// errShutdown ends the transfers still in flight at the drain deadline.
var errShutdown = errors.New("server shutting down")

// Serve answers on conn until ctx ends, then lets transfers in flight
// finish for DrainTimeout and closes conn. It returns nil on
// cancellation, or the error that stopped it reading conn.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	l := &listener{
		s:      s,
		log:    s.Log,
		conn:   conn,
		active: map[netip.AddrPort]*transfer{},
		pumps:  map[netip.Addr][]*pump{},
		mtu:    map[int]mtuSeen{},
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	defer conn.Close()
	// Wake the read loop when ctx ends; transfers go on on the pumps.
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	err := l.loop(ctx)
	drain := s.DrainTimeout
	if drain <= 0 {
		drain = 10 * time.Second
	}
	finished := make(chan struct{})
	go func() { l.wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(drain):
		l.log.Warn("tftp: transfers still in flight at the drain deadline", "deadline", drain.String())
	}
	for _, ps := range l.pumps {
		for _, p := range ps {
			p.conn.Close() // the transfers left fail
			<-p.done
		}
	}
	return err
}

// listener reads requests on the server's port and starts transfers.
type listener struct {
	s    *Server
	log  *slog.Logger
	conn net.PacketConn
	wg   sync.WaitGroup // the transfers in flight

	mu     sync.Mutex
	active map[netip.AddrPort]*transfer // by client address and port

	// The read loop's alone:
	pumps map[netip.Addr][]*pump // by local address
	turn  int
	mtu   map[int]mtuSeen // by interface index
}

// loop reads requests until ctx ends.
func (l *listener) loop(ctx context.Context) error {
	// RFC 2347 bounds a request to 512 bytes; a longer one arrives cut,
	// without its final NUL, and is rejected.
	buf := make([]byte, 1024)
	oob := make([]byte, 128)
	udp, _ := l.conn.(*net.UDPConn)
	withInfo := udp != nil && enablePktinfo(udp)
	for {
		var (
			n       int
			from    netip.AddrPort
			local   netip.Addr
			ifindex int
			err     error
		)
		if withInfo {
			var oobn int
			n, oobn, _, from, err = udp.ReadMsgUDPAddrPort(buf, oob)
			local, ifindex = pktinfo(oob[:oobn])
		} else {
			var addr net.Addr
			n, addr, err = l.conn.ReadFrom(buf)
			if a, ok := addr.(*net.UDPAddr); ok {
				from = a.AddrPort()
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("tftp: read: %w", err)
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		if !from.IsValid() || from.Port() == 0 {
			continue
		}
		if !local.IsValid() {
			if a, ok := l.conn.LocalAddr().(*net.UDPAddr); ok {
				local = a.AddrPort().Addr().Unmap()
			}
		}
		l.handle(buf[:n], from, local, ifindex)
	}
}

// handle answers one datagram that arrived on the server's port.
func (l *listener) handle(b []byte, from netip.AddrPort, local netip.Addr, ifindex int) {
	peer := from.Addr().String()
	req, err := parseRequest(b)
	if err != nil {
		l.log.Info("tftp: malformed request ignored", "peer", from.String(), "bytes", len(b), "err", err)
		return
	}
	if req.op == opWRQ {
		l.log.Info("tftp: write request refused", "file", req.filename, "peer", peer)
		l.refuse(from, errCodeAccess, "read-only server")
		l.failed(peer, req.filename, "write requests are not served")
		return
	}
	data, ok := l.s.Files.Lookup(req.filename)
	if !ok && l.s.Dynamic != nil {
		data, ok = l.s.Dynamic(req.filename, peer)
	}
	if !ok {
		l.log.Info("tftp: not found", "file", req.filename, "peer", peer)
		l.refuse(from, errCodeNotFound, "file not found")
		l.record(status.Event{Kind: status.KindTFTP, IP: peer, Message: "tftp: no file " + quote(req.filename), Error: true})
		return
	}
	switch req.mode {
	case "mail":
		l.log.Info("tftp: mail mode refused", "file", req.filename, "peer", peer)
		l.refuse(from, errCodeIllegalOp, "mail mode is not served")
		l.failed(peer, req.filename, "mail mode is not served")
		return
	case "netascii":
		data = toNetascii(data)
	}

	l.mu.Lock()
	_, dup := l.active[from]
	busy := len(l.active) >= l.maxTransfers()
	l.mu.Unlock()
	if dup {
		// The client sent its request again before our first packet
		// reached it: the transfer under way answers it.
		l.log.Debug("tftp: repeated request ignored", "file", req.filename, "peer", from.String())
		return
	}
	if busy {
		l.log.Warn("tftp: too many transfers, request refused", "file", req.filename, "peer", peer, "max_transfers", l.maxTransfers())
		l.refuse(from, errCodeUndefined, "server busy, try again")
		return
	}
	p, err := l.pump(local, from.Addr().Is4())
	if err != nil {
		l.log.Warn("tftp: no socket for a transfer", "file", req.filename, "peer", peer, "err", err)
		l.refuse(from, errCodeUndefined, "server error")
		l.failed(peer, req.filename, err)
		return
	}
	params := negotiate(req, l.maxBlksize(ifindex, !from.Addr().Is4()), len(data))
	timeout := params.timeout
	if timeout == 0 {
		timeout = l.timeout()
	}
	retries := l.s.Retries
	if retries <= 0 {
		retries = 5
	}
	t := newTransfer(req.filename, from, data, params, timeout, retries)
	t.pump = p
	first := t.window(nil, time.Now())
	l.wg.Add(1)
	// The first window goes out under the lock: the pump cannot take the
	// answer to it before.
	l.mu.Lock()
	l.active[from] = t
	p.write(first)
	l.mu.Unlock()
}

// finish logs and records the end of a transfer.
func (l *listener) finish(t *transfer, err error) {
	defer l.wg.Done()
	d := time.Since(t.start)
	peer := t.peer.Addr().String()
	if err != nil {
		l.log.Warn("tftp", "file", t.name, "peer", peer, "duration", d.String(), "err", err)
		l.failed(peer, t.name, err)
		return
	}
	l.log.Info("tftp", "file", t.name, "peer", peer, "duration", d.String(), "bytes", len(t.data),
		"blksize", t.p.blksize, "windowsize", t.p.window, "resent", t.resent)
	l.record(status.Event{Kind: status.KindTFTP, IP: peer, Message: fmt.Sprintf("tftp: sent %s in %s", t.name, d.Round(time.Millisecond))})
}

// pump picks the pump for a new transfer answering from local, taking
// turns among as many as there are processors (at most 4), made when
// first needed.
func (l *listener) pump(local netip.Addr, v4 bool) (*pump, error) {
	if local.IsUnspecified() {
		local = netip.Addr{}
	}
	ps := l.pumps[local]
	if len(ps) < min(runtime.GOMAXPROCS(0), maxPumps) {
		network := "udp6"
		if v4 {
			network = "udp4"
		}
		tick := min(l.timeout()/4, 100*time.Millisecond)
		p, err := newPump(l, local, network, max(tick, time.Millisecond))
		if err != nil {
			return nil, err
		}
		go p.run()
		l.pumps[local] = append(ps, p)
		return p, nil
	}
	l.turn++
	return ps[l.turn%len(ps)], nil
}

// maxPumps bounds the pumps per local address: one is a core's worth of
// system calls, and a boot storm rarely needs more.
const maxPumps = 4

func (l *listener) timeout() time.Duration {
	if l.s.Timeout > 0 {
		return l.s.Timeout
	}
	return 2 * time.Second
}

// refuse answers a request with an error packet from the server's port.
func (l *listener) refuse(to netip.AddrPort, code uint16, msg string) {
	if _, err := l.conn.WriteTo(appendError(nil, code, msg), net.UDPAddrFromAddrPort(to)); err != nil {
		l.log.Debug("tftp: error packet not sent", "peer", to.String(), "err", err)
	}
}

// failed records that a request or transfer of file for peer failed.
func (l *listener) failed(peer, file string, why any) {
	l.record(status.Event{Kind: status.KindTFTP, IP: peer, Message: fmt.Sprintf("tftp: %s failed: %v", quote(file), why), Error: true})
}

func (l *listener) record(e status.Event) {
	if l.s.Events != nil {
		l.s.Events.Record(e)
	}
}

func (l *listener) maxTransfers() int {
	if l.s.MaxTransfers > 0 {
		return l.s.MaxTransfers
	}
	return 1024
}

// maxBlksize is the largest block that crosses the interface a request
// came in on without IP fragmentation (MTU - 20 - 8 - 4 over IPv4, MTU -
// 40 - 8 - 4 over IPv6); PXE ROMs may ask for more than their link
// carries.
func (l *listener) maxBlksize(ifindex int, v6 bool) int {
	headers := 32
	if v6 {
		headers = 52
	}
	if ifindex <= 0 {
		return fallbackBlksize + 32 - headers
	}
	seen, ok := l.mtu[ifindex]
	if !ok || time.Since(seen.at) > time.Minute { // MTUs change, interfaces come and go
		iface, err := net.InterfaceByIndex(ifindex)
		if err != nil {
			return fallbackBlksize
		}
		if len(l.mtu) > 256 {
			clear(l.mtu)
		}
		seen = mtuSeen{iface.MTU, time.Now()}
		l.mtu[ifindex] = seen
	}
	return max(seen.mtu-headers, defaultBlksize)
}

// mtuSeen is an interface's MTU and when it was read.
type mtuSeen struct {
	mtu int
	at  time.Time
}

// quote bounds and quotes a client-chosen string for logs and events.
func quote(s string) string {
	if len(s) > 80 {
		s = s[:80]
	}
	return fmt.Sprintf("%q", s)
}
