// Package sitecluster makes a site of two or three daemons one: an
// embedded NATS JetStream cluster between them (mutual TLS with the site's
// peer certificates), whose replicated key-value buckets hold the facts a
// wipe depends on — which boot tokens were spent, each machine's session —
// written by a majority of the members before the check-in that depends
// on them is answered. A member cut off from the majority cannot write,
// so it refuses those check-ins instead of answering them alone.
//
// The buckets (each with Config.Replicas copies):
//
//	bootops-tokens    a spent boot token's ID → its expiry; created once (KV Create): the one member whose
//	                  Create wins is the one whose check-in goes on, whichever members the machine reaches
//	bootops-sessions  machine key → its current status.Session (JSON)
//	bootops-site      "boot-secret": the secret every member mints and checks credentials with; "serving.<member>":
//	                  the revision each member serves; "fact.<name>": other facts (the power policy's record)
//	bootops-roles     a role ("dhcp.<site>") → the member that performs it (role.go)
//	bootops-nodes     site/node → what the node has installed (Installed): the generation and install a
//	                  member answers "boot from your disk" by, whichever member saw it provisioned
//	bootops-rollouts  a rollout group (site/profile) → its state, written by the member running the rollouts
//	                  (role "rollouts") before it touches a node; the next holder goes on from it
//
// And a stream, the site's log (log.go): each member's status events and
// leases, which every other member applies to its own store.
//
// Keys are base64url of the daemon's keys (machine keys hold ':' and '/').
package sitecluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/natslog"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config is one member of a site's cluster.
type Config struct {
	// Name is the member's name, unique in the site (its server name).
	Name string
	// Listen is the member's cluster address ("host:port") the others'
	// Peers name.
	Listen string
	// Peers are the other members' cluster addresses ("host:port").
	Peers []string
	// TLS is the cluster's mutual TLS (trust.PeerTLS): required.
	TLS *tls.Config
	// StoreDir is where JetStream keeps this member's copy.
	StoreDir string
	// Replicas of each bucket: default the members' count, at most 3.
	Replicas int
	// Timeout bounds a write (default 5 s): past it the write failed,
	// and what depended on it is refused.
	Timeout time.Duration
	// Ready bounds Start's wait for the cluster to take writes (default
	// 60 s: the members start one after the other).
	Ready time.Duration
	Log   *slog.Logger
}

// Bucket names.
const (
	BucketTokens   = "bootops-tokens"
	BucketSessions = "bootops-sessions"
	BucketSite     = "bootops-site"
	BucketNodes    = "bootops-nodes"
	BucketRollouts = "bootops-rollouts"
)

// TokenTTL is how long a spent token's ID is kept: longer than any boot
// token lives (a token past its expiry is refused by its signature's
// check anyway).
const TokenTTL = 48 * time.Hour

// Member is a running member: its NATS server and the buckets.
type Member struct {
	cfg      Config
	srv      *server.Server
	nc       *nats.Conn
	js       jetstream.JetStream
	tokens   jetstream.KeyValue
	sessions jetstream.KeyValue
	site     jetstream.KeyValue
	nodes    jetstream.KeyValue
	roles    jetstream.KeyValue
	rollouts jetstream.KeyValue
}

// Start runs the member's server, joins the others and waits (Config.Ready)
// until the buckets exist and take writes: in a cluster, until a majority
// of its members runs.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	cfg = cfg.withDefaults()
	if cfg.TLS == nil {
		return nil, errors.New("sitecluster: the members' links need their TLS: peer certificates of the site's CA (bootops ca peer)")
	}
	tok := make([]byte, 32)
	rand.Read(tok)
	token := base64.RawURLEncoding.EncodeToString(tok)
	opts, err := serverOptions(cfg, token)
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("sitecluster: %w", err)
	}
	// Its notices at debug: a cluster's routine is not the operator's business.
	srv.SetLoggerV2(natslog.Logger{Log: cfg.Log, Prefix: "sitecluster: ", Notice: slog.LevelDebug}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("sitecluster %s: its server did not start", cfg.Name)
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv), nats.Token(token), nats.Name("bootops-site-"+cfg.Name), nats.MaxReconnects(-1))
	if err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("sitecluster %s: connect to itself: %w", cfg.Name, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		srv.Shutdown()
		return nil, err
	}
	m := &Member{cfg: cfg, srv: srv, nc: nc, js: js}
	if err := m.buckets(ctx); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func (cfg Config) withDefaults() Config {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = min(3, 1+len(cfg.Peers))
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Ready <= 0 {
		cfg.Ready = time.Minute
	}
	return cfg
}

