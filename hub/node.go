package hub

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
// MaxMsgSize, and SiteMsgs holds several whole provisionings of the site
// (12 events a machine) besides a month of hellos.
type Limits struct {
	// MaxMsgSize is the largest message (default 1 MiB): the server
	// refuses a bigger one.
	MaxMsgSize int32
	// SiteMsgs is the messages a site keeps on the stream (default
	// 1,000,000): past it its oldest go (its own, never another site's).
	// With MaxMsgSize it bounds the site's bytes on the stream.
	SiteMsgs int64
	// StreamBytes bounds the whole stream (default 0: only by SiteMsgs
	// and MaxMsgSize per site, and 30 days).
	StreamBytes int64
	// SiteMachines is the machines a site may have in the view (default
	// 20,000; its registered nodes and the machines that are no node).
	SiteMachines int
	// MachineEvents and UnknownEvents are the events kept per node and per
	// machine that is no node (defaults 500 and 100; the oldest go).
	MachineEvents, UnknownEvents int
	// MaxEventBytes is the largest event the view applies (default 64 KiB;
	// a site stores an event's message within 8 KiB).
	MaxEventBytes int
	// MaxSeqJump is how far ahead of the last event applied a site's
	// next may not be (default 1,000,000): one that far or further is
	// refused, so one message cannot hide the site's later events.
	MaxSeqJump uint64
	// SiteEarly is the events of a site that may wait for a predecessor
	// (default 100,000).
	SiteEarly int
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
	def(&l.SiteMachines, 20000)
	def(&l.MachineEvents, 500)
	def(&l.UnknownEvents, 100)
	def(&l.MaxEventBytes, 64<<10)
	def(&l.SiteEarly, 100000)
	if l.MaxSeqJump == 0 {
		l.MaxSeqJump = 1_000_000
	}
	return l
}

// Node is a running hub server: the embedded NATS server and the view it
// reads from the stream.
type Node struct {
	cfg    Config
	srv    *server.Server
	nc     *nats.Conn // the ingest's
	viewNC *nats.Conn // the view's reader's
	View   *View

	mu   sync.Mutex
	opts *server.Options // what the server runs with, for a reload
	self string          // the view's own key

	marks         string // the file of the view's per-site sequences
	stop, stopped chan struct{}
	closeOnce     sync.Once
}

// siteUsers are the server's users: the hub's own reader, with every
// permission, and each site, allowed to publish on its subject and to
// subscribe to its own inbox (where the hub answers it), nothing else.
func siteUsers(self string, sites map[string]string) ([]*server.NkeyUser, error) {
	users := []*server.NkeyUser{{Nkey: self}}
	for site, pub := range sites {
		if !ValidSite(site) {
			return nil, fmt.Errorf("hub: site name %q: lowercase letters, digits and '-'", site)
		}
		if !nkeys.IsValidPublicUserKey(pub) {
			return nil, fmt.Errorf("hub: site %s: %q is not an nkey user public key", site, pub)
		}
		users = append(users, &server.NkeyUser{Nkey: pub, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{SubjectPrefix + site}},
			Subscribe: &server.SubjectPermission{Allow: []string{Inbox(site) + ".>"}},
		}})
	}
	return users, nil
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
	cfg.Limits = cfg.Limits.withDefaults()
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
		MaxPayload: cfg.Limits.MaxMsgSize,
	}
	if cfg.TLS != nil {
		opts.TLS = true
	}
	if cfg.ClusterListen != "" {
		ch, cp, err := splitHostPort(cfg.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("hub: cluster listen %q: %w", cfg.ClusterListen, err)
		}
		if cfg.ClusterTLS == nil {
			return nil, fmt.Errorf("hub: a cluster's routes need their TLS: route certificates of the hub's CA (bootops ca route)")
		}
		opts.Cluster = server.ClusterOpts{Name: "bootops-hub", Host: ch, Port: cp, TLSConfig: cfg.ClusterTLS, TLSTimeout: 5}
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
	log := cfg.Log.With("server", cfg.Name)
	// Two connections to itself: the ingest's, which takes the sites'
	// messages in and writes them to the stream, and the view's, which
	// reads the stream. On one connection, the view's pulls and its
	// messages queued behind the ingest's traffic: while 50 sites sent,
	// the view applied about 3,000 events/s of the 15,000–30,000 the
	// stream took in.
	nc, err := selfConn(srv, selfPub, self, "bootops-hub-ingest", log)
	if err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("hub %s: connect to itself: %w", cfg.Name, err)
	}
	viewNC, err := selfConn(srv, selfPub, self, "bootops-hub-view", log)
	if err != nil {
		nc.Close()
		srv.Shutdown()
		return nil, fmt.Errorf("hub %s: connect to itself: %w", cfg.Name, err)
	}
	n := &Node{cfg: cfg, srv: srv, nc: nc, viewNC: viewNC, View: NewViewLimits(cfg.Limits, log), opts: opts.Clone(), self: selfPub,
		marks: filepath.Join(cfg.StoreDir, "sequences.json")}
	if err := n.loadMarks(); err != nil {
		n.Close()
		return nil, err
	}
	js, err := jetstream.New(viewNC)
	if err != nil {
		n.Close()
		return nil, err
	}
	n.stop, n.stopped = make(chan struct{}), make(chan struct{})
	go n.follow(ctx, js)
	go n.keepMarks()
	return n, nil
}

