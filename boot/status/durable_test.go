package status

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/bootops/bootops/plan"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// clock returns a clock that ticks a second per call.
func clock() func() time.Time {
	var mu sync.Mutex
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
}

func open(t testing.TB, path string, opt Options) *Durable {
	t.Helper()
	if opt.Now == nil {
		opt.Now = clock()
	}
	d, err := Open(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// barrier waits for what Record queued.
func barrier(t testing.TB, d *Durable) {
	t.Helper()
	if err := d.RecordSync(); err != nil {
		t.Fatal(err)
	}
}

func messages(evs []Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Message
	}
	return out
}

func keys(ms []Machine) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Key
	}
	return out
}

// snapshot is everything the store answers, to compare before and after a
// reopen.
type snapshot struct {
	Machines []Machine
	Events   map[string][]Event
	LastSeq  map[string]uint64
}

func snap(d *Durable) snapshot {
	s := snapshot{Machines: d.Machines(), Events: map[string][]Event{}, LastSeq: map[string]uint64{}}
	for _, m := range s.Machines {
		s.Events[m.Key] = d.Events(m.Key)
		s.LastSeq[m.Key] = d.LastSeq(m.Key)
	}
	return s
}

// The durable store answers as Memory does for the same events (within
// the bounds, where the two agree on what goes first).
func TestDurableAsMemory(t *testing.T) {
	tests := map[string][]Event{
		"boot": {
			{Kind: KindDHCP, MAC: "52:54:00:00:00:01", State: StateDiscovered, Message: "offer"},
			{Kind: KindTFTP, IP: "10.0.0.9", Message: "ipxe.efi"},
			{Kind: KindScript, Site: "lab", Node: "n1", MAC: "52:54:00:00:00:01", UUID: "u-1", State: StateBooting, Message: "script"},
			{Kind: KindFile, Site: "lab", Node: "n1", Message: "kernel"},
			{Kind: KindAgent, Site: "lab", Node: "n1", State: StateMicroOS, Seq: 1, Message: "checked in"},
			{Kind: KindAgent, Site: "lab", Node: "n1", State: StateProvisioning, Seq: 2, Action: "image", Step: 1, Steps: 2, Bytes: 10, Total: 100, Rate: 1.5},
			{Kind: KindAgent, Site: "lab", Node: "n1", State: StateProvisioned, Seq: 3, Generation: 2},
			{Kind: KindDHCP, Serial: "S-1", State: StateHeld, Error: true, Message: "held"},
		},
		"trimmed and evicted": func() []Event {
			var evs []Event
			for i := range 12 {
				evs = append(evs, Event{Kind: KindDHCP, MAC: fmt.Sprintf("52:54:00:00:01:%02x", i%6), Message: fmt.Sprint(i)})
				evs = append(evs, Event{Kind: KindScript, Site: "lab", Node: "n1", Message: fmt.Sprint(i)})
			}
			return evs
		}(),
		"merge into a new node": {
			{Kind: KindDHCP, MAC: "52:54:00:00:00:02", State: StateDiscovered, Message: "offer"},
			{Kind: KindDHCP, MAC: "52:54:00:00:00:02", Message: "ack"},
			{Kind: KindScript, Site: "lab", Node: "n2", MAC: "52:54:00:00:00:02", Message: "script"},
		},
	}
	for name, evs := range tests {
		t.Run(name, func(t *testing.T) {
			mem := &Memory{PerMachine: 5, MaxUnknown: 4, Now: clock()}
			d := open(t, filepath.Join(t.TempDir(), "status.db"), Options{PerMachine: 5, MaxUnknown: 4})
			for _, e := range evs {
				mem.Record(e)
				if err := d.RecordSync(e); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := d.Machines(), mem.Machines(); !reflect.DeepEqual(got, want) {
				t.Errorf("machines:\n got %+v\nwant %+v", got, want)
			}
			for _, m := range mem.Machines() {
				if got, want := d.Events(m.Key), mem.Events(m.Key); !reflect.DeepEqual(got, want) {
					t.Errorf("events of %s:\n got %+v\nwant %+v", m.Key, got, want)
				}
			}
		})
	}
}

func TestDurableRoundTrip(t *testing.T) {
	d := open(t, filepath.Join(t.TempDir(), "status.db"), Options{})
	d.Record(Event{Kind: KindDHCP, MAC: "52:54:00:00:00:01", State: StateDiscovered, Message: "offer"})
	d.Record(Event{Kind: KindDHCP, UUID: "u-9", Message: "unknown"})
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	agent := Event{Time: at, Kind: KindAgent, Site: "lab", Node: "n1", State: StateProvisioning, Seq: 7,
		Action: "image", Step: 2, Steps: 5, Bytes: 1 << 30, Total: 4 << 30, Rate: 123.5, Message: "writing"}
	if err := d.RecordSync(agent); err != nil {
		t.Fatal(err)
	}
	// RecordSync committed what Record queued before it.
	if got, want := keys(d.Machines()), []string{"lab/n1", "mac:52:54:00:00:00:01", "uuid:u-9"}; !slices.Equal(got, want) {
		t.Fatalf("machines %v, want %v", got, want)
	}
	evs := d.Events("lab/n1")
	if len(evs) != 1 || !reflect.DeepEqual(evs[0], agent) {
		t.Errorf("events: got %+v, want %+v", evs, agent)
	}
	m := d.Machines()[0]
	if m.State != StateProvisioning || m.Events != 1 || !reflect.DeepEqual(m.Last, agent) {
		t.Errorf("machine: %+v", m)
	}
	if ev := d.Events("mac:52:54:00:00:00:01"); len(ev) != 1 || ev[0].Time.IsZero() || ev[0].Message != "offer" {
		t.Errorf("a Record event: %+v", ev)
	}
	if got := d.LastSeq("lab/n1"); got != 7 {
		t.Errorf("last seq %d, want 7", got)
	}
	if d.Events("lab/nope") != nil || d.LastSeq("lab/nope") != 0 {
		t.Error("an unknown machine has events")
	}
	// A rate JSON cannot carry does not fail the batch.
	if err := d.RecordSync(Event{Kind: KindAgent, Site: "lab", Node: "n1", Rate: math.Inf(1)}); err != nil {
		t.Errorf("infinite rate: %v", err)
	}
}

func TestDurableReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.db")
	d := open(t, path, Options{PerMachine: 4})
	d.Record(Event{Kind: KindDHCP, MAC: "52:54:00:00:00:01", State: StateDiscovered, Message: "offer"})
	d.Record(Event{Kind: KindScript, Site: "lab", Node: "n1", MAC: "52:54:00:00:00:01", State: StateBooting, Message: "script"})
	for i := range 6 {
		if err := d.RecordSync(Event{Kind: KindAgent, Site: "lab", Node: "n1", State: StateProvisioning, Seq: uint64(i + 1), Message: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.RecordSync(Event{Kind: KindAgent, Site: "lab", Node: "n1", State: StateProvisioned, Seq: 7, Generation: 3}); err != nil {
		t.Fatal(err)
	}
	before := snap(d)
	// Close commits what Record queued.
	d.Record(Event{Kind: KindDHCP, MAC: "52:54:00:00:00:02", State: StateHeld})
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if err := d.RecordSync(Event{Site: "lab", Node: "n1"}); !errors.Is(err, ErrClosed) {
		t.Errorf("RecordSync after Close: %v", err)
	}
	dropped := d.Dropped()
	d.Record(Event{Site: "lab", Node: "n1"})
	if d.Dropped() != dropped+1 {
		t.Error("Record after Close is not counted as dropped")
	}

	d = open(t, path, Options{PerMachine: 4})
	after := snap(d)
	if len(after.Machines) != 2 || after.Machines[1].Key != "mac:52:54:00:00:00:02" || after.Machines[1].State != StateHeld {
		t.Fatalf("the event queued at Close is lost: %+v", after.Machines)
	}
	after.Machines = after.Machines[:1]
	delete(after.Events, "mac:52:54:00:00:00:02")
	delete(after.LastSeq, "mac:52:54:00:00:00:02")
	if !reflect.DeepEqual(after, before) {
		t.Errorf("after reopen:\n got %+v\nwant %+v", after, before)
	}
	if g, ok := d.Provisioned("lab", "n1"); !ok || g != 3 {
		t.Errorf("provisioned after reopen: %d %v", g, ok)
	}
	// The store's sequence goes on, and so does the Seq index.
	if err := d.RecordSync(Event{Kind: KindAgent, Site: "lab", Node: "n1", Seq: 7, Message: "again"},
		Event{Kind: KindAgent, Site: "lab", Node: "n1", Seq: 8, Message: "new"}); err != nil {
		t.Fatal(err)
	}
	if got, want := messages(d.Events("lab/n1")), []string{"4", "5", "", "new"}; !slices.Equal(got, want) {
		t.Errorf("events after reopen: %q, want %q", got, want)
	}
}

func TestDurableDedup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.db")
	d := open(t, path, Options{})
	ev := func(seq uint64) Event {
		return Event{Kind: KindAgent, Site: "lab", Node: "n1", Seq: seq, Message: fmt.Sprint(seq)}
	}
	seqs := func() []uint64 {
		var out []uint64
		for _, e := range d.Events("lab/n1") {
			out = append(out, e.Seq)
		}
		return out
	}
	if err := d.RecordSync(ev(1), ev(2), ev(3), ev(4), ev(5)); err != nil {
		t.Fatal(err)
	}
	// The ack of 3..5 was lost: the agent resends them with 6 and 7.
	if err := d.RecordSync(ev(3), ev(4), ev(5), ev(6), ev(7)); err != nil {
		t.Fatal(err)
	}
	// A duplicate in one batch, and a gap filled late.
	if err := d.RecordSync(ev(9), ev(9), ev(8)); err != nil {
		t.Fatal(err)
	}
	want := []uint64{1, 2, 3, 4, 5, 6, 7, 9, 8}
	if got := seqs(); !slices.Equal(got, want) {
		t.Errorf("seqs %v, want %v", got, want)
	}
	if d.LastSeq("lab/n1") != 9 || d.Machines()[0].Events != 9 {
		t.Errorf("last seq %d, machine %+v", d.LastSeq("lab/n1"), d.Machines()[0])
	}
	// Events without a Seq are never duplicates.
	if err := d.RecordSync(Event{Site: "lab", Node: "n1"}, Event{Site: "lab", Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	// Nor is the same Seq from another machine.
	if err := d.RecordSync(Event{Kind: KindAgent, Site: "lab", Node: "n2", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Events("lab/n1")); n != 11 || len(d.Events("lab/n2")) != 1 {
		t.Errorf("%d events of n1, %d of n2", n, len(d.Events("lab/n2")))
	}
	d.Close()
	d = open(t, path, Options{})
	if err := d.RecordSync(ev(2), ev(9)); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Events("lab/n1")); n != 11 {
		t.Errorf("resent after reopen: %d events, want 11", n)
	}
}

func TestDurableRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.db")
	d := open(t, path, Options{PerMachine: 3, MaxUnknown: 4})
	for i := range 10 {
		if err := d.RecordSync(Event{Kind: KindAgent, Site: "lab", Node: "n1", Seq: uint64(i + 1), Message: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := messages(d.Events("lab/n1")), []string{"7", "8", "9"}; !slices.Equal(got, want) {
		t.Errorf("per machine: %q, want %q", got, want)
	}
	if m := d.Machines()[0]; m.Events != 10 {
		t.Errorf("machine counts %d events, want every one recorded (10)", m.Events)
	}
	// The Seq index is trimmed with the events.
	d.db.View(func(tx *bolt.Tx) error {
		if n := tx.Bucket(bucketSeqs).Bucket([]byte("lab/n1")).Stats().KeyN; n != 3 {
			t.Errorf("seq index holds %d entries, want 3", n)
		}
		return nil
	})

	// Unknown machines: the oldest MACs go first; the node is not one of
	// them, however long ago it was seen.
	for i := range 6 {
		d.Record(Event{Kind: KindDHCP, MAC: fmt.Sprintf("52:54:00:00:01:%02x", i)})
		barrier(t, d)
		if i == 2 {
			d.Record(Event{Kind: KindScript, Site: "lab", Node: "n1"})
		}
	}
	want := []string{"lab/n1", "mac:52:54:00:00:01:02", "mac:52:54:00:00:01:03", "mac:52:54:00:00:01:04", "mac:52:54:00:00:01:05"}
	if got := keys(d.Machines()); !slices.Equal(got, want) {
		t.Errorf("machines %v, want %v", got, want)
	}
	// Many new machines in one batch: the newest stay.
	var evs []Event
	for i := range 9 {
		evs = append(evs, Event{Kind: KindDHCP, MAC: fmt.Sprintf("52:54:00:00:02:%02x", i)})
	}
	if err := d.RecordSync(evs...); err != nil {
		t.Fatal(err)
	}
	want = []string{"lab/n1", "mac:52:54:00:00:02:05", "mac:52:54:00:00:02:06", "mac:52:54:00:00:02:07", "mac:52:54:00:00:02:08"}
	if got := keys(d.Machines()); !slices.Equal(got, want) {
		t.Errorf("machines %v, want %v", got, want)
	}
	if len(d.Events("lab/n1")) != 3 || d.LastSeq("lab/n1") != 10 {
		t.Errorf("the node lost events to unknown machines: %d kept, last seq %d", len(d.Events("lab/n1")), d.LastSeq("lab/n1"))
	}
	if d.Events("mac:52:54:00:00:01:05") != nil {
		t.Error("an evicted machine kept its events")
	}
	d.Close()
	d = open(t, path, Options{PerMachine: 3, MaxUnknown: 4})
	if got := keys(d.Machines()); !slices.Equal(got, want) {
		t.Errorf("machines after reopen %v, want %v", got, want)
	}
	// The recency order survives the reopen: the oldest goes next.
	d.RecordSync(Event{Kind: KindDHCP, MAC: "52:54:00:00:03:00"})
	want = append([]string{"lab/n1"}, append(want[2:], "mac:52:54:00:00:03:00")...)
	if got := keys(d.Machines()); !slices.Equal(got, want) {
		t.Errorf("machines %v, want %v", got, want)
	}
	// Nothing of the evicted machines is left in the file.
	d.db.View(func(tx *bolt.Tx) error {
		for name, want := range map[string]int{"events": 5, "machines": 5, "seqs": 1} {
			n := 0
			tx.Bucket([]byte(name)).ForEach(func(k, v []byte) error { n++; return nil })
			if n != want {
				t.Errorf("bucket %s holds %d machines, want %d", name, n, want)
			}
		}
		return nil
	})
}

func TestDurableMerge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.db")
	d := open(t, path, Options{MaxUnknown: 3})
	mac := "52:54:00:00:00:01"
	d.Record(Event{Kind: KindDHCP, MAC: mac, State: StateDiscovered, Message: "offer"})
	d.Record(Event{Kind: KindDHCP, MAC: mac, UUID: "u-1", Message: "ack"})
	if err := d.RecordSync(Event{Kind: KindScript, Site: "lab", Node: "n1", MAC: mac, State: StateBooting, Message: "script"}); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		ms := d.Machines()
		if len(ms) != 1 || ms[0].Key != "lab/n1" || ms[0].State != StateBooting || ms[0].Events != 3 || ms[0].MAC != mac || ms[0].UUID != "u-1" {
			t.Fatalf("the DHCP history did not join the node: %+v", ms)
		}
		if got, want := messages(d.Events("lab/n1")), []string{"offer", "ack", "script"}; !slices.Equal(got, want) {
			t.Errorf("events %q, want %q", got, want)
		}
		if d.Events("mac:"+mac) != nil {
			t.Error("the MAC's events stayed")
		}
	}
	check()
	d.Close()
	d = open(t, path, Options{MaxUnknown: 3})
	check()

	// Into a node with a history, in one batch with the MAC's events: the
	// timeline stays in the order things happened, and the machine count
	// is right (three machines fit).
	mac2 := "52:54:00:00:00:02"
	err := d.RecordSync(
		Event{Kind: KindAgent, Site: "lab", Node: "n2", State: StateProvisioned, Generation: 1, Seq: 1, Message: "old"},
		Event{Kind: KindDHCP, MAC: mac2, State: StateDiscovered, Message: "offer"},
		Event{Kind: KindScript, Site: "lab", Node: "n2", MAC: mac2, Message: "script"},
		Event{Kind: KindDHCP, MAC: mac2, Message: "again"}, // a MAC event after the merge starts anew
		Event{Kind: KindDHCP, MAC: "52:54:00:00:00:03"},
	)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := messages(d.Events("lab/n2")), []string{"old", "offer", "script"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if got, want := keys(d.Machines()), []string{"lab/n1", "lab/n2", "mac:52:54:00:00:00:02", "mac:52:54:00:00:00:03"}; !slices.Equal(got, want) {
		t.Errorf("machines %v, want %v (nodes stay however many unknown machines come)", got, want)
	}
	if m := d.Machines()[1]; m.State != StateProvisioned || m.Events != 3 {
		t.Errorf("a node keeps its state through a merge: %+v", m)
	}
	// An unknown machine's agent events (by MAC) keep their Seqs.
	if err := d.RecordSync(Event{Kind: KindAgent, MAC: "52:54:00:00:00:04", Seq: 5, State: StateMicroOS}); err != nil {
		t.Fatal(err)
	}
	if err := d.RecordSync(Event{Kind: KindScript, Site: "lab", Node: "n4", MAC: "52:54:00:00:00:04"},
		Event{Kind: KindAgent, Site: "lab", Node: "n4", Seq: 5}); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Events("lab/n4")); n != 2 || d.LastSeq("lab/n4") != 5 {
		t.Errorf("merged: %d events, last seq %d", n, d.LastSeq("lab/n4"))
	}
}

func TestDurableProvisioned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.db")
	d := open(t, path, Options{PerMachine: 2})
	rec := func(e Event) {
		t.Helper()
		e.Site, e.Node, e.Kind = "lab", "n1", KindAgent
		if err := d.RecordSync(e); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := d.Provisioned("lab", "n1"); ok {
		t.Error("provisioned before any event")
	}
	rec(Event{State: StateProvisioning, Generation: 9})
	if _, ok := d.Provisioned("lab", "n1"); ok {
		t.Error("provisioned by a provisioning event")
	}
	rec(Event{State: StateProvisioned, Generation: 3})
	rec(Event{State: StateProvisioning})
	rec(Event{Generation: 7})
	// Trimmed from the timeline, it is still known.
	if g, ok := d.Provisioned("lab", "n1"); !ok || g != 3 {
		t.Errorf("provisioned %d %v, want 3", g, ok)
	}
	rec(Event{State: StateProvisioned, Generation: 4})
	rec(Event{State: StateProvisioned})
	if g, ok := d.Provisioned("lab", "n1"); !ok || g != 0 {
		t.Errorf("provisioned %d %v, want generation 0", g, ok)
	}
	rec(Event{State: StateProvisioned, Generation: 5})
	d.Close()
	d = open(t, path, Options{})
	if g, ok := d.Provisioned("lab", "n1"); !ok || g != 5 {
		t.Errorf("provisioned after reopen %d %v, want 5", g, ok)
	}
	if _, ok := d.Provisioned("lab", "n2"); ok {
		t.Error("another node is provisioned")
	}
}

// A request that cannot be stored fails alone, whole, and changes nothing.
func TestDurableFailedRequest(t *testing.T) {
	d := open(t, filepath.Join(t.TempDir(), "status.db"), Options{})
	huge := strings.Repeat("x", maxKeyLen)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			e := Event{Kind: KindAgent, Site: "lab", Node: fmt.Sprint("n", i), Seq: 1}
			if i%2 == 0 {
				errs[i] = d.RecordSync(e, Event{Site: "lab", Node: huge})
			} else {
				errs[i] = d.RecordSync(e)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i%2 == 0) {
			t.Errorf("request %d: %v", i, err)
		}
	}
	if got, want := keys(d.Machines()), []string{"lab/n1", "lab/n3", "lab/n5", "lab/n7"}; !slices.Equal(got, want) {
		t.Errorf("machines %v, want %v", got, want)
	}
	if d.Events("lab/n0") != nil || d.LastSeq("lab/n0") != 0 {
		t.Error("a failed request left events")
	}
	d.Record(Event{Site: "lab", Node: huge})
	barrier(t, d)
	if d.Dropped() != 1 {
		t.Errorf("dropped %d, want 1", d.Dropped())
	}
}

func TestDurableConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.db")
	d := open(t, path, Options{})
	const (
		agents  = 8
		batches = 40
		batch   = 5
		dhcp    = 6
		offers  = 500
	)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for a := range agents {
		wg.Go(func() {
			for i := range batches {
				evs := make([]Event, batch)
				for j := range evs {
					evs[j] = Event{Kind: KindAgent, Site: "lab", Node: fmt.Sprint("n", a), Seq: uint64(i*batch + j + 1), State: StateProvisioning}
				}
				if err := d.RecordSync(evs...); err != nil {
					t.Error(err)
					return
				}
				if got := d.LastSeq(fmt.Sprint("lab/n", a)); got < uint64((i+1)*batch) {
					t.Errorf("n%d: last seq %d after storing %d", a, got, (i+1)*batch)
				}
				if i%10 == 9 { // a lost ack
					if err := d.RecordSync(evs...); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	for c := range dhcp {
		wg.Go(func() {
			for i := range offers {
				d.Record(Event{Kind: KindDHCP, MAC: fmt.Sprintf("52:54:00:00:%02x:%02x", c, i%7), Message: "offer"})
			}
		})
	}
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, m := range d.Machines() {
					d.Events(m.Key)
					d.LastSeq(m.Key)
				}
				d.Provisioned("lab", "n0")
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	dropped := d.Dropped()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	d = open(t, path, Options{})
	var offered uint64
	for _, m := range d.Machines() {
		evs := d.Events(m.Key)
		if len(evs) != m.Events {
			t.Errorf("%s: %d events, the machine counts %d", m.Key, len(evs), m.Events)
		}
		if m.Node == "" {
			offered += uint64(len(evs))
			continue
		}
		if len(evs) != batches*batch || d.LastSeq(m.Key) != batches*batch {
			t.Errorf("%s: %d events, last seq %d", m.Key, len(evs), d.LastSeq(m.Key))
		}
		for i, e := range evs {
			if e.Seq != uint64(i+1) {
				t.Fatalf("%s: event %d has seq %d", m.Key, i, e.Seq)
			}
		}
	}
	if got := len(d.Machines()); got != agents+dhcp*7 {
		t.Errorf("%d machines, want %d", got, agents+dhcp*7)
	}
	if offered+dropped != dhcp*offers {
		t.Errorf("%d offers stored and %d dropped, of %d", offered, dropped, dhcp*offers)
	}
	t.Logf("dropped %d of %d Record events", dropped, dhcp*offers)
}

const crashEnv = "BOOTOPS_STATUS_CRASH_DB"

// TestDurableCrashChild is the process TestDurableCrash kills: it stores
// agent events with RecordSync and prints each Seq as soon as it is
// acknowledged.
func TestDurableCrashChild(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("run by TestDurableCrash")
	}
	d, err := Open(path, Options{PerMachine: 1 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	go func() {
		for i := 0; ; i++ {
			d.Record(Event{Kind: KindDHCP, MAC: fmt.Sprintf("52:54:00:00:00:%02x", i%50), Message: "noise"})
			time.Sleep(50 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			node := fmt.Sprint("n", w)
			for seq := d.LastSeq("crash/"+node) + 1; seq < 1e6; seq++ {
				batch := []Event{{Kind: KindAgent, Site: "crash", Node: node, Seq: seq, Message: "crash test"}}
				if seq%3 == 0 { // resend the previous one with it
					batch = append(batch, Event{Kind: KindAgent, Site: "crash", Node: node, Seq: seq - 1})
				}
				escrow := w == 0 && seq%7 == 0
				if escrow { // an escrow, its container named by its Seq
					batch[0].Escrow = &Escrow{Partition: 2, LUKSUUID: fmt.Sprint(seq), Recipients: []string{"age1qqq"}, Ciphertext: testCiphertext}
				}
				if err := d.RecordSync(batch...); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				fmt.Printf("%s %d\n", node, seq)
				if escrow {
					fmt.Printf("escrow %d\n", seq)
				}
			}
		})
	}
	wg.Wait()
	os.Exit(0)
}

// TestDurableCrash kills a process storing events with SIGKILL, and checks
// the store keeps every event it acknowledged, three times over.
func TestDurableCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a child process")
	}
	path := filepath.Join(t.TempDir(), "status.db")
	acked := map[string][]uint64{}
	var escrowed uint64 // the newest escrow acknowledged
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDurableCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnv+"="+path)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		lines := 0
		for sc.Scan() {
			var node string
			var seq uint64
			if _, err := fmt.Sscanf(sc.Text(), "escrow %d", &seq); err == nil {
				escrowed = seq
				continue
			}
			if _, err := fmt.Sscanf(sc.Text(), "%s %d", &node, &seq); err != nil {
				continue
			}
			acked[node] = append(acked[node], seq)
			if lines++; lines == 200+100*round {
				cmd.Process.Kill() // what was printed before still comes through the pipe
			}
		}
		err = cmd.Wait()
		if lines < 200 || err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("round %d: the child was not killed (%v) after %d acks; stderr:\n%s", round, err, lines, stderr.String())
		}

		d, err := Open(path, Options{PerMachine: 1 << 20})
		if err != nil {
			t.Fatalf("round %d: reopen after the kill: %v", round, err)
		}
		lost := 0
		for node, seqs := range acked {
			stored := map[uint64]int{}
			for _, e := range d.Events("crash/" + node) {
				stored[e.Seq]++
			}
			for _, s := range seqs {
				if stored[s] == 0 {
					lost++
					t.Errorf("round %d: %s: acknowledged seq %d is lost", round, node, s)
				}
			}
			for s, n := range stored {
				if n > 1 {
					t.Errorf("round %d: %s: seq %d stored %d times", round, node, s, n)
				}
			}
			if last := slices.Max(seqs); d.LastSeq("crash/"+node) < last {
				t.Errorf("round %d: %s: last seq %d, acknowledged %d", round, node, d.LastSeq("crash/"+node), last)
			}
		}
		// The newest escrow kept is the newest acknowledged, or one
		// stored after it (unacknowledged when the kill came).
		m, _ := d.Machine("crash/n0")
		if es := m.Escrows(); escrowed == 0 || len(es) == 0 || es[0].Ciphertext != testCiphertext {
			t.Errorf("round %d: the escrows kept after the kill: %+v (acknowledged up to seq %d)", round, es, escrowed)
		} else if newest, _ := strconv.ParseUint(es[0].LUKSUUID, 10, 64); newest < escrowed {
			t.Errorf("round %d: the newest escrow kept is of seq %d; seq %d's was acknowledged", round, newest, escrowed)
		}
		t.Logf("round %d: %d acks read, %d lost", round, lines, lost)
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func BenchmarkRecordSync(b *testing.B) {
	batchOf := func(node string, seq uint64) []Event {
		evs := make([]Event, 10)
		for i := range evs {
			evs[i] = Event{Kind: KindAgent, Site: "bench", Node: node, Seq: seq + uint64(i), State: StateProvisioning,
				Action: "image", Step: 1, Steps: 3, Bytes: 1 << 20, Total: 1 << 30, Rate: 1e8, Message: "writing image"}
		}
		return evs
	}
	b.Run("serial", func(b *testing.B) {
		d := open(b, filepath.Join(b.TempDir(), "status.db"), Options{})
		seq := uint64(1)
		for b.Loop() {
			if err := d.RecordSync(batchOf("n0", seq)...); err != nil {
				b.Fatal(err)
			}
			seq += 10
		}
		b.ReportMetric(float64(b.N*10)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("parallel", func(b *testing.B) {
		d := open(b, filepath.Join(b.TempDir(), "status.db"), Options{})
		var mu sync.Mutex
		next := 0
		b.SetParallelism(16) // agents posting at once
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			mu.Lock()
			node := fmt.Sprint("n", next)
			next++
			mu.Unlock()
			seq := uint64(1)
			for pb.Next() {
				if err := d.RecordSync(batchOf(node, seq)...); err != nil {
					b.Error(err)
					return
				}
				seq += 10
			}
		})
		b.ReportMetric(float64(b.N*10)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkRecord measures Record, which never waits, and what the writer
// stores behind it: stored/s is the writer's throughput, dropped/op what the
// queue could not take meanwhile.
func BenchmarkRecord(b *testing.B) {
	for name, macs := range map[string]int{"known machines": 1000, "new machines": 1 << 16} {
		b.Run(name, func(b *testing.B) {
			d := open(b, filepath.Join(b.TempDir(), "status.db"), Options{})
			ids := make([]string, macs)
			for i := range ids {
				ids[i] = fmt.Sprintf("52:54:00:00:%02x:%02x", i>>8, i&0xff)
			}
			i := 0
			for b.Loop() {
				d.Record(Event{Kind: KindDHCP, MAC: ids[i%macs], State: StateDiscovered, Message: "offer"})
				i++
			}
			barrier(b, d)
			b.ReportMetric(float64(d.Dropped())/float64(b.N), "dropped/op")
			b.ReportMetric(float64(uint64(b.N)-d.Dropped())/b.Elapsed().Seconds(), "stored/s")
		})
	}
}

// With Outbox, every stored event waits, in store order and as stored,
// until Sent; it outlives a restart. Without, nothing is kept for a hub.
func TestDurableOutbox(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.db")
	d, err := Open(path, Options{Outbox: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := d.RecordSync(Event{Kind: KindAgent, Site: "s", Node: "n", Seq: uint64(i + 1), Message: fmt.Sprint("e", i)}); err != nil {
			t.Fatal(err)
		}
	}
	d.RecordSync(Event{Kind: KindAgent, Site: "s", Node: "n", Seq: 3, Message: "e2"}) // a resend: not stored, not queued
	out, err := d.Pending(0, 100)
	if err != nil || len(out) != 5 {
		t.Fatalf("pending: %d %v", len(out), err)
	}
	for i, o := range out {
		var e Event
		if err := json.Unmarshal(o.JSON, &e); err != nil || e.Message != fmt.Sprint("e", i) || (i > 0 && o.Seq <= out[i-1].Seq) {
			t.Errorf("outbox %d: %+v %v (seq %d)", i, e, err, o.Seq)
		}
	}
	if err := d.Sent(out[2].Seq); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d, err = Open(path, Options{Outbox: true})
	if err != nil {
		t.Fatal(err)
	}
	if rest, _ := d.Pending(0, 100); len(rest) != 2 || rest[0].Seq != out[3].Seq {
		t.Errorf("after Sent and a restart: %d pending", len(rest))
	}
	if after, _ := d.Pending(out[3].Seq, 100); len(after) != 1 || after[0].Seq != out[4].Seq {
		t.Errorf("pending after a cursor: %d", len(after))
	}
	// Another cluster member's events: stored, on the timeline, not
	// queued for the hub (their member sends them).
	if err := d.RecordCopies(Event{Kind: KindAgent, Site: "s", Node: "n", Seq: 9, Message: "from m2"}); err != nil {
		t.Fatal(err)
	}
	if rest, _ := d.Pending(0, 100); len(rest) != 2 {
		t.Errorf("a copied event went to the outbox: %d pending", len(rest))
	}
	if tl := d.Events("s/n"); len(tl) != 6 || tl[5].Message != "from m2" || d.LastSeq("s/n") != 9 {
		t.Errorf("the copied event on the timeline: %d events, last seq %d", len(tl), d.LastSeq("s/n"))
	}
	d.Close()

	plain, err := Open(filepath.Join(t.TempDir(), "plain.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.RecordSync(Event{Kind: KindDHCP, MAC: "52:54:00:00:00:01", Message: "x"})
	if out, _ := plain.Pending(0, 10); len(out) != 0 {
		t.Errorf("an outbox without Outbox: %d", len(out))
	}
}

// A rollout group's state and a node's install outlive a restart.
func TestDurableRolloutsAndInstallReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.db")
	d := open(t, path, Options{})
	in := &plan.Install{Digest: "d", Image: "i", Workflow: "w", CloudInit: "c"}
	if err := d.RecordSync(Event{Kind: KindAgent, Site: "lab", Node: "n1", State: StateProvisioned, Seq: 1, Install: in}); err != nil {
		t.Fatal(err)
	}
	if err := d.PutRollout("lab/base", []byte(`{"halt":{"node":"n1"}}`)); err != nil {
		t.Fatal(err)
	}
	d.PutRollout("lab/gone", []byte(`{}`))
	d.PutRollout("lab/gone", nil)
	d.Close()
	d = open(t, path, Options{})
	got, err := d.Rollouts()
	if err != nil || len(got) != 1 || string(got["lab/base"]) != `{"halt":{"node":"n1"}}` {
		t.Errorf("rollouts after reopen: %q %v", got, err)
	}
	if ms := d.Machines(); len(ms) != 1 || ms[0].Installed == nil || *ms[0].Installed != *in {
		t.Errorf("installed after reopen: %+v", ms)
	}
}
