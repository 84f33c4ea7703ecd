package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
)

// Hello is what a site daemon says of itself now and then: what it serves
// (its Plan, its source) and its registered nodes, so the hub lists the
// nodes no machine has booted as yet.
type Hello struct {
	Site    string    `json:"site"`
	Daemon  string    `json:"daemon,omitempty"` // the site daemon's host name
	Version string    `json:"version,omitempty"`
	Plan    string    `json:"plan,omitempty"`
	Source  any       `json:"source,omitempty"`
	Nodes   []string  `json:"nodes,omitempty"` // registered node names
	Pending int       `json:"pending"`         // events in its outbox when it said hello
	Epoch   string    `json:"epoch,omitempty"` // its status store's identity (Epoch)
	Sent    time.Time `json:"sent"`
	// Rollouts are its rollout groups worth showing, halts included.
	Rollouts []bhttp.RolloutStatus `json:"rollouts,omitempty"`
	// Cluster is the site's cluster as the daemon saying hello sees it
	// (absent: the site has one daemon). Every member says hello.
	Cluster *bhttp.ClusterStatus `json:"cluster,omitempty"`
}

// siteState is what the view keeps of one site: its machines in a store
// of their own, so no site's events reach another's machines.
type siteState struct {
	name      string
	mem       *status.Memory
	lastHeard time.Time // the newest message from the site (event or hello)
	hello     *Hello
	events    uint64
	epoch     string               // the epoch of its newest event
	seqs      map[string]*sequence // by epoch: its stores' sequences
	early     int                  // bytes of its events waiting for a predecessor
	refused   map[string]uint64    // by reason
	warned    map[string]time.Time // by reason: when it was last said
}

// sequence is one store's (one epoch's) order at a site: a store wiped
// and made anew starts at 1 again, under another epoch.
type sequence struct {
	epoch string
	last  uint64                // the store sequence of the last event applied
	mark  uint64                // the highest ever applied, as the hub kept it (Marks)
	early map[uint64]earlyEvent // events that came before their predecessor, by it
	used  uint64                // the view's message count when last used: the oldest goes first
}

// maxEpochs is the epochs of a site the view keeps a sequence of: past
// it, the one used longest ago is forgotten (a resend of its events would
// be applied again). A site has one store at a time; this bounds a site
// that makes up epochs.
const maxEpochs = 8

// markKey is a site's epoch in the marks: the site's name for no epoch
// (the file as before epochs), site/epoch else ('/' is in no site name).
func markKey(site, epoch string) string {
	if epoch == "" {
		return site
	}
	return site + "/" + epoch
}

// status is the site as the status document has it.
func (s *siteState) status() bhttp.SiteStatus {
	st := bhttp.SiteStatus{Name: s.name, LastHeard: s.lastHeard, Events: s.events}
	if s.hello != nil {
		st.Daemon, st.Plan, st.Pending, st.Cluster = s.hello.Daemon, s.hello.Plan, s.hello.Pending, boundCluster(s.hello.Cluster)
	}
	return st
}

// maxClusterNames bounds the members and roles a site's hello shows: a
// site has at most three daemons, and two roles per site it serves.
const maxClusterNames = 8

// boundCluster is a hello's cluster as the hub shows it: the site's word
// on its own members, cut to maxClusterNames members and roles.
func boundCluster(c *bhttp.ClusterStatus) *bhttp.ClusterStatus {
	if c == nil {
		return nil
	}
	out := *c
	out.Members = c.Members[:min(len(c.Members), maxClusterNames)]
	if len(c.Roles) > maxClusterNames {
		out.Roles = map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(c.Roles))[:maxClusterNames] {
			out.Roles[k] = c.Roles[k]
		}
	}
	return &out
}

type earlyEvent struct {
	seq  uint64
	e    *status.Event // nil: one too big, counted when its turn comes
	size int           // its bytes, as the site's bound on waiting events counts them
}

