package status

import (
	"bytes"
	"cmp"
	"container/list"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/bootops/bootops/plan"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrClosed is returned by RecordSync once the store is closed.
var ErrClosed = errors.New("status: store closed")

// The file's layout:
//
//	events/<key>/<seq>    the machine's events as JSON, by store sequence
//	seqs/<key>/<agent seq> → <seq>  which stored event carries an agent Seq
//	machines/<key>        the machine's record (summary, counts, last Seq)
//	outbox/<seq>          events not yet acknowledged by the hub (Options.Outbox)
//
// Sequences are 8-byte big-endian, so a bucket's order is the order the
// events were stored in. The store sequence is the events bucket's
// NextSequence, shared by every machine: it also orders machines by how
// recently they were seen.
var (
	bucketEvents   = []byte("events")
	bucketSeqs     = []byte("seqs")
	bucketMachines = []byte("machines")
	bucketOutbox   = []byte("outbox")
)

const (
	// queueLen bounds what Record may have waiting for the writer; past it
	// events are dropped rather than block the DHCP path.
	queueLen = 4096
	// A batch is committed when it holds maxBatch events or, when nobody
	// waits on it, linger after its first event.
	maxBatch = 1000
	linger   = 5 * time.Millisecond
	// maxKeyLen bounds a machine key (bbolt takes up to 32 KiB).
	maxKeyLen = 1024
)

// Options tunes a Durable store; zero fields take the defaults.
//
// The store holds two kinds of machine apart. A registered node (its key is
// site/node) is kept for as long as Retain is told it is in Git, and a grace
// period after: no amount of traffic evicts it, its provisioned generation,
// or its session. Sightings of machines that are no node (keyed mac:, uuid:,
// serial:, ip:) live in a table of their own, bounded in count and in bytes;
// when it is full the least recently seen unknown machines go first.
type Options struct {
	PerMachine int // events kept per registered node (default 2000; the oldest go first)
	PerUnknown int // events kept per unknown machine (default 100)
	// PerMachineBytes bounds the bytes of events any one machine keeps
	// (default 4 MiB; the oldest go first, the newest always stays).
	PerMachineBytes int64
	MaxUnknown      int   // unknown machines kept (default 20000; the least recently seen go first)
	MaxUnknownBytes int64 // bytes of events kept for unknown machines together (default 64 MiB)
	// NodeTraffic bounds the boot plane's events (Record, not RecordSync)
	// a registered node keeps: a burst of NodeTrafficBurst (default 200),
	// then one per NodeTrafficEvery (default 1 s); the rest are counted,
	// and the next one kept says how many were not. Someone on the LAN who
	// repeats a node's identifiers cannot wash its timeline away.
	NodeTrafficBurst int
	NodeTrafficEvery time.Duration
	// Evicted, when set, is told how many unknown machines a commit
	// dropped to stay within MaxUnknown and MaxUnknownBytes. It runs on
	// the writer: it must not block.
	Evicted func(n int)
	// Now is the clock that stamps events without a time (default time.Now).
	Now func() time.Time
	// Changed, when set, is called after every commit that changed what
	// Machines or Events return (the dashboard pushes the change). It
	// runs on the writer: it must not block.
	Changed func()
	// Outbox keeps every stored event, in store order, until Sent says
	// the hub has it: the site's store-and-forward buffer (see Pending).
	Outbox bool
}

// Durable keeps events in a bbolt file. One writer goroutine commits what
// is queued in one transaction (group commit), so a flood of DHCP events
// costs one fsync per batch, not per event. Machines, LastSeq and
// Provisioned answer from an index in memory that only ever holds
// committed data; Events reads the file.
type Durable struct {
	db  *bolt.DB
	opt Options

	queue   chan request
	quit    chan struct{} // closed by Close: the writer drains the queue and stops
	stopped chan struct{} // closed by the writer when it has stopped
	dropped atomic.Uint64
	// tokenUses counts UseToken calls, to sweep expired tokens now and then.
	tokenUses atomic.Uint64

	// sendMu orders sends on queue before Close: once closed is set no
	// request can enter the queue, so the writer's last drain sees them all.
	sendMu sync.RWMutex
	closed bool

	// mu guards the index. Only the writer changes it, after a commit;
	// the writer reads it without the lock.
	mu       sync.RWMutex
	machines map[string]*record
	lru      *list.List // unknown machines' keys, least recently seen first
	// unknownBytes is the bytes of events the unknown machines keep.
	unknownBytes int64
	evicted      atomic.Uint64

	// traffic is each node's budget of boot-plane events (Record).
	traffic *Budgets
	// mirror, when set (SetMirror), is given each event Record queued.
	mirror atomic.Pointer[func(Event)]
}

var _ Recorder = (*Durable)(nil)

// record is what the index, and the machines bucket, keep of a machine.
type record struct {
	Machine Machine `json:"machine"`
	// Kept is how many events the machine's bucket holds.
	Kept int `json:"kept"`
	// LastSeq is the highest agent Seq stored.
	LastSeq uint64 `json:"lastSeq,omitempty"`
	// Recent is the store sequence of the newest event.
	Recent uint64 `json:"recent"`
	// Provisioned is the Generation of the newest "provisioned" event; it
	// outlives the event's trimming.
	Provisioned *int `json:"provisioned,omitempty"`
	// Bytes is the size of the events the machine's bucket holds.
	Bytes int64 `json:"bytes,omitempty"`
	// Gone is when Retain first found the node no longer in Git.
	Gone *time.Time `json:"gone,omitempty"`
	// Escrows are the Machine's (which its JSON leaves out), kept here in
	// the same transaction as the event that brought them: an
	// acknowledged escrow outlives a crash.
	Escrows []Escrow `json:"escrows,omitempty"`

	elem *list.Element // in Durable.lru
}

type request struct {
	events []Event
	// fn, when set, is work of the writer's in the batch's transaction
	// (Retain), in place of events.
	fn   func(*batch) error
	done chan error // nil for Record
	// copies: events another member of the site's cluster recorded
	// (RecordCopies), which stay out of the outbox.
	copies bool
}

// Open opens the store at path, creating it when missing, and loads the
// index from it.
func Open(path string, opt Options) (*Durable, error) {
	opt.PerMachine = orDefault(opt.PerMachine, 2000)
	opt.PerUnknown = orDefault(opt.PerUnknown, 100)
	opt.PerMachineBytes = orDefault(opt.PerMachineBytes, 4<<20)
	opt.MaxUnknown = orDefault(opt.MaxUnknown, 20000)
	opt.MaxUnknownBytes = orDefault(opt.MaxUnknownBytes, 64<<20)
	opt.NodeTrafficBurst = orDefault(opt.NodeTrafficBurst, 200)
	opt.NodeTrafficEvery = orDefault(opt.NodeTrafficEvery, time.Second)
	if opt.Now == nil {
		opt.Now = time.Now
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		// Another daemon holding the file fails the start at once, not
		// after a wait (InUseError); a second is room for a restart's
		// predecessor still closing it.
		Timeout: time.Second,
		// Trimming frees pages all the time: do not write the free list
		// with every commit (it is rebuilt at open), and keep it in a map.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, &InUseError{Path: path, PID: lockHolder(path)}
	}
	if err != nil {
		return nil, fmt.Errorf("status: open %s: %w", path, err)
	}
	d := &Durable{
		db:       db,
		opt:      opt,
		queue:    make(chan request, queueLen),
		quit:     make(chan struct{}),
		stopped:  make(chan struct{}),
		machines: map[string]*record{},
		lru:      list.New(),
		// Node keys come from Git: a bound that is never reached.
		traffic: &Budgets{Burst: opt.NodeTrafficBurst, Every: opt.NodeTrafficEvery, MaxKeys: 100000},
	}
	if err := d.load(); err != nil {
		db.Close()
		return nil, fmt.Errorf("status: load %s: %w", path, err)
	}
	go d.run()
	return d, nil
}

// load creates the buckets and rebuilds the index from the machines bucket.
func (d *Durable) load() error {
	return d.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketEvents, bucketSeqs, bucketMachines, bucketTokens, bucketSessions, bucketOutbox, bucketRollouts} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		var recs []*record
		err := tx.Bucket(bucketMachines).ForEach(func(k, v []byte) error {
			r := &record{}
			if err := json.Unmarshal(v, r); err != nil {
				return fmt.Errorf("machine %q: %w", k, err)
			}
			if es := r.Escrows; len(es) > 0 {
				r.Machine.escrows = &es
			}
			recs = append(recs, r)
			return nil
		})
		if err != nil {
			return err
		}
		slices.SortFunc(recs, func(a, b *record) int { return cmp.Compare(a.Recent, b.Recent) })
		for _, r := range recs {
			if r.Bytes == 0 && r.Kept > 0 {
				r.Bytes = int64(r.Kept) * 300 // a file from before sizes were kept: about right
			}
			d.machines[r.Machine.Key] = r
			if !IsNodeKey(r.Machine.Key) {
				r.elem = d.lru.PushBack(r.Machine.Key)
				d.unknownBytes += r.Bytes
			}
		}
		return nil
	})
}

