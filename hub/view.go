package hub

import (
	"encoding/json"
	"sort"
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
	Sent    time.Time `json:"sent"`
}

// siteState is what the view keeps of one site.
type siteState struct {
	name      string
	lastHeard time.Time // the newest message from the site (event or hello)
	hello     *Hello
	events    uint64
	last      uint64                // the store sequence of the last event applied
	early     map[uint64]earlyEvent // events that came before their predecessor, by it
}

// status is the site as the status document has it.
func (s *siteState) status() bhttp.SiteStatus {
	st := bhttp.SiteStatus{Name: s.name, LastHeard: s.lastHeard, Events: s.events}
	if s.hello != nil {
		st.Daemon, st.Plan, st.Pending = s.hello.Daemon, s.hello.Plan, s.hello.Pending
	}
	return st
}

type earlyEvent struct {
	seq uint64
	e   status.Event
}

// maxEarly bounds the events a site may have waiting for a predecessor;
// past it (a predecessor lost for good) they are applied as they are.
const maxEarly = 100000

// View is the fleet as the hub reads it from the stream: every site's
// machines and timelines, and each site's last word.
type View struct {
	mem *status.Memory

	mu      sync.Mutex
	sites   map[string]*siteState
	applied atomic.Uint64 // the last stream sequence applied
	forged  atomic.Uint64 // events naming another site than their subject's
	changed func()
}

// NewView returns an empty view.
func NewView() *View {
	return &View{mem: &status.Memory{PerMachine: 2000, MaxUnknown: 500000}, sites: map[string]*siteState{}}
}

// OnChange sets what is called after each message applied (the
// dashboard's push); it must not block.
func (v *View) OnChange(f func()) { v.changed = f }

// Apply takes one message of the stream, published on site's subject at
// time at, with stream sequence seq; an event's store sequence at its site
// and its predecessor's are siteSeq and prev (0, 0 when unknown).
func (v *View) Apply(site, kind string, data []byte, seq uint64, at time.Time, siteSeq, prev uint64) {
	defer func() {
		v.applied.Store(seq)
		if v.changed != nil {
			v.changed()
		}
	}()
	v.mu.Lock()
	s := v.sites[site]
	if s == nil {
		s = &siteState{name: site}
		v.sites[site] = s
	}
	if at.After(s.lastHeard) {
		s.lastHeard = at
	}
	v.mu.Unlock()
	switch kind {
	case KindHello:
		var h Hello
		if json.Unmarshal(data, &h) != nil {
			return
		}
		v.mu.Lock()
		s.hello = &h
		v.mu.Unlock()
	default:
		var e status.Event
		if json.Unmarshal(data, &e) != nil {
			return
		}
		// A site speaks for itself only: its subject is its credential's.
		if e.Site != "" && e.Site != site {
			v.forged.Add(1)
			return
		}
		v.inOrder(s, siteSeq, prev, e)
	}
}

// inOrder applies e when its predecessor was (then whatever waited for
// it), keeps it when it came early, and drops it when it was applied
// already.
func (v *View) inOrder(s *siteState, seq, prev uint64, e status.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case seq == 0: // no sequence: as it comes
	case seq <= s.last && prev != 0:
		return // a resend of what is applied
	case prev != 0 && prev != s.last && len(s.early) < maxEarly:
		if s.early == nil {
			s.early = map[uint64]earlyEvent{}
		}
		s.early[prev] = earlyEvent{seq, e}
		return
	}
	for {
		s.events++
		v.mem.Record(e)
		if seq == 0 {
			return
		}
		s.last = seq
		next, ok := s.early[seq]
		if !ok {
			return
		}
		delete(s.early, seq)
		seq, e = next.seq, next.e
	}
}

// Applied is the last stream sequence applied.
func (v *View) Applied() uint64 { return v.applied.Load() }

// Forged counts events a site sent in another site's name (dropped).
func (v *View) Forged() uint64 { return v.forged.Load() }

// Sites lists the sites heard of, by name.
func (v *View) Sites() []bhttp.SiteStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]bhttp.SiteStatus, 0, len(v.sites))
	for _, s := range v.sites {
		out = append(out, s.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
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

// Machines is every machine of every site.
func (v *View) Machines() []status.Machine { return v.mem.Machines() }

// Events is one machine's timeline.
func (v *View) Events(key string) []status.Event { return v.mem.Events(key) }

// Doc is the fleet as GET /api/v1/status has it: the same document as a
// site daemon's, every site's nodes (a registered node no machine booted
// yet is "registered"), and the sites with when they were last heard.
func (v *View) Doc(hub string) bhttp.StatusDoc {
	doc := bhttp.StatusDoc{Nodes: []status.Machine{}, Machines: []status.Machine{}, Sites: v.Sites()}
	seen := map[string]bool{}
	for _, m := range v.mem.Machines() {
		if m.Node != "" {
			seen[m.Key] = true
			doc.Nodes = append(doc.Nodes, m)
		} else {
			doc.Machines = append(doc.Machines, m)
		}
	}
	for site, nodes := range v.registered() {
		for _, n := range nodes {
			if k := site + "/" + n; !seen[k] {
				doc.Nodes = append(doc.Nodes, status.Machine{Key: k, Site: site, Node: n, State: status.StateRegistered})
			}
		}
	}
	sort.Slice(doc.Nodes, func(i, j int) bool { return doc.Nodes[i].Key < doc.Nodes[j].Key })
	// The dashboard reads the sites from the source (pushed when it
	// changes): each site's row says when it was last heard.
	doc.Source = map[string]any{"hub": hub, "sites": doc.Sites}
	return doc
}
