package hub

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A lane is one site's way through a hub server, apart from every other
// site's: its own connection of the hub to itself, on which the ingest
// takes the site's messages in and the view reads them back; and its own
// stream, bounded in messages and bytes. A site that sends as fast as the
// hub takes its messages fills its own lane — its connection's buffers,
// its stream, its consumer's pulls — while another site's events go
// through theirs. (With one subscription and one stream for all sites, 1
// MB messages of one site had nats-server close the hub's ingest
// connection as a slow consumer, and an honest site's events reached the
// view 14 s late.)
type lane struct {
	site string
	// nc is the lane's connection; ingest is set while the site is
	// allowed in (a removed site's stream is still read).
	nc      *nats.Conn
	ingest  *nats.Subscription
	opening bool // an open runs (SetSites comes every few seconds)
	reading bool
	settled atomic.Bool   // the first reading reached the stream's end
	applied atomic.Uint64 // the stream sequence the view applied
}

// SiteStream is the stream of site's events and hellos, on SiteSubject.
func SiteStream(site string) string { return SiteStreamPrefix + site }

// SiteSubject is where the hub writes what site sent; no site may
// publish there.
func SiteSubject(site string) string { return SitePrefix + site }

// helloTTL is how long a hello stays on its site's stream: the view
// keeps the newest, and the site says hello every few seconds while
// connected, so a month of them does not push its events out.
const helloTTL = time.Hour

// siteStream is the configuration of site's stream.
func (n *Node) siteStream(site string) jetstream.StreamConfig {
	l := n.cfg.Limits
	return jetstream.StreamConfig{
		Name:        SiteStream(site),
		Subjects:    []string{SiteSubject(site)},
		Storage:     jetstream.FileStorage,
		Replicas:    n.cfg.Replicas,
		Duplicates:  n.cfg.Dedup,
		MaxAge:      30 * 24 * time.Hour,
		Discard:     jetstream.DiscardOld,
		MaxMsgSize:  l.MaxMsgSize,
		MaxMsgs:     l.SiteMsgs,
		MaxBytes:    l.SiteBytes,
		AllowMsgTTL: true,
	}
}

// follow waits until JetStream answers (a cluster needs a leader first),
// reads the stream of hubs before lanes once, and opens a lane for every
// site allowed in and for every site stream there is.
func (n *Node) follow(ctx context.Context) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := n.js.AccountInfo(cctx)
		cancel()
		if err == nil {
			break
		}
		n.cfg.Log.Debug("hub: JetStream not ready yet", "err", err)
		time.Sleep(500 * time.Millisecond)
	}
	if ctx.Err() != nil {
		return
	}
	var streams []string
	names := n.js.StreamNames(ctx)
	for name := range names.Name() {
		streams = append(streams, name)
	}
	n.mu.Lock()
	for _, name := range streams {
		if site, ok := strings.CutPrefix(name, SiteStreamPrefix); ok && ValidSite(site) && n.lanes[site] == nil {
			n.lanes[site] = &lane{site: site}
		}
	}
	n.ready = true
	n.openLanes()
	n.mu.Unlock()
	n.replayLegacy(ctx)
}