// Close commits what is queued and closes the file. Record drops, and
// RecordSync fails with ErrClosed, from then on.
func (d *Durable) Close() error {
	d.sendMu.Lock()
	if d.closed {
		d.sendMu.Unlock()
		return nil
	}
	d.closed = true
	d.sendMu.Unlock()
	close(d.quit)
	<-d.stopped
	return d.db.Close()
}

// Record stores e without waiting for the disk: the boot plane's events
// (DHCP, TFTP, scripts). It never blocks on the writer; when the queue is
// full the event is dropped and counted (Dropped).
func (d *Durable) Record(e Event) {
	e = d.stamp(e)
	if e.Node != "" && e.Kind != KindPower {
		var ok bool
		if e, ok = d.admit(e); !ok {
			return
		}
	}
	r := request{events: []Event{e}}
	d.sendMu.RLock()
	defer d.sendMu.RUnlock()
	if d.closed {
		d.dropped.Add(1)
		return
	}
	select {
	case d.queue <- r:
		if m := d.mirror.Load(); m != nil {
			(*m)(e)
		}
	default:
		d.dropped.Add(1)
	}
}

// SetMirror has f given every event Record queues, as stored (dated,
// within its node's budget): a member of a site's cluster copies them to
// the others. f runs on the caller of Record (the DHCP path): it must not
// block. RecordSync's events are not given to it.
func (d *Durable) SetMirror(f func(Event)) { d.mirror.Store(&f) }

