package hub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// Events that reach the stream out of order (a failed publish sent again
// after the ones that followed it had landed) are applied in the site's
// order; one applied already is not applied again.
func TestViewPutsEventsBackInOrder(t *testing.T) {
	v := NewView()
	ev := func(i int) []byte {
		b, _ := json.Marshal(status.Event{Kind: status.KindAgent, Site: "s", Node: "n", Message: fmt.Sprintf("event %d", i)})
		return b
	}
	at := time.Now()
	// The stream's order: 1 2 4 5 3 (resent) 4 (resent) 6.
	for i, x := range [][2]uint64{{1, 0}, {2, 1}, {4, 3}, {5, 4}, {3, 2}, {4, 3}, {6, 5}} {
		v.Apply(Message{Site: "s", Kind: KindEvent, Data: ev(int(x[0])), Stream: uint64(i + 1), At: at, Seq: x[0], Prev: x[1]})
	}
	got := v.Events("s/n")
	if len(got) != 6 {
		t.Fatalf("%d events applied, want 6", len(got))
	}
	for i, e := range got {
		if want := fmt.Sprintf("event %d", i+1); e.Message != want {
			t.Errorf("event %d: %q, want %q", i, e.Message, want)
		}
	}
	if s := v.Sites(); len(s) != 1 || s[0].Events != 6 || !s[0].LastHeard.Equal(at) {
		t.Errorf("site: %+v", s)
	}
}

// A site's rollouts reach the hub's status in its hello, and only its
// own: a hello that names another site's group is not shown for it.
func TestViewRollouts(t *testing.T) {
	v := NewView()
	hello := func(site string, rs ...bhttp.RolloutStatus) {
		b, _ := json.Marshal(Hello{Site: site, Plan: "p", Rollouts: rs})
		v.Apply(Message{Site: site, Kind: KindHello, Data: b, At: time.Now()})
	}
	hello("east", bhttp.RolloutStatus{Site: "east", Profile: "debian", Strategy: "rolling", OutOfDate: 2, Halted: "r1: install failed: 404"},
		bhttp.RolloutStatus{Site: "west", Profile: "debian", Halted: "forged"})
	var many []bhttp.RolloutStatus
	for i := range 1000 {
		many = append(many, bhttp.RolloutStatus{Site: "west", Profile: fmt.Sprintf("p%d", i)})
	}
	hello("west", many...)
	if n := len(v.Doc("hub").Rollouts); n != 1+maxRolloutsPerSite {
		t.Errorf("a site that names 1,000 groups: %d shown, want %d", n, 1+maxRolloutsPerSite)
	}
	hello("west")
	doc := v.Doc("hub")
	if len(doc.Rollouts) != 1 || doc.Rollouts[0].Site != "east" || doc.Rollouts[0].Halted != "r1: install failed: 404" {
		t.Errorf("rollouts in the hub's status: %+v", doc.Rollouts)
	}
}

// A machine's TPM proof, as its site's check-in recorded it, is in the
// hub's status.
func TestViewShowsTheTPMProof(t *testing.T) {
	v := NewView()
	const ek = "sha256:0a0b"
	proof := "tpm: ek " + ek + ", attested, secure boot, micro-os digest ok"
	b, _ := json.Marshal(status.Event{Kind: status.KindAgent, Site: "s", Node: "n", State: status.StateMicroOS, EK: ek, TPM: proof})
	v.Apply(Message{Site: "s", Kind: KindEvent, Data: b, Stream: 1, At: time.Now(), Seq: 1})
	for _, m := range v.Doc("hub").Nodes {
		if m.Key == "s/n" {
			if m.EK != ek || m.TPM != proof {
				t.Errorf("s/n in the hub's status: ek %q, tpm %q", m.EK, m.TPM)
			}
			return
		}
	}
	t.Errorf("s/n is not in the hub's status: %+v", v.Doc("hub"))
}

// A site's machine bound counts the machines the view holds now: three
// machines first seen by their MACs that turn out to be nodes are three,
// not six; a fourth is refused.
func TestViewMachineBoundCountsHeld(t *testing.T) {
	v := NewViewLimits(Limits{SiteMachines: 3}, nil)
	seq := uint64(0)
	send := func(e status.Event) {
		seq++
		b, _ := json.Marshal(e)
		v.Apply(Message{Site: "s", Kind: KindEvent, Data: b, Stream: seq, At: time.Now(), Seq: seq, Prev: seq - 1})
	}
	for i := range 3 {
		mac := fmt.Sprintf("52:54:00:00:00:%02x", i)
		send(status.Event{Kind: status.KindDHCP, Site: "s", MAC: mac, Message: "seen"})
		send(status.Event{Kind: status.KindScript, Site: "s", Node: fmt.Sprintf("n%d", i), MAC: mac, Message: "booting"})
	}
	if n := v.Refused("s", RefusedMachines); n != 0 {
		t.Errorf("%d refused of three machines, each seen first by its MAC", n)
	}
	send(status.Event{Kind: status.KindScript, Site: "s", Node: "n9", Message: "booting"})
	if n := v.Refused("s", RefusedMachines); n != 1 {
		t.Errorf("a fourth machine: %d refused, want 1", n)
	}
}

