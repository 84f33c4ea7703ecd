package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// Server serves the dashboard and its event stream. Doc is required.
type Server struct {
	// Doc is the fleet as GET /api/v1/status has it.
	Doc func() bhttp.StatusDoc
	// Events is one machine's timeline, oldest first (nil: none).
	Events func(key string) []status.Event
	// Plan is the live Plan, for what Git gives each node: its profile
	// and the profile's encryption (nil: neither is shown; a hub has no
	// one Plan).
	Plan func() *plan.Plan
	// Sync, when set with Token, is what the page's "fetch now" does.
	Sync func(reason string)
	// Token is the bearer token actions need; "" (or nil) makes the
	// dashboard read-only. Authorize, when set, decides instead: "fetch
	// now" needs the operate role.
	Token     func() string
	Authorize func(r *http.Request, role bhttp.Role) bool
	// Interval is how often changes are pushed at most (default 100 ms):
	// a burst of progress events becomes one message.
	Interval time.Duration
	// Heartbeat is how often an idle stream gets a comment, so proxies
	// and browsers keep it open (default 15 s).
	Heartbeat time.Duration
	// WriteTimeout is how long one write to a client may block before the
	// client is dropped (default 10 s): a client that does not read
	// cannot hold the daemon's memory.
	WriteTimeout time.Duration
	// MaxClients bounds the open streams (default 100); past it a new one
	// is refused with 503 and the browser retries.
	MaxClients int
	Log        *slog.Logger

	dirty   atomic.Bool
	wake    chan struct{}
	once    sync.Once
	refresh sync.Mutex // one update at a time

	mu      sync.Mutex
	clients map[*client]struct{}
	state   map[string]sent // key → the machine as last sent
	source  []byte          // the source document, as last sent
	cluster []byte          // the cluster's, as last sent ("null": none)
	plan    string
	dropped uint64
}

// view is a machine as the page gets it: its summary, what the Plan
// gives it, and for a machine that is no node the Node object to commit.
type view struct {
	status.Machine
	// Git is what the Plan gives a node (a field of its own: the
	// machine's fields are what the machine says).
	Git      *planned `json:"git,omitempty"`
	NodeYAML string   `json:"nodeYAML,omitempty"`
}

// planned is what the live Plan gives a node, as the page shows it.
type planned struct {
	Profile string `json:"profile,omitempty"`
	// Encryption is the profile's full-disk encryption in words:
	// "encrypted (LUKS2, TPM PCRs 7)"; "" for none.
	Encryption string `json:"encryption,omitempty"`
}

// plannedOf is what p gives machine m (nothing for a machine that is no
// node, or without a Plan).
func plannedOf(p *plan.Plan, m status.Machine) planned {
	if p == nil || m.Node == "" {
		return planned{}
	}
	n := p.Node(m.Site, m.Node)
	if n == nil {
		return planned{}
	}
	pl := planned{Profile: n.Profile}
	if pr := p.Profile(n.Profile); pr != nil && pr.Encryption != nil {
		pl.Encryption = encryptedText(pr.Encryption)
	}
	return pl
}

// encryptedText is "encrypted (LUKS2, TPM PCRs 4+7)".
func encryptedText(e *plan.Encryption) string {
	pcrs := make([]string, len(e.PCRs))
	for i, n := range e.PCRs {
		pcrs[i] = strconv.Itoa(n)
	}
	return "encrypted (LUKS2, TPM PCRs " + strings.Join(pcrs, "+") + ")"
}

// sent is a machine as last sent, with what the Plan gave it, and its
// JSON: a machine equal to it is not marshalled again.
type sent struct {
	m    status.Machine
	pl   planned
	json []byte
}

// push is the data of a "snapshot" (the whole fleet) or an "update" (what
// changed since the last push) event.
type push struct {
	Plan string `json:"plan"`
	// Source is the source's status: always in a snapshot, in an update
	// only when it changed.
	Source json.RawMessage `json:"source,omitempty"`
	// Cluster is the site's cluster as this daemon sees it (a site of more
	// than one daemon), like Source: in a snapshot, in an update when it
	// changed.
	Cluster json.RawMessage `json:"cluster,omitempty"`
	// Actions says whether the page may offer actions (snapshot only).
	Actions *bool `json:"actions,omitempty"`
	// Machines are the machines, or the ones that changed, by key.
	Machines []json.RawMessage `json:"machines"`
	// Gone are the keys of machines no longer there.
	Gone []string `json:"gone,omitempty"`
}

// machinesJSON is the JSON of the machines, sorted by key.
func machinesJSON(ms []sent) []json.RawMessage {
	slices.SortFunc(ms, func(a, b sent) int { return strings.Compare(a.m.Key, b.m.Key) })
	out := make([]json.RawMessage, len(ms))
	for i, v := range ms {
		out[i] = v.json
	}
	return out
}

// message is one server-sent event, the same bytes for every client;
// keys are the machines it changes (a node page's stream adds their
// timeline).
type message struct {
	data []byte
	keys map[string]bool
}

// client is one open stream.
type client struct {
	ch   chan *message
	gone chan struct{} // closed when the hub drops the client
}

// queueLen is how many messages a client may be behind before it is
// dropped (its browser reconnects and starts from a fresh snapshot).
const queueLen = 64