// admit spends one of the node's boot-plane event tokens on e; false when
// it has none left (e is counted, and the next event kept says so).
func (d *Durable) admit(e Event) (Event, bool) {
	ok, suppressed := d.traffic.take(e.Key(), 1, e.Time)
	if !ok {
		d.dropped.Add(1)
		return e, false
	}
	if suppressed > 0 {
		e.Message += fmt.Sprintf(" (and %d more events of this node's identifiers before it, not kept: over its budget of %d at once and one per %s)",
			suppressed, d.opt.NodeTrafficBurst, d.opt.NodeTrafficEvery)
	}
	return e, true
}

// Retain forgets the registered nodes that left Git more than grace ago;
// inGit says whether a node's key (site/node) is in the served Plan. A node
// that leaves is marked gone and kept, with its history, its provisioned
// generation and its session; one that comes back within grace is as it
// was. Sessions of unknown machines that expired are dropped too.
func (d *Durable) Retain(inGit func(key string) bool, grace time.Duration) error {
	now := d.opt.Now().UTC()
	return d.send(request{fn: func(b *batch) error {
		for k, r := range b.d.machines {
			if !IsNodeKey(k) || b.removed[k] {
				continue
			}
			switch in := inGit(k); {
			case in && r.Gone != nil:
				b.touch(k, "").Gone = nil
			case !in && r.Gone == nil:
				b.touch(k, "").Gone = &now
			case !in && now.Sub(*r.Gone) > grace:
				if err := b.remove(k); err != nil {
					return err
				}
				if err := b.tx.Bucket(bucketSessions).Delete([]byte(k)); err != nil {
					return err
				}
			}
		}
		return sweepSessions(b.tx.Bucket(bucketSessions), now)
	}})
}