// Reasons a message is refused, as Refused and the metric name them.
const (
	RefusedDuplicate = "duplicate"         // an event applied already (a resend)
	RefusedSequence  = "sequence"          // a sequence jump past Limits.MaxSeqJump
	RefusedEarly     = "early"             // too many events waiting for a predecessor
	RefusedMachines  = "machines"          // a new machine past Limits.SiteMachines
	RefusedTooBig    = "event_too_big"     // an event over Limits.MaxEventBytes
	RefusedForged    = "forged"            // an event naming another site
	RefusedMalformed = "malformed"         // not an event or a hello
	RefusedReply     = "reply"             // a reply subject outside the site's inbox
	RefusedInventory = "inventory_too_big" // an inventory over maxInventory: the event is kept without it
	// RefusedBusy counts the times a site sent faster than its lane takes
	// in: messages dropped unacknowledged (its forwarder sends them again).
	RefusedBusy = "busy"
)

// maxInventory bounds a machine's inventory in the view: a large server's
// (two dozen disks, a hundred PCI functions) is well under it.
const maxInventory = 32 << 10

// warnEvery is how often a site's refusals of one kind are said.
const warnEvery = time.Minute

// View is the fleet as the hub reads it from the stream: every site's
// machines and timelines, and each site's last word. A message changes
// only the site of its subject (the site's credential), never another.
type View struct {
	limits Limits
	log    *slog.Logger

	mu      sync.Mutex
	sites   map[string]*siteState
	marks   map[string]uint64 // the highest sequence applied per site and epoch (markKey), kept on disk
	dirty   bool
	count   uint64        // messages applied, to tell the epochs used longest ago
	applied atomic.Uint64 // messages applied
	forged  atomic.Uint64 // events naming another site than their subject's
	changed func()
}

// NewView returns an empty view with the default limits.
func NewView() *View { return NewViewLimits(Limits{}, nil) }

// NewViewLimits returns an empty view bounded by l (zero fields: the
// defaults), warning on log when a site hits a bound.
func NewViewLimits(l Limits, log *slog.Logger) *View {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &View{limits: l.withDefaults(), log: log, sites: map[string]*siteState{}, marks: map[string]uint64{}}
}

// OnChange sets what is called after each message applied (the
// dashboard's push); it must not block.
func (v *View) OnChange(f func()) { v.changed = f }

// site returns site's state, making it; v.mu is held.
func (v *View) site(name string) *siteState {
	s := v.sites[name]
	if s == nil {
		s = &siteState{name: name, seqs: map[string]*sequence{},
			mem: &status.Memory{PerMachine: v.limits.MachineEvents, PerUnknown: v.limits.UnknownEvents, MaxUnknown: v.limits.SiteMachines,
				MaxBytes: v.limits.ViewBytes}}
		v.sites[name] = s
	}
	return s
}

// sequence returns site s's sequence of epoch, making it (and forgetting
// the one used longest ago past maxEpochs); v.mu is held.
func (v *View) sequence(s *siteState, epoch string) *sequence {
	v.count++
	q := s.seqs[epoch]
	if q == nil {
		if len(s.seqs) >= maxEpochs {
			oldest, found := "", false
			for e, o := range s.seqs {
				if !found || o.used < s.seqs[oldest].used {
					oldest, found = e, true
				}
			}
			for _, w := range s.seqs[oldest].early {
				s.early -= w.size
			}
			delete(s.seqs, oldest)
			delete(v.marks, markKey(s.name, oldest))
			v.dirty = true
		}
		q = &sequence{epoch: epoch, mark: v.marks[markKey(s.name, epoch)]}
		if q.mark == 0 && v.hasOtherEpoch(s, epoch) {
			// A site's store wiped and made anew (or another daemon for
			// the site): what it sends starts at 1 again.
			if now := time.Now(); now.Sub(s.warned["epoch"]) >= warnEvery {
				if s.warned == nil {
					s.refused, s.warned = map[string]uint64{}, map[string]time.Time{}
				}
				s.warned["epoch"] = now
				v.log.Warn("hub: a site sends under a new epoch (its status store was made anew, or its daemon now has epochs): a new sequence for the site", "site", s.name, "epoch", epoch, "previous_epoch", s.epoch)
			}
		}
		s.seqs[epoch] = q
	}
	s.epoch = epoch
	q.used = v.count
	return q
}

