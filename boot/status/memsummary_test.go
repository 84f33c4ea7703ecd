package status

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// heapInUse is the Go heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// maximalEvent is an event as large as a site may send: every string
// past its cut (so the store keeps each at its cut length, copied anew
// at every Record, as events decoded one by one are). Site is at its
// bound without a cut, whose note (a colon) would make the key no node's
// (IsNodeKey); ReportKey is not cut.
func maximalEvent() Event {
	field := strings.Repeat("f", MaxField+1)
	return Event{Kind: field, Site: field[:MaxField], Node: field, MAC: field, UUID: field, Serial: field, IP: field, State: field,
		Message: strings.Repeat("m", MaxMessage+1), Action: field, Boot: strings.Repeat("b", 2*MaxField+1),
		Hostname: field, Kernel: field, InstallID: field, CloudInit: strings.Repeat("c", 2*MaxField+1), Revision: field,
		Held: field, EK: field, TPM: field, ReportKey: field[:MaxField], Sync: field, Rollout: field}
}

// Issue 44's measure: 20,000 machines that each send one maximal event.
// The store's bound covers their summaries too: it keeps MaxBytes or
// less, the heap grows by no more than about that, and the machines seen
// longest ago go, the newest stay.
func TestMemorySummariesBounded(t *testing.T) {
	testutil.Slow(t)
	const machines = 20000
	m := &Memory{MaxBytes: 64 << 20, Now: tick()}
	e := maximalEvent()
	vendor := strings.Repeat("v", 30000)
	key := func(i int) string {
		ev := e
		ev.Node = fmt.Sprintf("%06d%s", i, e.Node)
		return ev.printable().Key()
	}
	if !IsNodeKey(key(0)) {
		t.Fatal("the machines are no nodes")
	}
	before := heapInUse()
	start := time.Now()
	for i := range machines {
		ev := e
		ev.Node, ev.MAC = fmt.Sprintf("%06d%s", i, e.Node), fmt.Sprintf("%06d%s", i, e.MAC)
		// Its own inventory, as each decoded event has.
		ev.Inventory = &plan.Inventory{System: plan.SystemInfo{Vendor: strings.Clone(vendor)}}
		m.Record(ev)
	}
	took := time.Since(start)
	after := heapInUse()
	grew := int64(after) - int64(before)
	ms := m.Machines()
	newest := key(machines - 1)
	if len(ms) == 0 || len(m.Events(newest)) != 1 {
		t.Fatalf("%d machines kept; the newest keeps %d events", len(ms), len(m.Events(newest)))
	}
	t.Logf("%d maximal events (%d bytes each), in %s: %d machines kept (%d bytes a summary), %d evicted, %d MiB counted, heap +%d MiB",
		machines, m.Events(newest)[0].Size(), took.Round(time.Millisecond), len(ms), summaryOf(ms[0]), m.Evicted(), m.Bytes()>>20, grew>>20)
	if m.Bytes() > m.MaxBytes {
		t.Errorf("Bytes() %d, over MaxBytes %d", m.Bytes(), m.MaxBytes)
	}
	if limit := 2*m.MaxBytes + 16<<20; grew > limit {
		t.Errorf("the heap grew by %d MiB, bound %d MiB", grew>>20, limit>>20)
	}
	if m.Evicted() == 0 || int(m.Evicted())+len(ms) != machines {
		t.Errorf("%d machines evicted, %d kept, of %d", m.Evicted(), len(ms), machines)
	}
	// The newest are kept, and only they.
	kept := machines - len(ms)
	for i, mc := range ms {
		if mc.Key != key(kept+i) {
			t.Fatalf("machine %d listed is %.12q…, want the %dth recorded", i, mc.Key, kept+i)
		}
	}
	if !m.Known(newest) {
		t.Errorf("the newest machine is not known")
	}
	if mc, ok := m.Machine(newest); !ok || mc.Inventory == nil || mc.Last.Inventory != mc.Inventory {
		t.Errorf("the newest machine's summary: %v", ok)
	}
	for _, i := range []int{0, 1, kept - 1} {
		k := key(i)
		if _, ok := m.Machine(k); ok || m.Known(k) || m.Events(k) != nil {
			t.Errorf("machine %d of %d (evicted) is still known", i, machines)
		}
		if ok, n := m.Holds(k, ""); ok || n != len(ms) {
			t.Errorf("Holds(machine %d): %v, %d machines (want %d)", i, ok, n, len(ms))
		}
	}
	checkBytes(t, m)
	runtime.KeepAlive(m)
}

