package status

import (
	"fmt"
	"github.com/bootops/bootops/plan"
	"testing"
	"time"
)

func TestMemory(t *testing.T) {
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	m := &Memory{PerMachine: 3, MaxUnknown: 4, Now: func() time.Time { now = now.Add(time.Second); return now }}
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
	if got := m.Machines(); len(got) != 5 || got[0].Key != "lab/n1" || got[len(got)-1].MAC != "52:54:00:00:01:09" {
		t.Errorf("machine bound: %d machines, %+v", len(got), got)
	}
}

// Every transition a node's state takes from one event: the boot plane's
// events move it forward to the Micro-OS, the agent's through the
// install, the installed OS's report to running; an installed node's
// reboot (DHCP, the local-disk script) never moves it back; a reinstall
// (the Micro-OS script again) starts over. A report moves only an
// installed node, and only with the install the node's record holds.
func TestStateTransitions(t *testing.T) {
	report := Event{Kind: KindReport, State: StateRunning, InstallID: "i1"}
	other := Event{Kind: KindReport, State: StateRunning, InstallID: "i0"}
	claim := Event{Kind: KindReport, State: StateRunning, InstallID: "i1", Install: &plan.Install{Digest: "d9"}}
	for _, c := range []struct {
		from string
		ev   Event
		want string
	}{
		{StateRegistered, Event{Kind: KindDHCP, State: StateDiscovered}, StateDiscovered},
		{StateDiscovered, Event{Kind: KindScript, State: StateBooting}, StateBooting},
		{StateBooting, Event{Kind: KindAgent, State: StateMicroOS}, StateMicroOS},
		{StateMicroOS, Event{Kind: KindAgent, State: StateProvisioning}, StateProvisioning},
		{StateProvisioning, Event{Kind: KindAgent, State: StateFailed}, StateFailed},
		{StateProvisioning, Event{Kind: KindAgent, State: StateProvisioned}, StateProvisioned},
		{StateFailed, Event{Kind: KindDHCP, State: StateDiscovered}, StateDiscovered},
		{StateProvisioning, Event{Kind: KindDHCP, State: StateDiscovered}, StateDiscovered},
		// The installed node's reboot.
		{StateProvisioned, Event{Kind: KindDHCP, State: StateDiscovered}, StateProvisioned},
		{StateProvisioned, Event{Kind: KindScript, Message: "served local-disk script"}, StateProvisioned},
		{StateProvisioned, Event{Kind: KindFile, Message: "tftp: sent undionly.kpxe"}, StateProvisioned},
		{StateProvisioned, report, StateRunning},
		{StateProvisioned, other, StateProvisioned},
		{StateProvisioned, claim, StateProvisioned},
		{StateMicroOS, report, StateMicroOS},
		{StateRegistered, report, StateRegistered},
		{StateFailed, report, StateFailed},
		{StateRunning, Event{Kind: KindDHCP, State: StateDiscovered}, StateRunning},
		{StateRunning, Event{Kind: KindScript, Message: "served local-disk script"}, StateRunning},
		{StateRunning, report, StateRunning},
		// A reinstall: Git raised the generation, the Micro-OS script is served.
		{StateRunning, Event{Kind: KindScript, State: StateBooting}, StateBooting},
		{StateProvisioned, Event{Kind: KindScript, State: StateBooting}, StateBooting},
		{StateRunning, Event{Kind: KindAgent, State: StateMicroOS}, StateMicroOS},
		{StateMismatch, Event{Kind: KindDHCP, State: StateDiscovered}, StateDiscovered},
	} {
		m := Machine{State: c.from}
		if Installed(c.from) {
			m.Installed, m.InstallID = &plan.Install{Digest: "d1"}, "i1"
		}
		m.apply(c.ev)
		if m.State != c.want {
			t.Errorf("%s + %s event (state %q): %s, want %s", c.from, c.ev.Kind, c.ev.State, m.State, c.want)
		}
	}
}

// What a node's disk holds: unknown until an install finishes, the
// session's install once provisioned, unknown again as soon as another
// install starts or fails. A report never changes it: one of the
// recorded install adds cloud-init's result; one that claims another
// digest, or comes with another install's credential, changes nothing.
func TestInstalled(t *testing.T) {
	m := &Memory{PerMachine: 10, MaxUnknown: 10}
	full := &plan.Install{Digest: "d1", Image: "i1", Workflow: "w1", CloudInit: "c1"}
	installed := func() *plan.Install { return m.Machines()[0].Installed }
	rec := func(e Event) { e.Site, e.Node, e.Kind = "s", "n", KindAgent; m.Record(e) }
	rec(Event{State: StateMicroOS, Installing: true})
	if installed() != nil {
		t.Fatal("installed before any install finished")
	}
	rec(Event{State: StateProvisioned, Install: full, InstallID: "s1"})
	if installed() != full || m.Machines()[0].InstallID != "s1" {
		t.Errorf("after provisioned: %+v", m.Machines()[0])
	}
	for _, e := range []Event{
		{State: StateRunning, Install: &plan.Install{Digest: "d0"}, InstallID: "s1", CloudInit: "error: forged"},
		{State: StateRunning, Install: &plan.Install{Digest: "d1"}, InstallID: "s0", CloudInit: "error: old install"},
		{State: StateRunning, CloudInit: "error: no install named"},
	} {
		rec(e)
		if got := m.Machines()[0]; got.Installed != full || got.CloudInit != "" || got.State != StateProvisioned {
			t.Errorf("a report that does not prove the install (%+v): %+v %q %s", e, got.Installed, got.CloudInit, got.State)
		}
	}
	rec(Event{State: StateRunning, Install: &plan.Install{Digest: "d1"}, InstallID: "s1", CloudInit: "done"})
	if got := m.Machines()[0]; got.Installed != full || got.CloudInit != "done" || got.State != StateRunning {
		t.Errorf("a report of the recorded install: %+v %q %s", got.Installed, got.CloudInit, got.State)
	}
	rec(Event{State: StateProvisioning}) // the reboot after an install
	if installed() == nil {
		t.Error("an action after provisioned forgot the install")
	}
	rec(Event{State: StateMicroOS, Installing: true})
	if installed() != nil || m.Machines()[0].CloudInit != "" {
		t.Error("an install that started still shows the old one")
	}
	if got := SyncOf(nil, *full); got != SyncUnknown {
		t.Errorf("sync of unknown: %q", got)
	}
	if got := SyncOf(&plan.Install{Digest: "d0", Image: "aaaaaaaaaa", Workflow: "w1", CloudInit: "c2"}, *full); got != "out of date: image aaaaaaaa…→i1, cloud-init" {
		t.Errorf("sync: %q", got)
	}
	if got := NodeSync(&Machine{State: StateRegistered}, *full); got != "" {
		t.Errorf("a node never installed: %q", got)
	}
	if got := NodeSync(&Machine{State: StateFailed}, *full); got != SyncUnknown {
		t.Errorf("a node whose install failed: %q", got)
	}
	if got := SyncOf(full, *full); got != SyncIn {
		t.Errorf("sync: %q", got)
	}
}