// send queues r and waits for its commit.
func (d *Durable) send(r request) error {
	r.done = make(chan error, 1)
	d.sendMu.RLock()
	if d.closed {
		d.sendMu.RUnlock()
		return ErrClosed
	}
	// Blocking here is fine: the writer runs until Close, and Close waits
	// for this send.
	d.queue <- r
	d.sendMu.RUnlock()
	return <-r.done
}

// RecordSync stores events and returns once they are committed to disk:
// the agent's events, acknowledged only when this returns nil. An event
// with a Seq already stored for its machine (an agent resending after a
// lost acknowledgement) is dropped, and counts as stored. With no events it
// waits for what Record queued before it.
func (d *Durable) RecordSync(events ...Event) error {
	r := request{events: make([]Event, len(events))}
	for i, e := range events {
		r.events[i] = d.stamp(e)
	}
	return d.send(r)
}

// RecordCopies stores events another member of the site's cluster
// recorded, as RecordSync does, but keeps them out of the outbox: the hub
// has each event from the member that recorded it, once.
func (d *Durable) RecordCopies(events ...Event) error {
	r := request{events: make([]Event, len(events)), copies: true}
	for i, e := range events {
		r.events[i] = d.stamp(e)
	}
	return d.send(r)
}

// Dropped counts the events Record dropped (queue full, store closed, a
// failed commit, or a node past its event budget).
func (d *Durable) Dropped() uint64 { return d.dropped.Load() }

// stamp dates an event without a time, and zeroes a rate JSON cannot carry
// (a division by a zero duration), which would fail the whole batch.
func (d *Durable) stamp(e Event) Event {
	e = e.printable()
	if e.Time.IsZero() {
		e.Time = d.opt.Now().UTC()
	}
	if math.IsNaN(e.Rate) || math.IsInf(e.Rate, 0) {
		e.Rate = 0
	}
	return e
}

// Machines lists every machine kept, registered nodes first, by key.
func (d *Durable) Machines() []Machine {
	d.mu.RLock()
	out := make([]Machine, 0, len(d.machines))
	for _, r := range d.machines {
		out = append(out, r.Machine)
	}
	d.mu.RUnlock()
	sortMachines(out)
	return out
}

// Events returns a machine's kept events, oldest first (in the order they
// were stored: a machine first seen by its MAC and merged into its node
// keeps its events where they fell among the node's).
func (d *Durable) Events(key string) []Event {
	var out []Event
	err := d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents).Bucket([]byte(key))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var e Event
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("event %x of %q: %w", k, key, err)
			}
			out = append(out, e)
			return nil
		})
	})
	if err != nil {
		return nil
	}
	return out
}

// LastSeq is the highest agent Seq stored, committed, for the machine.
func (d *Durable) LastSeq(key string) uint64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if r := d.machines[key]; r != nil {
		return r.LastSeq
	}
	return 0
}

// Known reports whether the store keeps the machine.
func (d *Durable) Known(key string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.machines[key] != nil
}

// Machine returns what the store holds of one machine.
func (d *Durable) Machine(key string) (Machine, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if r := d.machines[key]; r != nil {
		return r.Machine, true
	}
	return Machine{}, false
}

// State is the machine's state, "" when it is not kept.
func (d *Durable) State(key string) string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if r := d.machines[key]; r != nil {
		return r.Machine.State
	}
	return ""
}

// Installed is what the node's disk was last installed with (nil:
// unknown).
func (d *Durable) Installed(key string) *plan.Install {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if r := d.machines[key]; r != nil {
		return r.Machine.Installed
	}
	return nil
}

