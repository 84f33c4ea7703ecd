package hub

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/bootops/bootops/internal/natslog"
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
	// ClusterTLS is the routes' mutual TLS (trust.RouteTLS): required
	// with ClusterListen. A server without a route certificate of the
	// hub's CA cannot join, read or write anything.
	ClusterTLS *tls.Config
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
	// Limits bound what one site may put on the stream and in the view.
	Limits Limits
	Log    *slog.Logger
}

// Limits bound what a site can make the hub keep. The defaults fit a
// site of 10,000 machines: a hello naming every node is well under
// MaxMsgSize, and SiteBytes holds a dozen whole provisionings of the site
// (12 events a machine of about 700 bytes).
type Limits struct {
	// MaxMsgSize is the largest message (default 1 MiB): the server
	// refuses a bigger one.
	MaxMsgSize int32
	// SiteMsgs and SiteBytes bound a site's own stream (defaults 1,000,000
	// messages and 1 GiB): past either its oldest go — its own, never
	// another site's (each site has a stream of its own).
	SiteMsgs  int64
	SiteBytes int64
	// SiteMachines is the machines a site may have in the view (default
	// 20,000; its registered nodes and the machines that are no node).
	SiteMachines int
	// MachineEvents and UnknownEvents are the events kept per node and per
	// machine that is no node (defaults 500 and 100; the oldest go).
	MachineEvents, UnknownEvents int
	// ViewBytes bounds the events of a site the view keeps (default 256
	// MiB): past it the site's oldest go, whatever machine they are of;
	// each machine keeps its summary.
	ViewBytes int64
	// MaxEventBytes is the largest event the view applies (default 64 KiB;
	// a site stores an event's message within 8 KiB).
	MaxEventBytes int
	// MaxSeqJump is how far ahead of the last event applied a site's
	// next may not be (default 1,000,000): one that far or further is
	// refused, so one message cannot hide the site's later events.
	MaxSeqJump uint64
	// SiteEarly and EarlyBytes bound the events of a site that wait for a
	// predecessor (defaults 100,000 and 16 MiB).
	SiteEarly  int
	EarlyBytes int
	// SiteConns is the connections one site's key may hold at once
	// (default 16; a site daemon needs one), SiteSubs the subscriptions
	// each may make (default 64; a forwarder makes two).
	SiteConns, SiteSubs int
}

func (l Limits) withDefaults() Limits {
	def := func(p *int, d int) {
		if *p <= 0 {
			*p = d
		}
	}
	if l.MaxMsgSize <= 0 {
		l.MaxMsgSize = 1 << 20
	}
	if l.SiteMsgs <= 0 {
		l.SiteMsgs = 1_000_000
	}
	if l.SiteBytes <= 0 {
		l.SiteBytes = 1 << 30
	}
	if l.ViewBytes <= 0 {
		l.ViewBytes = 256 << 20
	}
	def(&l.SiteMachines, 20000)
	def(&l.MachineEvents, 500)
	def(&l.UnknownEvents, 100)
	def(&l.MaxEventBytes, 64<<10)
	def(&l.SiteEarly, 100000)
	def(&l.EarlyBytes, 16<<20)
	def(&l.SiteConns, 16)
	def(&l.SiteSubs, 64)
	if l.MaxSeqJump == 0 {
		l.MaxSeqJump = 1_000_000
	}
	return l
}

// Node is a running hub server: the embedded NATS server, each site's
// lane through it (lane.go) and the view it reads from the sites' streams.
type Node struct {
	cfg    Config
	ctx    context.Context // Start's, ended by Close
	cancel context.CancelFunc
	srv    *server.Server
	nc     *nats.Conn // the hub's own, for the JetStream API
	js     jetstream.JetStream
	View   *View

	self   string // the hub's own key
	selfKP nkeys.KeyPair
	gate   *gate

	mu       sync.Mutex
	lanes    map[string]*lane // by site: those configured, and the streams of those removed
	ready    bool             // JetStream answers: lanes open
	replayed chan struct{}    // the stream of older hubs is read (or there is none)

	marks         string // the file of the view's per-site sequences
	stop, stopped chan struct{}
	closeOnce     sync.Once
}

