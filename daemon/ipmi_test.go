//go:build ipmi

package daemon

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/power"
	"github.com/bootops/bootops/test/ipmisim"
)

// ipmiChassis is ipmi_sim's chassis_control program: it keeps the power
// state in a file (on from the start) and logs every set it is told.
const ipmiChassis = `#!/bin/sh
dir=%s
dev=$1; op=$2; shift 2
[ -f $dir/power ] || echo 1 > $dir/power
case $op in
get)
  for p in "$@"; do
    case $p in
    power) echo "power:$(cat $dir/power)" ;;
    boot) echo "boot:$(cat $dir/boot 2>/dev/null || echo default)" ;;
    esac
  done ;;
set)
  echo "set $*" >> $dir/control.log
  while [ $# -ge 2 ]; do
    case $1 in
    power) echo "$2" > $dir/power ;;
    boot) echo "$2" > $dir/boot ;;
    esac
    shift 2
  done ;;
esac
exit 0
`

// ipmiSim starts OpenIPMI's BMC simulator on 127.0.0.1 at a free UDP
// port, user admin/secret, and returns its port and the folder whose
// control.log lists what it was told.
func ipmiSim(t *testing.T, name string) (int, string) {
	t.Helper()
	for _, bin := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing (Debian packages openipmi, ipmitool; make test installs them)", bin)
		}
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	dir := filepath.Join(t.TempDir(), name)
	os.MkdirAll(dir, 0o755)
	control := filepath.Join(dir, "chassis-control")
	os.WriteFile(control, []byte(fmt.Sprintf(ipmiChassis, dir)), 0o755)
	args, err := ipmisim.Prepare(dir, name, "127.0.0.1", port, control)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ipmi_sim", args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return port, dir
}

// Finding 1 of the authority issue again, with IPMI BMCs (ipmi_sim, driven
// through bmclib and ipmitool as the daemon drives real ones): forged
// reports make the rollout controller tell no BMC anything — no PXE once,
// no power action — and n1 stays in sync.
func TestForgedReportsIPMI(t *testing.T) {
	start := time.Now()
	f := newFleet(t)
	os.WriteFile(filepath.Join(f.dir, "rack"), []byte("admin:secret\nallow: 127.0.0.0/8\n"), 0o600)
	dirs := map[string]string{}
	p := f.live.Current()
	for _, n := range p.Sites[0].Nodes {
		port, dir := ipmiSim(t, "bmc-"+n.Name)
		n.BMC = &plan.BMC{Address: "127.0.0.1", Port: port, Protocol: plan.BMCIPMI, Secret: "rack"}
		dirs[n.Name] = dir
	}
	f.live.Swap(p)
	f.pm.Dial, f.pm.Allow, f.pm.Timeout = power.DialBMCLib, mustAllow(t, "127.0.0.0/8"), 20*time.Second
	told := func(node string) string {
		b, _ := os.ReadFile(filepath.Join(dirs[node], "control.log"))
		return string(b)
	}
	// The BMCs answer: every node is on, through IPMI.
	for i := 0; ; i++ {
		f.pm.Round(t.Context())
		ok := true
		for _, n := range []string{"n1", "n2", "n3"} {
			if st, _ := f.pm.Status("lab/" + n); st.Power != power.On {
				ok = false
			}
		}
		if ok {
			break
		}
		if i == 30 {
			for _, n := range []string{"n1", "n2", "n3"} {
				st, _ := f.pm.Status("lab/" + n)
				t.Logf("%s: %+v", n, st)
			}
			t.Fatal("the IPMI BMCs never answered on")
		}
		time.Sleep(time.Second)
	}
	f.restart()
	forgeReports(t, f)
	for _, n := range []string{"n1", "n2"} {
		if s := told(n); s != "" {
			t.Errorf("%s, in sync, was told by its BMC: %q", n, s)
		}
	}
	// And the BMCs do take orders: Git moves n1 to v3, and the rollout
	// sets its next boot to the network and power-cycles it, through
	// IPMI.
	p = f.live.Current()
	n1 := p.Node("lab", "n1")
	n1.Artifacts.Workflow.Actions[0].SHA256 = "v3"
	n1.Install = plan.InstallOf(n1)
	f.live.Swap(p)
	f.round()
	if s := told("n1"); !strings.Contains(s, "boot") || !strings.Contains(s, "power") && !strings.Contains(s, "reset") {
		t.Errorf("n1, out of date for v3, was told %q, want a network boot and a power cycle; status %+v", s, f.r.Status())
	}
	t.Logf("n1 told: %q", told("n1"))
	t.Logf("TestForgedReportsIPMI: %s", time.Since(start).Round(time.Second))
}
