// Package utp is a minimal stand-in for github.com/anacrolix/go-utp.
//
// The real module cannot be fetched from the Go module proxy, and
// anacrolix/torrent imports it unconditionally. The p2ptorrent benchmark
// disables uTP (ClientConfig.DisableUTP), so none of these functions is called
// at run time; they exist so the torrent package compiles. Every constructor
// returns ErrUnavailable.
package utp

import (
	"context"
	"errors"
	"log/slog"
	"net"
)

// ErrUnavailable is returned by every constructor of this stub.
var ErrUnavailable = errors.New("utp: not available (stub of github.com/anacrolix/go-utp)")

// Default names the implementation; the torrent package prints it in errors.
const Default = "stub"

// FirewallCallback reports whether an incoming connection from addr is blocked.
type FirewallCallback = func(addr net.Addr) bool

// Option configures a Socket.
type Option func(*options)

type options struct {
	logger *slog.Logger
}

// WithLogger sets the logger of a Socket.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// Socket is the uTP socket interface the torrent package expects.
type Socket interface {
	net.PacketConn
	Accept() (net.Conn, error)
	Addr() net.Addr
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	SetFirewallCallback(FirewallCallback)
}

// NewSocket always fails: uTP is not available in this build.
func NewSocket(network, addr string, opts ...Option) (Socket, error) {
	return nil, ErrUnavailable
}

// NewSocketFromPacketConn always fails: uTP is not available in this build.
func NewSocketFromPacketConn(pc net.PacketConn, opts ...Option) (Socket, error) {
	return nil, ErrUnavailable
}