// ValidSite says whether name can be a site's: one subject token of
// lowercase letters, digits and '-', at most 63.
func ValidSite(name string) bool {
	if name == "" || len(name) > 63 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// SetSites changes the sites allowed in, without a restart: a new site may
// connect at once (its lane opens), and a removed one's connections are
// closed (its stream stays, and the view shows it).
func (n *Node) SetSites(sites map[string]string) error {
	gone, err := n.gate.set(sites)
	if err != nil {
		return err
	}
	for _, id := range gone {
		n.srv.DisconnectClientByID(id)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cfg.Sites = sites
	n.openLanes()
	return nil
}

// Start runs the server and, once JetStream is ready (in a cluster: once
// the servers have a leader), opens each site's lane: its stream, its
// ingest and the view's reading of it.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
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
	log := cfg.Log.With("server", cfg.Name)
	g := &gate{self: selfPub, limit: cfg.Limits.SiteConns, log: log}
	if _, err := g.set(cfg.Sites); err != nil {
		return nil, err
	}
	opts, err := serverOptions(cfg, host, port, g)
	if err != nil {
		return nil, err
	}
	srv, err := startServer(cfg, opts)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.srv = srv
	g.mu.Unlock()
	// The hub's own connection to itself, for the JetStream API; each
	// site's lane has one more (lane.go).
	nc, err := selfConn(srv, selfPub, self, "bootops-hub", log, nil)
	if err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("hub %s: connect to itself: %w", cfg.Name, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		srv.Shutdown()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	n := &Node{cfg: cfg, ctx: ctx, cancel: cancel, srv: srv, nc: nc, js: js, View: NewViewLimits(cfg.Limits, log), self: selfPub, selfKP: self, gate: g,
		lanes: map[string]*lane{}, replayed: make(chan struct{}),
		marks: filepath.Join(cfg.StoreDir, "sequences.json")}
	if err := n.loadMarks(); err != nil {
		n.Close()
		return nil, err
	}
	n.stop, n.stopped = make(chan struct{}), make(chan struct{})
	go n.follow(ctx)
	go n.keepMarks()
	return n, nil
}

// withDefaults is cfg with its zero values given their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Dedup == 0 {
		cfg.Dedup = 10 * time.Minute
	}
	cfg.Limits = cfg.Limits.withDefaults()
	return cfg
}

// serverOptions are the NATS server's options for cfg, listening on host
// and port, sites let in through g.
func serverOptions(cfg Config, host string, port int, g *gate) (*server.Options, error) {
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		// Each site's stream reserves its --site-max-bytes; JetStream's
		// default store (75 % of the disk's free space) would refuse the
		// 50th site's stream on a 64 GB disk. The bounds are per site: what
		// all of them may use together is the disk's.
		JetStreamMaxStore: math.MaxInt64,
		NoSigs:            true,
		// Sites come in through the gate (each key's connections bounded),
		// with the server's nonce to sign.
		CustomClientAuthentication: g,
		AlwaysEnableNonce:          true,
		// Per connection, the hub's own included (a lane's needs four).
		MaxSubs:    cfg.Limits.SiteSubs,
		TLSConfig:  cfg.TLS,
		TLSTimeout: 5,
		MaxPayload: cfg.Limits.MaxMsgSize,
	}
	if cfg.TLS != nil {
		opts.TLS = true
	}
	if cfg.ClusterListen != "" {
		if err := clusterOptions(cfg, opts); err != nil {
			return nil, err
		}
	}
	return opts, nil
}

// clusterOptions sets in opts the cluster cfg asks for: its listener, over
// TLS, and the routes to the other hubs.
func clusterOptions(cfg Config, opts *server.Options) error {
	ch, cp, err := splitHostPort(cfg.ClusterListen)
	if err != nil {
		return fmt.Errorf("hub: cluster listen %q: %w", cfg.ClusterListen, err)
	}
	if cfg.ClusterTLS == nil {
		return fmt.Errorf("hub: a cluster's routes need their TLS: route certificates of the hub's CA (bootops ca route)")
	}
	opts.Cluster = server.ClusterOpts{Name: "bootops-hub", Host: ch, Port: cp, TLSConfig: cfg.ClusterTLS, TLSTimeout: 5}
	for _, r := range cfg.Routes {
		u, err := url.Parse(r)
		if err != nil {
			return fmt.Errorf("hub: route %q: %w", r, err)
		}
		opts.Routes = append(opts.Routes, u)
	}
	return nil
}

