package status

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// tick is a clock that moves a second at every reading.
func tick() func() time.Time {
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	return func() time.Time { now = now.Add(time.Second); return now }
}

// summaryOf is what the store counts a machine's summary for.
func summaryOf(mc Machine) int64 { return int64(machineSize(mc) + entryOverhead) }

// checkBytes fails unless m.Bytes() is the Size of every event m keeps and
// the size of every machine's summary, within MaxBytes (unless the store
// keeps one machine alone, with one event, that is larger alone), and the
// store's order of events stays within its bound.
func checkBytes(t *testing.T, m *Memory) {
	t.Helper()
	var events, sums int64
	n := 0
	ms := m.Machines()
	for _, mc := range ms {
		for _, e := range m.Events(mc.Key) {
			events += int64(e.Size())
			n++
		}
	}
	bytes := m.Bytes()
	m.mu.Lock()
	defer m.mu.Unlock()
	unknown := 0
	for k, en := range m.machines {
		sum := summaryOf(en.m)
		if en.sum != sum || en.node != IsNodeKey(k) || en.gone || en.into != nil {
			t.Fatalf("%s: counted %d, its summary %d (node %v, gone %v)", k, en.sum, sum, en.node, en.gone)
		}
		sums += sum
		if !en.node {
			unknown++
		}
	}
	if bytes != events+sums {
		t.Fatalf("Bytes() = %d, the events kept are %d bytes and the summaries %d", bytes, events, sums)
	}
	if m.MaxBytes > 0 && events+sums > m.MaxBytes && (n > 1 || len(ms) > 1) {
		t.Fatalf("%d events of %d bytes and %d machines of %d kept, over MaxBytes %d", n, events, len(ms), sums, m.MaxBytes)
	}
	if m.held != n || m.bytes != events || m.sums != sums {
		t.Fatalf("held %d of %d bytes, summaries %d: %d events of %d bytes kept, summaries %d", m.held, m.bytes, m.sums, n, events, sums)
	}
	if unknown != m.unknown || len(m.machines) != len(ms) {
		t.Fatalf("%d unknown machines counted, %d held; %d machines listed, %d held", m.unknown, unknown, len(ms), len(m.machines))
	}
	if len(m.order) > 2*m.held+1024 {
		t.Fatalf("order holds %d for %d events kept", len(m.order), m.held)
	}
}

// seqOf is the number an event's message starts with.
func seqOf(t *testing.T, e Event) int {
	t.Helper()
	n, err := strconv.Atoi(strings.Fields(e.Message)[0])
	if err != nil {
		t.Fatalf("message %.20q: %v", e.Message, err)
	}
	return n
}

// One MiB of events from 10 machines that send 10 KB messages: the store
// keeps the newest events that fit beside the machines' summaries,
// whichever machine sent them, and every machine's summary.
func TestMemoryMaxBytes(t *testing.T) {
	m := &Memory{MaxBytes: 1 << 20, Now: tick()}
	pad := strings.Repeat("x", 10000)
	var size, summary int64
	for i := range 1000 {
		m.Record(Event{Kind: KindAgent, Site: "lab", Node: fmt.Sprintf("n%d", i%10), Message: fmt.Sprintf("%04d %s", i, pad)})
		checkBytes(t, m)
		if i == 0 {
			size = int64(m.Events("lab/n0")[0].Size())
			summary = m.Bytes() - size
		}
	}
	// Every event is as large (its message cut to MaxMessage alike), and
	// so is every summary (its last event among it).
	keep := int((m.MaxBytes - 10*summary) / size)
	var kept []int
	ms := m.Machines()
	if len(ms) != 10 {
		t.Fatalf("%d machines listed, want 10", len(ms))
	}
	if m.Evicted() != 0 {
		t.Errorf("%d machines evicted", m.Evicted())
	}
	for _, mc := range ms {
		if mc.Events != 100 {
			t.Errorf("%s: Events %d, want 100", mc.Key, mc.Events)
		}
		if mc.Last.Message == "" {
			t.Errorf("%s: no last event", mc.Key)
		}
		for _, e := range m.Events(mc.Key) {
			kept = append(kept, seqOf(t, e))
		}
	}
	slices.Sort(kept)
	if len(kept) != keep || kept[0] != 1000-keep || kept[len(kept)-1] != 999 {
		t.Fatalf("kept %d events (%v … %v), want the newest %d", len(kept), kept[:1], kept[len(kept)-1:], keep)
	}
	if m.Bytes() != int64(keep)*size+10*summary {
		t.Errorf("Bytes() %d, want %d", m.Bytes(), int64(keep)*size+10*summary)
	}
	// A machine all of whose events went is still listed, with none.
	for i := range keep {
		m.Record(Event{Kind: KindAgent, Site: "lab", Node: "n10", Message: fmt.Sprintf("%04d %s", 1000+i, pad)})
		checkBytes(t, m)
	}
	if ms := m.Machines(); len(ms) != 11 {
		t.Errorf("%d machines listed, want 11", len(ms))
	}
	if ev := m.Events("lab/n0"); len(ev) != 0 {
		t.Errorf("lab/n0 keeps %d events", len(ev))
	}
	if mc, ok := m.Machine("lab/n0"); !ok || mc.Events != 100 {
		t.Errorf("lab/n0's summary: %v %+v", ok, mc)
	}
}

