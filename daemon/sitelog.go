package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bootops/bootops/boot/lease"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/sitecluster"
)

// siteLog is a member's side of the site's log: it copies what this
// member records — the boot plane's events (in batches, not waited for),
// the agents' events and the leases it gives (before they are answered) —
// and applies what the other members copied to its own store and pools,
// so every member's timelines, node states and leases are the site's.
type siteLog struct {
	m      *sitecluster.Member
	events *status.Durable
	pools  *leasePools
	// place is the file that keeps the last entry of the log applied.
	place string
	log   *slog.Logger

	queue chan status.Event
	// uncopied counts boot-plane events not copied (a full queue, or no
	// majority to write them): they stay on this member's timeline only.
	uncopied atomic.Uint64
}

// siteLogQueue bounds the boot plane's events waiting to be copied.
const siteLogQueue = 4096

func newSiteLog(m *sitecluster.Member, events *status.Durable, pools *leasePools, stateDir string, log *slog.Logger) *siteLog {
	return &siteLog{m: m, events: events, pools: pools, place: filepath.Join(stateDir, "cluster-log.applied"), log: log,
		queue: make(chan status.Event, siteLogQueue)}
}

// add queues one of the boot plane's events for the others; never blocks.
func (l *siteLog) add(e status.Event) {
	select {
	case l.queue <- e:
	default:
		l.uncopied.Add(1)
	}
}

// copyEvents writes the queued events to the log, up to 500 an entry,
// until ctx ends.
func (l *siteLog) copyEvents(ctx context.Context) error {
	for {
		var batch []status.Event
		select {
		case <-ctx.Done():
			return nil
		case e := <-l.queue:
			batch = append(batch, e)
		}
	fill:
		for len(batch) < 500 {
			select {
			case e := <-l.queue:
				batch = append(batch, e)
			default:
				break fill
			}
		}
		if err := l.appendEvents(batch); err != nil {
			l.uncopied.Add(uint64(len(batch)))
			l.log.Debug("cluster: boot-plane events not copied to the other members", "events", len(batch), "err", err)
		}
	}
}

// appendEvents writes events to the log as one entry, on a majority.
func (l *siteLog) appendEvents(evs []status.Event) error {
	b, err := json.Marshal(evs)
	if err != nil {
		return err
	}
	return l.m.Append(sitecluster.LogEvents, b)
}

// leaseEntry is a lease in the log: the pool (its file's name), the
// client's key, the address and its end (none: the key has no lease).
type leaseEntry struct {
	Pool    string     `json:"pool"`
	Key     string     `json:"key"`
	IP      string     `json:"ip,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
}

// replicate is pool's lease.Store.Replicate: the lease on a majority
// before the client is answered.
func (l *siteLog) replicate(pool string) func(string, lease.Record) error {
	return func(key string, r lease.Record) error {
		e := leaseEntry{Pool: pool, Key: key}
		if r.IP.IsValid() {
			exp := r.Expires.UTC()
			e.IP, e.Expires = r.IP.String(), &exp
		}
		b, _ := json.Marshal(e)
		return l.m.Append(sitecluster.LogLeases, b)
	}
}

// follow applies the other members' entries from where this member
// stopped last, until ctx ends.
func (l *siteLog) follow(ctx context.Context) error {
	var from uint64
	b, err := os.ReadFile(l.place)
	switch {
	case err == nil:
		if from, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return fmt.Errorf("cluster: %s: %w (remove it to apply the whole log again)", l.place, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cluster: %w", err)
	}
	l.m.Follow(ctx, from, l.apply)
	return nil
}

// apply stores a batch of the others' entries, then the place they
// reach: a crash between the two applies them again (an agent's events
// carry their Seq and are stored once; a lease is the same lease).
func (l *siteLog) apply(es []sitecluster.Entry, upTo uint64) error {
	var evs []status.Event
	for _, e := range es {
		switch e.Kind {
		case sitecluster.LogEvents:
			var batch []status.Event
			if err := json.Unmarshal(e.Data, &batch); err != nil {
				l.log.Warn("cluster: an entry of the site's log that is no list of events, passed over", "entry", e.Seq, "member", e.Member, "err", err)
				continue
			}
			evs = append(evs, batch...)
		case sitecluster.LogLeases:
			var le leaseEntry
			if err := json.Unmarshal(e.Data, &le); err != nil {
				l.log.Warn("cluster: an entry of the site's log that is no lease, passed over", "entry", e.Seq, "member", e.Member, "err", err)
				continue
			}
			var r lease.Record
			if le.IP != "" && le.Expires != nil {
				ip, err := netip.ParseAddr(le.IP)
				if err != nil {
					l.log.Warn("cluster: a lease in the site's log with no address, passed over", "entry", e.Seq, "member", e.Member, "ip", le.IP)
					continue
				}
				r = lease.Record{IP: ip, Expires: *le.Expires}
			}
			if !poolName.MatchString(le.Pool) {
				l.log.Warn("cluster: a lease in the site's log for no pool file, passed over", "entry", e.Seq, "member", e.Member, "pool", le.Pool)
				continue
			}
			if err := l.pools.get(le.Pool).Apply(le.Key, r); err != nil {
				return fmt.Errorf("lease of %s from %s: %w", le.Key, e.Member, err)
			}
		}
	}
	if len(evs) > 0 {
		if err := l.events.RecordCopies(evs...); err != nil {
			return err
		}
	}
	tmp := l.place + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(upTo, 10)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, l.place)
}

// poolName is a lease pool's file name, leases-<site>.json or
// leases6-<site>.json: the only files another member's lease may name
// (never the status store, a key, or a path out of the state folder).
var poolName = regexp.MustCompile(`^leases6?-[a-z0-9]([a-z0-9-]{0,62})\.json$`)

// leasePools are the daemon's lease stores by file name, one per site and
// family, made when first asked for: by the boot plane, or by the site's
// log applying another member's lease for a pool not served yet.
type leasePools struct {
	dir       string
	replicate func(pool string) func(string, lease.Record) error // nil: no cluster
	macs      *lease.Stores

	mu    sync.Mutex
	pools map[string]*lease.Store
}

// get is the pool kept in file name (leases-<site>.json, leases6-<site>.json).
func (p *leasePools) get(name string) *lease.Store {
	name = filepath.Base(name)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.pools[name]; ok {
		return s
	}
	if p.pools == nil {
		p.pools = map[string]*lease.Store{}
	}
	s := &lease.Store{Path: filepath.Join(p.dir, name)}
	if p.replicate != nil {
		s.Replicate = p.replicate(name)
	}
	p.pools[name] = s
	p.macs.Add(s)
	return s
}