func (s *Server) init() {
	s.once.Do(func() {
		s.wake = make(chan struct{}, 1)
		s.clients = map[*client]struct{}{}
	})
}

// Notify says the fleet changed; the status store calls it after every
// commit. It never blocks.
func (s *Server) Notify() {
	s.init()
	s.dirty.Store(true)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run pushes changes to the open streams until ctx ends: at most every
// Interval, and every few seconds without a notification (the source's
// status changes without an event).
func (s *Server) Run(ctx context.Context) error {
	s.init()
	every := orDuration(s.Interval, 100*time.Millisecond)
	idle := time.NewTicker(2 * time.Second)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-idle.C:
			s.dirty.Store(true)
		}
		if s.dirty.Load() && s.clientCount() > 0 {
			s.update()
		}
		// Coalesce: what arrives in the next Interval waits for it.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

func (s *Server) clientCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

// update reads the fleet, compares it with what was last sent and sends
// the difference to every client.
func (s *Server) update() {
	s.refresh.Lock()
	defer s.refresh.Unlock()
	s.dirty.Store(false)
	doc := s.Doc()
	var live *plan.Plan
	if s.Plan != nil {
		live = s.Plan()
	}
	source, _ := json.Marshal(doc.Source)
	cluster, _ := json.Marshal(doc.Cluster)
	// Only s.update changes s.state, and s.refresh is held: it may be read
	// without s.mu here.
	next := make(map[string]sent, len(doc.Nodes)+len(doc.Machines))
	var changed []sent
	keys := map[string]bool{}
	see := func(m status.Machine, unknown bool) {
		pl := plannedOf(live, m)
		if old, ok := s.state[m.Key]; ok && old.m == m && old.pl == pl {
			next[m.Key] = old
			return
		}
		v := sent{m, pl, marshalView(m, pl, unknown)}
		next[m.Key] = v
		changed = append(changed, v)
		keys[m.Key] = true
	}
	for _, m := range doc.Nodes {
		see(m, false)
	}
	for _, m := range doc.Machines {
		see(m, true)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []string
	for k := range s.state {
		if _, ok := next[k]; !ok {
			gone = append(gone, k)
			keys[k] = true
		}
	}
	sourceChanged := !bytes.Equal(source, s.source) || doc.Plan != s.plan
	clusterChanged := !bytes.Equal(cluster, s.cluster)
	s.state, s.source, s.plan, s.cluster = next, source, doc.Plan, cluster
	if len(changed) == 0 && len(gone) == 0 && !sourceChanged && !clusterChanged {
		return
	}
	slices.Sort(gone)
	p := push{Plan: doc.Plan, Machines: machinesJSON(changed), Gone: gone}
	if sourceChanged {
		p.Source = source
	}
	if clusterChanged {
		p.Cluster = cluster
	}
	s.broadcast(&message{data: frame("update", p), keys: keys})
}

// broadcast queues m for every client; s.mu is held. A client whose queue
// is full is dropped rather than waited for.
func (s *Server) broadcast(m *message) {
	for c := range s.clients {
		select {
		case c.ch <- m:
		default:
			delete(s.clients, c)
			close(c.gone)
			s.dropped++
			s.logger().Info("ui: dropped a stream that fell behind", "queued", queueLen)
		}
	}
}

// subscribe registers a client and returns it with a snapshot of the
// fleet taken atomically with the registration: every change after the
// snapshot reaches the client's queue.
func (s *Server) subscribe() (*client, []byte, bool) {
	s.init()
	s.mu.Lock()
	first := len(s.clients) == 0
	s.mu.Unlock()
	if first {
		// Nobody was watching, so nothing kept the state fresh.
		s.update()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.clients) >= orInt(s.MaxClients, 100) {
		return nil, nil, false
	}
	c := &client{ch: make(chan *message, queueLen), gone: make(chan struct{})}
	s.clients[c] = struct{}{}
	actions := s.actions()
	p := push{Plan: s.plan, Source: s.source, Cluster: s.cluster, Actions: &actions, Machines: machinesJSON(slices.Collect(maps.Values(s.state)))}
	return c, frame("snapshot", p), true
}

func (s *Server) unsubscribe(c *client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.clients[c]; ok {
		delete(s.clients, c)
		close(c.gone)
	}
}

// Stats says how many streams are open and how many were dropped for
// falling behind (their queue full, or a write blocked past WriteTimeout).
func (s *Server) Stats() (open int, dropped uint64) {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients), s.dropped
}

func (s *Server) actions() bool {
	return s.Sync != nil && (s.Authorize != nil || s.Token != nil && s.Token() != "")
}

func marshalView(m status.Machine, pl planned, unknown bool) []byte {
	v := view{Machine: m}
	if pl != (planned{}) {
		v.Git = &pl
	}
	if unknown {
		v.NodeYAML, _ = status.NodeYAML(m, "") // none offered for a machine that cannot have one
	}
	b, _ := json.Marshal(v)
	return b
}

// frame is one server-sent event: its name and its data, as JSON on one
// line (JSON has no raw newline).
func frame(event string, data any) []byte {
	b, _ := json.Marshal(data)
	out := make([]byte, 0, len(b)+len(event)+16)
	out = append(out, "event: "...)
	out = append(out, event...)
	out = append(out, "\ndata: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}

func (s *Server) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.New(slog.DiscardHandler)
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func orInt(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}
