package status

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// floodEvents is n script requests of made-up serials from one address,
// as a flood of GET /ipxe sends them.
func floodEvents(from, n int) []Event {
	evs := make([]Event, 0, n)
	for i := from; i < from+n; i++ {
		evs = append(evs, Event{Kind: KindScript, Serial: fmt.Sprintf("FAKE-%08d", i), IP: "198.18.0.66", State: StateBooting, Message: "unknown machine: provision"})
	}
	return evs
}

// A provisioned node is never evicted by traffic: 25,000 made-up
// identities (more than the default table of unknown machines holds) leave
// its provisioned generation, its history and its place in the status as
// they were. With the defaults: this failed when nodes and sightings shared
// one least-recently-seen table (the node went, and its next boot wiped its
// disk).
func TestFloodKeepsNodes(t *testing.T) {
	testutil.Slow(t)
	path := filepath.Join(t.TempDir(), "status.db")
	d := open(t, path, Options{})
	install := []Event{
		{Kind: KindAgent, Site: "lab", Node: "n1", State: StateMicroOS, Seq: 1, Message: "checked in"},
		{Kind: KindAgent, Site: "lab", Node: "n1", State: StateProvisioning, Seq: 2, Message: "done 1/3 wipe-disk"},
		{Kind: KindAgent, Site: "lab", Node: "n1", State: StateProvisioned, Seq: 3, Generation: 2, Message: "provisioned (generation 2)"},
	}
	if err := d.RecordSync(install...); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 25000; i += 1000 {
		if err := d.RecordSync(floodEvents(i, 1000)...); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		if gen, ok := d.Provisioned("lab", "n1"); !ok || gen != 2 {
			t.Fatalf("%s: node n1 provisioned = %d, %v; want generation 2 kept", when, gen, ok)
		}
		if got := messages(d.Events("lab/n1")); len(got) != 3 || got[2] != "provisioned (generation 2)" {
			t.Errorf("%s: n1's timeline is %q, want its 3 install events", when, got)
		}
		if d.State("lab/n1") != StateProvisioned || d.LastSeq("lab/n1") != 3 {
			t.Errorf("%s: n1 is %q at seq %d", when, d.State("lab/n1"), d.LastSeq("lab/n1"))
		}
	}
	check("after the flood")
	if n, _ := d.Unknown(); n != 20000 {
		t.Errorf("%d unknown machines kept, want the default bound 20000", n)
	}
	if got := d.Evicted(); got != 5000 {
		t.Errorf("evicted %d unknown machines, want 5000", got)
	}
	// The newest sightings stay, the oldest went.
	if d.Events("serial:FAKE-00024999") == nil || d.Events("serial:FAKE-00000000") != nil {
		t.Error("the oldest sightings were not the ones dropped")
	}
	d.Close()
	d = open(t, path, Options{})
	check("after a restart")
}

// The unknown machines' table is bounded in bytes too: a few machines with
// long messages cannot fill the disk, and the count says so.
func TestUnknownBytesBound(t *testing.T) {
	var evicted int
	d := open(t, filepath.Join(t.TempDir(), "status.db"), Options{MaxUnknownBytes: 64 << 10, Evicted: func(n int) { evicted += n }})
	long := strings.Repeat("x", 4000)
	for i := range 100 {
		if err := d.RecordSync(Event{Kind: KindScript, Serial: fmt.Sprint("S-", i), Message: long}); err != nil {
			t.Fatal(err)
		}
	}
	n, bytes := d.Unknown()
	if bytes > 64<<10 || n == 0 || n > 16 {
		t.Errorf("%d unknown machines holding %d bytes, want within 64 KiB", n, bytes)
	}
	if evicted != 100-n || d.Evicted() != uint64(evicted) {
		t.Errorf("evicted %d (told) / %d (counted), want %d", evicted, d.Evicted(), 100-n)
	}
	// Per machine: the newest events within PerMachineBytes.
	d2 := open(t, filepath.Join(t.TempDir(), "status.db"), Options{PerMachineBytes: 20 << 10})
	for range 50 {
		if err := d2.RecordSync(Event{Kind: KindAgent, Site: "lab", Node: "n1", Message: long}); err != nil {
			t.Fatal(err)
		}
	}
	if kept := len(d2.Events("lab/n1")); kept < 3 || kept > 5 {
		t.Errorf("%d events of 4 KB kept within 20 KiB", kept)
	}
}