// hasOtherEpoch says whether site s has a sequence of another epoch than
// epoch, in the view or in the marks; v.mu is held.
func (v *View) hasOtherEpoch(s *siteState, epoch string) bool {
	for e := range s.seqs {
		if e != epoch {
			return true
		}
	}
	for k := range v.marks {
		if (k == s.name || strings.HasPrefix(k, s.name+"/")) && k != markKey(s.name, epoch) {
			return true
		}
	}
	return false
}

// refuse counts a message of site refused for why and says so, at most
// once a minute per site and reason; v.mu is held.
func (v *View) refuse(s *siteState, why string, attrs ...any) {
	if s.refused == nil {
		s.refused, s.warned = map[string]uint64{}, map[string]time.Time{}
	}
	s.refused[why]++
	if why == RefusedDuplicate { // a resend is ordinary
		return
	}
	if now := time.Now(); now.Sub(s.warned[why]) >= warnEvery {
		s.warned[why] = now
		v.log.Warn("hub: a site's message refused: past a limit or out of sequence", append([]any{"site", s.name, "reason", why, "refused", s.refused[why]}, attrs...)...)
	}
}

// Refuse counts a message the hub did not take from site (before the
// stream: a reply subject outside its inbox, a message of no kind).
func (v *View) Refuse(site, why string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.refuse(v.site(site), why)
}

// Refused is how many of site's messages were refused for why.
func (v *View) Refused(site, why string) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s := v.sites[site]; s != nil {
		return s.refused[why]
	}
	return 0
}

// RefusedAll is every site's refusals: site → reason → count.
func (v *View) RefusedAll() map[string]map[string]uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]map[string]uint64{}
	for name, s := range v.sites {
		if len(s.refused) > 0 {
			out[name] = maps.Clone(s.refused)
		}
	}
	return out
}

// Message is one message of the stream, as the view takes it.
type Message struct {
	// Site is the site of its subject (its credential's); Epoch its
	// store's; Kind KindEvent or KindHello.
	Site, Epoch, Kind string
	Data              []byte
	Stream            uint64    // its stream sequence
	At                time.Time // when the stream took it
	// Seq and Prev are an event's store sequence at its site and the one
	// sent before it (0, 0 when unknown).
	Seq, Prev uint64
}

// Apply takes one message of the stream.
func (v *View) Apply(m Message) {
	defer func() {
		v.applied.Add(1)
		if v.changed != nil {
			v.changed()
		}
	}()
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.site(m.Site)
	switch m.Kind {
	case KindHello:
		var h Hello
		if json.Unmarshal(m.Data, &h) != nil {
			v.refuse(s, RefusedMalformed)
			return
		}
		if len(h.Nodes) > v.limits.SiteMachines {
			v.refuse(s, RefusedMachines, "nodes", len(h.Nodes))
			h.Nodes = h.Nodes[:v.limits.SiteMachines]
		}
		h.Site, h.Epoch = m.Site, m.Epoch
		s.hello = &h
	case KindEvent:
		q := v.sequence(s, m.Epoch)
		if len(m.Data) > v.limits.MaxEventBytes {
			// Counted in sequence: it is not applied, and it does not hide
			// what follows.
			v.inOrder(s, q, m.Seq, m.Prev, nil)
			return
		}
		var e status.Event
		if json.Unmarshal(m.Data, &e) != nil {
			v.refuse(s, RefusedMalformed)
			return
		}
		// A site speaks for itself only: its subject is its credential's.
		if e.Site != "" && e.Site != m.Site {
			v.forged.Add(1)
			v.refuse(s, RefusedForged)
			return
		}
		e.Site = m.Site
		v.inOrder(s, q, m.Seq, m.Prev, &e)
	default:
		v.refuse(s, RefusedMalformed)
		return
	}
	if m.At.After(s.lastHeard) {
		s.lastHeard = m.At
	}
}