// Past MaxBytes, machines that are no node go before nodes, each kind the
// one seen longest ago first; the machine just recorded never goes.
func TestMemoryEvictForBytesOrder(t *testing.T) {
	pad := strings.Repeat("p", 2000)
	mk := func(node, mac string) Event {
		e := Event{Kind: KindAgent, Message: pad}
		if node != "" {
			e.Site, e.Node = "lab", node
		} else {
			e.Kind, e.MAC = KindDHCP, mac
		}
		return e
	}
	// The five machines' summaries and one event fit; a sixth does not.
	one := &Memory{Now: tick()}
	one.Record(mk("n1", ""))
	summary, event := one.Bytes()-int64(one.Events("lab/n1")[0].Size()), int64(one.Events("lab/n1")[0].Size())
	m := &Memory{MaxBytes: 5*summary + event + 100, Now: tick()}
	for _, e := range []Event{mk("n1", ""), mk("", "u1"), mk("n2", ""), mk("", "u2"), mk("n3", "")} {
		m.Record(e)
		checkBytes(t, m)
	}
	if m.Evicted() != 0 || len(m.Machines()) != 5 {
		t.Fatalf("%d machines, %d evicted", len(m.Machines()), m.Evicted())
	}
	// n1 is seen again: u1 is now the one seen longest ago.
	m.Record(mk("n1", ""))
	checkBytes(t, m)
	want := []string{"mac:u1", "mac:u2", "lab/n2", "lab/n3", "lab/n1"}
	for i, e := range []Event{mk("n4", ""), mk("n5", ""), mk("n6", ""), mk("n7", ""), mk("n8", "")} {
		m.Record(e)
		checkBytes(t, m)
		if m.Evicted() != uint64(i+1) {
			t.Fatalf("after %s: %d evicted", e.Key(), m.Evicted())
		}
		for _, k := range want[:i+1] {
			if m.Known(k) {
				t.Fatalf("after %s: %s still kept", e.Key(), k)
			}
		}
		if !m.Known(e.Key()) || len(m.Machines()) != 5 {
			t.Fatalf("after %s: %d machines", e.Key(), len(m.Machines()))
		}
	}
	// An unknown machine just recorded stays, and nodes go for it.
	m.Record(mk("", "u3"))
	checkBytes(t, m)
	if !m.Known("mac:u3") || m.Known("lab/n4") || m.Evicted() != 6 {
		t.Fatalf("u3 known %v, n4 known %v, %d evicted", m.Known("mac:u3"), m.Known("lab/n4"), m.Evicted())
	}
	// One machine larger than the bound alone: every other goes, it stays.
	huge := mk("n9", "")
	huge.Inventory = &plan.Inventory{System: plan.SystemInfo{Vendor: strings.Repeat("v", int(m.MaxBytes))}}
	m.Record(huge)
	checkBytes(t, m)
	if ms := m.Machines(); len(ms) != 1 || ms[0].Key != "lab/n9" || m.Evicted() != 11 {
		t.Fatalf("%d machines kept, %d evicted", len(ms), m.Evicted())
	}
	// The next one pushes it out.
	m.Record(mk("", "u4"))
	checkBytes(t, m)
	if m.Known("lab/n9") || !m.Known("mac:u4") || m.Bytes() > m.MaxBytes {
		t.Fatalf("after the huge one: n9 known %v, %d bytes", m.Known("lab/n9"), m.Bytes())
	}
	// A machine evicted comes back anew.
	m.Record(mk("n2", ""))
	checkBytes(t, m)
	if mc, ok := m.Machine("lab/n2"); !ok || mc.Events != 1 {
		t.Fatalf("n2 again: %v %+v", ok, mc.Events)
	}
}