// selfConn is a connection of the hub to its own server, with the hub's
// key; its errors go to the hub's log.
func selfConn(srv *server.Server, pub string, kp nkeys.KeyPair, name string, log *slog.Logger) (*nats.Conn, error) {
	return nats.Connect("", nats.InProcessServer(srv), nats.Nkey(pub, kp.Sign), nats.Name(name),
		nats.MaxReconnects(-1),
		// nats.go's default prints plain text on stderr: the hub logs JSON.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
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

// follow makes the stream (again and again until JetStream answers: a
// cluster needs a leader first) and reads it into the view from its start.
func (n *Node) follow(ctx context.Context, js jetstream.JetStream) {
	l := n.cfg.Limits
	cfg := jetstream.StreamConfig{
		Name: Stream,
		// Sites publish on SubjectPrefix, where the hub's ingest takes
		// their messages in: only the hub writes the stream's subjects.
		Subjects:          []string{StreamPrefix + "*"},
		Storage:           jetstream.FileStorage,
		Replicas:          n.cfg.Replicas,
		Duplicates:        n.cfg.Dedup,
		MaxAge:            30 * 24 * time.Hour,
		Discard:           jetstream.DiscardOld,
		MaxMsgSize:        l.MaxMsgSize,
		MaxMsgsPerSubject: l.SiteMsgs,
		MaxBytes:          -1,
	}
	if l.StreamBytes > 0 {
		cfg.MaxBytes = l.StreamBytes
	}
	var stream jetstream.Stream
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		// Not while SetSites reloads the server's options: the server
		// reads them unguarded as it makes a stream (nats-server 2.15.2,
		// stream.go:1013; the race detector caught it in TestHubSetSites).
		n.mu.Lock()
		s, err := js.CreateOrUpdateStream(cctx, cfg)
		n.mu.Unlock()
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
	in, err := n.ingest()
	if err != nil {
		n.cfg.Log.Error("hub: sites' messages not taken in", "err", err)
		return
	}
	defer in.Unsubscribe()
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
			site, ok := strings.CutPrefix(m.Subject(), StreamPrefix)
			if !ok { // a stream of an older hub: sites published on it
				site = strings.TrimPrefix(m.Subject(), SubjectPrefix)
			}
			n.View.Apply(Message{Site: site, Epoch: h.Get(Epoch), Kind: h.Get(Kind), Data: m.Data(),
				Stream: seq, At: at, Seq: siteSeq, Prev: prev})
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
	for _, nc := range []*nats.Conn{n.nc, n.viewNC} {
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

// ingest takes the sites' messages into the stream: each node of the
// cluster answers in one queue group. A site chooses none of what the
// hub writes: the subject is its own (its credential's), the message ID
// its site/epoch/sequence, and the answer — the stream's acknowledgement —
// goes only to the site's own inbox. A reply subject elsewhere (another
// site's subject, $JS.API…) is refused: no site can make the hub write
// there.
//
// The stream answers the site itself: the hub publishes with the site's
// reply subject, checked above, rather than waiting for the stream's
// acknowledgement and passing it on (one goroutine and two more trips
// over the hub's connection per event).
func (n *Node) ingest() (*nats.Subscription, error) {
	return n.nc.QueueSubscribe(SubjectPrefix+"*", "bootops-ingest", func(m *nats.Msg) {
		site := strings.TrimPrefix(m.Subject, SubjectPrefix)
		if m.Reply != "" && !strings.HasPrefix(m.Reply, Inbox(site)+".") {
			n.View.Refuse(site, RefusedReply)
			return
		}
		kind := m.Header.Get(Kind)
		seq, err := strconv.ParseUint(m.Header.Get(Seq), 10, 64)
		epoch := m.Header.Get(Epoch)
		if kind == KindEvent && (err != nil || seq == 0) || kind != KindEvent && kind != KindHello || !ValidEpoch(epoch) {
			n.View.Refuse(site, RefusedMalformed)
			if m.Reply != "" {
				m.Respond([]byte(`{"error":{"code":400,"description":"bootops: an event with a Bootops-Seq, or a hello; a Bootops-Epoch of letters, digits, '-' and '_'"}}`))
			}
			return
		}
		out := nats.NewMsg(StreamPrefix + site)
		out.Reply = m.Reply
		out.Header.Set(Kind, kind)
		if epoch != "" {
			out.Header.Set(Epoch, epoch)
		}
		if kind == KindEvent {
			out.Header.Set(Seq, strconv.FormatUint(seq, 10))
			if prev, err := strconv.ParseUint(m.Header.Get(Prev), 10, 64); err == nil {
				out.Header.Set(Prev, strconv.FormatUint(prev, 10))
			}
			out.Header.Set(jetstream.MsgIDHeader, msgID(site, epoch, seq))
		}
		out.Data = m.Data
		if err := n.nc.PublishMsg(out); err != nil {
			respondErr(m, err)
		}
	})
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
