package status

import (
	"fmt"
	"testing"
	"time"
)

func TestMemory(t *testing.T) {
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	m := &Memory{PerMachine: 3, MaxMachines: 4, Now: func() time.Time { now = now.Add(time.Second); return now }}
	m.Record(Event{Kind: KindDHCP, MAC: "52:54:00:00:00:01", State: StateDiscovered, Message: "offer"})
	m.Record(Event{Kind: KindScript, Site: "lab", Node: "n1", MAC: "52:54:00:00:00:01", State: StateBooting, Message: "script"})
	got := m.Machines()
	if len(got) != 1 || got[0].Key != "lab/n1" || got[0].State != StateBooting || got[0].Events != 2 || got[0].MAC != "52:54:00:00:00:01" {
		t.Fatalf("the DHCP history did not join the node: %+v", got)
	}
	if ev := m.Events("lab/n1"); len(ev) != 2 || ev[0].Message != "offer" {
		t.Errorf("events: %+v", ev)
	}
	// Bounded per machine, and in machines (the least recently seen go).
	for i := range 5 {
		m.Record(Event{Kind: KindScript, Site: "lab", Node: "n1", Message: fmt.Sprint(i)})
	}
	if ev := m.Events("lab/n1"); len(ev) != 3 || ev[2].Message != "4" {
		t.Errorf("per-machine bound: %+v", ev)
	}
	for i := range 10 {
		m.Record(Event{Kind: KindDHCP, MAC: fmt.Sprintf("52:54:00:00:01:%02x", i)})
	}
	if got := m.Machines(); len(got) != 4 || got[len(got)-1].MAC != "52:54:00:00:01:09" {
		t.Errorf("machine bound: %d machines, %+v", len(got), got)
	}
}
