package swarm

import (
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Defaults of a Scheduler.
const (
	DefaultServerStreams = 4                // chunk transfers from the server at once, per image
	DefaultPeers         = 4                // transfers a machine takes, and serves, at once
	leaseTTL             = time.Minute      // an assignment not reported back by then is forgotten
	deadAfter            = 10 * time.Second // a member not heard from for this long holds nothing
	forgetAfter          = 10 * time.Minute // ... and is forgotten after this
	avoidGone            = 30 * time.Second // a source that failed a transfer, avoided by that machine
	avoidSlow            = time.Minute      // a source too slow for a machine, avoided by it
	idleFallback         = 2 * time.Second  // a machine with nothing to do this long gets a chunk from the server
	maxGone              = 3                // failed transfers from a source before it counts as gone
)

// Scheduler decides, for every image being installed, which machine
// fetches which chunk from where. It keeps everything in memory: a
// restarted server starts every swarm afresh, and the peers' next
// reports fill it again (their Have is resent in full then, see Peer).
type Scheduler struct {
	// ServerStreams bounds the server's transfers at once, per image
	// (0: DefaultServerStreams): enough to fill its link, and no more.
	ServerStreams int
	// Client fetches the chunks the server re-checks from the peers that
	// served them (nil: one of its own).
	Client *http.Client
	Now    func() time.Time

	mu       sync.Mutex
	groups   map[string]*group
	stats    Stats
	checking int            // re-checks under way
	checks   sync.WaitGroup // ... and their goroutines
}

// Stats counts what the swarms did since the server started.
type Stats struct {
	ServerBytes, PeerBytes int64 // bytes delivered, as the receivers reported them
	Bad                    int64 // transfers whose bytes did not match, as the receivers reported them
	Gone, Slow             int64 // transfers that failed for the other reasons, and were retried
	// Unfounded counts reports of failed transfers the scheduler had not
	// assigned to the reporter: ignored.
	Unfounded int64
	// Banned counts peers dropped from their swarm because the server
	// fetched a chunk from them that did not match; Cleared the re-checks
	// that found the chunk right.
	Banned, Cleared int64
	Members         int // machines in a swarm now
}

// group is one image's swarm.
type group struct {
	m          *Manifest
	key        string
	members    map[string]*member
	holders    []int // members that hold each chunk (and are not banned or gone)
	serverBusy int
	fromServer []int // transfers of each chunk from the server under way
	seen       time.Time
}

type member struct {
	name, url, instance string
	have                []bool
	complete, bad       bool
	seen, idle          time.Time
	uploads, downloads  int
	fails               int
	avoid               map[string]time.Time // source → until
	known               map[string]bool      // sources it fetched from
	leases              map[int]lease        // chunk → where it is being fetched from
	ended               map[ended]time.Time  // leases ended lately → till when a report of them counts
	suspect             bool                 // it reported a transfer it was not assigned
	accused             accusation           // chunks it served that were reported bad
}

type lease struct {
	from  string
	until time.Time
}

// ended is a lease that ended: chunk from a source.
type ended struct {
	chunk int
	from  string
}

func (s *Scheduler) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Stats returns the counters.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	for _, g := range s.groups {
		st.Members += len(g.members)
	}
	return st
}

// Member is who a report comes from.
type Member struct {
	Name string // the machine
	IP   string // the address its request came from: its chunks are fetched there
	// Server is the base URL of the server's chunks for it (its site's
	// address).
	Server string
	// Peers is the most transfers it takes and serves at once (its site's
	// limit; 0: DefaultPeers).
	Peers int
}

