package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
)

// The tests of this file are issue 26's findings: a site's key, used by
// the real nats.go client as a hostile site, cannot read, write or hide
// another site's events, nor its own later ones.

// hostile connects to the hub with a site's key, as any NATS client can.
func hostile(t *testing.T, n *Node, kp nkeys.KeyPair, opts ...nats.Option) (*nats.Conn, chan error) {
	t.Helper()
	errs := make(chan error, 100)
	pub, _ := kp.PublicKey()
	opts = append([]nats.Option{nats.Nkey(pub, kp.Sign), nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		})}, opts...)
	nc, err := nats.Connect("nats://"+n.cfg.Listen, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

func eventJSON(e status.Event) []byte {
	b, _ := json.Marshal(e)
	return b
}

// eventMsg is an event as the forwarder sends it.
func eventMsg(site string, seq, prev uint64, e status.Event) *nats.Msg {
	m := nats.NewMsg(SubjectPrefix + site)
	m.Header.Set(Kind, KindEvent)
	m.Header.Set(Seq, strconv.FormatUint(seq, 10))
	m.Header.Set(Prev, strconv.FormatUint(prev, 10))
	m.Data = eventJSON(e)
	return m
}

// streamReady waits until n has made its sites' streams.
func streamReady(t *testing.T, ctx context.Context, n *Node) {
	t.Helper()
	if !testutil.Poll(15*time.Second, 50*time.Millisecond, func() bool {
		n.mu.Lock()
		lanes := len(n.lanes)
		n.mu.Unlock()
		_, err := n.Behind(ctx)
		return lanes > 0 && err == nil
	}) {
		t.Fatal("no streams")
	}
	time.Sleep(200 * time.Millisecond) // and the hub takes messages in
}

// Finding 1: a site's key subscribes to nothing but its own inbox: not
// _INBOX.> (where the hub's reader gets the stream and other sites their
// acknowledgements), not another site's subject, not $JS.
func TestHubSiteReadsNothingElse(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north", "south")
	hubs := cluster(t, ctx, 1, pubs)
	nc, errs := hostile(t, hubs[0], kps["north"])
	got := make(chan *nats.Msg, 1000)
	for _, subj := range []string{"_INBOX.>", ">", "bootops.>", "$JS.>", "_INBOX_south.>"} {
		if _, err := nc.ChanSubscribe(subj, got); err != nil {
			t.Fatal(err)
		}
	}
	nc.Flush()
	south := newSite(t, ctx, "south", 1, []string{hubs[0].cfg.Listen}, kps["south"])
	if err := south.store.RecordSync(status.Event{Kind: status.KindDHCP, Site: "south", MAC: "52:54:00:00:00:01", Message: "secret of south"}); err != nil {
		t.Fatal(err)
	}
	south.drained(t, 30*time.Second)
	caughtUp(t, ctx, hubs[0], 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	select {
	case m := <-got:
		t.Errorf("north read %s: %.80q", m.Subject, m.Data)
	default:
	}
	violations := 0
	for len(errs) > 0 {
		if strings.Contains((<-errs).Error(), "Permissions Violation for Subscription") {
			violations++
		}
	}
	if violations != 5 {
		t.Errorf("%d subscriptions refused, want 5", violations)
	}
}

// Finding 2: a publish on the site's own subject with a reply subject
// elsewhere (another site's subject, the JetStream API) does not make the
// hub write there.
func TestHubReplyGoesNowhereElse(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north", "south")
	hubs := cluster(t, ctx, 1, pubs)
	streamReady(t, ctx, hubs[0])
	nc, _ := hostile(t, hubs[0], kps["north"])
	ev := status.Event{Kind: status.KindDHCP, MAC: "52:54:00:00:00:02", Message: "north"}
	for i, reply := range []string{SubjectPrefix + "south", "$JS.API.STREAM.PURGE." + SiteStream("south"), "$JS.API.STREAM.DELETE." + SiteStream("north"), SiteSubject("south")} {
		m := eventMsg("north", uint64(i+1), uint64(i), ev)
		m.Reply = reply
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// The mark question (KindMark) answered into south's inbox: refused;
	// south hears nothing.
	south, _ := hostile(t, hubs[0], kps["south"], nats.CustomInboxPrefix(Inbox("south")))
	heard, err := south.SubscribeSync(Inbox("south") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	south.Flush()
	ask := nats.NewMsg(SubjectPrefix + "north")
	ask.Header.Set(Kind, KindMark)
	ask.Reply = Inbox("south") + ".stolen"
	if err := nc.PublishMsg(ask); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	time.Sleep(time.Second)
	if m, err := heard.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("south's inbox heard %q, an answer to north's question", m.Data)
	}
	// Asked into its own inbox, north hears its own mark only.
	q := nats.NewMsg(SubjectPrefix + "north")
	q.Header.Set(Kind, KindMark)
	north, _ := hostile(t, hubs[0], kps["north"], nats.CustomInboxPrefix(Inbox("north")))
	if r, err := north.RequestMsg(q, 5*time.Second); err != nil || string(r.Data) != `{"mark":0}` {
		t.Errorf("north's own mark question: %v %+v", err, r)
	}
	v := hubs[0].View
	for _, s := range v.Sites() {
		if s.Name != "north" {
			t.Errorf("site %q in the view: %+v", s.Name, s)
		}
	}
	for _, m := range v.Machines() {
		if m.Site != "north" {
			t.Errorf("machine %q (site %q) in the view", m.Key, m.Site)
		}
	}
	js, _ := jetstream.New(hubs[0].nc)
	for _, site := range []string{"north", "south"} {
		s, err := js.Stream(ctx, SiteStream(site))
		if err != nil {
			t.Fatalf("%s's stream: %v", site, err)
		}
		if info, _ := s.Info(ctx); info == nil || info.State.Msgs != 0 {
			t.Errorf("%s's stream holds messages: %+v", site, info)
		}
	}
	if got := v.Refused("north", RefusedReply); got != 5 {
		t.Errorf("%d of north's replies refused, want 5 (4 events, 1 mark question)", got)
	}
}

// Finding 3: an unknown machine is its site's: the same MAC (or serial)
// at two sites is two machines, each with its own timeline.
func TestHubMachinesAreTheirSites(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north", "south")
	hubs := cluster(t, ctx, 1, pubs)
	var sites []*site
	for i, name := range []string{"north", "south"} {
		s := newSite(t, ctx, name, i, []string{hubs[0].cfg.Listen}, kps[name])
		if err := s.store.RecordSync(
			status.Event{Kind: status.KindDHCP, MAC: "52:54:00:aa:aa:aa", Message: "dhcp at " + name},
			status.Event{Kind: status.KindScript, Serial: "SER-1", Message: "script at " + name},
		); err != nil {
			t.Fatal(err)
		}
		sites = append(sites, s)
	}
	for _, s := range sites {
		s.drained(t, 30*time.Second)
	}
	caughtUp(t, ctx, hubs[0], 10*time.Second)
	ms := hubs[0].View.Machines()
	if len(ms) != 4 {
		t.Errorf("%d machines, want 4 (a MAC and a serial at each site): %+v", len(ms), ms)
	}
	for _, m := range ms {
		ev := hubs[0].View.Events(m.Key)
		if len(ev) != 1 || !strings.HasSuffix(ev[0].Message, " at "+m.Site) {
			t.Errorf("%s (site %q): %+v", m.Key, m.Site, ev)
		}
	}
}

// noAck is an outbox whose site dies before it hears the hub's
// acknowledgement: nothing leaves it.
type noAck struct{ Outbox }

func (noAck) Sent(uint64) error { return nil }

// Finding 4: a site killed mid-forward and started again after the
// stream's duplicate window sends again what the hub had: not counted
// twice.
func TestHubResendAfterDedupWindow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north")
	hubs := cluster(t, ctx, 1, pubs, nil, func(c *Config) { c.Dedup = time.Second })
	st, err := status.Open(filepath.Join(t.TempDir(), "status.db"), status.Options{Outbox: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 50 {
		if err := st.RecordSync(status.Event{Kind: status.KindDHCP, Site: "north", Node: "n1", MAC: "52:54:00:00:00:03", Message: fmt.Sprint("event ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	seed, _ := kps["north"].Seed()
	run := func(out Outbox) (stop func()) {
		fctx, fcancel := context.WithCancel(ctx)
		f := &Forwarder{Site: "north", URLs: []string{"nats://" + hubs[0].cfg.Listen}, Seed: seed, Outbox: out}
		done := make(chan struct{})
		go func() { defer close(done); f.Run(fctx) }()
		return func() { fcancel(); <-done }
	}
	stop := run(noAck{st})
	if !testutil.Poll(30*time.Second, 50*time.Millisecond, func() bool { return len(hubs[0].View.Events("north/n1")) == 50 }) {
		t.Fatalf("%d events in the view, want 50", len(hubs[0].View.Events("north/n1")))
	}
	stop()
	time.Sleep(2 * time.Second) // past the duplicate window
	stop = run(st)
	defer stop()
	drained := testutil.Poll(30*time.Second, 50*time.Millisecond, func() bool { out, _ := st.Pending(0, 1); return len(out) == 0 })
	if !drained {
		t.Fatal("the outbox did not drain")
	}
	caughtUp(t, ctx, hubs[0], 10*time.Second)
	if n := len(hubs[0].View.Events("north/n1")); n != 50 {
		t.Errorf("%d events in the view after the resend, want 50", n)
	}
	if s := hubs[0].View.Sites(); len(s) != 1 || s[0].Events != 50 {
		t.Errorf("site: %+v", s)
	}
}

// Finding 5: the site's hello says how many events wait in its outbox.
func TestHubHelloCountsUnsent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north")
	hubs := cluster(t, ctx, 1, pubs)
	st, err := status.Open(filepath.Join(t.TempDir(), "status.db"), status.Options{Outbox: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 300 {
		if err := st.RecordSync(status.Event{Kind: status.KindDHCP, Site: "north", Node: "n1", Message: fmt.Sprint("event ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	seed, _ := kps["north"].Seed()
	f := &Forwarder{Site: "north", URLs: []string{"nats://" + hubs[0].cfg.Listen}, Seed: seed, Outbox: st, HelloEvery: time.Hour,
		Hello: func() Hello { return Hello{Plan: "p"} }}
	fctx, fcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.Run(fctx) }()
	defer func() { fcancel(); <-done }()
	if !testutil.Poll(30*time.Second, 50*time.Millisecond, func() bool { s := hubs[0].View.Sites(); return len(s) == 1 && s[0].Plan == "p" }) {
		t.Fatal("no hello")
	}
	if s := hubs[0].View.Sites(); s[0].Pending != 300 {
		t.Errorf("the hello says %d unsent, the outbox holds 300", s[0].Pending)
	}
}

// Finding 6: a site whose key was removed and put back connects again by
// itself, and says meanwhile that it is refused.
func TestHubSiteComesBackAfterRefusal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north")
	var logBuf testutil.SyncBuffer
	hubs := cluster(t, ctx, 1, pubs)
	st, err := status.Open(filepath.Join(t.TempDir(), "status.db"), status.Options{Outbox: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seed, _ := kps["north"].Seed()
	f := &Forwarder{Site: "north", URLs: []string{"nats://" + hubs[0].cfg.Listen}, Seed: seed, Outbox: st,
		Log: slog.New(slog.NewTextHandler(&logBuf, nil))}
	fctx, fcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.Run(fctx) }()
	defer func() { fcancel(); <-done }()
	if !testutil.Poll(10*time.Second, 50*time.Millisecond, f.Connected) {
		t.Fatal("not connected")
	}
	if err := hubs[0].SetSites(map[string]string{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second) // nats.go gives up after two refusals
	if f.Connected() {
		t.Error("connected while its key is removed")
	}
	if err := hubs[0].SetSites(pubs); err != nil {
		t.Fatal(err)
	}
	st.RecordSync(status.Event{Kind: status.KindDHCP, Site: "north", Node: "n1", Message: "after"})
	if !testutil.Poll(40*time.Second, 50*time.Millisecond, func() bool { out, _ := st.Pending(0, 1); return len(out) == 0 }) {
		t.Errorf("the site did not come back once its key was restored; its log:\n%s", logBuf.String())
	}
	if !strings.Contains(strings.ToLower(logBuf.String()), "authorization violation") {
		t.Errorf("the site's log does not say it is refused:\n%s", logBuf.String())
	}
}

// Finding 7: a site is bounded: the message size, its messages on the
// stream, its machines and its events' size in the view; what is past a
// bound is counted and said.
func TestHubBoundsASite(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north")
	var logBuf testutil.SyncBuffer
	hubs := cluster(t, ctx, 1, pubs, slog.New(slog.NewTextHandler(&logBuf, nil)), func(c *Config) {
		c.Limits = Limits{MaxMsgSize: 256 << 10, SiteMsgs: 500, SiteMachines: 100}
	})
	// Its stream first: what is published before it exists is lost (a
	// loaded machine made it late).
	streamReady(t, ctx, hubs[0])
	nc, _ := hostile(t, hubs[0], kps["north"])
	// 10 events of 200 KB: under the message size, over an event's.
	big := strings.Repeat("x", 200<<10)
	for i := range 10 {
		nc.PublishMsg(eventMsg("north", uint64(i+1), uint64(i), status.Event{Kind: status.KindDHCP, MAC: "52:54:00:00:01:00", Message: big}))
	}
	// 300 KB: over the message size.
	if err := nc.PublishMsg(eventMsg("north", 11, 10, status.Event{Kind: status.KindDHCP, MAC: "52:54:00:00:01:00", Message: big + big})); err == nil {
		nc.Flush()
	}
	nc, _ = hostile(t, hubs[0], kps["north"])
	// 150 made-up machines: 100 are kept.
	for i := range 150 {
		nc.PublishMsg(eventMsg("north", uint64(i+11), uint64(i+10), status.Event{Kind: status.KindDHCP, MAC: fmt.Sprintf("52:54:00:00:02:%02x", i), Message: "junk"}))
	}
	nc.Flush()
	if !testutil.Poll(10*time.Second, 50*time.Millisecond, func() bool { return hubs[0].View.Applied() > 0 && len(hubs[0].View.Machines()) >= 100 }) {
		t.Fatalf("%d machines", len(hubs[0].View.Machines()))
	}
	caughtUp(t, ctx, hubs[0], 10*time.Second)
	v := hubs[0].View
	if n := len(v.Machines()); n != 100 {
		t.Errorf("%d machines of north in the view, want 100", n)
	}
	if got := v.Refused("north", "event_too_big"); got != 10 {
		t.Errorf("%d events too big refused, want 10", got)
	}
	if got := v.Refused("north", "machines"); got != 50 {
		t.Errorf("%d events past the machine limit refused, want 50", got)
	}
	if !strings.Contains(logBuf.String(), "limit") {
		t.Errorf("no warning in the hub's log:\n%s", logBuf.String())
	}
	js, _ := jetstream.New(hubs[0].nc)
	s, err := js.Stream(ctx, SiteStream("north"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.Info(ctx)
	if info.Config.MaxMsgSize != 256<<10 || info.Config.MaxMsgs != 500 || info.Config.MaxBytes != 1<<30 {
		t.Errorf("stream bounds: message size %d, messages %d, bytes %d", info.Config.MaxMsgSize, info.Config.MaxMsgs, info.Config.MaxBytes)
	}
	if info.State.Msgs > 500 {
		t.Errorf("the stream holds %d of north's messages, over 500", info.State.Msgs)
	}
}

// Finding 8: one message with a sequence far ahead (Seq 999999999, Prev 0)
// is refused and counted; the site's later events are applied, also after
// the hub restarts.
func TestHubRefusesASequenceJump(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north")
	hubs := cluster(t, ctx, 1, pubs)
	s := newSite(t, ctx, "north", 0, []string{hubs[0].cfg.Listen}, kps["north"])
	record := func(from, to int) {
		for i := from; i < to; i++ {
			if err := s.store.RecordSync(status.Event{Kind: status.KindDHCP, Site: "north", Node: "n1", Message: fmt.Sprint("event ", i)}); err != nil {
				t.Fatal(err)
			}
		}
		s.drained(t, 30*time.Second)
	}
	record(0, 5)
	nc, _ := hostile(t, hubs[0], kps["north"])
	nc.PublishMsg(eventMsg("north", 999999999, 0, status.Event{Kind: status.KindDHCP, Node: "n1", Message: "jump"}))
	nc.Flush()
	time.Sleep(500 * time.Millisecond)
	record(5, 10)
	caughtUp(t, ctx, hubs[0], 10*time.Second)
	check := func(n *Node, when string) {
		ev := n.View.Events("north/n1")
		if len(ev) != 10 {
			t.Errorf("%s: %d events of north/n1 in the view, want 10: %+v", when, len(ev), ev)
		}
		if got := n.View.Refused("north", "sequence"); got != 1 {
			t.Errorf("%s: %d sequence jumps refused, want 1", when, got)
		}
	}
	check(hubs[0], "running")
	cfg := hubs[0].cfg
	hubs[0].Close()
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	caughtUp(t, ctx, n, 20*time.Second)
	check(n, "after a restart")
}

// Finding 9: the hub's own connection has an error handler (nats.go's
// default prints plain text to stderr, into the hub's JSON log).
func TestHubOwnConnectionLogs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, _ := siteKeys(t, "north")
	var logBuf testutil.SyncBuffer
	hubs := cluster(t, ctx, 1, pubs, slog.New(slog.NewJSONHandler(&logBuf, nil)))
	// What nats.go does on a slow consumer: its handler gets the error.
	hubs[0].nc.Opts.AsyncErrorCB(hubs[0].nc, nil, nats.ErrSlowConsumer)
	var line struct{ Msg, Err string }
	for l := range strings.Lines(logBuf.String()) {
		if strings.Contains(l, "slow consumer") {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Errorf("not a JSON log line: %q", l)
			}
		}
	}
	if line.Err == "" {
		t.Errorf("the slow consumer is not in the hub's log:\n%s", logBuf.String())
	}
}

// Issue 44's finding 4: one site's key holds at most SiteConns connections
// and each at most SiteSubs subscriptions; past them it is refused, the
// other sites connect and send as before, and a closed connection frees
// its place.
func TestHubBoundsASiteConnections(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "loud", "quiet")
	hubs := cluster(t, ctx, 1, pubs, func(c *Config) { c.Limits.SiteConns, c.Limits.SiteSubs = 4, 8 })
	n := hubs[0]
	streamReady(t, ctx, n)
	url := "nats://" + n.cfg.Listen
	connect := func(site string) (*nats.Conn, error) {
		pub, _ := kps[site].PublicKey()
		return nats.Connect(url, nats.Nkey(pub, kps[site].Sign), nats.MaxReconnects(0))
	}
	var held []*nats.Conn
	for i := range 4 {
		nc, err := connect("loud")
		if err != nil {
			t.Fatalf("connection %d of 4: %v", i+1, err)
		}
		held = append(held, nc)
	}
	if nc, err := connect("loud"); err == nil {
		nc.Close()
		t.Error("a fifth connection of one site's key was let in (bound 4)")
	}
	quiet := newSite(t, ctx, "quiet", 1, []string{n.cfg.Listen}, kps["quiet"])
	quiet.provision(t, 0, 2)
	quiet.drained(t, 30*time.Second)
	held[0].Close()
	time.Sleep(100 * time.Millisecond)
	nc, err := connect("loud")
	if err != nil {
		t.Fatalf("a connection after one of four closed: %v", err)
	}
	defer nc.Close()
	for _, c := range held[1:] {
		c.Close()
	}
	// Subscriptions: 8 on one connection; the ninth is refused.
	errs := make(chan error, 10)
	sc, err := connect("loud")
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	sc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	for i := range 12 {
		if _, err := sc.SubscribeSync(fmt.Sprintf("%s.%d", Inbox("loud"), i)); err != nil {
			break
		}
	}
	sc.Flush()
	select {
	case err := <-errs:
		if !strings.Contains(strings.ToLower(err.Error()), "maximum subscriptions") {
			t.Errorf("past the subscription bound: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("12 subscriptions on one connection taken (bound 8)")
	}
	quiet.provision(t, 2, 4)
	quiet.drained(t, 30*time.Second)
	caughtUp(t, ctx, n, 30*time.Second)
	sameView(t, n, []*site{quiet})
}