// An event larger than MaxBytes alone is kept, with its machine, until the
// next one: the other machines go.
func TestMemoryMaxBytesLargeEvent(t *testing.T) {
	m := &Memory{MaxBytes: 4096, Now: tick()}
	m.Record(Event{Kind: KindAgent, Site: "lab", Node: "n1", Message: "1 small"})
	m.Record(Event{Kind: KindAgent, Site: "lab", Node: "n2", Message: "2 " + strings.Repeat("z", 6000)})
	checkBytes(t, m)
	if ev := m.Events("lab/n2"); len(ev) != 1 || m.Bytes() <= m.MaxBytes || m.Known("lab/n1") || m.Evicted() != 1 {
		t.Fatalf("the large event: %d bytes kept, n1 known %v, %d evicted", m.Bytes(), m.Known("lab/n1"), m.Evicted())
	}
	m.Record(Event{Kind: KindAgent, Site: "lab", Node: "n1", Message: "3 small"})
	checkBytes(t, m)
	if m.Known("lab/n2") || len(m.Events("lab/n1")) != 1 || m.Bytes() > m.MaxBytes || m.Evicted() != 2 {
		t.Fatalf("after the next: %d bytes kept, n2 known %v, %d evicted", m.Bytes(), m.Known("lab/n2"), m.Evicted())
	}
}

// model is Memory as the test reads its contract, slowly: every event by
// its sequence number, and every machine's summary (its own, applied as
// the store applies events) counted anew at every step.
type model struct {
	perMachine, perUnknown, maxUnknown int
	maxBytes                           int64
	now                                func() time.Time // the store's clock's twin
	machines                           map[string]*modelMachine
	unknown                            int
	size                               map[int]int64
	bytes                              int64 // the events'
	evicted                            uint64
}

type modelMachine struct {
	seqs []int
	last int // the sequence of its newest event (the clock ticks at each)
	m    Machine
}

// total is what the model keeps: its events and its machines' summaries.
func (md *model) total() int64 {
	n := md.bytes
	for _, mm := range md.machines {
		n += summaryOf(mm.m)
	}
	return n
}

// drop forgets the machine under k.
func (md *model) drop(k string) {
	for _, s := range md.machines[k].seqs {
		md.bytes -= md.size[s]
	}
	delete(md.machines, k)
	if !IsNodeKey(k) {
		md.unknown--
	}
}