// inOrder applies e (nil: one too big, taken in its place but not
// applied) when its predecessor in q, its store's sequence, was (then
// whatever waited for it), keeps it when it came early, and drops it when
// it was applied already or jumps ahead: a store's sequence only moves on
// by what it sent. v.mu is held.
func (v *View) inOrder(s *siteState, q *sequence, seq, prev uint64, e *status.Event) {
	jump := func() bool {
		base := q.last
		if base == 0 {
			base = q.mark // nothing applied yet: since the hub's restart
		}
		return base > 0 && seq > base && seq-base >= v.limits.MaxSeqJump
	}
	switch {
	case seq == 0: // no sequence: as it comes
		v.apply(s, e)
		return
	case seq <= q.last:
		v.refuse(s, RefusedDuplicate)
		return
	case prev > q.last && (q.last != 0 || q.mark == 0):
		size := 0
		if e != nil {
			size = e.Size()
		}
		if len(q.early) >= v.limits.SiteEarly || s.early+size > v.limits.EarlyBytes {
			v.refuse(s, RefusedEarly, "seq", seq, "prev", prev, "last", q.last, "waiting_bytes", s.early)
			return
		}
		if q.early == nil {
			q.early = map[uint64]earlyEvent{}
		}
		if old, ok := q.early[prev]; ok {
			s.early -= old.size
		}
		q.early[prev] = earlyEvent{seq, derefEvent(e), size}
		s.early += size
		return
	case jump():
		// Its predecessor is one applied (or none: the forwarder started
		// again), but it is too far ahead to be the store's next.
		v.refuse(s, RefusedSequence, "seq", seq, "prev", prev, "last", q.last)
		return
	}
	for {
		if e != nil {
			v.apply(s, e)
		} else {
			v.refuse(s, RefusedTooBig)
		}
		q.last = seq
		if seq > q.mark {
			q.mark, v.marks[markKey(s.name, q.epoch)], v.dirty = seq, seq, true
		}
		next, ok := q.early[seq]
		if !ok {
			return
		}
		delete(q.early, seq)
		s.early -= next.size
		seq, e = next.seq, next.e
	}
}

// Settle is told that the view read site's stream to its end for the
// first time since the hub started: an epoch of the site with nothing
// applied and no mark kept (a new or rebuilt hub server, or
// sequences.json lost) whose events wait for a predecessor waits for
// one that left the stream (its oldest messages aged out). Its waiting
// events are applied, from the oldest on.
func (v *View) Settle(site string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.sites[site]
	if s == nil {
		return
	}
	for _, q := range s.seqs {
		if q.last != 0 || q.mark != 0 || len(q.early) == 0 {
			continue
		}
		waiting := len(q.early)
		// Oldest first, each chain as far as it goes; a gap's
		// predecessor left the stream too. Sorted once: a site may have
		// parked 100,000.
		for _, prev := range slices.Sorted(maps.Keys(q.early)) {
			next, ok := q.early[prev]
			if !ok {
				continue // applied with the chain before it
			}
			delete(q.early, prev)
			s.early -= next.size
			q.last = max(q.last, prev)
			v.inOrder(s, q, next.seq, prev, next.e)
		}
		v.log.Info("hub: a site's events whose predecessors left the stream applied", "site", site, "epoch", q.epoch, "events", waiting)
	}
}

// Mark is the highest store sequence of site's epoch the view applied, or
// kept from before a restart (0: none).
func (v *View) Mark(site, epoch string) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s := v.sites[site]; s != nil {
		if q := s.seqs[epoch]; q != nil {
			return max(q.mark, q.last)
		}
	}
	return v.marks[markKey(site, epoch)]
}