// startServer starts the NATS server and waits (15 s at most) until it
// takes connections.
func startServer(cfg Config, opts *server.Options) (*server.Server, error) {
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	srv.SetLoggerV2(natslog.Logger{Log: cfg.Log.With("server", cfg.Name), Prefix: "nats: ", Notice: slog.LevelInfo}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("hub %s: not ready for connections on %s", cfg.Name, cfg.Listen)
	}
	return srv, nil
}

// selfConn is a connection of the hub to its own server, with the hub's
// key; its errors go to the hub's log.
// A slow consumer (messages dropped: a site sending faster than the hub
// takes in) goes to slow instead, when there is one.
func selfConn(srv *server.Server, pub string, kp nkeys.KeyPair, name string, log *slog.Logger, slow func()) (*nats.Conn, error) {
	return nats.Connect("", nats.InProcessServer(srv), nats.Nkey(pub, kp.Sign), nats.Name(name),
		nats.MaxReconnects(-1),
		// nats.go's default prints plain text on stderr: the hub logs JSON.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if slow != nil && errors.Is(err, nats.ErrSlowConsumer) {
				slow()
				return
			}
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("hub: its own connection", "conn", name, "subject", subject, "err", err)
		}))
}

// loadMarks reads the view's per-site sequences. A file that is no JSON
// (cut short by a crash of the days before they were synced) is moved
// aside, said in the log, and the marks are rebuilt from the stream as
// the view reads it from its start; a file that cannot be read is an
// error: the hub says so and exits rather than start without it.
func (n *Node) loadMarks() error {
	err := n.View.LoadMarks(n.marks)
	var bad *json.SyntaxError
	var wrong *json.UnmarshalTypeError
	if !errors.As(err, &bad) && !errors.As(err, &wrong) {
		return err
	}
	aside := fmt.Sprintf("%s.corrupt-%d", n.marks, time.Now().Unix())
	if rerr := os.Rename(n.marks, aside); rerr != nil {
		return fmt.Errorf("hub: %w; and it could not be moved aside: %w", err, rerr)
	}
	n.cfg.Log.Warn("hub: the sites' sequences file is damaged: moved aside; the sequences are rebuilt from the stream", "file", n.marks, "aside", aside, "err", err)
	return nil
}

// keepMarks writes the view's sequence marks every second they moved, and
// once more when the node closes.
func (n *Node) keepMarks() {
	defer close(n.stopped)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			n.saveMarks()
			return
		case <-t.C:
			n.saveMarks()
		}
	}
}

func (n *Node) saveMarks() {
	if err := n.View.SaveMarks(n.marks); err != nil {
		n.cfg.Log.Warn("hub: the sites' sequences not written", "file", n.marks, "err", err)
	}
}

// Server is the embedded NATS server (tests kill it to kill a hub).
func (n *Node) Server() *server.Server { return n.srv }

// ClientURL is where sites connect.
func (n *Node) ClientURL() string { return n.srv.ClientURL() }

// Close stops the view's reader and the server.
func (n *Node) Close() {
	if n.cancel != nil {
		n.cancel()
	}
	n.mu.Lock()
	conns := []*nats.Conn{n.nc}
	for _, l := range n.lanes {
		conns = append(conns, l.nc)
	}
	n.mu.Unlock()
	for _, nc := range conns {
		if nc != nil {
			nc.Close()
		}
	}
	n.closeOnce.Do(func() {
		if n.stop != nil {
			close(n.stop)
			<-n.stopped
		}
	})
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// msgID is an event's message ID on the stream: the same event sent again
// has the same, an event of another store of the site (another epoch) not.
func msgID(site, epoch string, seq uint64) string {
	if epoch == "" { // a forwarder without an epoch, as before epochs
		return site + "/" + strconv.FormatUint(seq, 10)
	}
	return site + "/" + epoch + "/" + strconv.FormatUint(seq, 10)
}

func respondErr(m *nats.Msg, err error) {
	if m.Reply == "" {
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": 503, "description": err.Error()}})
	m.Respond(b)
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