// Provisioned reports the reprovision generation the node was last
// provisioned at: the Generation of its newest event that put it in
// StateProvisioned. ok is false when it never was (or was forgotten).
func (d *Durable) Provisioned(site, node string) (generation int, ok bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if r := d.machines[site+"/"+node]; r != nil && r.Provisioned != nil {
		return *r.Provisioned, true
	}
	return 0, false
}

// run is the writer: it takes what is queued, up to maxBatch events, and
// commits it in one transaction.
func (d *Durable) run() {
	defer close(d.stopped)
	timer := time.NewTimer(linger)
	timer.Stop()
	var reqs []request
	for {
		reqs = reqs[:0]
		select {
		case r := <-d.queue:
			reqs = append(reqs, r)
		case <-d.quit:
			d.drain()
			return
		}
		n, waited := len(reqs[0].events), reqs[0].done != nil
	take:
		for n < maxBatch {
			select {
			case r := <-d.queue:
				reqs = append(reqs, r)
				n, waited = n+len(r.events), waited || r.done != nil
			default:
				break take
			}
		}
		// Nobody waits on this batch: give more events a moment to join
		// it rather than pay an fsync for a few.
		if !waited && n < maxBatch {
			timer.Reset(linger)
		wait:
			for n < maxBatch && !waited {
				select {
				case r := <-d.queue:
					reqs = append(reqs, r)
					n, waited = n+len(r.events), r.done != nil
				case <-timer.C:
					break wait
				case <-d.quit:
					break wait
				}
			}
			timer.Stop()
		}
		d.commit(reqs)
		clear(reqs) // let the events go
	}
}

// drain commits everything left in the queue; Close has stopped new sends.
func (d *Durable) drain() {
	for {
		var reqs []request
		n := 0
	take:
		for n < maxBatch {
			select {
			case r := <-d.queue:
				reqs = append(reqs, r)
				n += len(r.events)
			default:
				break take
			}
		}
		if len(reqs) == 0 {
			return
		}
		d.commit(reqs)
	}
}

// commit writes reqs in one transaction, installs the index changes once it
// is on disk and answers the waiters. When the transaction fails, each
// request is tried on its own, so one bad request cannot fail the others.
func (d *Durable) commit(reqs []request) {
	err := d.write(reqs)
	if err != nil && len(reqs) > 1 {
		for _, r := range reqs {
			d.commit([]request{r})
		}
		return
	}
	for _, r := range reqs {
		if r.done != nil {
			r.done <- err
		} else if err != nil {
			d.dropped.Add(uint64(len(r.events)))
		}
	}
}

func (d *Durable) write(reqs []request) error {
	var b *batch
	err := d.db.Update(func(tx *bolt.Tx) error {
		b = &batch{
			d:            d,
			tx:           tx,
			events:       tx.Bucket(bucketEvents),
			seqs:         tx.Bucket(bucketSeqs),
			machines:     tx.Bucket(bucketMachines),
			outbox:       tx.Bucket(bucketOutbox),
			pending:      map[string]*record{},
			removed:      map[string]bool{},
			unknown:      d.lru.Len(),
			unknownBytes: d.unknownBytes,
		}
		for _, r := range reqs {
			if r.fn != nil {
				if err := r.fn(b); err != nil {
					return err
				}
				continue
			}
			b.copies = r.copies
			for _, e := range r.events {
				if err := b.add(e); err != nil {
					return err
				}
			}
			b.copies = false
		}
		if err := b.evict(); err != nil {
			return err
		}
		return b.flush()
	})
	if err != nil {
		return fmt.Errorf("status: store events: %w", err)
	}
	d.install(b)
	if b.evicted > 0 {
		d.evicted.Add(uint64(b.evicted))
		if d.opt.Evicted != nil {
			d.opt.Evicted(b.evicted)
		}
	}
	if d.opt.Changed != nil && (len(b.pending) > 0 || len(b.removed) > 0) {
		d.opt.Changed()
	}
	return nil
}