// serverOptions: JetStream, the cluster's listener and routes over mutual
// TLS, and a client listener only the daemon's own connection may use.
func serverOptions(cfg Config, token string) (*server.Options, error) {
	host, port, err := hostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("sitecluster: listen %q: %w", cfg.Listen, err)
	}
	// The client port: on loopback, a port of the system's choosing, and a
	// token made now and never written anywhere (the daemon connects in
	// process). The server starts its routes only once it listens for
	// clients, so DontListen would keep it out of the cluster.
	opts := &server.Options{
		ServerName:    cfg.Name,
		Host:          "127.0.0.1",
		Port:          server.RANDOM_PORT,
		Authorization: token,
		JetStream:     true,
		// Every write on disk before it counts: a site whose members all
		// lose power at once must not forget that a node was installed
		// (JetStream's default syncs every two minutes, trusting the
		// copies on the other members).
		SyncAlways: true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		Cluster:    server.ClusterOpts{Name: "bootops-site", Host: host, Port: port, TLSConfig: cfg.TLS, TLSTimeout: 5},
	}
	for _, p := range cfg.Peers {
		if _, _, err := hostPort(p); err != nil {
			return nil, fmt.Errorf("sitecluster: peer %q: %w", p, err)
		}
		opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats-route", Host: p})
	}
	return opts, nil
}

func hostPort(s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		return "", 0, fmt.Errorf("port %q: want 1-65535", p)
	}
	return h, n, nil
}

// buckets creates (or finds) the buckets and the site's log, all at once
// (a new replicated stream answers only once its copies elected a leader:
// seconds each), asking again until the cluster has a leader and takes
// them, or Config.Ready passes.
func (m *Member) buckets(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Ready)
	defer cancel()
	kvs := []struct {
		into *jetstream.KeyValue
		cfg  jetstream.KeyValueConfig
	}{
		{&m.tokens, jetstream.KeyValueConfig{Bucket: BucketTokens, TTL: TokenTTL, Replicas: m.cfg.Replicas, Storage: jetstream.FileStorage}},
		{&m.sessions, jetstream.KeyValueConfig{Bucket: BucketSessions, Replicas: m.cfg.Replicas, Storage: jetstream.FileStorage}},
		{&m.site, jetstream.KeyValueConfig{Bucket: BucketSite, Replicas: m.cfg.Replicas, Storage: jetstream.FileStorage}},
		{&m.nodes, jetstream.KeyValueConfig{Bucket: BucketNodes, Replicas: m.cfg.Replicas, Storage: jetstream.FileStorage}},
		{&m.roles, jetstream.KeyValueConfig{Bucket: BucketRoles, TTL: RoleTTL, Replicas: m.cfg.Replicas, Storage: jetstream.FileStorage}},
		{&m.rollouts, jetstream.KeyValueConfig{Bucket: BucketRollouts, Replicas: m.cfg.Replicas, Storage: jetstream.FileStorage}},
	}
	errs := make([]error, len(kvs)+1)
	var wg sync.WaitGroup
	for i, b := range kvs {
		wg.Go(func() {
			if err := retry(ctx, func(try context.Context) error {
				kv, err := m.js.CreateOrUpdateKeyValue(try, b.cfg)
				*b.into = kv
				return err
			}); err != nil {
				errs[i] = fmt.Errorf("sitecluster %s: bucket %s not ready within %s (is a majority of the members up and reachable?): %w", m.cfg.Name, b.cfg.Bucket, m.cfg.Ready, err)
			}
		})
	}
	wg.Go(func() {
		if err := retry(ctx, func(try context.Context) error {
			_, err := m.js.CreateOrUpdateStream(try, m.logConfig())
			return err
		}); err != nil {
			errs[len(kvs)] = fmt.Errorf("sitecluster %s: the site's log not ready within %s (is a majority of the members up and reachable?): %w", m.cfg.Name, m.cfg.Ready, err)
		}
	})
	wg.Wait()
	return errors.Join(errs...)
}

// retry calls f, each try with a few seconds of its own (a request made
// before the cluster has a leader waits for no answer), until it succeeds
// or ctx ends: f's last error.
func retry(ctx context.Context, f func(context.Context) error) error {
	for {
		try, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := f(try)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Close stops the member (its copy stays in StoreDir).
func (m *Member) Close() {
	if m.nc != nil {
		m.nc.Close()
	}
	m.srv.Shutdown()
	m.srv.WaitForShutdown()
}

// key encodes a daemon's key as a bucket's key.
func key(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// op bounds one call to the cluster.
func (m *Member) op() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), m.cfg.Timeout)
}