// Report takes a report from a machine about the image m, and returns its
// work.
func (s *Scheduler) Report(m *Manifest, who Member, r Report) Reply {
	peers := who.Peers
	if peers <= 0 {
		peers = DefaultPeers
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.group(m, now)
	me := g.member(who.Name, m, now)
	g.heard(me, who.IP, r, now)
	g.holds(me, r.Have, r.Lost)
	s.settle(g, me, r, now)
	me.complete = r.Complete
	reply := Reply{Key: g.key, Banned: me.bad}
	for _, h := range me.have {
		if h {
			reply.Holds++
		}
	}
	if r.Leaving {
		g.forget(me)
		delete(g.members, who.Name)
		return reply
	}
	g.expire(now)
	s.recheck(g, now)
	for _, o := range g.members {
		if o != me && !o.complete && o.alive(now) {
			reply.Fetching++
		}
	}
	if r.Want > 0 && !r.Complete {
		reply.Assign = s.assign(g, me, min(r.Want, peers), peers, who.Server, now)
	}
	if me.downloads > 0 {
		me.idle = now
	}
	return reply
}

// member returns the named machine of the swarm for m, made on its first
// report.
func (g *group) member(name string, m *Manifest, now time.Time) *member {
	me := g.members[name]
	if me == nil {
		me = &member{name: name, have: make([]bool, m.Chunks()), avoid: map[string]time.Time{}, known: map[string]bool{},
			leases: map[int]lease{}, ended: map[ended]time.Time{}, idle: now}
		g.members[name] = me
	}
	return me
}

// heard notes that me reported r from ip: a new life of the machine, its
// return after failures, the address it serves chunks at.
func (g *group) heard(me *member, ip string, r Report, now time.Time) {
	if r.Instance != me.instance {
		// A new life of the machine (the agent started again): whatever
		// it held before is not on its disk any more.
		g.forget(me)
		me.instance = r.Instance
	}
	if me.fails >= maxGone {
		// Back after its transfers failed: what it holds counts again.
		g.count(me, +1)
	}
	me.fails = 0
	me.seen = now
	if r.Addr != "" && ip != "" {
		if _, port, err := net.SplitHostPort(r.Addr); err == nil {
			me.url = "http://" + net.JoinHostPort(ip, port)
		}
	}
}

// holds takes the chunks me now has and has lost (indexes out of range
// ignored); a banned machine's chunks are not counted as held.
func (g *group) holds(me *member, have, lost []int) {
	for _, i := range have {
		if i >= 0 && i < len(me.have) && !me.have[i] {
			me.have[i] = true
			if !me.bad {
				g.holders[i]++
			}
		}
	}
	for _, i := range lost {
		if i >= 0 && i < len(me.have) && me.have[i] {
			me.have[i] = false
			if !me.bad {
				g.holders[i]--
			}
		}
	}
}

// settle closes the transfers r says ended, done or failed, and counts
// them.
func (s *Scheduler) settle(g *group, me *member, r Report, now time.Time) {
	for _, t := range r.Done {
		s.close(g, me, t, now)
		if t.From == "" {
			s.stats.ServerBytes += t.Bytes
		} else {
			s.stats.PeerBytes += t.Bytes
			me.known[t.From] = true
		}
	}
	for _, t := range r.Failed {
		// Only the machine sent for the chunk to that source can say how
		// it went: anyone else's word about another peer is ignored.
		leased := me.leased(t, now)
		s.close(g, me, t, now)
		if !leased {
			s.stats.Unfounded++
			me.suspect = true
			continue
		}
		s.failed(g, me, t, now)
	}
}

// group returns m's swarm, made on first use; swarms nobody reported to
// for a while are forgotten on the way.
func (s *Scheduler) group(m *Manifest, now time.Time) *group {
	if s.groups == nil {
		s.groups = map[string]*group{}
	}
	for k, g := range s.groups {
		if now.Sub(g.seen) > forgetAfter {
			delete(s.groups, k)
		}
	}
	g := s.groups[m.Source]
	if g == nil || g.m.SHA256 != m.SHA256 {
		key := make([]byte, 16)
		crand.Read(key)
		g = &group{m: m, key: hex.EncodeToString(key), members: map[string]*member{},
			holders: make([]int, m.Chunks()), fromServer: make([]int, m.Chunks())}
		s.groups[m.Source] = g
	}
	g.seen = now
	return g
}

// Key is the credential of m's swarm ("" before anyone reported to it):
// the server's chunk handler checks it.
func (s *Scheduler) Key(source string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[source]; g != nil {
		return g.key
	}
	return ""
}

func (me *member) alive(now time.Time) bool {
	return now.Sub(me.seen) <= deadAfter && me.fails < maxGone
}

// count adds d to the holder counts of what me holds.
func (g *group) count(me *member, d int) {
	if me.bad {
		return
	}
	for i, h := range me.have {
		if h {
			g.holders[i] += d
		}
	}
}

// close ends the lease of transfer t to me.
func (s *Scheduler) close(g *group, me *member, t Transfer, now time.Time) {
	if l, ok := me.leases[t.Chunk]; ok && l.from == t.From {
		g.release(me, t.Chunk)
		me.ended[ended{t.Chunk, t.From}] = now.Add(leaseTTL)
	}
}

// release ends me's lease on chunk i: its download slot, and its source's
// upload slot (the server's stream) are free again.
func (g *group) release(me *member, i int) {
	l := me.leases[i]
	delete(me.leases, i)
	me.downloads--
	if l.from == "" {
		g.serverBusy--
		g.fromServer[i]--
	} else if src := g.members[l.from]; src != nil {
		src.uploads--
	}
}

// failed takes a failed transfer into account.
func (s *Scheduler) failed(g *group, me *member, t Transfer, now time.Time) {
	src := g.members[t.From]
	switch t.Why {
	case WhyBad:
		s.stats.Bad++
		// The machine's word convicts nobody (it may be the liar): it
		// avoids that source itself, and the server checks the chunk.
		me.avoid[t.From] = now.Add(forgetAfter)
		if src != nil && !src.bad && !me.suspect {
			src.accused.add(t.Chunk)
			s.recheck(g, now)
		}
	case WhySlow:
		s.stats.Slow++
		me.avoid[t.From] = now.Add(avoidSlow)
	default:
		s.stats.Gone++
		me.avoid[t.From] = now.Add(avoidGone)
		if src != nil {
			if src.fails++; src.fails == maxGone {
				g.count(src, -1) // alive() is false from now on
			}
		}
	}
}

// expire forgets leases not reported back in time, and members not heard
// from for long.
func (g *group) expire(now time.Time) {
	for name, me := range g.members {
		for i, l := range me.leases {
			if now.After(l.until) {
				g.release(me, i)
				me.ended[ended{i, l.from}] = now.Add(leaseTTL)
			}
		}
		for l, until := range me.ended {
			if now.After(until) {
				delete(me.ended, l)
			}
		}
		if now.Sub(me.seen) > forgetAfter {
			g.forget(me)
			delete(g.members, name)
		}
	}
}

// forget drops what me holds, and the transfers it had under way.
func (g *group) forget(me *member) {
	for i := range me.leases {
		g.release(me, i)
	}
	clear(me.ended)
	if me.fails < maxGone {
		g.count(me, -1)
	}
	clear(me.have)
	me.complete = false
}

// assign hands me up to want chunks: the rarest it lacks, each from the
// least busy peer holding it; from the server when no peer me may fetch
// from holds it and nobody fetches it from the server yet (so the server
// sends each chunk about once), and anyway when me has had nothing to do
// for idleFallback.
func (s *Scheduler) assign(g *group, me *member, want, peers int, server string, now time.Time) []Assignment {
	var lacking []int
	for i, h := range me.have {
		if _, busy := me.leases[i]; !h && !busy && !g.m.IsZero(i) {
			lacking = append(lacking, i)
		}
	}
	if len(lacking) == 0 {
		return nil
	}
	// Rarest first; among equals, an order of this machine's own, so the
	// machines spread over the chunks.
	rand.Shuffle(len(lacking), func(a, b int) { lacking[a], lacking[b] = lacking[b], lacking[a] })
	rarity := func(i int) int { return g.holders[i] + g.fromServer[i] }
	slices.SortStableFunc(lacking, func(a, b int) int { return rarity(a) - rarity(b) })

	var sources []*member
	if !me.bad {
		for _, o := range g.members {
			if o != me && !o.bad && o.url != "" && o.alive(now) && !avoided(me, o.name, now) {
				sources = append(sources, o)
			}
		}
	}
	serverOK := !avoided(me, "", now)
	streams := s.ServerStreams
	if streams <= 0 {
		streams = DefaultServerStreams
	}
	var out []Assignment
	give := func(i int, src *member) {
		me.downloads++
		if src == nil {
			g.serverBusy++
			g.fromServer[i]++
			me.leases[i] = lease{from: "", until: now.Add(leaseTTL)}
			out = append(out, Assignment{Chunk: i, URL: server})
			return
		}
		src.uploads++
		me.leases[i] = lease{from: src.name, until: now.Add(leaseTTL)}
		out = append(out, Assignment{Chunk: i, From: src.name, URL: src.url})
	}
	for _, i := range lacking {
		if len(out) >= want {
			break
		}
		var best *member
		held := false
		for _, o := range sources {
			if o.have[i] {
				held = true
				if o.uploads < peers && (best == nil || better(me, o, best)) {
					best = o
				}
			}
		}
		switch {
		case best != nil:
			give(i, best)
		case held:
			// Its holders are busy: one of them will have time soon.
		case serverOK && g.serverBusy < streams && (me.bad || g.fromServer[i] == 0 && !fromServer(me)):
			// Nobody this machine may fetch it from holds it, nor is it
			// coming from the server to anyone: the server sends it, one
			// chunk at a time to each machine, so the first copies spread
			// over the machines.
			give(i, nil)
		}
	}
	if len(out) == 0 && me.downloads == 0 && serverOK && g.serverBusy < streams && now.Sub(me.idle) >= idleFallback {
		give(lacking[0], nil)
	}
	return out
}

// better says source a is a better choice than b for me: one me fetched
// from before (its connection is open: on a busy link a new one can take
// seconds), then the less busy.
func better(me, a, b *member) bool {
	if ka, kb := me.known[a.name], me.known[b.name]; ka != kb {
		return ka
	}
	return a.uploads < b.uploads
}

// fromServer says me is fetching a chunk from the server.
func fromServer(me *member) bool {
	for _, l := range me.leases {
		if l.from == "" {
			return true
		}
	}
	return false
}

func avoided(me *member, source string, now time.Time) bool {
	until, ok := me.avoid[source]
	return ok && now.Before(until)
}

// Source names a transfer's source for logs: the server or the peer.
func Source(from string) string {
	if from == "" {
		return "the server"
	}
	return strconv.Quote(from)
}