// Evicted counts the unknown machines dropped to keep their table within
// its bounds. A registered node is never among them.
func (d *Durable) Evicted() uint64 { return d.evicted.Load() }

// Unknown reports the unknown machines kept and the bytes of their events.
func (d *Durable) Unknown() (machines int, bytes int64) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.lru.Len(), d.unknownBytes
}

// install takes a committed batch's changes into the index.
func (d *Durable) install(b *batch) {
	keys := make([]string, 0, len(b.pending))
	for k := range b.pending {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int { return cmp.Compare(b.pending[x].Recent, b.pending[y].Recent) })
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range b.removed {
		if old := d.machines[k]; old != nil {
			if old.elem != nil {
				d.lru.Remove(old.elem)
			}
			delete(d.machines, k)
		}
	}
	for _, k := range keys {
		r := b.pending[k]
		switch old := d.machines[k]; {
		case IsNodeKey(k):
			r.elem = nil // nodes are not in the unknown machines' order
		case old != nil && old.elem != nil:
			r.elem = old.elem
			d.lru.MoveToBack(r.elem)
		default:
			r.elem = d.lru.PushBack(k)
		}
		d.machines[k] = r
	}
	d.unknownBytes = b.unknownBytes
}

// batch is one transaction's work. Records it changes are copies in
// pending until the commit succeeds; a key is in pending, in removed, or
// in neither.
type batch struct {
	d                              *Durable
	tx                             *bolt.Tx
	events, seqs, machines, outbox *bolt.Bucket
	pending                        map[string]*record
	removed                        map[string]bool
	copies                         bool // the events added now stay out of the outbox
	// unknown and unknownBytes are the unknown machines, and the bytes of
	// their events, once this batch is in; evicted counts those it dropped.
	unknown      int
	unknownBytes int64
	evicted      int
}

// peek returns the machine's record as this transaction sees it, not to
// be changed; nil when there is none.
func (b *batch) peek(k string) *record {
	if r, ok := b.pending[k]; ok {
		return r
	}
	if b.removed[k] {
		return nil
	}
	return b.d.machines[k]
}

// touch returns the machine's record for changing, creating it when
// missing.
func (b *batch) touch(k, state string) *record {
	if r, ok := b.pending[k]; ok {
		return r
	}
	r := &record{Machine: Machine{Key: k, State: state}}
	if old := b.d.machines[k]; old != nil && !b.removed[k] {
		*r = *old
	} else if !IsNodeKey(k) {
		b.unknown++
	}
	delete(b.removed, k)
	b.pending[k] = r
	return r
}

// remove deletes a machine, its events and its Seq index.
func (b *batch) remove(k string) error {
	r := b.peek(k)
	if r == nil {
		return nil
	}
	if !IsNodeKey(k) {
		b.unknown--
		b.unknownBytes -= r.Bytes
	}
	delete(b.pending, k)
	b.removed[k] = true
	for _, parent := range []*bolt.Bucket{b.events, b.seqs} {
		if err := parent.DeleteBucket([]byte(k)); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
	}
	return b.machines.Delete([]byte(k))
}

