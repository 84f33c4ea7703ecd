package main

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"

	"github.com/anacrolix/torrent"
	"github.com/anacrolix/torrent/metainfo"
	pp "github.com/anacrolix/torrent/peer_protocol"
	"github.com/anacrolix/torrent/storage"
)

// newClientConfig returns the configuration shared by seed and get: TCP only
// on listen, no DHT, trackers, LSD, web torrent (WebRTC), uTP, port forwarding
// or IPv6, plaintext handshakes only, and seeding enabled.
func newClientConfig(listen string, st storage.ClientImpl) (*torrent.ClientConfig, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("-listen %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return nil, fmt.Errorf("-listen %q: bad port", listen)
	}
	cfg := torrent.NewDefaultClientConfig()
	cfg.ListenHost = func(string) string { return host }
	cfg.ListenPort = port
	cfg.NoDHT = true
	cfg.DisableTrackers = true
	cfg.DisableWebtorrent = true
	cfg.DisableUTP = true
	cfg.DisableIPv6 = true
	cfg.NoDefaultPortForwarding = true
	cfg.LocalServiceDiscovery = nil // BEP 14 off (already the default)
	// Plaintext only: don't offer MSE, and refuse peers that insist on it.
	cfg.HeaderObfuscationPolicy = torrent.HeaderObfuscationPolicy{Preferred: false, RequirePreferred: true}
	cfg.Seed = true
	cfg.DefaultStorage = st
	return cfg, nil
}

// addTorrent loads the .torrent at path into cl, backed by st.
func addTorrent(cl *torrent.Client, path string, st storage.ClientImpl) (*torrent.Torrent, error) {
	mi, err := metainfo.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	spec, err := torrent.TorrentSpecFromMetaInfoErr(mi)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	spec.Storage = st
	t, _, err := cl.AddTorrentSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("adding %s: %w", path, err)
	}
	return t, nil
}

// pieceCounter counts piece-message payload bytes received on peer
// connections, split by whether the sender is the seed. It is installed as
// Callbacks.ReadMessage, which the library calls with the client lock held
// for every decoded message, wasted (duplicate) chunks included.
type pieceCounter struct {
	seed      netip.AddrPort
	fromSeed  atomic.Int64
	fromPeers atomic.Int64
}

func (c *pieceCounter) readMessage(pc *torrent.PeerConn, msg *pp.Message) {
	if msg.Type != pp.Piece {
		return
	}
	n := int64(len(msg.Piece))
	if c.isSeed(pc) {
		c.fromSeed.Add(n)
	} else {
		c.fromPeers.Add(n)
	}
}

// isSeed reports whether pc is a connection to the seed's address. For a
// connection we dialled that is its remote address; for one the seed dialled
// to us, its IP plus the listen port it advertised in the extended handshake.
func (c *pieceCounter) isSeed(pc *torrent.PeerConn) bool {
	remote, err := netip.ParseAddrPort(pc.RemoteAddr.String())
	if err != nil {
		return false
	}
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	if pc.Discovery == torrent.PeerSourceIncoming {
		return remote.Addr() == c.seed.Addr() && pc.PeerListenPort == int(c.seed.Port())
	}
	return remote == c.seed
}
