package udpserve

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bootops/bootops/boot/status"
)

// Series are a server's Prometheus series, named (and described) by its
// family: dashboards and tests query these names.
type Series struct {
	// Dropped counts packets dropped unanswered as invalid, by "reason".
	Dropped prometheus.CounterOpts
	// Exhausted counts machines that got no address because the pool
	// was full, by "site".
	Exhausted prometheus.CounterOpts
	// Suppressed counts replies sent but not written as status events.
	Suppressed prometheus.CounterOpts
	// QueueFull counts packets read but dropped unanswered because the
	// queue for the workers was full (the client retransmits).
	QueueFull prometheus.CounterOpts
	// Reasons are every drop reason, each series counted from 0.
	Reasons []string
}

// Metrics are a server's series. A nil *Metrics counts nothing.
type Metrics struct {
	dropped    *prometheus.CounterVec
	exhausted  *prometheus.CounterVec
	suppressed prometheus.Counter
	queueFull  prometheus.Counter
}

// NewMetrics registers s on reg.
func NewMetrics(reg prometheus.Registerer, s Series) *Metrics {
	m := &Metrics{
		dropped:    prometheus.NewCounterVec(s.Dropped, []string{"reason"}),
		exhausted:  prometheus.NewCounterVec(s.Exhausted, []string{"site"}),
		suppressed: prometheus.NewCounter(s.Suppressed),
		queueFull:  prometheus.NewCounter(s.QueueFull),
	}
	reg.MustRegister(m.dropped, m.exhausted, m.suppressed, m.queueFull)
	for _, r := range s.Reasons {
		m.dropped.WithLabelValues(r)
	}
	return m
}

// Site starts the site's exhaustion count at 0, so a dashboard shows the
// site before its pool ever runs out.
func (m *Metrics) Site(name string) {
	if m != nil {
		m.exhausted.WithLabelValues(name)
	}
}

func (m *Metrics) drop(reason string) {
	if m != nil {
		m.dropped.WithLabelValues(reason).Inc()
	}
}

// full counts a packet the workers' queue had no room for.
func (m *Metrics) full() {
	if m != nil {
		m.queueFull.Inc()
	}
}

func (m *Metrics) exhaust(site string) {
	if m != nil {
		m.exhausted.WithLabelValues(site).Inc()
	}
}

func (m *Metrics) suppress() {
	if m != nil {
		m.suppressed.Inc()
	}
}

// FullEvery is the least time between two pool-exhausted events of a
// server: a flood must not flood the status store too.
const FullEvery = 10 * time.Second

// Book is what a server writes down about its answers: the counts, the
// log, and the status events. A server makes one from its settings before
// it answers anything.
type Book struct {
	// Name begins its log messages ("dhcp", "dhcp6"); FullPrefix the
	// pool-exhausted event's message ("", "DHCPv6 ").
	Name, FullPrefix string
	Events           status.Recorder // nil: no events
	Log              *slog.Logger    // nil: no log
	Metrics          *Metrics
	// Newcomers, when set, bounds how many machines the status store
	// does not know (Known) may have sightings recorded: past it their
	// replies still go, their sightings are not kept.
	Newcomers *status.Newcomers
	Known     func(key string) bool

	// lastFull is when the last pool-exhausted event was recorded (unix
	// ns), refused how many machines went without an address since.
	lastFull, refused atomic.Int64
	gateOnce          sync.Once
	gate              *status.EventGate
}

func (b *Book) events() *status.EventGate {
	b.gateOnce.Do(func() { b.gate = status.NewEventGate() })
	return b.gate
}

// discard is the log of a book without one.
var discard = slog.New(slog.DiscardHandler)

// Logger is the book's log, a discarding one when it has none.
func (b *Book) Logger() *slog.Logger {
	if b.Log == nil {
		return discard
	}
	return b.Log
}

// Suppressed is how many replies were not recorded as status events (a
// machine's same answer again within 5 s, or past 2,000 events a second).
func (b *Book) Suppressed() uint64 { return b.events().Suppressed() }

// Dropped counts a packet refused as invalid, for reason, and logs why.
func (b *Book) Dropped(reason, why string, peer netip.AddrPort) {
	b.Metrics.drop(reason)
	b.Logger().Debug(b.Name+": dropped", "reason", reason, "why", why, "peer", peer.String())
}

// Record writes ev, a reply's sighting, as a status event, unless the
// event gate holds it back (key: the machine and what it asked on) or ev
// is of a machine the store does not know past the newcomers' budget of
// source ("link" or "relayed": never an address the sender chooses, or one
// host could mint budgets). What is held back is counted.
func (b *Book) Record(ev status.Event, key, source string) {
	switch {
	case b.Events == nil:
	case ev.Node == "" && b.Newcomers != nil && (b.Known == nil || !b.Known(ev.Key())) && !b.Newcomers.Allow(source):
		b.Metrics.suppress()
	case b.events().Allow(key, ev.Message, time.Now()):
		b.Events.Record(ev)
	default:
		b.Metrics.suppress()
	}
}

// Exhausted counts a machine of site refused for want of an address, and
// says so in an error event (for mac) and a warning, at most once per
// FullEvery, with how many were refused since. who names the machine in
// both.
func (b *Book) Exhausted(site, mac string, who slog.Attr) {
	b.Metrics.exhaust(site)
	n := b.refused.Add(1)
	now := time.Now().UnixNano()
	last := b.lastFull.Load()
	if now-last < int64(FullEvery) || !b.lastFull.CompareAndSwap(last, now) {
		return
	}
	b.refused.Add(-n)
	msg := fmt.Sprintf("%spool exhausted: no address for %s (%d refused since the last such event)", b.FullPrefix, who.Value, n)
	b.Logger().Warn(b.Name+": pool exhausted", "site", site, who, "refused", n)
	if b.Events != nil {
		b.Events.Record(status.Event{Kind: status.KindDHCP, Site: site, MAC: mac, Message: msg, Error: true})
	}
}
