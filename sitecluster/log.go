package sitecluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamLog is the site's log: what each member recorded that the others
// keep a copy of — its status events (timelines, node states), the leases
// it gave — one entry per write, subject "bootops.log.<kind>.<member>".
// Every member applies the others' entries to its own store (Follow), so
// each has the whole site's record; the log keeps a week of it.
const StreamLog = "bootops-site-log"

// Kinds of log entry.
const (
	LogEvents = "events" // a JSON array of status events
	LogLeases = "leases" // a lease a member gave (the daemon's JSON)
)

const (
	logMaxAge   = 7 * 24 * time.Hour
	logMaxBytes = 1 << 30
	// followBatch is how many entries Follow hands its caller at once.
	followBatch = 500
)

func logSubject(kind, member string) string { return "bootops.log." + kind + "." + member }

func (m *Member) logConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: StreamLog, Subjects: []string{"bootops.log.>"}, Replicas: m.cfg.Replicas,
		Storage: jetstream.FileStorage, MaxAge: logMaxAge, MaxBytes: logMaxBytes, Discard: jetstream.DiscardOld}
}

// Append writes data to the site's log as this member's entry of kind,
// on a majority of the members before it returns.
func (m *Member) Append(kind string, data []byte) error {
	ctx, cancel := m.op()
	defer cancel()
	if _, err := m.js.Publish(ctx, logSubject(kind, m.cfg.Name), data); err != nil {
		return fmt.Errorf("the site's cluster did not record this member's %s: %w", kind, err)
	}
	return nil
}

// Entry is an entry of the site's log.
type Entry struct {
	Seq    uint64 // its place in the log
	Kind   string
	Member string // the member that appended it
	Data   []byte
}

// Follow gives apply, in the log's order and in batches, every entry
// after seq that another member appended, with the last place the batch
// covers (this member's own entries are passed over, but counted in it):
// the caller keeps that place and starts there next time. An apply that
// fails gets the same batch again a second later; nothing is skipped.
// Follow returns when ctx ends.
func (m *Member) Follow(ctx context.Context, seq uint64, apply func(entries []Entry, upTo uint64) error) {
	for ctx.Err() == nil {
		var err error
		seq, err = m.follow(ctx, seq, apply)
		if err != nil && ctx.Err() == nil {
			m.cfg.Log.Debug("sitecluster: following the site's log", "after", seq, "err", err)
			sleep(ctx, time.Second)
		}
	}
}

// follow reads the log after seq with one consumer until an error: the
// last place applied.
func (m *Member) follow(ctx context.Context, seq uint64, apply func([]Entry, uint64) error) (uint64, error) {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if seq > 0 {
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq + 1}
	}
	cons, err := m.js.OrderedConsumer(ctx, StreamLog, cfg)
	if err != nil {
		return seq, err
	}
	for ctx.Err() == nil {
		batch, err := cons.Fetch(followBatch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return seq, err
		}
		var entries []Entry
		upTo := seq
		for msg := range batch.Messages() {
			meta, err := msg.Metadata()
			if err != nil {
				continue
			}
			upTo = meta.Sequence.Stream
			kind, member, ok := strings.Cut(strings.TrimPrefix(msg.Subject(), "bootops.log."), ".")
			if !ok || member == m.cfg.Name {
				continue
			}
			entries = append(entries, Entry{Seq: upTo, Kind: kind, Member: member, Data: msg.Data()})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			if upTo == seq {
				return seq, err
			}
		}
		if upTo == seq {
			continue
		}
		for {
			err := apply(entries, upTo)
			if err == nil {
				break
			}
			m.cfg.Log.Warn("sitecluster: applying other members' records (again in a second)", "entries", len(entries), "err", err)
			if !sleep(ctx, time.Second) {
				return seq, ctx.Err()
			}
		}
		seq = upTo
	}
	return seq, ctx.Err()
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
