package hub

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Config is one hub server.
type Config struct {
	// Name is the server's name, unique in its cluster.
	Name string
	// Listen is the NATS address sites connect to ("host:port").
	Listen string
	// TLS is the NATS listener's TLS (nil: plain, for tests on loopback
	// only; the command always sets it).
	TLS *tls.Config
	// ClusterListen and Routes make a JetStream cluster: this server's
	// route address and the others' (nats://host:port). Empty: one server.
	ClusterListen string
	Routes        []string
	// Replicas of the stream: 1, or 3 in a 3-server cluster.
	Replicas int
	// StoreDir is where JetStream keeps the stream.
	StoreDir string
	// Sites are the sites allowed to publish, by name: each one's nkey
	// public key (bootops hub add-site makes the pair).
	Sites map[string]string
	// Dedup is the stream's duplicate window (default 10 min): a resend
	// within it of an event already stored is dropped.
	Dedup time.Duration
	Log   *slog.Logger
}

// Node is a running hub server: the embedded NATS server and the view it
// reads from the stream.
type Node struct {
	cfg  Config
	srv  *server.Server
	nc   *nats.Conn
	View *View

	mu   sync.Mutex
	opts *server.Options // what the server runs with, for a reload
	self string          // the view's own key
}

// siteUsers are the server's users: the hub's own reader, with every
// permission, and each site, allowed to publish on its subject only.
func siteUsers(self string, sites map[string]string) ([]*server.NkeyUser, error) {
	users := []*server.NkeyUser{{Nkey: self}}
	for site, pub := range sites {
		if !nkeys.IsValidPublicUserKey(pub) {
			return nil, fmt.Errorf("hub: site %s: %q is not an nkey user public key", site, pub)
		}
		users = append(users, &server.NkeyUser{Nkey: pub, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{SubjectPrefix + site}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}})
	}
	return users, nil
}

// SetSites changes the sites allowed in, without a restart: a new site may
// connect at once, and a removed one's connections are closed.
func (n *Node) SetSites(sites map[string]string) error {
	users, err := siteUsers(n.self, sites)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	next := n.opts.Clone()
	next.Nkeys = users
	if err := n.srv.ReloadOptions(next.Clone()); err != nil {
		return fmt.Errorf("hub: reload the sites: %w", err)
	}
	n.opts = next
	n.cfg.Sites = sites
	return nil
}

// Start runs the server and, once JetStream is ready (in a cluster: once
// the servers have a leader), makes the stream and starts reading it.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Dedup == 0 {
		cfg.Dedup = 10 * time.Minute
	}
	host, port, err := splitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("hub: listen %q: %w", cfg.Listen, err)
	}
	// The hub's own reader: a key made now, never written anywhere.
	self, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	selfPub, _ := self.PublicKey()
	users, err := siteUsers(selfPub, cfg.Sites)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		Nkeys:      users,
		NoSigs:     true,
		TLSConfig:  cfg.TLS,
		TLSTimeout: 5,
	}
	if cfg.TLS != nil {
		opts.TLS = true
	}
	if cfg.ClusterListen != "" {
		ch, cp, err := splitHostPort(cfg.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("hub: cluster listen %q: %w", cfg.ClusterListen, err)
		}
		opts.Cluster = server.ClusterOpts{Name: "bootops-hub", Host: ch, Port: cp}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("hub: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	srv.SetLoggerV2(natsLogger{cfg.Log.With("server", cfg.Name)}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("hub %s: not ready for connections on %s", cfg.Name, cfg.Listen)
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv), nats.Nkey(selfPub, self.Sign), nats.Name("bootops-hub-view"),
		nats.MaxReconnects(-1))
	if err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("hub %s: connect to itself: %w", cfg.Name, err)
	}
	n := &Node{cfg: cfg, srv: srv, nc: nc, View: NewView(), opts: opts.Clone(), self: selfPub}
	js, err := jetstream.New(nc)
	if err != nil {
		n.Close()
		return nil, err
	}
	go n.follow(ctx, js)
	return n, nil
}

// follow makes the stream (again and again until JetStream answers: a
// cluster needs a leader first) and reads it into the view from its start.
func (n *Node) follow(ctx context.Context, js jetstream.JetStream) {
	cfg := jetstream.StreamConfig{
		Name:       Stream,
		Subjects:   []string{SubjectPrefix + "*"},
		Storage:    jetstream.FileStorage,
		Replicas:   n.cfg.Replicas,
		Duplicates: n.cfg.Dedup,
		MaxAge:     30 * 24 * time.Hour,
		Discard:    jetstream.DiscardOld,
	}
	var stream jetstream.Stream
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := js.CreateOrUpdateStream(cctx, cfg)
		cancel()
		if err == nil {
			stream = s
			break
		}
		n.cfg.Log.Debug("hub: stream not ready yet", "err", err)
		time.Sleep(500 * time.Millisecond)
	}
	if stream == nil {
		return
	}
	for ctx.Err() == nil {
		cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
		if err != nil {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			meta, _ := m.Metadata()
			var seq uint64
			at := time.Now()
			if meta != nil {
				seq, at = meta.Sequence.Stream, meta.Timestamp
			}
			h := m.Headers()
			siteSeq, _ := strconv.ParseUint(h.Get(Seq), 10, 64)
			prev, _ := strconv.ParseUint(h.Get(Prev), 10, 64)
			n.View.Apply(m.Subject()[len(SubjectPrefix):], h.Get(Kind), m.Data(), seq, at, siteSeq, prev)
		})
		if err != nil {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		<-ctx.Done()
		cc.Stop()
	}
}

// Server is the embedded NATS server (tests kill it to kill a hub).
func (n *Node) Server() *server.Server { return n.srv }

// ClientURL is where sites connect.
func (n *Node) ClientURL() string { return n.srv.ClientURL() }

// Close stops the view's reader and the server.
func (n *Node) Close() {
	if n.nc != nil {
		n.nc.Close()
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, errors.New("bad port")
	}
	return h, port, nil
}
