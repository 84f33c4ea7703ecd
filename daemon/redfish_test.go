package daemon

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/power"
	"github.com/bootops/bootops/test/redfishsim"
)

// redfishFleet is a fleet whose nodes' BMCs are Redfish simulators with
// the faults given (by node number), reached through bmclib as in
// production; every machine is on and running v1.
func redfishFleet(t testing.TB, count int, faults map[int]redfishsim.Faults) (*fleet, []*redfishsim.BMC) {
	sims := make([]*redfishsim.BMC, count+1)
	srvs := make([]*httptest.Server, count+1)
	for i := 1; i <= count; i++ {
		sims[i] = redfishsim.New()
		sims[i].SetPowerState("On")
		sims[i].SetFaults(faults[i])
		srvs[i] = sims[i].Start()
		t.Cleanup(srvs[i].Close)
	}
	f := newFleetOf(t, count, func(i int) power.Controller {
		host, port := redfishsim.Addr(srvs[i])
		return power.DialBMCLib(&plan.BMC{Address: host, Port: port, Protocol: plan.BMCRedfish}, netip.MustParseAddr(host),
			power.Credentials{Username: "root", Password: "calvin"})
	})
	return f, sims
}

// cycledBy says whether the simulator was told a one-time PXE boot and a
// power cycle, and how many times each.
func cycledBy(b *redfishsim.BMC) (pxe, cycles int) {
	for _, r := range b.Saw("PATCH ") {
		if strings.Contains(r, "BootSourceOverrideEnabled=Once") && strings.Contains(r, "BootSourceOverrideTarget=Pxe") {
			pxe++
		}
	}
	return pxe, len(b.Saw("POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset ForceRestart"))
}

// redfishCycled says whether the simulator of node i was told a cycle.
func redfishCycled(sims []*redfishsim.BMC) func(int) bool {
	return func(i int) bool { _, c := cycledBy(sims[i]); return c > 0 }
}

// rollOut runs rounds until every node's BMC was cycled and its machine
// (the test) reported the new install, at most max rounds; it returns
// the rounds it took. cycled says whether node i's BMC (from 1) was told
// to cycle it.
func (f *fleet) rollOut(cycled func(i int) bool, max int) int {
	done := map[string]bool{}
	for round := 1; round <= max; round++ {
		f.round()
		for i, name := range f.names {
			if cycled(i+1) && !done[name] {
				in := f.v2[name]
				f.report(name, &in) // the machine booted the network, installed v2, reported
				done[name] = true
			}
		}
		if len(done) == len(f.names) {
			f.round() // judges the last one
			return round
		}
	}
	return max
}

// The rollout controller on Redfish BMCs through bmclib (the BMC issue's
// faults, test/redfishsim): one healthy, one slow (300 ms an answer),
// one dropping every second connection, one whose power state shows two
// seconds late. Every node is reinstalled once — one PXE override and
// one cycle each, the dropped connections tried again — and nothing
// halts. A BMC that hangs fails its node after the retry budget and halts
// the group before the next node is touched; a refused login is not
// retried (a wrong password tried again locks accounts).
func TestRolloutRedfishFaults(t *testing.T) {
	testutil.Slow(t)
	f, sims := redfishFleet(t, 4, map[int]redfishsim.Faults{
		2: {Latency: 300 * time.Millisecond},
		3: {DropEvery: 2},
		4: {LateState: 2 * time.Second},
	})
	f.r.bmcBackoff = 100 * time.Millisecond
	start := time.Now()
	rounds := f.rollOut(redfishCycled(sims), 12)
	t.Logf("4 nodes rolled out in %d rounds, %s", rounds, time.Since(start).Round(time.Millisecond))
	for i, name := range f.names {
		if pxe, cycles := cycledBy(sims[i+1]); pxe != 1 || cycles != 1 {
			t.Errorf("%s: %d PXE overrides, %d cycles; want one each\n%s", name, pxe, cycles, strings.Join(sims[i+1].Saw(""), "\n"))
		}
	}
	for _, g := range f.r.Status() {
		if g.Halted != "" || g.OutOfDate != 0 || g.InProgress != 0 {
			t.Errorf("after the rollout: %+v", g)
		}
	}
	if p := sims[4].Power(); p != "On" {
		t.Errorf("n4's machine is %s after its cycle", p)
	}

	// A BMC that answered the polls and hangs when the rollout comes, and
	// one whose password was changed on it: each the first of its group.
	f2, sims2 := redfishFleet(t, 2, nil)
	sims2[1].SetFaults(redfishsim.Faults{Hang: true})
	f2.pm.Timeout = time.Second
	f2.r.bmcTries, f2.r.bmcBackoff = 2, 100*time.Millisecond
	start = time.Now()
	f2.round()
	st := f2.r.Status()
	if len(st) != 1 || !strings.HasPrefix(st[0].Halted, "n1: power: ") || !strings.Contains(st[0].Halted, "after 2 tries") {
		t.Errorf("a hung BMC: status %+v", st)
	}
	if _, c := cycledBy(sims2[2]); c != 0 || len(sims2[2].Saw("PATCH")) != 0 {
		t.Errorf("n2 was touched after n1's BMC hung: %v", sims2[2].Saw(""))
	}
	t.Logf("a hung BMC halted the rollout in %s", time.Since(start).Round(time.Millisecond))

	f3, sims3 := redfishFleet(t, 1, nil)
	sims3[1].SetFaults(redfishsim.Faults{RefuseLogin: true})
	logins := sims3[1].Logins()
	f3.r.bmcBackoff = 100 * time.Millisecond
	f3.round()
	if st := f3.r.Status(); len(st) != 1 || !strings.Contains(st[0].Halted, "401") || strings.Contains(st[0].Halted, "tries") {
		t.Errorf("a refused login: status %+v", st)
	}
	if n := sims3[1].Logins() - logins; n != 1 {
		t.Errorf("a refused login was tried %d times in the rollout, want once", n)
	}
}

// BenchmarkRolloutRedfish: a 20-node rolling rollout (a canary, then 5 at
// a time) through bmclib against Redfish simulators, all healthy beside
// one BMC taking ~15 s a call (3 s an answer; a call is ~5 requests) and
// one dropping every second connection; the machines install the moment
// they are cycled, so the time is the controller's and the BMCs'. Each
// sub-benchmark is one rollout (run with -benchtime 1x):
//
//	go test ./daemon -run '^$' -bench RolloutRedfish -benchtime 1x
func BenchmarkRolloutRedfish(b *testing.B) {
	for _, c := range []struct {
		name   string
		faults map[int]redfishsim.Faults
	}{
		{"healthy", nil},
		{"one-15s-one-dropping", map[int]redfishsim.Faults{7: {Latency: 3 * time.Second}, 13: {DropEvery: 2}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				f, sims := redfishFleet(b, 20, c.faults)
				p := f.live.Current()
				p.Sites[0].Rollouts["base"] = &plan.Rollout{Strategy: plan.RolloutRolling, MaxUnavailable: "5", Canary: 1, HealthTimeout: "20m"}
				f.live.Swap(p)
				f.restart()
				start := time.Now()
				rounds := f.rollOut(redfishCycled(sims), 40)
				d := time.Since(start)
				for i, name := range f.names {
					if pxe, cycles := cycledBy(sims[i+1]); pxe != 1 || cycles != 1 {
						b.Fatalf("%s: %d PXE overrides, %d cycles", name, pxe, cycles)
					}
				}
				b.ReportMetric(d.Seconds(), "s/rollout")
				b.ReportMetric(float64(rounds), "rounds")
			}
		})
	}
}