// A node stays while it is in Git and for a grace period after it left;
// then it goes, with its session. One that comes back in time is as it was.
func TestRetain(t *testing.T) {
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	d := open(t, filepath.Join(t.TempDir(), "status.db"), Options{Now: func() time.Time { return now }})
	for _, n := range []string{"n1", "n2"} {
		if err := d.RecordSync(Event{Kind: KindAgent, Site: "lab", Node: n, State: StateProvisioned, Generation: 1, Message: "provisioned"}); err != nil {
			t.Fatal(err)
		}
		if err := d.PutSession("lab/"+n, Session{ID: "s-" + n, Expires: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	d.PutSession("lab/unknown-mac:52:54:00:00:00:09", Session{ID: "old", Expires: now.Add(-time.Minute)})
	d.PutSession("lab/unknown-mac:52:54:00:00:00:0a", Session{ID: "live", Expires: now.Add(time.Minute)})
	onlyN1 := func(k string) bool { return k == "lab/n1" }
	if err := d.Retain(onlyN1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Provisioned("lab", "n2"); !ok {
		t.Fatal("n2 forgotten the moment it left Git")
	}
	if _, ok := d.Session("lab/unknown-mac:52:54:00:00:00:09"); ok {
		t.Error("an unknown machine's expired session was kept")
	}
	if _, ok := d.Session("lab/unknown-mac:52:54:00:00:00:0a"); !ok {
		t.Error("an unknown machine's live session was dropped")
	}
	now = now.Add(2 * time.Hour)
	if err := d.Retain(onlyN1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Provisioned("lab", "n2"); ok || d.Events("lab/n2") != nil {
		t.Error("n2 kept past its grace period")
	}
	if _, ok := d.Session("lab/n2"); ok {
		t.Error("n2's session kept past its grace period")
	}
	if _, ok := d.Provisioned("lab", "n1"); !ok {
		t.Error("n1, in Git, forgotten")
	}
	// Out and back within the grace period: nothing lost.
	if err := d.Retain(func(string) bool { return false }, time.Hour); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Minute)
	if err := d.Retain(onlyN1, time.Hour); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Hour)
	if err := d.Retain(onlyN1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Provisioned("lab", "n1"); !ok {
		t.Error("n1 came back within the grace period and was forgotten later")
	}
}

// Someone who repeats a node's identifiers (a mismatch: its serial with
// another MAC) cannot wash its timeline away nor move it out of its state:
// past the node's budget the boot plane's events are counted, not kept.
func TestNodeTrafficBudget(t *testing.T) {
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	d := open(t, filepath.Join(t.TempDir(), "status.db"), Options{PerMachine: 1000, Now: func() time.Time { return now }})
	if err := d.RecordSync(Event{Kind: KindAgent, Site: "lab", Node: "n1", State: StateProvisioned, Generation: 1, Seq: 9, Message: "provisioned"}); err != nil {
		t.Fatal(err)
	}
	for range 5000 {
		d.Record(Event{Kind: KindScript, Site: "lab", Node: "n1", Serial: "S1", MAC: "52:54:00:66:66:66", State: StateMismatch, Error: true, Message: "refused"})
	}
	barrier(t, d)
	evs := d.Events("lab/n1")
	if len(evs) == 0 || evs[0].Message != "provisioned" {
		t.Fatalf("the flood washed the install out of n1's timeline (%d events kept)", len(evs))
	}
	if d.State("lab/n1") != StateProvisioned {
		t.Errorf("n1 is %s after requests that contradict it, want provisioned", d.State("lab/n1"))
	}
	// A minute on, the budget allows more, and says what it did not keep.
	now = now.Add(time.Minute)
	d.Record(Event{Kind: KindScript, Site: "lab", Node: "n1", Message: "served local-disk script"})
	barrier(t, d)
	evs = d.Events("lab/n1")
	if last := evs[len(evs)-1].Message; !strings.Contains(last, "and 4800 more events") {
		t.Errorf("the next event kept says %q", last)
	}
}