func (b *batch) add(e Event) error {
	k := e.Key()
	if len(k) > maxKeyLen {
		return fmt.Errorf("machine key of %d bytes, over %d", len(k), maxKeyLen)
	}
	// A machine first seen by its MAC turns out to be a node: its history
	// joins the node's, as in Memory.
	if e.Node != "" && e.MAC != "" {
		if err := b.merge("mac:"+e.MAC, k); err != nil {
			return err
		}
	}
	if e.Seq != 0 {
		if r := b.peek(k); r != nil && e.Seq <= r.LastSeq {
			if sb := b.seqs.Bucket([]byte(k)); sb != nil && sb.Get(u64(e.Seq)) != nil {
				return nil // a resent event
			}
		}
	}
	r := b.touch(k, StateRegistered)
	id, err := b.events.NextSequence()
	if err != nil {
		return err
	}
	v, out, err := eventJSON(e)
	if err != nil {
		return fmt.Errorf("event for %s: %w", k, err)
	}
	eb, err := b.events.CreateBucketIfNotExists([]byte(k))
	if err != nil {
		return err
	}
	eb.FillPercent = 0.9 // keys are appended
	if err := eb.Put(u64(id), v); err != nil {
		return err
	}
	if b.d.opt.Outbox && !b.copies {
		ob := b.outbox
		ob.FillPercent = 0.9
		if err := ob.Put(u64(id), out); err != nil {
			return err
		}
	}
	if e.Seq != 0 {
		sb, err := b.seqs.CreateBucketIfNotExists([]byte(k))
		if err != nil {
			return err
		}
		if err := sb.Put(u64(e.Seq), u64(id)); err != nil {
			return err
		}
		r.LastSeq = max(r.LastSeq, e.Seq)
	}
	r.Machine.apply(e)
	r.Kept++
	r.Bytes += int64(len(v))
	if !IsNodeKey(k) {
		b.unknownBytes += int64(len(v))
	}
	r.Recent = id
	if e.State == StateProvisioned {
		g := e.Generation
		r.Provisioned = &g
	}
	return b.trim(k, r, eb)
}

// eventJSON is e as the machine's timeline keeps it (an escrow without
// its ciphertext, which the record keeps) and as the outbox sends it to
// the hub (whole).
func eventJSON(e Event) (timeline, outbox []byte, err error) {
	if outbox, err = json.Marshal(e); err != nil || e.Escrow == nil || e.Escrow.Ciphertext == "" {
		return outbox, outbox, err
	}
	e.Escrow = e.Escrow.withoutCiphertext()
	timeline, err = json.Marshal(e)
	return timeline, outbox, err
}

// merge moves machine from's events into machine to.
func (b *batch) merge(from, to string) error {
	early := b.peek(from)
	if early == nil {
		return nil
	}
	r := b.touch(to, early.Machine.State)
	if src := b.events.Bucket([]byte(from)); src != nil {
		dst, err := b.events.CreateBucketIfNotExists([]byte(to))
		if err != nil {
			return err
		}
		// Store sequences are unique across machines: no key collides.
		err = src.ForEach(func(k, v []byte) error { return dst.Put(bytes.Clone(k), bytes.Clone(v)) })
		if err != nil {
			return err
		}
	}
	if src := b.seqs.Bucket([]byte(from)); src != nil {
		dst, err := b.seqs.CreateBucketIfNotExists([]byte(to))
		if err != nil {
			return err
		}
		// Should both have an event with the same Seq, the node's keeps
		// the index entry; the other event stays in the timeline.
		err = src.ForEach(func(k, v []byte) error {
			if dst.Get(k) != nil {
				return nil
			}
			return dst.Put(bytes.Clone(k), bytes.Clone(v))
		})
		if err != nil {
			return err
		}
	}
	m := &r.Machine
	m.MAC, m.UUID, m.Serial = or(m.MAC, early.Machine.MAC), or(m.UUID, early.Machine.UUID), or(m.Serial, early.Machine.Serial)
	m.Events += early.Machine.Events
	r.Kept += early.Kept
	r.Bytes += early.Bytes
	r.LastSeq = max(r.LastSeq, early.LastSeq)
	if r.Provisioned == nil {
		r.Provisioned = early.Provisioned
	}
	return b.remove(from)
}

// trim deletes a machine's oldest events past PerMachine (PerUnknown for
// an unknown machine) or PerMachineBytes, and their Seq index entries; the
// newest event always stays.
func (b *batch) trim(k string, r *record, eb *bolt.Bucket) error {
	node := IsNodeKey(k)
	limit := b.d.opt.PerUnknown
	if node {
		limit = b.d.opt.PerMachine
	}
	over := func() bool { return r.Kept > 1 && (r.Kept > limit || r.Bytes > b.d.opt.PerMachineBytes) }
	if !over() {
		return nil
	}
	sb := b.seqs.Bucket([]byte(k))
	c := eb.Cursor()
	for key, v := c.First(); key != nil && over(); key, v = c.First() {
		if sb != nil {
			var s struct {
				Seq uint64 `json:"seq"`
			}
			if json.Unmarshal(v, &s) == nil && s.Seq != 0 && bytes.Equal(sb.Get(u64(s.Seq)), key) {
				if err := sb.Delete(u64(s.Seq)); err != nil {
					return err
				}
			}
		}
		if err := c.Delete(); err != nil {
			return err
		}
		r.Kept--
		r.Bytes -= int64(len(v))
		if !node {
			b.unknownBytes -= int64(len(v))
		}
	}
	return nil
}

