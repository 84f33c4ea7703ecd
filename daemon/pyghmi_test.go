//go:build ipmi

package daemon

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/power"
	"github.com/bootops/bootops/test/pyghmisim"
)

// pyghmiFleet is a fleet whose nodes' BMCs are pyghmi's (IPMI, RMCP+
// cipher suite 3) with the faults given by node number, reached through
// bmclib and ipmitool as in production; password is what the daemon
// presents (the BMCs take "secret").
func pyghmiFleet(t *testing.T, count int, faults map[int]pyghmisim.Faults, password string) (*fleet, []*pyghmisim.BMC) {
	sims := make([]*pyghmisim.BMC, count+1)
	for i := 1; i <= count; i++ {
		sims[i] = pyghmisim.Start(t, "admin", "secret")
		if err := sims[i].SetFaults(faults[i]); err != nil {
			t.Fatal(err)
		}
	}
	f := newFleetOf(t, count, func(i int) power.Controller {
		return power.DialBMCLib(&plan.BMC{Address: "127.0.0.1", Port: sims[i].Port, Protocol: plan.BMCIPMI}, netip.MustParseAddr("127.0.0.1"),
			power.Credentials{Username: "admin", Password: password})
	})
	return f, sims
}

// pyghmiCycled counts the network boots set once and the power actions a
// BMC was told.
func pyghmiCycled(b *pyghmisim.BMC) (pxe, power int) {
	for _, o := range b.Told() {
		switch {
		case o == "boot network":
			pxe++
		case strings.HasPrefix(o, "power "):
			power++
		}
	}
	return pxe, power
}

// The rollout controller on IPMI BMCs of pyghmi's (the BMC issue's faults
// on a BMC implementation that is not ipmi_sim): one healthy, one slow
// (100 ms an answer), one dropping every eighth answer (ipmitool sends
// again after bmclib's -N 5: 5 s a drop), one whose power state shows two
// seconds late. Every node is
// reinstalled once — one network boot set and one cycle each — and
// nothing halts. A BMC that hangs when the rollout comes halts its group
// after its tries, before the next node is touched; a BMC that refuses the
// password is told nothing: its node is skipped, and its power status
// says which cipher suite's login was refused.
func TestRolloutIPMIFaultsPyghmi(t *testing.T) {
	start := time.Now()
	f, sims := pyghmiFleet(t, 4, map[int]pyghmisim.Faults{
		2: {Latency: 300 * time.Millisecond},
		3: {DropEvery: 8},
		4: {LateState: 2 * time.Second},
	}, "secret")
	f.r.bmcBackoff = 100 * time.Millisecond
	rounds := f.rollOut(func(i int) bool { _, p := pyghmiCycled(sims[i]); return p > 0 }, 12)
	t.Logf("4 nodes rolled out in %d rounds, %s", rounds, time.Since(start).Round(time.Millisecond))
	for i, name := range f.names {
		told := sims[i+1].Told()
		if pxe, _ := pyghmiCycled(sims[i+1]); pxe != 1 || !slices.ContainsFunc(told, func(o string) bool { return o == "power cycle" || o == "power reset" || o == "power on" }) {
			t.Errorf("%s's BMC was told %q; want one network boot and one cycle", name, told)
		}
	}
	for _, g := range f.r.Status() {
		if g.Halted != "" || g.OutOfDate != 0 || g.InProgress != 0 {
			t.Errorf("after the rollout: %+v", g)
		}
	}

	f2, sims2 := pyghmiFleet(t, 2, nil, "secret")
	sims2[1].SetFaults(pyghmisim.Faults{Hang: true})
	f2.pm.Timeout = 3 * time.Second
	f2.r.bmcTries, f2.r.bmcBackoff = 2, 100*time.Millisecond
	f2.round()
	if st := f2.r.Status(); len(st) != 1 || !strings.HasPrefix(st[0].Halted, "n1: power: ") || !strings.Contains(st[0].Halted, "after 2 tries") {
		t.Errorf("a hung BMC: status %+v", st)
	}
	if told := sims2[2].Told(); len(told) != 0 {
		t.Errorf("n2 was touched after n1's BMC hung: %q", told)
	}

	f3, sims3 := pyghmiFleet(t, 1, nil, "wrong")
	f3.r.bmcBackoff = 100 * time.Millisecond
	f3.round()
	if st := f3.r.Status(); len(st) != 1 || st[0].Halted != "" || !strings.Contains(st[0].Summary, "1 skipped") {
		t.Errorf("a refused password: status %+v", st)
	}
	if ps, _ := f3.pm.Status("lab/n1"); !strings.Contains(ps.Error, "cipher suite 3") || !strings.Contains(ps.Error, "cipher suite 17") {
		t.Errorf("a refused password: power status %+v; want each cipher suite's refusal", ps)
	} else {
		t.Logf("a refused password: %s", ps.Error)
	}
	if told := sims3[1].Told(); len(told) != 0 {
		t.Errorf("a BMC that refused the password was told %q", told)
	}
	t.Logf("TestRolloutIPMIFaultsPyghmi: %s", time.Since(start).Round(time.Second))
}