// A sequence jump of exactly MaxSeqJump is refused; one short of it is
// taken.
func TestViewSequenceJumpBound(t *testing.T) {
	v := NewViewLimits(Limits{MaxSeqJump: 100}, nil)
	send := func(seq, prev uint64) {
		b, _ := json.Marshal(status.Event{Kind: status.KindDHCP, Site: "s", MAC: "52:54:00:00:00:01", Message: "x"})
		v.Apply(Message{Site: "s", Kind: KindEvent, Data: b, Stream: seq, At: time.Now(), Seq: seq, Prev: prev})
	}
	send(1, 0)
	send(101, 1) // exactly 100 ahead
	if n := v.Refused("s", RefusedSequence); n != 1 {
		t.Errorf("a jump of exactly MaxSeqJump: %d refused, want 1", n)
	}
	send(100, 1) // 99 ahead
	if n := v.Refused("s", RefusedSequence); n != 1 {
		t.Errorf("a jump of 99: %d refused, want still 1", n)
	}
}

// maximalEvents makes events of machine i as large as a site may send
// one: every field at the length the store keeps (longer is cut), an
// inventory filling the rest of limit.
func maximalEvents(limit int) func(i int) []byte {
	field := func(n int) string { return strings.Repeat("x", n) }
	k := field(status.MaxField)
	e := status.Event{Kind: status.KindAgent, Node: "nXXXXXX", MAC: "52:54:XX:XX:XX:XX",
		UUID: k, Serial: k, State: status.StateMicroOS, Message: field(status.MaxMessage), Action: k, Boot: field(2 * status.MaxField), Hostname: k, Kernel: k,
		InstallID: k, CloudInit: field(2 * status.MaxField), Revision: k, Held: k, EK: k, TPM: k, Sync: k, Rollout: k}
	b, _ := json.Marshal(e)
	e.Inventory = &plan.Inventory{System: plan.SystemInfo{Vendor: field(limit - len(b) - 100)}}
	tmpl, _ := json.Marshal(e)
	if len(tmpl) > limit {
		panic(len(tmpl))
	}
	return func(i int) []byte {
		b := bytes.Replace(tmpl, []byte("nXXXXXX"), fmt.Appendf(nil, "n%06d", i), 1)
		return bytes.Replace(b, []byte("52:54:XX:XX:XX:XX"), fmt.Appendf(nil, "52:54:00:%02x:%02x:%02x", i>>16, (i>>8)&0xff, i&0xff), 1)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// Issue 44's finding 3: 20,000 events as large as a site may send, and
// 20,000 more whose predecessor never comes, keep the view within its
// bounds in bytes (the site's events, what waits), and the status document
// stays a summary: its size is bounded by the machines, not by what the
// site padded its events with.
func TestViewBoundedInBytes(t *testing.T) {
	testutil.Slow(t)
	lim := Limits{ViewBytes: 64 << 20, EarlyBytes: 8 << 20}
	v := NewViewLimits(lim, nil)
	before := heapInUse()
	events := 20000
	if raceDetector {
		events = 5000 // the bounds are smaller than 5,000 maximal events all the same
	}
	maximal := maximalEvents(v.limits.MaxEventBytes)
	for i := range events {
		v.Apply(Message{Site: "loud", Kind: KindEvent, Epoch: "e1", Seq: uint64(i + 1), Prev: uint64(i), Data: maximal(i)})
	}
	// Parked: each waits for a predecessor that never comes.
	for i := range events {
		seq := uint64(2*events + 2*i + 2)
		v.Apply(Message{Site: "loud", Kind: KindEvent, Epoch: "e1", Seq: seq, Prev: seq - 1, Data: maximal(i)})
	}
	grew := heapInUse() - before
	v.mu.Lock()
	s := v.sites["loud"]
	kept, waiting := s.mem.Bytes(), s.early
	v.mu.Unlock()
	start := time.Now()
	doc := v.Doc("hub")
	b, err := json.Marshal(doc)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after %d maximal events and %d waiting ones: heap +%d MiB (events kept %d MiB, waiting %d MiB); the status document %d machines, %d MiB, built and encoded in %s",
		events, events, grew>>20, kept>>20, waiting>>20, len(doc.Nodes)+len(doc.Machines), len(b)>>20, took.Round(time.Millisecond))
	if kept > lim.ViewBytes {
		t.Errorf("the site's events hold %d bytes in the view, bound %d", kept, lim.ViewBytes)
	}
	if waiting > lim.EarlyBytes {
		t.Errorf("the site's waiting events hold %d bytes, bound %d", waiting, lim.EarlyBytes)
	}
	if v.Refused("loud", RefusedEarly) == 0 {
		t.Error("no waiting event refused past the bound")
	}
	// The machines' summaries on top of the bounds: 20,000 of them.
	if limit := lim.ViewBytes + int64(lim.EarlyBytes) + 16<<20; grew > limit {
		t.Errorf("the view grew by %d MiB, bound %d MiB", grew>>20, limit>>20)
	}
	if perMachine := len(b) / (len(doc.Nodes) + len(doc.Machines)); perMachine > 12<<10 {
		t.Errorf("the status document holds %d bytes a machine: not a summary", perMachine)
	}
}

// Settle applies what waits for predecessors that left the stream: every
// chain, oldest first, across the gaps between them — 20,000 events that
// each wait for another (a site's stream cut in every other place) are
// all applied, in order, and an older resend is a duplicate afterwards.
func TestViewSettleAppliesEveryChain(t *testing.T) {
	v := NewView()
	const n = 20000
	for i := n - 1; i >= 0; i-- { // newest first: each parks
		seq := uint64(10 + 2*i)
		v.Apply(Message{Site: "north", Epoch: "e1", Kind: KindEvent, Seq: seq, Prev: seq - 1,
			Data: eventJSON(status.Event{Kind: status.KindDHCP, Node: "n1", Message: fmt.Sprint("event ", i)})})
	}
	if got := len(v.Events("north/n1")); got != 0 {
		t.Fatalf("%d events applied before the stream's end, want 0 (each waits)", got)
	}
	v.Settle("north")
	ev := v.Events("north/n1")
	if len(ev) != 500 || ev[0].Message != fmt.Sprint("event ", n-500) || ev[499].Message != fmt.Sprint("event ", n-1) {
		t.Fatalf("after Settle: %d events kept (the newest 500 of %d, in order, wanted)", len(ev), n)
	}
	if got := v.Mark("north", "e1"); got != uint64(10+2*(n-1)) {
		t.Errorf("the mark after Settle: %d", got)
	}
	v.Apply(Message{Site: "north", Epoch: "e1", Kind: KindEvent, Seq: 9, Prev: 8, Data: eventJSON(status.Event{Kind: status.KindDHCP, Node: "n1", Message: "late"})})
	if v.Refused("north", RefusedDuplicate) != 1 {
		t.Errorf("an older event after Settle: %d duplicates refused, want 1", v.Refused("north", RefusedDuplicate))
	}
}

// A site of more than one daemon says, in its hello, its members and who
// answers its DHCP: the hub's status shows them for that site, bounded.
func TestViewShowsASitesMembers(t *testing.T) {
	v := NewView()
	c := &bhttp.ClusterStatus{Member: "m2", Leader: "m1", Size: 3, Quorum: true, Roles: map[string]string{"dhcp.lab": "m2"},
		Members: []bhttp.ClusterMember{{Name: "m1", Current: true}, {Name: "m3", Offline: true}}}
	b, _ := json.Marshal(Hello{Site: "lab", Plan: "p", Daemon: "m2", Cluster: c})
	v.Apply(Message{Site: "lab", Kind: KindHello, Data: b, At: time.Now()})
	many := &bhttp.ClusterStatus{Member: "x", Size: 3, Roles: map[string]string{}}
	for i := range 100 {
		many.Members = append(many.Members, bhttp.ClusterMember{Name: fmt.Sprint("m", i)})
		many.Roles[fmt.Sprint("r", i)] = "x"
	}
	b, _ = json.Marshal(Hello{Site: "east", Plan: "p", Cluster: many})
	v.Apply(Message{Site: "east", Kind: KindHello, Data: b, At: time.Now()})
	for _, s := range v.Sites() {
		switch s.Name {
		case "lab":
			if s.Cluster == nil || s.Cluster.Member != "m2" || len(s.Cluster.Members) != 2 || s.Cluster.Roles["dhcp.lab"] != "m2" {
				t.Errorf("lab's cluster in the hub: %+v", s.Cluster)
			}
		case "east":
			if s.Cluster == nil || len(s.Cluster.Members) != maxClusterNames || len(s.Cluster.Roles) != maxClusterNames {
				t.Errorf("east's hello of 100 members and roles: %+v", s.Cluster)
			}
		}
	}
}