// replayLegacy reads the one stream of every site that hubs before lanes
// wrote (Stream), once, to its end: nothing writes it any more, and its
// messages age out. The sites' lanes read their own streams after it.
func (n *Node) replayLegacy(ctx context.Context) {
	defer close(n.replayed)
	s, err := n.js.Stream(ctx, Stream)
	if err != nil {
		return
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs == 0 {
		return
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		n.cfg.Log.Warn("hub: the stream of older hubs not read", "stream", Stream, "err", err)
		return
	}
	done := make(chan struct{})
	var once atomic.Bool
	cc, err := cons.Consume(func(m jetstream.Msg) {
		site, ok := strings.CutPrefix(m.Subject(), StreamPrefix)
		if !ok {
			site = strings.TrimPrefix(m.Subject(), SubjectPrefix)
		}
		meta := n.apply(site, m)
		if meta == nil || meta.NumPending == 0 || meta.Sequence.Stream >= info.State.LastSeq {
			if once.CompareAndSwap(false, true) {
				close(done)
			}
		}
	}, jetstream.PullMaxBytes(n.pullBytes()))
	if err != nil {
		n.cfg.Log.Warn("hub: the stream of older hubs not read", "stream", Stream, "err", err)
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	cc.Stop()
	n.cfg.Log.Info("hub: the stream of older hubs read", "stream", Stream, "messages", info.State.Msgs)
}

// pullBytes bounds what one lane's reader has in flight: a site sending
// its largest messages cannot fill the view's reading.
func (n *Node) pullBytes() int { return max(4<<20, 2*int(n.cfg.Limits.MaxMsgSize)) }

// openLanes opens the lane of every site allowed in and of every site
// stream found, and closes the ingest of sites no longer allowed; n.mu is
// held.
func (n *Node) openLanes() {
	if !n.ready {
		return
	}
	for site := range n.cfg.Sites {
		if n.lanes[site] == nil {
			n.lanes[site] = &lane{site: site}
		}
	}
	for site, l := range n.lanes {
		_, allowed := n.cfg.Sites[site]
		switch {
		case !allowed && l.ingest != nil:
			l.ingest.Unsubscribe()
			l.ingest = nil
		case l.opening:
		case allowed && l.ingest == nil, !l.reading:
			l.opening = true
			go n.open(l)
		}
	}
}

// open makes l's stream (again and again until JetStream answers), then
// its connection, its ingest while its site is allowed in, and its reader.
func (n *Node) open(l *lane) {
	ctx := n.ctx
	cfg := n.siteStream(l.site)
	var warned time.Time
	for start := time.Now(); ctx.Err() == nil; {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := n.js.CreateOrUpdateStream(cctx, cfg)
		cancel()
		if err == nil {
			break
		}
		// A cluster without a leader yet answers so for a few seconds;
		// past them it is worth an operator's look.
		if now := time.Now(); now.Sub(start) > 10*time.Second && now.Sub(warned) >= warnEvery {
			warned = now
			n.cfg.Log.Warn("hub: a site's stream cannot be made: its events are not taken in", "site", l.site, "stream", cfg.Name, "err", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	l.opening = false
	if ctx.Err() != nil {
		return
	}
	if l.nc == nil {
		nc, err := selfConn(n.srv, n.self, n.selfKP, "bootops-hub-lane-"+l.site, n.cfg.Log.With("server", n.cfg.Name, "site", l.site),
			func() { n.View.Refuse(l.site, RefusedBusy) })
		if err != nil {
			n.cfg.Log.Error("hub: a site's lane not opened", "site", l.site, "err", err)
			return
		}
		l.nc = nc
	}
	if _, allowed := n.cfg.Sites[l.site]; allowed && l.ingest == nil {
		sub, err := l.nc.QueueSubscribe(SubjectPrefix+l.site, "bootops-ingest", func(m *nats.Msg) { n.take(l, m) })
		if err != nil {
			n.cfg.Log.Error("hub: a site's messages not taken in", "site", l.site, "err", err)
			return
		}
		l.ingest = sub
	}
	if !l.reading {
		l.reading = true
		go n.read(ctx, l)
	}
}

// read reads l's stream into the view from its start, after the stream of
// older hubs.
func (n *Node) read(ctx context.Context, l *lane) {
	select {
	case <-n.replayed:
	case <-ctx.Done():
		return
	}
	js, err := jetstream.New(l.nc)
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		s, err := js.Stream(ctx, SiteStream(l.site))
		if err != nil {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		if info, err := s.Info(ctx); err == nil && info.State.Msgs == 0 {
			l.settle(n.View)
		}
		cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
		if err != nil {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			meta := n.apply(l.site, m)
			if meta != nil {
				l.applied.Store(meta.Sequence.Stream)
				if meta.NumPending == 0 {
					l.settle(n.View)
				}
			}
		}, jetstream.PullMaxBytes(n.pullBytes()))
		if err != nil {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		<-ctx.Done()
		cc.Stop()
	}
}

// settle tells the view, once, that the lane's first reading reached the
// stream's end: what still waits for a predecessor there waits for one
// that left the stream.
func (l *lane) settle(v *View) {
	if l.settled.CompareAndSwap(false, true) {
		v.Settle(l.site)
	}
}

// apply gives the view one message of site's stream.
func (n *Node) apply(site string, m jetstream.Msg) *jetstream.MsgMetadata {
	meta, _ := m.Metadata()
	var seq uint64
	at := time.Now()
	if meta != nil {
		seq, at = meta.Sequence.Stream, meta.Timestamp
	}
	h := m.Headers()
	siteSeq, _ := strconv.ParseUint(h.Get(Seq), 10, 64)
	prev, _ := strconv.ParseUint(h.Get(Prev), 10, 64)
	n.View.Apply(Message{Site: site, Epoch: h.Get(Epoch), Kind: h.Get(Kind), Data: m.Data(),
		Stream: seq, At: at, Seq: siteSeq, Prev: prev})
	return meta
}

// take is the ingest of l's site: it writes what the site sent to the
// site's stream. A site chooses none of what the hub writes: the subject
// is its own (its credential's), the message ID its site/epoch/sequence,
// and the answer — the stream's acknowledgement — goes only to the site's
// own inbox. A reply subject elsewhere (another site's subject, $JS.API…)
// is refused: no site can make the hub write there.
//
// The stream answers the site itself: the hub publishes with the site's
// reply subject, checked above, rather than waiting for the stream's
// acknowledgement and passing it on (one goroutine and two more trips
// over the hub's connection per event).
func (n *Node) take(l *lane, m *nats.Msg) {
	site := l.site
	if m.Reply != "" && !strings.HasPrefix(m.Reply, Inbox(site)+".") {
		n.View.Refuse(site, RefusedReply)
		return
	}
	kind := m.Header.Get(Kind)
	epoch := m.Header.Get(Epoch)
	if kind == KindMark && ValidEpoch(epoch) {
		b, _ := json.Marshal(MarkAnswer{Mark: n.View.Mark(site, epoch)})
		m.Respond(b)
		return
	}
	seq, err := strconv.ParseUint(m.Header.Get(Seq), 10, 64)
	if kind == KindEvent && (err != nil || seq == 0) || kind != KindEvent && kind != KindHello || !ValidEpoch(epoch) {
		n.View.Refuse(site, RefusedMalformed)
		if m.Reply != "" {
			m.Respond([]byte(`{"error":{"code":400,"description":"bootops: an event with a Bootops-Seq, a hello, or a question for the mark; a Bootops-Epoch of letters, digits, '-' and '_'"}}`))
		}
		return
	}
	out := nats.NewMsg(SiteSubject(site))
	out.Reply = m.Reply
	out.Header.Set(Kind, kind)
	if epoch != "" {
		out.Header.Set(Epoch, epoch)
	}
	switch kind {
	case KindEvent:
		out.Header.Set(Seq, strconv.FormatUint(seq, 10))
		if prev, err := strconv.ParseUint(m.Header.Get(Prev), 10, 64); err == nil {
			out.Header.Set(Prev, strconv.FormatUint(prev, 10))
		}
		out.Header.Set(jetstream.MsgIDHeader, msgID(site, epoch, seq))
	case KindHello:
		out.Header.Set(jetstream.MsgTTLHeader, helloTTL.String())
	}
	out.Data = m.Data
	if err := l.nc.PublishMsg(out); err != nil {
		respondErr(m, err)
	}
}

// MarkAnswer is the hub's answer to a site's question for its mark
// (KindMark): the highest store sequence of the site's epoch the view
// applied (0: none).
type MarkAnswer struct {
	Mark uint64 `json:"mark"`
}

// Behind is how many messages of the sites' streams this server's view
// has still to apply (tests and the bench wait for 0).
func (n *Node) Behind(ctx context.Context) (uint64, error) {
	n.mu.Lock()
	lanes := make([]*lane, 0, len(n.lanes))
	for _, l := range n.lanes {
		lanes = append(lanes, l)
	}
	n.mu.Unlock()
	var behind uint64
	for _, l := range lanes {
		s, err := n.js.Stream(ctx, SiteStream(l.site))
		if err != nil {
			return 0, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, err
		}
		if last, done := info.State.LastSeq, l.applied.Load(); last > done {
			behind += last - done
		}
	}
	return behind, nil
}