func derefEvent(e *status.Event) *status.Event {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

// apply records e in its site's machines, within the site's bound.
func (v *View) apply(s *siteState, e *status.Event) {
	if e == nil {
		v.refuse(s, RefusedTooBig)
		return
	}
	// The bound counts the machines the view holds now: not those
	// evicted, and a machine first seen by its MAC that turns out to be
	// a node is one machine, not two.
	if held, n := s.mem.Holds(e.Key(), e.MAC); !held && n >= v.limits.SiteMachines {
		v.refuse(s, RefusedMachines, "machines", n)
		return
	}
	if e.Inventory != nil {
		if b, _ := json.Marshal(e.Inventory); len(b) > maxInventory {
			e.Inventory = nil
			v.refuse(s, RefusedInventory, "bytes", len(b))
		}
	}
	s.events++
	s.mem.Record(*e)
}

// Applied counts the messages applied, every site's.
func (v *View) Applied() uint64 { return v.applied.Load() }

// Forged counts events a site sent in another site's name (dropped).
func (v *View) Forged() uint64 { return v.forged.Load() }

// Sites lists the sites heard of, by name.
func (v *View) Sites() []bhttp.SiteStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]bhttp.SiteStatus, 0, len(v.sites))
	for _, s := range v.sites {
		if s.lastHeard.IsZero() {
			continue // only refused so far
		}
		out = append(out, s.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// maxRolloutsPerSite bounds the rollout groups the view shows of a site.
const maxRolloutsPerSite = 256

// rollouts are every site's rollout groups, as its last hello gave them
// (each for its own site only), by site.
func (v *View) rollouts() []bhttp.RolloutStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []bhttp.RolloutStatus
	for name, s := range v.sites {
		if s.hello == nil {
			continue
		}
		kept := 0
		for _, r := range s.hello.Rollouts {
			// A site's own groups only, and a bound: a site has a
			// group per profile it installs, not thousands.
			if r.Site == name && kept < maxRolloutsPerSite {
				out = append(out, r)
				kept++
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Site+"/"+out[i].Profile < out[j].Site+"/"+out[j].Profile })
	return out
}

// registered is each site's registered nodes, as its last hello named them.
func (v *View) registered() map[string][]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string][]string{}
	for _, s := range v.sites {
		if s.hello != nil {
			out[s.name] = s.hello.Nodes
		}
	}
	return out
}

// stores is each site's machines' store.
func (v *View) stores() map[string]*status.Memory {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]*status.Memory, len(v.sites))
	for name, s := range v.sites {
		out[name] = s.mem
	}
	return out
}

