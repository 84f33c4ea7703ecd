package hub

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
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