// Without MaxBytes no machine goes for bytes, however large their
// summaries: only MaxUnknown bounds the unknown ones, and Bytes counts
// them all.
func TestMemoryNoMaxBytesNoEviction(t *testing.T) {
	m := &Memory{MaxUnknown: 50, Now: tick()}
	e := maximalEvent()
	inv := &plan.Inventory{System: plan.SystemInfo{Vendor: strings.Repeat("v", 30000)}}
	for i := range 300 {
		ev := e
		ev.Inventory = inv
		if i%2 == 0 {
			ev.Node = fmt.Sprintf("%04d%s", i, e.Node)
		} else {
			ev.Node, ev.MAC = "", fmt.Sprintf("%04d%s", i, e.MAC)
		}
		m.Record(ev)
		if i%50 == 0 {
			checkBytes(t, m)
		}
	}
	checkBytes(t, m)
	if m.Evicted() != 0 || len(m.Machines()) != 150+50 {
		t.Fatalf("%d machines kept, %d evicted for bytes", len(m.Machines()), m.Evicted())
	}
	if m.Bytes() < 200*60000 {
		t.Errorf("Bytes() %d for 200 machines of maximal events", m.Bytes())
	}
}

// A summary's size counts every string a Machine carries (a field added
// to Machine and forgotten there fails this), its Last event's Size, and
// Installed and Inventory once each, when they are Last's own.
func TestMachineSize(t *testing.T) {
	base := machineSize(Machine{})
	if base != machineOverhead || base < eventOverhead+300 {
		t.Fatalf("an empty machine: %d bytes", base)
	}
	typ := reflect.TypeFor[Machine]()
	for i := range typ.NumField() {
		if typ.Field(i).Type.Kind() != reflect.String {
			continue
		}
		var m Machine
		reflect.ValueOf(&m).Elem().Field(i).SetString("abc")
		if got := machineSize(m); got != base+3 {
			t.Errorf("%s: size %d, want %d", typ.Field(i).Name, got, base+3)
		}
	}
	last := Event{Message: "hello", Kind: KindAgent}
	if got := machineSize(Machine{Last: last}); got != base+last.Size()-eventOverhead {
		t.Errorf("Last: %d, want %d", got, base+last.Size()-eventOverhead)
	}
	if got := machineSize(Machine{Image: &ImageSources{}}); got != base+imageOverhead {
		t.Errorf("Image: %d", got)
	}
	in := &plan.Install{Digest: "sha256:abcd", Image: "i", Workflow: "wf", CloudInit: "ci"}
	if got := machineSize(Machine{Installed: in}); got != base+installOverhead+16 {
		t.Errorf("Installed: %d", got)
	}
	if got := machineSize(Machine{Installed: in, Last: Event{Install: in}}); got != base+installOverhead+16 {
		t.Errorf("Installed, Last's own: %d", got)
	}
	if got := machineSize(Machine{Installed: in, Last: Event{Install: &plan.Install{}}}); got != base+2*installOverhead+16 {
		t.Errorf("Installed, and Last another: %d", got)
	}
	inv := &plan.Inventory{System: plan.SystemInfo{Vendor: "acme"}}
	js, _ := json.Marshal(inv)
	if got := machineSize(Machine{Inventory: inv}); got != base+len(js) {
		t.Errorf("Inventory: %d, want %d", got, base+len(js))
	}
	if got := machineSize(Machine{Inventory: inv, Last: Event{Inventory: inv}}); got != base+len(js) {
		t.Errorf("Inventory, Last's own: %d, want %d", got, base+len(js))
	}
	other := &plan.Inventory{System: plan.SystemInfo{Vendor: "acme"}}
	if got := machineSize(Machine{Inventory: inv, Last: Event{Inventory: other}}); got != base+2*len(js) {
		t.Errorf("Inventory, and Last another: %d, want %d", got, base+2*len(js))
	}
}