func (md *model) record(e Event, seq int) {
	e = e.printable()
	e.Time = md.now().UTC()
	k := e.Key()
	mm := md.machines[k]
	if e.Node != "" && e.MAC != "" {
		if early := md.machines["mac:"+e.MAC]; early != nil {
			delete(md.machines, "mac:"+e.MAC)
			md.unknown--
			if mm == nil {
				mm = &modelMachine{m: Machine{Key: k, State: early.m.State}}
				md.machines[k] = mm
			}
			mm.seqs = append(mm.seqs, early.seqs...)
			slices.Sort(mm.seqs)
			mm.m.Events += early.m.Events
		}
	}
	node := IsNodeKey(k)
	if mm == nil {
		if !node {
			if md.unknown >= md.maxUnknown {
				oldest := ""
				for k, o := range md.machines {
					if !IsNodeKey(k) && (oldest == "" || o.last < md.machines[oldest].last) {
						oldest = k
					}
				}
				md.drop(oldest)
			}
			md.unknown++
		}
		mm = &modelMachine{m: Machine{Key: k, State: StateRegistered}}
		md.machines[k] = mm
	}
	mm.last = seq
	mm.m.apply(e)
	md.size[seq] = int64(e.Size())
	md.bytes += md.size[seq]
	mm.seqs = append(mm.seqs, seq)
	limit := md.perMachine
	if !node {
		limit = md.perUnknown
	}
	for len(mm.seqs) > limit {
		md.bytes -= md.size[mm.seqs[0]]
		mm.seqs = mm.seqs[1:]
	}
	// The oldest events go first, whatever machines they are of.
	for md.total() > md.maxBytes {
		var oldest *modelMachine
		for _, o := range md.machines {
			if len(o.seqs) > 0 && o.seqs[0] != seq && (oldest == nil || o.seqs[0] < oldest.seqs[0]) {
				oldest = o
			}
		}
		if oldest == nil {
			break
		}
		md.bytes -= md.size[oldest.seqs[0]]
		oldest.seqs = oldest.seqs[1:]
	}
	// Then whole machines: not nodes before nodes, the one seen longest
	// ago first; never the one just recorded.
	for md.total() > md.maxBytes {
		oldest := ""
		for k := range md.machines {
			if k == e.Key() {
				continue
			}
			if oldest == "" || IsNodeKey(k) != IsNodeKey(oldest) && IsNodeKey(oldest) ||
				IsNodeKey(k) == IsNodeKey(oldest) && md.machines[k].last < md.machines[oldest].last {
				oldest = k
			}
		}
		if oldest == "" {
			break
		}
		md.drop(oldest)
		md.evicted++
	}
}