// evict removes the least recently seen unknown machines past MaxUnknown
// or MaxUnknownBytes: first those this batch did not touch (all older than
// those it did), then the batch's own, oldest first. A registered node is
// never evicted: only Retain forgets one.
func (b *batch) evict() error {
	full := func() bool {
		return b.unknown > b.d.opt.MaxUnknown || (b.unknownBytes > b.d.opt.MaxUnknownBytes && b.unknown > 0)
	}
	for el := b.d.lru.Front(); el != nil && full(); {
		k := el.Value.(string)
		el = el.Next()
		if _, touched := b.pending[k]; touched || b.removed[k] {
			continue
		}
		if err := b.remove(k); err != nil {
			return err
		}
		b.evicted++
	}
	if !full() {
		return nil
	}
	keys := make([]string, 0, len(b.pending))
	for k := range b.pending {
		if !IsNodeKey(k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y string) int { return cmp.Compare(b.pending[x].Recent, b.pending[y].Recent) })
	for _, k := range keys {
		if !full() {
			break
		}
		if err := b.remove(k); err != nil {
			return err
		}
		b.evicted++
	}
	return nil
}

// flush writes the records this batch changed.
func (b *batch) flush() error {
	for k, r := range b.pending {
		r.Escrows = r.Machine.Escrows()
		v, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("machine %s: %w", k, err)
		}
		if err := b.machines.Put([]byte(k), v); err != nil {
			return err
		}
	}
	return nil
}

// u64 encodes n big-endian, in a new slice (bbolt keeps keys and values
// until the transaction ends).
func u64(n uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), n)
}

// Outgoing is an event waiting in the outbox: its store sequence and the
// JSON it is stored as (what the hub is sent, unchanged).
type Outgoing struct {
	Seq  uint64
	JSON []byte
}

// Pending returns up to max events of the outbox after store sequence
// after, oldest first.
func (d *Durable) Pending(after uint64, max int) ([]Outgoing, error) {
	var out []Outgoing
	err := d.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketOutbox).Cursor()
		for k, v := c.Seek(u64(after + 1)); k != nil && len(out) < max; k, v = c.Next() {
			out = append(out, Outgoing{Seq: binary.BigEndian.Uint64(k), JSON: bytes.Clone(v)})
		}
		return nil
	})
	return out, err
}

// Sent drops the outbox's events up to store sequence upTo: the hub has
// acknowledged them.
func (d *Durable) Sent(upTo uint64) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		ob := tx.Bucket(bucketOutbox)
		var done [][]byte
		c := ob.Cursor()
		for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= upTo; k, _ = c.Next() {
			done = append(done, bytes.Clone(k))
		}
		for _, k := range done {
			if err := ob.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// Issued is the highest store sequence the store has given an event: a
// store restored from a backup issues again numbers it had issued after
// the backup (the hub's forwarder asks the hub, and takes a new epoch).
func (d *Durable) Issued() (uint64, error) {
	var n uint64
	err := d.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketEvents).Sequence()
		return nil
	})
	return n, err
}

// Unsent is how many events wait in the outbox: what a site's hello
// tells the hub (its UNSENT). Added for the hub's forwarder (issue 26);
// it walks the bucket's pages, cheap next to a hello every 10 s.
func (d *Durable) Unsent() (int, error) {
	var n int
	err := d.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketOutbox).Stats().KeyN
		return nil
	})
	return n, err
}