// Machines is every machine of every site. A machine that is no node is
// keyed by its site too (site:mac:…), as the same MAC or serial at two
// sites is two machines.
func (v *View) Machines() []status.Machine {
	var out []status.Machine
	for site, mem := range v.stores() {
		for _, m := range mem.Machines() {
			if !status.IsNodeKey(m.Key) {
				m.Key, m.Site = site+":"+m.Key, site
			}
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := status.IsNodeKey(out[i].Key), status.IsNodeKey(out[j].Key); a != b {
			return a
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// Events is one machine's timeline: key is site/node or site:mac:… (as
// Machines has it).
func (v *View) Events(key string) []status.Event {
	site, rest := key, ""
	if i := strings.IndexAny(key, "/:"); i > 0 {
		site = key[:i]
		if key[i] == ':' {
			rest = key[i+1:]
		} else {
			rest = key // a node's key is its site's own
		}
	}
	v.mu.Lock()
	s := v.sites[site]
	v.mu.Unlock()
	if s == nil || rest == "" {
		return nil
	}
	return s.mem.Events(rest)
}

// Escrows are a node's recovery key escrows as its site forwarded them
// (the escrow events' ciphertext, as the agent sent it to the site);
// known is false when the view has no such node: none of its site's
// machines, and not among the nodes its last hello named. What
// GET /api/v1/recovery-keys/{site}/{node} serves on a hub.
func (v *View) Escrows(site, node string) (escrows []status.Escrow, known bool) {
	v.mu.Lock()
	s := v.sites[site]
	registered := s != nil && s.hello != nil && slices.Contains(s.hello.Nodes, node)
	v.mu.Unlock()
	if s == nil || node == "" {
		return nil, false
	}
	m, held := s.mem.Machine(site + "/" + node)
	return m.Escrows(), held || registered
}

// Doc is the fleet as GET /api/v1/status has it: the same document as a
// site daemon's, every site's nodes (a registered node no machine booted
// yet is "registered"), and the sites with when they were last heard.
// Each machine is a summary (status.Machine.Brief): what a site padded its events with
// does not make the document big.
func (v *View) Doc(hub string) bhttp.StatusDoc { return v.DocOf(hub, "") }

// DocOf is Doc of one site ("": every site).
func (v *View) DocOf(hub, site string) bhttp.StatusDoc {
	doc := bhttp.StatusDoc{Nodes: []status.Machine{}, Machines: []status.Machine{}, Sites: v.Sites()}
	seen := map[string]bool{}
	for _, m := range v.Machines() {
		if site != "" && m.Site != site {
			continue
		}
		m = m.Brief()
		if m.Node != "" {
			seen[m.Key] = true
			doc.Nodes = append(doc.Nodes, m)
		} else {
			doc.Machines = append(doc.Machines, m)
		}
	}
	for name, nodes := range v.registered() {
		if site != "" && name != site {
			continue
		}
		for _, n := range nodes {
			if k := name + "/" + n; !seen[k] {
				doc.Nodes = append(doc.Nodes, status.Machine{Key: k, Site: name, Node: n, State: status.StateRegistered})
			}
		}
	}
	sort.Slice(doc.Nodes, func(i, j int) bool { return doc.Nodes[i].Key < doc.Nodes[j].Key })
	doc.Rollouts = v.rollouts()
	if site != "" {
		doc.Rollouts = slices.DeleteFunc(doc.Rollouts, func(r bhttp.RolloutStatus) bool { return r.Site != site })
		doc.Sites = slices.DeleteFunc(doc.Sites, func(s bhttp.SiteStatus) bool { return s.Name != site })
	}
	// The dashboard reads the sites from the source (pushed when it
	// changes): each site's row says when it was last heard.
	doc.Source = map[string]any{"hub": hub, "sites": doc.Sites}
	return doc
}

// LoadMarks reads the highest sequence applied per site and epoch, as
// SaveMarks wrote it (none: a hub's first start). The file maps
// markKey(site, epoch) to the sequence: a site's name alone is its events
// without an epoch, as a hub before epochs wrote it.
func (v *View) LoadMarks(file string) error {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	marks := map[string]uint64{}
	if err := json.Unmarshal(b, &marks); err != nil {
		return fmt.Errorf("hub: %s: %w", file, err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, m := range marks {
		v.marks[k] = max(v.marks[k], m)
		site, epoch, _ := strings.Cut(k, "/")
		if s := v.sites[site]; s != nil {
			if q := s.seqs[epoch]; q != nil {
				q.mark = max(q.mark, m)
			}
		}
	}
	return nil
}

// SaveMarks writes the highest sequence applied per site and epoch, when
// it moved:
// after a restart, a site's first event is judged against it (a jump is
// refused even before anything of the site is applied again).
func (v *View) SaveMarks(file string) error {
	v.mu.Lock()
	if !v.dirty {
		v.mu.Unlock()
		return nil
	}
	b, _ := json.Marshal(v.marks)
	v.dirty = false
	v.mu.Unlock()
	// Synced before the rename: a crash leaves the old file or the new
	// one, never one cut short.
	tmp := file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, file)
}
