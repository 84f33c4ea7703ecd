package main

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/anacrolix/torrent"
	pp "github.com/anacrolix/torrent/peer_protocol"
)

// connTracker records which peers, by listen address, this client has a live
// connection to. anacrolix/torrent forgets a peer address once it has dialled
// it: if the dial fails (the peer is not listening yet) or the connection
// later drops, the address is not tried again unless a tracker, DHT or PEX
// supplies it anew, and this benchmark has none of those (PEX is off for
// private torrents). The tracker lets redial re-add just the missing peers.
type connTracker struct {
	mu    sync.Mutex
	conns map[*torrent.PeerConn]string // connection -> peer listen address ("" until known)
}

func newConnTracker() *connTracker {
	return &connTracker{conns: make(map[*torrent.PeerConn]string)}
}

// install hooks the tracker into the client's callbacks.
func (ct *connTracker) install(cb *torrent.Callbacks) {
	cb.PeerConnAdded = append(cb.PeerConnAdded, ct.added)
	cb.ReadExtendedHandshake = ct.extendedHandshake
	cb.PeerConnClosed = ct.closed
}

// added runs when a connection has completed its handshakes. For a connection
// we dialled, the remote address is the peer's listen address.
func (ct *connTracker) added(pc *torrent.PeerConn) {
	key := ""
	if pc.Discovery != torrent.PeerSourceIncoming {
		key = pc.RemoteAddr.String()
	}
	ct.mu.Lock()
	ct.conns[pc] = key
	ct.mu.Unlock()
}

// extendedHandshake learns the listen port of a peer that dialled us.
func (ct *connTracker) extendedHandshake(pc *torrent.PeerConn, msg *pp.ExtendedHandshakeMessage) {
	if pc.Discovery != torrent.PeerSourceIncoming || msg.Port == 0 {
		return
	}
	host, _, err := net.SplitHostPort(pc.RemoteAddr.String())
	if err != nil {
		return
	}
	ct.mu.Lock()
	if _, ok := ct.conns[pc]; ok {
		ct.conns[pc] = net.JoinHostPort(host, strconv.Itoa(msg.Port))
	}
	ct.mu.Unlock()
}

func (ct *connTracker) closed(pc *torrent.PeerConn) {
	ct.mu.Lock()
	delete(ct.conns, pc)
	ct.mu.Unlock()
}

// missing returns the addresses in want that have no live connection.
func (ct *connTracker) missing(want []netip.AddrPort) []netip.AddrPort {
	ct.mu.Lock()
	have := make(map[string]bool, len(ct.conns))
	for _, key := range ct.conns {
		have[key] = true
	}
	ct.mu.Unlock()
	var out []netip.AddrPort
	for _, a := range want {
		if !have[a.String()] {
			out = append(out, a)
		}
	}
	return out
}

// redial re-adds every listed peer without a live connection each interval,
// until the download completes or ctx ends. It returns how many times it
// re-added a peer. The library skips addresses it is already dialling.
func redial(ctx context.Context, t *torrent.Torrent, ct *connTracker, peers []netip.AddrPort, interval time.Duration) (readded int) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return readded
		case <-t.Complete().On():
			return readded
		case <-tick.C:
		}
		if miss := ct.missing(peers); len(miss) > 0 {
			readded += len(miss)
			t.AddPeers(peerInfos(miss))
		}
	}
}