// UseToken records a boot token's ID as spent, in the cluster; false when
// it already was, on any member. Without a majority it fails: the
// check-in that spends it is refused, never answered by one member alone.
func (m *Member) UseToken(id string, expires time.Time) (bool, error) {
	ctx, cancel := m.op()
	defer cancel()
	v := binary.BigEndian.AppendUint64(nil, uint64(expires.Unix()))
	_, err := m.tokens.Create(ctx, key(id), v)
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("the site's cluster did not record the spent token: %w", err)
	}
	return true, nil
}

// Session is the machine's current session as the cluster has it.
func (m *Member) Session(k string) (status.Session, bool) {
	ctx, cancel := m.op()
	defer cancel()
	data, err := m.leaderGet(ctx, BucketSessions, key(k))
	if err != nil {
		m.cfg.Log.Warn("sitecluster: read a session", "key", k, "err", err)
		return status.Session{}, false
	}
	if data == nil {
		return status.Session{}, false
	}
	var s status.Session
	if err := json.Unmarshal(data, &s); err != nil {
		m.cfg.Log.Warn("sitecluster: a session that is no JSON", "key", k, "err", err)
		return status.Session{}, false
	}
	return s, true
}

// leaderGet reads a key's newest value in bucket from the bucket's
// leader (JetStream's message-get API, which only the leader answers),
// not from this member's copy: what another member wrote a moment ago,
// once a majority had it, is what is read. nil, nil: no such key (or it
// was deleted).
func (m *Member) leaderGet(ctx context.Context, bucket, k string) ([]byte, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + k})
	resp, err := m.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return nil, err
	}
	var r struct {
		Message *struct {
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, err
	}
	switch {
	case r.Error != nil && r.Error.Code == 404:
		return nil, nil
	case r.Error != nil:
		return nil, fmt.Errorf("%s (%d/%d)", r.Error.Description, r.Error.Code, r.Error.ErrCode)
	case r.Message == nil:
		return nil, errors.New("an answer without its message")
	}
	if h := string(r.Message.Hdrs); strings.Contains(h, "KV-Operation: DEL") || strings.Contains(h, "KV-Operation: PURGE") {
		return nil, nil
	}
	return r.Message.Data, nil
}

// PutSession makes s the machine's current session, on a majority of the
// members before it returns.
func (m *Member) PutSession(k string, s status.Session) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	ctx, cancel := m.op()
	defer cancel()
	if _, err := m.sessions.Put(ctx, key(k), b); err != nil {
		return fmt.Errorf("the site's cluster did not record the session: %w", err)
	}
	return nil
}

// Installed is what a node last finished installing, as the cluster
// keeps it: its reprovision generation and install digest.
type Installed struct {
	Generation int    `json:"generation"`
	Install    string `json:"install,omitempty"`
}

// PutInstalled records that node (site/node) finished installing, on a
// majority of the members before it returns: a member that answers the
// node next sends it to its disk, whichever saw it provisioned.
func (m *Member) PutInstalled(node string, in Installed) error {
	b, _ := json.Marshal(in)
	ctx, cancel := m.op()
	defer cancel()
	if _, err := m.nodes.Put(ctx, key(node), b); err != nil {
		return fmt.Errorf("the site's cluster did not record %s's install: %w", node, err)
	}
	return nil
}

// Installed is what the cluster says node (site/node) last finished
// installing, read from the bucket's leader; ok false when it knows of
// none (or cannot be asked: the caller then has its own record only).
func (m *Member) Installed(node string) (Installed, bool, error) {
	// A second at most: a script is answered from this member's own
	// record when the cluster cannot say (no majority: the check-in that
	// would follow is refused anyway).
	ctx, cancel := context.WithTimeout(context.Background(), min(time.Second, m.cfg.Timeout))
	defer cancel()
	data, err := m.leaderGet(ctx, BucketNodes, key(node))
	if err != nil || data == nil {
		return Installed{}, false, err
	}
	var in Installed
	if err := json.Unmarshal(data, &in); err != nil {
		return Installed{}, false, err
	}
	return in, true, nil
}

// Secret is the site's credential secret: the one the first member to
// ask put in the cluster (mine, when none is there yet). Every member
// mints and checks boot tokens and sessions with it, so a machine's
// credential from one member is good on the others.
func (m *Member) Secret(mine []byte) ([]byte, error) {
	if len(mine) < 32 {
		b := make([]byte, 32)
		rand.Read(b)
		mine = b
	}
	ctx, cancel := m.op()
	defer cancel()
	_, err := m.site.Create(ctx, "boot-secret", mine)
	if err == nil {
		return mine, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("the site's cluster: the shared secret: %w", err)
	}
	// From the bucket's leader: this member's copy may not have the
	// other member's write yet.
	b, err := m.leaderGet(ctx, BucketSite, "boot-secret")
	if err == nil && len(b) < 32 {
		err = fmt.Errorf("%d bytes, want at least 32", len(b))
	}
	if err != nil {
		return nil, fmt.Errorf("the site's cluster: the shared secret: %w", err)
	}
	return b, nil
}