// The byte bound holds, and its count (events and summaries) stays exact,
// while machines' events are trimmed to their counts, unknown machines are
// evicted, whole machines go for bytes, and the histories of machines
// first seen by their MAC join their nodes': the store keeps what a slow
// model of it keeps, event for event and summary for summary.
func TestMemoryMaxBytesTrimEvictMerge(t *testing.T) {
	testutil.Slow(t)
	const maxBytes = 30000
	m := &Memory{PerMachine: 6, PerUnknown: 3, MaxUnknown: 4, MaxBytes: maxBytes, Now: tick()}
	md := &model{perMachine: 6, perUnknown: 3, maxUnknown: 4, maxBytes: maxBytes, now: tick(), machines: map[string]*modelMachine{}, size: map[int]int64{}}
	rnd := rand.New(rand.NewPCG(1, 2))
	mac := func() string { return fmt.Sprintf("52:54:00:00:00:%02x", rnd.IntN(8)) }
	merges := 0
	for seq := range 20000 {
		e := Event{Kind: KindAgent, Message: fmt.Sprintf("%d %s", seq, strings.Repeat("m", rnd.IntN(3000)))}
		switch r := rnd.IntN(100); {
		case r < 40: // a machine first seen by its MAC
			e.Kind, e.MAC = KindDHCP, mac()
		case r < 70:
			e.Site, e.Node = "lab", fmt.Sprintf("n%d", rnd.IntN(4))
		case r < 85: // a node with a MAC: its MAC's history joins it
			e.Site, e.Node, e.MAC = "lab", fmt.Sprintf("n%d", rnd.IntN(4)), mac()
			if ok, _ := m.Holds("mac:"+e.MAC, ""); ok {
				merges++
			}
		default:
			e.Kind, e.Serial = KindScript, fmt.Sprintf("S%d", rnd.IntN(8))
		}
		switch rnd.IntN(10) {
		case 0:
			e.Install = &plan.Install{Digest: "sha256:0123", Workflow: "w"}
			e.Inventory = &plan.Inventory{Disks: []plan.DiskInfo{{}}}
		case 1: // a summary that keeps what its last event no longer holds
			e.State, e.Install, e.InstallID = StateProvisioned, &plan.Install{Digest: "sha256:4567", Image: strings.Repeat("i", rnd.IntN(500))}, "s1"
		case 2:
			e.Hostname, e.Boot = strings.Repeat("h", rnd.IntN(300)), strings.Repeat("b", rnd.IntN(300))
		}
		m.Record(e)
		md.record(e, seq)
		checkBytes(t, m)
		if m.Bytes() != md.total() {
			t.Fatalf("event %d: Bytes() %d, the model keeps %d", seq, m.Bytes(), md.total())
		}
		if m.Evicted() != md.evicted {
			t.Fatalf("event %d: %d machines evicted, the model %d", seq, m.Evicted(), md.evicted)
		}
		ms := m.Machines()
		if len(ms) != len(md.machines) {
			t.Fatalf("event %d: %d machines, the model %d", seq, len(ms), len(md.machines))
		}
		for _, mc := range ms {
			mm := md.machines[mc.Key]
			if mm == nil {
				t.Fatalf("event %d: %s is not in the model", seq, mc.Key)
			}
			// The summary just changed, and every summary now and then.
			if (mc.Key == e.Key() || seq%50 == 0) && !reflect.DeepEqual(mc, mm.m) {
				t.Fatalf("event %d: %s's summary %+v, the model's %+v", seq, mc.Key, mc, mm.m)
			}
			var got []int
			for _, e := range m.Events(mc.Key) {
				got = append(got, seqOf(t, e))
			}
			if !slices.Equal(got, mm.seqs) && (len(got) > 0 || len(mm.seqs) > 0) {
				t.Fatalf("event %d: %s keeps %v, the model %v", seq, mc.Key, got, mm.seqs)
			}
		}
	}
	t.Logf("%d merges, %d machines evicted for bytes", merges, m.Evicted())
	if merges < 100 {
		t.Errorf("only %d merges", merges)
	}
	if m.Evicted() < 100 {
		t.Errorf("only %d machines evicted for bytes", m.Evicted())
	}
}

// Without MaxBytes, nothing goes but what the counts drop; Bytes still
// counts what is kept.
func TestMemoryNoMaxBytes(t *testing.T) {
	pad := strings.Repeat("x", 10000)
	for _, per := range []int{0, 50} {
		m := &Memory{PerMachine: per, Now: tick()}
		for i := range 1000 {
			m.Record(Event{Kind: KindAgent, Site: "lab", Node: fmt.Sprintf("n%d", i%10), Message: fmt.Sprintf("%04d %s", i, pad)})
			checkBytes(t, m)
		}
		want := 100
		if per > 0 {
			want = per
		}
		for _, mc := range m.Machines() {
			ev := m.Events(mc.Key)
			if mc.Events != 100 || len(ev) != want || seqOf(t, ev[len(ev)-1]) < 990 {
				t.Errorf("PerMachine %d: %s: %d events counted, %d kept", per, mc.Key, mc.Events, len(ev))
			}
		}
	}
}

// What the store remembers of events gone (trimmed by count, of machines
// evicted) stays within a bound of what it keeps.
func TestMemoryOrderBounded(t *testing.T) {
	m := &Memory{PerMachine: 2, PerUnknown: 1, MaxUnknown: 3, Now: tick()}
	for i := range 100000 {
		if i%2 == 0 {
			m.Record(Event{Kind: KindAgent, Site: "lab", Node: "n1", Message: strconv.Itoa(i)})
		} else {
			m.Record(Event{Kind: KindDHCP, MAC: fmt.Sprintf("52:54:00:%06x", i), Message: strconv.Itoa(i)})
		}
		if i%1000 == 0 {
			checkBytes(t, m)
		}
	}
	checkBytes(t, m)
}

