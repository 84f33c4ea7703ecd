package swarm

import (
	"context"
	"io"
	"net/http"
	"slices"
	"time"
)

// How the server checks a peer accused of serving a bad chunk.
const (
	maxChecks    = 2                // re-checks under way at once, all swarms together
	checkTimeout = 30 * time.Second // one re-check's time
	checkTries   = 3                // re-checks of a chunk that could not tell, before the server gives up on it
	checkRetry   = 2 * time.Second  // time between them
)

// accusation is what the server still has to check of a peer: chunks it
// served that a machine sent for them found bad.
type accusation struct {
	chunks   []int     // to check, first first
	checking bool      // a re-check is under way
	tries    int       // of chunks[0], that could not tell
	next     time.Time // no re-check before
}

func (a *accusation) add(i int) {
	if !slices.Contains(a.chunks, i) {
		a.chunks = append(a.chunks, i)
	}
}

// leased says the scheduler sent me for t's chunk to t's source, lately
// enough for a report of it to count: the lease is under way, or ended
// less than leaseTTL ago (a report that was resent, or held up).
func (me *member) leased(t Transfer, now time.Time) bool {
	if l, ok := me.leases[t.Chunk]; ok && l.from == t.From {
		return true
	}
	until, ok := me.ended[ended{t.Chunk, t.From}]
	return ok && !now.After(until)
}

// verdict is what a re-check found.
type verdict int

const (
	unknown verdict = iota // no answer, an error, not served: nothing is known
	right                  // the chunk matches its sha256
	wrong                  // the peer served bytes that do not
)

// recheck starts the re-checks of g's accused members that are due, as
// many as may run at once. Each runs on its own: the scheduler does not
// wait for the network.
func (s *Scheduler) recheck(g *group, now time.Time) {
	for _, src := range g.members {
		a := &src.accused
		if s.checking >= maxChecks {
			return
		}
		if src.bad || a.checking || len(a.chunks) == 0 || now.Before(a.next) {
			continue
		}
		if src.url == "" {
			a.chunks = nil // it serves nothing: nothing to check
			continue
		}
		a.checking = true
		s.checking++
		s.checks.Add(1)
		go s.check(g, src, a.chunks[0], src.url, g.key)
	}
}

// check fetches chunk i from the peer src at url, as a member of its swarm
// would, and bans src if it does not match the manifest.
func (s *Scheduler) check(g *group, src *member, i int, url, key string) {
	defer s.checks.Done()
	v := s.fetch(g.m, i, url, key)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checking--
	a := &src.accused
	a.checking = false
	now := s.now()
	if len(a.chunks) == 0 { // banned meanwhile
		return
	}
	switch v {
	case wrong:
		s.ban(g, src)
	case right:
		s.stats.Cleared++
		a.chunks, a.tries = a.chunks[1:], 0
	default:
		if a.tries++; a.tries >= checkTries {
			a.chunks, a.tries = a.chunks[1:], 0
		}
		a.next = now.Add(checkRetry)
	}
	if s.groups[g.m.Source] == g {
		s.recheck(g, now)
	}
}

// ban drops src from its swarm: it holds nothing for anyone from now on.
func (s *Scheduler) ban(g *group, src *member) {
	if src.bad {
		return
	}
	if src.fails < maxGone { // else not counted already
		g.count(src, -1)
	}
	src.bad = true
	src.accused = accusation{}
	s.stats.Banned++
}

// fetch gets chunk i of m from url and says whether it is right.
func (s *Scheduler) fetch(m *Manifest, i int, url, key string) verdict {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+ChunkPath(m.Source, i), nil)
	if err != nil {
		return unknown
	}
	req.Header.Set("Authorization", "Bearer "+key)
	client := s.Client
	if client == nil {
		client = defaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return unknown
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Busy, or not held any more: what it sent before is not known.
		return unknown
	}
	_, n := m.Span(i)
	b, err := io.ReadAll(io.LimitReader(resp.Body, n+1))
	if err != nil {
		// Cut short: a failed transfer, not a lie.
		return unknown
	}
	if m.Verify(i, b) {
		return right
	}
	return wrong
}
