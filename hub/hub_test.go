package hub

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/test/fleet"
	"github.com/bootops/bootops/trust"
)

// cluster starts n hub servers (n = 1 or 3) on loopback that accept sites.
// opts are a *slog.Logger and funcs that change each server's Config.
func cluster(t testing.TB, ctx context.Context, n int, sites map[string]string, opts ...any) []*Node {
	t.Helper()
	// FreePorts' ports are free when it looks, not when a server binds
	// them: another package's test may take one in between (the server
	// is then never ready). Such a start is tried again on other ports.
	for attempt := 1; ; attempt++ {
		nodes, err := startCluster(ctx, t.TempDir(), n, sites, testutil.FreePorts(t, 2*n), opts...)
		if err == nil {
			for _, node := range nodes {
				t.Cleanup(func() {
					if node.srv.Running() {
						node.Close()
					}
				})
			}
			return nodes
		}
		if attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; again on other ports", attempt, err)
	}
}

// startCluster starts n servers, their stores in dir: the first n ports are their clients',
// the next n their routes'. On an error none is left running.
func startCluster(ctx context.Context, dir string, n int, sites map[string]string, ports []string, opts ...any) ([]*Node, error) {
	clients, routes := ports[:n], ports[n:]
	nodes := make([]*Node, n)
	var wg sync.WaitGroup
	var errs = make([]error, n)
	for i := range n {
		name := fmt.Sprintf("hub-%d", i+1)
		cfg := Config{Name: name, Listen: clients[i], StoreDir: filepath.Join(dir, name, "js"), Sites: sites, Replicas: n}
		for _, o := range opts {
			switch o := o.(type) {
			case *slog.Logger:
				cfg.Log = o
			case func(*Config):
				o(&cfg)
			}
		}
		if n > 1 {
			cfg.ClusterListen = routes[i]
			tlsCfg, err := routeTLS(dir, name)
			if err != nil {
				return nil, err
			}
			cfg.ClusterTLS = tlsCfg
			for j := range n {
				if j != i {
					cfg.Routes = append(cfg.Routes, "nats://"+routes[j])
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = Start(ctx, cfg)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, node := range nodes {
			if node != nil {
				node.Close()
			}
		}
		return nil, err
	}
	return nodes, nil
}

// routeTLS is server name's route TLS, of a hub CA in dir (made at the
// first call).
func routeTLS(dir, name string) (*tls.Config, error) {
	caDir := filepath.Join(dir, "hub-ca")
	if _, err := os.Stat(filepath.Join(caDir, trust.CAFile)); err != nil {
		if err := trust.InitCA(caDir, trust.CAOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
			return nil, err
		}
	}
	cert, key, err := trust.IssueRoute(caDir, name, []string{"127.0.0.1"}, 1, time.Now())
	if err != nil {
		return nil, err
	}
	cf, kf := filepath.Join(caDir, name+".pem"), filepath.Join(caDir, name+"-key.pem")
	if err := os.WriteFile(cf, cert, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(kf, key, 0o600); err != nil {
		return nil, err
	}
	return trust.RouteTLS(cf, kf, filepath.Join(caDir, trust.CAFile))
}

// proxy stands between a site and the hub's servers: cut drops every
// connection and refuses new ones until mend.
type proxy struct {
	t        testing.TB
	backends []string
	addrs    []string
	mu       sync.Mutex
	lns      []net.Listener
	conns    []net.Conn
}

func newProxy(t testing.TB, backends []string) *proxy {
	p := &proxy{t: t, backends: backends}
	for range backends {
		p.addrs = append(p.addrs, testutil.FreePort(t))
	}
	p.mend()
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) urls() []string {
	var out []string
	for _, a := range p.addrs {
		out = append(out, "nats://"+a)
	}
	return out
}

func (p *proxy) mend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, a := range p.addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			p.t.Fatal(err)
		}
		p.lns = append(p.lns, ln)
		go func(ln net.Listener, backend string) {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				b, err := net.Dial("tcp", backend)
				if err != nil {
					c.Close()
					continue
				}
				p.mu.Lock()
				p.conns = append(p.conns, c, b)
				p.mu.Unlock()
				go func() { io.Copy(b, c); b.Close() }()
				go func() { io.Copy(c, b); c.Close() }()
			}
		}(ln, p.backends[i])
	}
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ln := range p.lns {
		ln.Close()
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.lns, p.conns = nil, nil
}

// site is a site daemon's status store and its forwarder.
type site struct {
	name  string
	idx   int
	store *status.Durable
	fwd   *Forwarder
	proxy *proxy
	done  chan struct{}
	log   testutil.SyncBuffer // the forwarder's, shown when the site does not drain
}

func newSite(t testing.TB, ctx context.Context, name string, idx int, hubs []string, kp nkeys.KeyPair) *site {
	t.Helper()
	seed, _ := kp.Seed()
	s := &site{name: name, idx: idx, proxy: newProxy(t, hubs), done: make(chan struct{})}
	st, err := status.Open(filepath.Join(t.TempDir(), "status.db"), status.Options{Outbox: true, Changed: func() {
		if s.fwd != nil {
			s.fwd.Poke()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.store = st
	s.fwd = &Forwarder{Site: name, URLs: s.proxy.urls(), Seed: seed, Outbox: st, HelloEvery: time.Second,
		Hello: func() Hello { return Hello{Plan: "plan-" + name, Nodes: []string{"never-booted"}} },
		Log:   slog.New(slog.NewTextHandler(&s.log, nil))}
	go func() { defer close(s.done); s.fwd.Run(ctx) }()
	t.Cleanup(func() { <-s.done; st.Close() })
	return s
}

// provision writes a full provisioning's events for machines from..to-1,
// as the boot plane and the agents would: DHCP, script, check-in, four
// actions with progress, provisioned.
func (s *site) provision(t testing.TB, from, to int) {
	t.Helper()
	var batch []status.Event
	for i := from; i < to; i++ {
		ev := fleet.Provisioning(s.name, s.idx, i)
		batch = append(batch, ev...)
		if len(batch) >= 1000 || i == to-1 {
			if err := s.store.RecordSync(batch...); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
}

// drained waits until the site's outbox is empty.
func (s *site) drained(t testing.TB, d time.Duration) {
	t.Helper()
	if testutil.Poll(d, 100*time.Millisecond, func() bool { out, _ := s.store.Pending(0, 1); return len(out) == 0 }) {
		return
	}
	out, _ := s.store.Pending(0, 100000)
	t.Fatalf("site %s: %d events still not acknowledged after %s; its forwarder's log:\n%s", s.name, len(out), d, s.log.String())
}

// caughtUp waits until node's view has applied every site stream's last
// message.
func caughtUp(t testing.TB, ctx context.Context, n *Node, d time.Duration) {
	t.Helper()
	var behind uint64
	var err error
	if testutil.Poll(d, 100*time.Millisecond, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		behind, err = n.Behind(cctx)
		cancel()
		return err == nil && behind == 0 && n.View.Applied() > 0
	}) {
		return
	}
	t.Fatalf("%s: the view is %d messages behind the sites' streams (%v)", n.cfg.Name, behind, err)
}

type summary struct {
	State, Last string
	Events      int
}

func summarize(ms []status.Machine) map[string]summary {
	out := map[string]summary{}
	for _, m := range ms {
		out[m.Key] = summary{m.State, m.Last.Message, m.Events}
	}
	return out
}

// sameView compares a hub's view with the union of the sites' stores:
// every machine, its state, its last message and its number of events
// (a duplicate or a loss changes it).
func sameView(t testing.TB, n *Node, sites []*site) {
	t.Helper()
	want := map[string]summary{}
	for _, s := range sites {
		for k, v := range summarize(s.store.Machines()) {
			if !status.IsNodeKey(k) {
				k = s.name + ":" + k // the hub keys a machine that is no node by its site
			}
			want[k] = v
		}
	}
	got := summarize(n.View.Machines())
	if len(got) != len(want) {
		t.Errorf("%s: %d machines, the sites have %d", n.cfg.Name, len(got), len(want))
	}
	bad := 0
	for k, w := range want {
		if g := got[k]; g != w {
			if bad++; bad <= 5 {
				t.Errorf("%s: %s is %+v, its site says %+v", n.cfg.Name, k, g, w)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d machines differ", n.cfg.Name, bad)
	}
}

func siteKeys(t testing.TB, names ...string) (map[string]string, map[string]nkeys.KeyPair) {
	pubs, kps := map[string]string{}, map[string]nkeys.KeyPair{}
	for _, n := range names {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		pubs[n], kps[n] = pub, kp
	}
	return pubs, kps
}

// Three hub servers (a JetStream cluster, the stream on all three) and
// three sites of 1,000 machines each: every hub's view is the union of the
// sites'. One site's link is cut for a minute while its machines go on
// provisioning: once it is back the hub has every event, once. The
// stream's leader is killed: the other two go on, and so does their view.
// A fourth site is killed before it hears the hub's acknowledgements and
// started again past the stream's duplicate window (5 s here): what it
// sends again is not counted twice. A serial seen at two sites is two
// machines.
func TestHubFleet(t *testing.T) {
	testutil.Slow(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := []string{"north", "south", "east"}
	pubs, kps := siteKeys(t, append(names, "west")...)
	const dedup = 5 * time.Second
	var hubLog testutil.SyncBuffer
	hubs := cluster(t, ctx, 3, pubs, func(c *Config) { c.Dedup = dedup }, slog.New(slog.NewTextHandler(&hubLog, nil)))
	rogueRoutes(t, hubs[0], &hubLog)
	var urls []string
	for _, h := range hubs {
		urls = append(urls, h.cfg.Listen)
	}
	var sites []*site
	for i, n := range names {
		sites = append(sites, newSite(t, ctx, n, i, urls, kps[n]))
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range sites {
		wg.Add(1)
		go func() { defer wg.Done(); s.provision(t, 0, 1000) }()
	}
	wg.Wait()
	for _, s := range sites {
		s.drained(t, 4*time.Minute)
	}
	for _, h := range hubs {
		caughtUp(t, ctx, h, time.Minute)
		sameView(t, h, sites)
	}
	t.Logf("3 sites × 1,000 machines (%d events) in every hub's view: %s", 3*1000*fleet.EventsPerMachine, time.Since(start).Round(time.Millisecond))
	doc := hubs[0].View.Doc("hub-1")
	if len(doc.Sites) != 3 || doc.Sites[0].Plan != "plan-east" || doc.Sites[0].LastHeard.IsZero() {
		t.Errorf("sites in the hub's document: %+v", doc.Sites)
	}
	registered := 0
	for _, m := range doc.Nodes {
		if m.Node == "never-booted" && m.State == status.StateRegistered {
			registered++
		}
	}
	if len(doc.Nodes) != 3003 || registered != 3 {
		t.Errorf("%d nodes in the hub's document (%d registered, never booted); want 3,003 and 3", len(doc.Nodes), registered)
	}

	// The uplink of "east" is cut for a minute; its machines go on.
	east := sites[2]
	east.proxy.cut()
	cutAt := time.Now()
	if !testutil.Poll(5*time.Second, 50*time.Millisecond, func() bool { return !east.fwd.Connected() }) {
		t.Fatal("east still connected after its link was cut")
	}
	for k := range 6 {
		east.provision(t, 1000+k*50, 1050+k*50)
		time.Sleep(10 * time.Second)
	}
	if out, _ := east.store.Pending(0, 100000); len(out) != 300*fleet.EventsPerMachine {
		t.Errorf("east's outbox holds %d events after a minute cut off, want %d", len(out), 300*fleet.EventsPerMachine)
	}
	east.proxy.mend()
	back := time.Now()
	east.drained(t, 4*time.Minute)
	for _, h := range hubs {
		caughtUp(t, ctx, h, time.Minute)
		sameView(t, h, sites)
	}
	t.Logf("east cut off %s, caught up %s after its link came back", back.Sub(cutAt).Round(time.Second), time.Since(back).Round(time.Millisecond))

	// Kill the leader of north's stream: the other two serve on.
	js, _ := jetstream.New(hubs[0].nc)
	s, err := js.Stream(ctx, SiteStream("north"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		t.Fatalf("stream info: %v", err)
	}
	var alive []*Node
	for _, h := range hubs {
		if h.cfg.Name == info.Cluster.Leader {
			h.Close()
			t.Logf("killed %s, the stream's leader", h.cfg.Name)
		} else {
			alive = append(alive, h)
		}
	}
	if len(alive) != 2 {
		t.Fatalf("leader %q is none of the hubs", info.Cluster.Leader)
	}
	for _, s := range sites {
		s.provision(t, 2000, 2100)
	}
	for _, s := range sites {
		s.drained(t, 4*time.Minute)
	}
	for _, h := range alive {
		caughtUp(t, ctx, h, time.Minute)
		sameView(t, h, sites)
	}

	// The same serial at two sites: two machines.
	for _, s := range sites[:2] {
		if err := s.store.RecordSync(status.Event{Kind: status.KindScript, Serial: "SER-SHARED", Message: "script for " + s.name}); err != nil {
			t.Fatal(err)
		}
		s.drained(t, 3*time.Minute)
	}

	// west is killed before it hears any acknowledgement, and started
	// again after the duplicate window: it sends everything again.
	west := &site{name: "west", idx: 3}
	west.store, err = status.Open(filepath.Join(t.TempDir(), "status.db"), status.Options{Outbox: true})
	if err != nil {
		t.Fatal(err)
	}
	defer west.store.Close()
	west.provision(t, 0, 200)
	seed, _ := kps["west"].Seed()
	var aliveURLs []string
	for _, h := range alive {
		aliveURLs = append(aliveURLs, "nats://"+h.cfg.Listen)
	}
	forward := func(out Outbox) (stop func()) {
		fctx, fcancel := context.WithCancel(ctx)
		f := &Forwarder{Site: "west", URLs: aliveURLs, Seed: seed, Outbox: out}
		done := make(chan struct{})
		go func() { defer close(done); f.Run(fctx) }()
		return func() { fcancel(); <-done }
	}
	stop := forward(noAck{west.store})
	want := 200 * fleet.EventsPerMachine
	if !testutil.Poll(time.Minute, 50*time.Millisecond, func() bool {
		return alive[0].View.Refused("west", RefusedDuplicate) > 0 || siteEvents(alive[0], "west") >= uint64(want)
	}) {
		t.Fatalf("west: %d events in the view, want %d", siteEvents(alive[0], "west"), want)
	}
	stop()
	time.Sleep(dedup + time.Second)
	stop = forward(west.store)
	defer stop()
	west.drained(t, 3*time.Minute)
	sites = append(sites, west)
	for _, h := range alive {
		caughtUp(t, ctx, h, time.Minute)
		sameView(t, h, sites)
		if got := siteEvents(h, "west"); got != uint64(want) {
			t.Errorf("%s: west has %d events, want %d", h.cfg.Name, got, want)
		}
		for _, site := range []string{"north", "south"} {
			if ev := h.View.Events(site + ":serial:SER-SHARED"); len(ev) != 1 || ev[0].Message != "script for "+site {
				t.Errorf("%s: %s's SER-SHARED: %+v", h.cfg.Name, site, ev)
			}
		}
	}
}

func siteEvents(n *Node, site string) uint64 {
	for _, s := range n.View.Sites() {
		if s.Name == site {
			return s.Events
		}
	}
	return 0
}

// A site's credential publishes on its own subject only; an unknown key
// does not get in; both are refused where the hub says so, and nothing of
// theirs reaches the view.
func TestHubRefusesOtherSites(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north", "south")
	var logBuf testutil.SyncBuffer
	hubs := cluster(t, ctx, 1, pubs, slog.New(slog.NewTextHandler(&logBuf, nil)))
	url := "nats://" + hubs[0].cfg.Listen

	errs := make(chan error, 10)
	kp := kps["north"]
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect(url, nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(Inbox("north")), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = js.Publish(cctx, SubjectPrefix+"south", []byte(`{"kind":"agent","site":"south","node":"n1","state":"failed","message":"forged"}`))
	ccancel()
	if err == nil {
		t.Error("north published on south's subject")
	}
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "Permissions Violation for Publish") {
			t.Errorf("refusal: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Error("no permissions violation reported")
	}
	// On its own subject, in another site's name: dropped by the view.
	cctx, ccancel = context.WithTimeout(ctx, 2*time.Second)
	if _, err := js.PublishMsg(cctx, eventMsg("north", 1, 0, status.Event{Kind: "agent", Site: "south", Node: "n1", State: "failed", Message: "forged"})); err != nil {
		t.Errorf("north on its own subject: %v", err)
	}
	ccancel()
	caughtUp(t, ctx, hubs[0], 10*time.Second)
	if len(hubs[0].View.Machines()) != 0 || hubs[0].View.Forged() != 1 {
		t.Errorf("machines %d, forged %d", len(hubs[0].View.Machines()), hubs[0].View.Forged())
	}

	stranger, _ := nkeys.CreateUser()
	spub, _ := stranger.PublicKey()
	if _, err := nats.Connect(url, nats.Nkey(spub, stranger.Sign)); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Errorf("an unknown key connected: %v", err)
	}
	if _, err := nats.Connect(url); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Errorf("a connection without a key: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	for _, want := range []string{`Publish Violation - Subject \"bootops.events.south\"`, "authentication error - Nkey"} {
		if !strings.Contains(logBuf.String(), want) {
			t.Errorf("the hub's log lacks %q:\n%s", want, logBuf.String())
		}
	}
}

// Sites added and removed while the hub runs: the new one gets in at
// once, the removed one is shut out.
func TestHubSetSites(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north", "south")
	hubs := cluster(t, ctx, 1, map[string]string{"north": pubs["north"]})
	url := "nats://" + hubs[0].cfg.Listen
	connect := func(site string) (*nats.Conn, error) {
		kp := kps[site]
		pub, _ := kp.PublicKey()
		return nats.Connect(url, nats.Nkey(pub, kp.Sign), nats.MaxReconnects(0), nats.CustomInboxPrefix(Inbox(site)))
	}
	if _, err := connect("south"); err == nil {
		t.Fatal("south got in before it was added")
	}
	north, err := connect("north")
	if err != nil {
		t.Fatal(err)
	}
	defer north.Close()
	if err := hubs[0].SetSites(map[string]string{"south": pubs["south"]}); err != nil {
		t.Fatal(err)
	}
	south, err := connect("south")
	if err != nil {
		t.Fatalf("south after it was added: %v", err)
	}
	defer south.Close()
	js, _ := jetstream.New(south)
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if _, err := js.PublishMsg(cctx, eventMsg("south", 1, 0, status.Event{Kind: "dhcp", Site: "south", MAC: "52:54:00:00:00:01", Message: "hello"})); err != nil {
		t.Errorf("south publishing: %v", err)
	}
	if !testutil.Poll(5*time.Second, 50*time.Millisecond, func() bool { return !north.IsConnected() }) {
		t.Error("north, removed, is still connected")
	}
	if _, err := connect("north"); err == nil {
		t.Error("north, removed, got in again")
	}
	// The last site removed: nobody is let in, and south is cut off.
	if err := hubs[0].SetSites(map[string]string{}); err != nil {
		t.Fatal(err)
	}
	if !testutil.Poll(5*time.Second, 50*time.Millisecond, func() bool { return !south.IsConnected() }) {
		t.Error("south, the last site, removed, is still connected")
	}
	if _, err := connect("south"); err == nil {
		t.Error("south, the last site, removed, got in again")
	}
}