// Status is the cluster as one member sees it: its members, the leader
// of its metadata ("" when there is none: no majority), and each other
// member's state.
type Status struct {
	Member string `json:"member"`
	Leader string `json:"leader"`
	Size   int    `json:"size"`
	// Quorum: this member and the others it hears are a majority of
	// Size (it may take writes).
	Quorum  bool   `json:"quorum"`
	Members []Peer `json:"members"`
}

// Peer is another member as this one sees it: whether it is current (seen
// and caught up), offline, when last heard, and how many operations
// behind it is.
type Peer struct {
	Name    string        `json:"name"`
	Current bool          `json:"current"`
	Offline bool          `json:"offline,omitempty"`
	Active  time.Duration `json:"active"`
	Lag     uint64        `json:"lag,omitempty"`
}

// Status reads the member's view of the cluster.
func (m *Member) Status() Status {
	st := Status{Member: m.cfg.Name, Size: 1}
	info, err := m.srv.Jsz(&server.JSzOptions{})
	if err != nil || info.Meta == nil {
		return st
	}
	st.Leader, st.Size = info.Meta.Leader, info.Meta.Size
	up := 1
	for _, p := range info.Meta.Replicas {
		st.Members = append(st.Members, Peer{Name: p.Name, Current: p.Current, Offline: p.Offline, Active: p.Active, Lag: p.Lag})
		if !p.Offline {
			up++
		}
	}
	st.Quorum = st.Leader != "" && 2*up > st.Size
	return st
}

// PutRollout stores a rollout group's state, on a majority of the members
// before it returns.
func (m *Member) PutRollout(group string, state []byte) error {
	ctx, cancel := m.op()
	defer cancel()
	if _, err := m.rollouts.Put(ctx, key(group), state); err != nil {
		return fmt.Errorf("the site's cluster did not record rollout %s: %w", group, err)
	}
	return nil
}

// Rollouts is every rollout group's state, read from the bucket's leader.
func (m *Member) Rollouts() (map[string][]byte, error) {
	ctx, cancel := m.op()
	defer cancel()
	keys, err := m.rollouts.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("the site's cluster: its rollouts: %w", err)
	}
	out := map[string][]byte{}
	for k := range keys.Keys() {
		group, err := base64.RawURLEncoding.DecodeString(k)
		if err != nil {
			continue
		}
		b, err := m.leaderGet(ctx, BucketRollouts, k)
		if err != nil {
			return nil, fmt.Errorf("the site's cluster: rollout %s: %w", group, err)
		}
		if b != nil {
			out[string(group)] = b
		}
	}
	return out, nil
}

// SetServing records, in the cluster, the Git revision this member serves.
func (m *Member) SetServing(rev string) error {
	ctx, cancel := m.op()
	defer cancel()
	_, err := m.site.Put(ctx, "serving."+key(m.cfg.Name), []byte(rev))
	return err
}

// Serving is the revision each member (this one and those Status names)
// last said it serves, from this member's copy; a member that said none
// is left out.
func (m *Member) Serving() map[string]string {
	names := []string{m.cfg.Name}
	for _, p := range m.Status().Members {
		names = append(names, p.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(time.Second, m.cfg.Timeout))
	defer cancel()
	out := map[string]string{}
	for _, n := range names {
		if e, err := m.site.Get(ctx, "serving."+key(n)); err == nil {
			out[n] = string(e.Value())
		}
	}
	return out
}

// PutFact stores one of the site's facts by name (the power policy's
// record, …) in the site bucket, on a majority before it returns.
func (m *Member) PutFact(name string, data []byte) error {
	ctx, cancel := m.op()
	defer cancel()
	if _, err := m.site.Put(ctx, "fact."+key(name), data); err != nil {
		return fmt.Errorf("the site's cluster did not record %s: %w", name, err)
	}
	return nil
}

// Fact is the site's fact name, read from the bucket's leader (nil: none).
func (m *Member) Fact(name string) ([]byte, error) {
	ctx, cancel := m.op()
	defer cancel()
	return m.leaderGet(ctx, BucketSite, "fact."+key(name))
}
