package hub

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/natslog"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/trust"
)

// A cluster server without route TLS does not start.
func TestHubClusterNeedsTLS(t *testing.T) {
	sites, _ := siteKeys(t, "s1")
	_, err := Start(context.Background(), Config{Name: "hub-x", Listen: testutil.FreePort(t), ClusterListen: testutil.FreePort(t), StoreDir: t.TempDir(), Sites: sites})
	if err == nil || !strings.Contains(err.Error(), "bootops ca route") {
		t.Errorf("a cluster server without route TLS: %v", err)
	}
}

// rogueRoutes checks, on a server of a running cluster, that its cluster
// port lets in only hub servers with a route certificate of the hub's CA:
// a rogue server with no TLS, with a route certificate of another CA, or
// with a certificate of the hub's CA that is no route's (an operator's)
// forms no route; one with a route certificate does. TestHubFleet runs it
// on its cluster.
func rogueRoutes(t *testing.T, node *Node, hubLog *testutil.SyncBuffer) {
	t.Helper()
	began := time.Now()
	clusterAddr := node.cfg.ClusterListen
	dir := filepath.Dir(filepath.Dir(node.cfg.StoreDir))
	other := t.TempDir()
	otherTLS, err := routeTLS(other, "rogue")
	if err != nil {
		t.Fatal(err)
	}
	// The rogue takes any server: the refusal to see is the hub's.
	otherTLS.InsecureSkipVerify, otherTLS.VerifyPeerCertificate = true, nil
	hubCA := filepath.Join(dir, "hub-ca")
	opCert, opKey, err := trust.IssueOperator(hubCA, "mallory", "operate", 1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := filepath.Join(t.TempDir(), "op.pem"), filepath.Join(t.TempDir(), "op-key.pem")
	os.WriteFile(cf, opCert, 0o644)
	os.WriteFile(kf, opKey, 0o600)
	opTLS, err := trust.RouteTLS(cf, kf, filepath.Join(hubCA, trust.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	goodTLS, err := routeTLS(dir, "hub-2")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		tls     *tls.Config
		joins   bool
		refusal string // in the hub's log
	}{
		{"no TLS", nil, false, ""},
		{"another CA's route certificate", otherTLS, false, "unknown authority"},
		{"the hub CA's operator certificate", opTLS, false, "no hub server's route certificate"},
		{"the hub CA's route certificate", goodTLS, true, ""},
	} {
		var log testutil.SyncBuffer
		before := len(hubLog.String())
		rogue := rogueServer(t, clusterAddr, c.tls, &log)
		joined := testutil.Poll(5*time.Second, 100*time.Millisecond, func() bool { return rogue.NumRoutes() > 0 })
		if joined != c.joins {
			t.Errorf("%s: joined %v, want %v", c.name, joined, c.joins)
		}
		if said := hubLog.String()[before:]; c.refusal != "" && !(strings.Contains(said, "TLS route handshake error") && strings.Contains(said, c.refusal)) {
			t.Errorf("%s: the hub's log does not say the route was refused (%q):\n%.2000s", c.name, c.refusal, said)
		}
		if c.tls == nil && !strings.Contains(log.String(), "Router connection closed") {
			t.Errorf("no TLS: the rogue's route was not closed:\n%s", log.String())
		}
		rogue.Shutdown()
		rogue.WaitForShutdown()
	}
	t.Logf("rogue routes refused, a real one taken: %v", time.Since(began).Round(time.Millisecond))
}

// rogueServer is a NATS server that dials the hub's cluster port with
// tlsCfg (nil: none) as a route.
func rogueServer(t *testing.T, clusterAddr string, tlsCfg *tls.Config, log *testutil.SyncBuffer) *server.Server {
	t.Helper()
	u, _ := url.Parse("nats://" + clusterAddr)
	opts := &server.Options{ServerName: "rogue", Host: "127.0.0.1", Port: -1, NoSigs: true,
		Cluster: server.ClusterOpts{Name: "bootops-hub", Host: "127.0.0.1", Port: -1, TLSConfig: tlsCfg, TLSTimeout: 2},
		Routes:  []*url.URL{u}}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.SetLoggerV2(natslog.Logger{Log: slog.New(slog.NewTextHandler(log, nil)), Prefix: "nats: ", Notice: slog.LevelInfo}, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("the rogue server did not start")
	}
	return s
}

// A damaged sequences file never hangs the start: one cut short is moved
// aside (the view rebuilds the sequences from the stream); one that cannot
// be read is an error, at once.
func TestHubDamagedSequences(t *testing.T) {
	sites, _ := siteKeys(t, "s1")
	start := func(store string) (*Node, error) {
		type res struct {
			n   *Node
			err error
		}
		done := make(chan res, 1)
		go func() {
			n, err := Start(context.Background(), Config{Name: "hub-1", Listen: testutil.FreePort(t), StoreDir: store, Sites: sites})
			done <- res{n, err}
		}()
		select {
		case r := <-done:
			return r.n, r.err
		case <-time.After(60 * time.Second):
			t.Fatal("the hub did not start or fail within 60 s")
			return nil, nil
		}
	}
	cut := t.TempDir()
	if err := os.WriteFile(filepath.Join(cut, "sequences.json"), []byte(`{"s1/e1": 12`), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := start(cut)
	if err != nil {
		t.Fatalf("a sequences file cut short: %v", err)
	}
	n.Close()
	aside, _ := filepath.Glob(filepath.Join(cut, "sequences.json.corrupt-*"))
	if len(aside) != 1 {
		t.Errorf("the damaged file was not moved aside: %v", aside)
	}
	unreadable := t.TempDir()
	if err := os.Mkdir(filepath.Join(unreadable, "sequences.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	if n, err := start(unreadable); err == nil {
		n.Close()
		t.Error("a sequences file that cannot be read: started anyway")
	}
}

// Issue 44: a hub server rebuilt without its sequences file (a new server,
// or the file lost) reads a site whose oldest messages left its stream:
// the site's first event there waits for a predecessor that will never
// come. Once the view has read the stream to its end, what waits is
// applied — the site is shown, with every event its stream still holds.
func TestHubRebuiltServerShowsEverySite(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north", "south")
	store := t.TempDir()
	cfg := Config{Name: "hub-1", Listen: testutil.FreePort(t), StoreDir: store, Sites: pubs, Limits: Limits{SiteMsgs: 50}}
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	north := newSite(t, ctx, "north", 0, []string{cfg.Listen}, kps["north"])
	south := newSite(t, ctx, "south", 1, []string{cfg.Listen}, kps["south"])
	for i := range 100 {
		if err := north.store.RecordSync(status.Event{Kind: status.KindDHCP, Site: "north", Node: "n1", Message: fmt.Sprint("north ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	south.provision(t, 0, 3)
	north.drained(t, time.Minute)
	south.drained(t, time.Minute)
	caughtUp(t, ctx, n, time.Minute)
	n.Close()
	if err := os.Remove(filepath.Join(store, "sequences.json")); err != nil {
		t.Fatal(err)
	}
	n, err = Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	caughtUp(t, ctx, n, time.Minute)
	var names []string
	for _, s := range n.View.Sites() {
		names = append(names, s.Name)
	}
	if fmt.Sprint(names) != "[north south]" {
		t.Errorf("the rebuilt server shows sites %v, want north and south", names)
	}
	// The stream holds its last 50 messages: north's events, and a hello
	// of north's among them when one came after the first of those.
	held := streamEvents(t, ctx, n, "north")
	ev := n.View.Events("north/n1")
	if held < 49 || len(ev) != held || ev[len(ev)-1].Message != "north 99" || ev[0].Message != fmt.Sprint("north ", 100-held) {
		t.Errorf("north's events on the rebuilt server: %d, want the %d its stream holds (north %d … north 99)", len(ev), held, 100-held)
	}
}

// streamEvents counts the events (not the hellos) site's stream holds.
func streamEvents(t *testing.T, ctx context.Context, n *Node, site string) int {
	t.Helper()
	s, err := n.js.Stream(ctx, SiteStream(site))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted, or a hello gone with its TTL
		}
		if m.Header.Get(Kind) == KindEvent {
			events++
		}
	}
	return events
}