// Size counts every string an event carries (a field added to Event and
// forgotten there fails this), Install's, and Inventory's JSON.
func TestEventSize(t *testing.T) {
	base := Event{}.Size()
	if base != eventOverhead || base < 300 {
		t.Fatalf("an empty event: %d bytes", base)
	}
	typ := reflect.TypeFor[Event]()
	for i := range typ.NumField() {
		if typ.Field(i).Type.Kind() != reflect.String {
			continue
		}
		var e Event
		reflect.ValueOf(&e).Elem().Field(i).SetString("abc")
		if got := e.Size(); got != base+3 {
			t.Errorf("%s: Size %d, want %d", typ.Field(i).Name, got, base+3)
		}
	}
	in := &plan.Install{Digest: "sha256:abcd", Image: "i", Workflow: "wf", CloudInit: "ci"}
	if got := (Event{Install: in}).Size(); got != base+installOverhead+11+1+2+2 {
		t.Errorf("Install: %d", got)
	}
	inv := &plan.Inventory{Disks: []plan.DiskInfo{{}, {}}}
	js, _ := json.Marshal(inv)
	if got := (Event{Inventory: inv}).Size(); got != base+len(js) {
		t.Errorf("Inventory: %d, want %d", got, base+len(js))
	}
}

// The cost of a Record with MaxBytes set, after 10,000 and 100,000 events
// recorded: it should not grow with what went before.
func BenchmarkMemoryRecordBounded(b *testing.B) {
	events := make([]Event, 1000)
	for i := range events {
		events[i] = Event{Kind: KindAgent, Site: "lab", Node: fmt.Sprintf("n%d", i%100), Message: fmt.Sprintf("%d %s", i, strings.Repeat("x", 500))}
		if i%10 == 0 {
			events[i] = Event{Kind: KindDHCP, MAC: fmt.Sprintf("52:54:00:00:%02x:%02x", i/256, i%256), Message: "offer"}
		}
	}
	for _, before := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("recorded=%d", before), func(b *testing.B) {
			m := &Memory{MaxBytes: 1 << 20}
			for i := range before {
				m.Record(events[i%len(events)])
			}
			i := 0
			for b.Loop() {
				m.Record(events[i%len(events)])
				i++
			}
		})
	}
}

// A machine's summary for a fleet's document: every string but its
// identifiers within BriefField (and the cut's note), its last event
// without its inventory and install, no report key; the identifiers whole.
func TestMachineBrief(t *testing.T) {
	long := strings.Repeat("x", MaxField)
	inv := &plan.Inventory{System: plan.SystemInfo{Vendor: long}}
	m := Machine{Key: "lab/" + long, Site: "lab", Node: long, MAC: long, TPM: long, Boot: long + long, ReportKey: long, Inventory: inv,
		Last: Event{Kind: KindAgent, Node: long, Message: long + long, Inventory: inv, Install: &plan.Install{Digest: long}, TPM: long}}
	b := m.Brief()
	if b.Key != m.Key || b.Node != long || b.Last.Node != long {
		t.Errorf("an identifier was cut: key %d bytes, node %d", len(b.Key), len(b.Node))
	}
	for name, f := range map[string]string{"mac": b.MAC, "tpm": b.TPM, "boot": b.Boot} {
		if len(f) > BriefField+40 || !strings.Contains(f, "[cut:") {
			t.Errorf("%s: %d bytes in the summary", name, len(f))
		}
	}
	if len(b.Last.Message) > 2*BriefField+40 || b.Last.Inventory != nil || b.Last.Install != nil || b.Last.TPM != "" || b.ReportKey != "" {
		t.Errorf("the summary's last event carries more than what happened: %+v", b.Last)
	}
	if m.MAC != long || m.Last.Inventory == nil {
		t.Error("Brief changed the machine it summed up")
	}
}
