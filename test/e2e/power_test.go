//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/test/ipmisim"
)

// chassisControl is ipmi_sim's chassis_control program for one VM: power
// on starts QEMU (in the lab's namespace, where ipmi_sim runs) booting
// from the device the BMC was told, once, else from its disk only; power
// off stops it; a reset (or a cycle: off, then on) stops and starts it.
// With -no-reboot (%[5]s) a machine whose QEMU exited (its reboot) is
// off; without, it reboots as a machine does. %[6]s is how QEMU boots the
// network once (order=n with -no-reboot; once=n,order=c without). Every
// call is logged.
const chassisControl = `#!/bin/sh
dir=%[1]s
dev=$1; op=$2; shift 2
echo "$(date +%%T) $op $*" >> $dir/control.log
# a QEMU that exited may stay a zombie until init reaps it: not running
running() { [ -f $dir/vm.pid ] && st=$(cut -d' ' -f3 /proc/$(cat $dir/vm.pid)/stat 2>/dev/null) && [ -n "$st" ] && [ "$st" != Z ]; }
start() {
  order="order=c,strict=on"
  if [ "$(cat $dir/boot 2>/dev/null)" = pxe ]; then order="%[6]s"; fi
  rm -f $dir/boot # a boot device is for the next boot only
  n=$(( $(cat $dir/boots 2>/dev/null || echo 0) + 1 )); echo $n > $dir/boots
  echo "$(date +%%T) power on $n: -boot $order" >> $dir/control.log
  setsid qemu-system-x86_64 -accel tcg -m 512 -nographic %[5]s -monitor none \
    -serial file:$dir/console-$n.log -netdev tap,id=n0,ifname=%[2]s,script=no,downscript=no \
    -device virtio-net-pci,netdev=n0,mac=%[3]s -drive file=%[4]s,if=virtio,format=raw \
    -boot $order >>$dir/qemu.log 2>&1 </dev/null &
  echo $! > $dir/vm.pid
}
stop() {
  running && kill "$(cat $dir/vm.pid)"
  for i in 1 2 3 4 5 6 7 8 9 10; do running || break; sleep 0.2; done
  rm -f $dir/vm.pid
}
case $op in
get)
  for p in "$@"; do
    case $p in
    power) if running; then echo power:1; else echo power:0; fi ;;
    boot) echo "boot:$(cat $dir/boot 2>/dev/null || echo default)" ;;
    esac
  done ;;
set)
  while [ $# -ge 2 ]; do
    case $1 in
    power) if [ "$2" = 1 ]; then running || start; else stop; fi ;;
    reset) if [ "$2" = 1 ]; then stop; start; fi ;;
    boot) echo "$2" > $dir/boot ;;
    esac
    shift 2
  done ;;
esac
exit 0
`

// ipmiSim starts OpenIPMI's BMC simulator on 198.18.0.1:port in the lab,
// with user admin/secret; control, when set, is its chassis_control.
func (l *lab) ipmiSim(name string, port int, control string) {
	l.t.Helper()
	args, err := ipmisim.Prepare(filepath.Join(l.dir, name), name, "198.18.0.1", port, control)
	if err != nil {
		l.t.Fatal(err)
	}
	l.start(name, append([]string{"ip", "netns", "exec", l.lan, "ipmi_sim"}, args...)...)
}

// The IPMI loop: bootops, through bmclib and ipmitool, drives a VM's BMC
// (ipmi_sim). The site says power: auto, so the new node is set to PXE
// once and powered on, and installs with no one touching it; an operator
// powers it on (it boots its disk: nothing happens) and off; a commit
// raising reprovision has the daemon set PXE once and power it on again,
// and it reinstalls, cycled once for that generation. Beside it, four
// nodes whose BMCs cannot be used (a wrong password, nothing listening,
// a BMC that never answers, a secret file others may read) are each
// unreachable with why, and hold nothing up.
func TestPowerIPMI(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing (Debian packages openipmi, ipmitool; make test installs them)", bin)
		}
	}
	l := newLab(t, true)
	l.vms(1)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")

	// The VM's BMC: its disk and tap made now, QEMU started by the BMC.
	mac := "52:54:00:e2:50:01"
	vmDisk := disk(t, l, "vm-ipmi")
	run(t, "ip", "-n", l.lan, "tuntap", "add", "dev", "tap-ipmi", "mode", "tap")
	run(t, "ip", "-n", l.lan, "link", "set", "tap-ipmi", "master", "br0", "up")
	bmcDir := filepath.Join(l.dir, "bmc-vm")
	os.MkdirAll(bmcDir, 0o755)
	control := filepath.Join(bmcDir, "chassis-control")
	os.WriteFile(control, []byte(fmt.Sprintf(chassisControl, bmcDir, "tap-ipmi", mac, vmDisk, "-no-reboot", "order=n")), 0o755)
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(bmcDir, "vm.pid")); err == nil {
			exec.Command("kill", "-9", strings.TrimSpace(string(b))).Run()
		}
	})
	l.ipmiSim("bmc-vm", 9623, control)
	l.ipmiSim("bmc-other", 9624, "")
	// A BMC that takes packets and never answers.
	l.start("bmc-hang", "ip", "netns", "exec", l.lan, "python3", "-c",
		"import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('198.18.0.1',9625))\nend=time.time()+900\nwhile time.time()<end:\n  s.settimeout(5)\n  try: s.recv(512)\n  except Exception: pass\n")

	secrets := filepath.Join(l.dir, "secrets")
	os.MkdirAll(secrets, 0o700)
	// Where each may be sent is the daemon's to say: the lab's BMCs only.
	os.WriteFile(filepath.Join(secrets, "lab-bmc"), []byte("admin:secret\nallow: 198.18.0.1\n"), 0o600)
	os.WriteFile(filepath.Join(secrets, "wrong-pw"), []byte("admin:not-the-password\nallow: 198.18.0.0/24\n"), 0o600)
	os.WriteFile(filepath.Join(secrets, "open"), []byte("admin:secret\n"), 0o644)
	token := filepath.Join(l.dir, "ui-token")
	os.WriteFile(token, []byte("operator-token\n"), 0o600)

	repo := provisionRepo(t, images4, gzSHA, "power-ipmi", nil)
	start := time.Now()
	l.serve(repo, "--secrets-dir", secrets, "--power-interval", "3s", "--bmc-timeout", "8s", "--ui-token-file", token)
	cli := func(args ...string) (string, error) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", l.lan, bootops}, append(args, "--server", "http://198.18.0.1:8080")...)...).CombinedOutput()
		return string(out), err
	}

	// Nobody powers the VM on: the daemon does, and it installs.
	waitState(t, l, "lab/vm-ipmi", "provisioned", 6*time.Minute)
	t.Logf("timing: power: auto, daemon start → provisioned through IPMI: %s", time.Since(start).Round(time.Second))
	logs, _ := cli("logs", "lab/vm-ipmi")
	for _, want := range []string{"power: set next boot pxe (once)", "power: powered on (it was off) for generation 0 (a new node)", "[provisioned] provisioned (generation 0)"} {
		if !strings.Contains(logs, want) {
			t.Errorf("vm-ipmi's timeline lacks %q:\n%s", want, logs)
		}
	}
	checkDisk(t, vmDisk, rawSHA)
	controlLog := func() string { b, _ := os.ReadFile(filepath.Join(bmcDir, "control.log")); return string(b) }
	if c := controlLog(); !strings.Contains(c, "set boot pxe") || !strings.Contains(c, "power on 1: -boot order=n") {
		t.Errorf("the BMC was not told PXE, then power on:\n%s", c)
	}

	// The BMCs that cannot be used: each unreachable, with why.
	for key, want := range map[string]string{
		"lab/bad-password": "RMCP+ session",
		"lab/bmc-down":     "BMC 198.18.0.1:9700",
		"lab/bmc-hangs":    "did not answer within 8s",
		"lab/open-secret":  "has mode 0644: others may read it",
	} {
		m, _ := l.machine(key)
		if m.Power != "unreachable" || !strings.Contains(m.PowerError, want) {
			t.Errorf("%s: power %q (%q), want unreachable with %q", key, m.Power, m.PowerError, want)
		}
		if log, _ := cli("logs", key); !strings.Contains(log, "power: failed (attempt 1 of 6)") {
			t.Errorf("%s: no failed attempt on its timeline:\n%s", key, log)
		}
	}

	// The agent's reboot ended QEMU: off. An operator powers it on; the BMC
	// has no boot device set, so it boots its disk (nothing to boot there:
	// the test image is not bootable) and nothing is reinstalled; then off.
	waitFor(t, "vm-ipmi off after its reboot", time.Minute, func() bool {
		out, _ := cli("power", "vm-ipmi", "status")
		return strings.Contains(out, "lab/vm-ipmi: off")
	})
	if out, err := cli("power", "vm-ipmi", "on"); err == nil || !strings.Contains(out, "operator token") {
		t.Errorf("power on without the token: %v\n%s", err, out)
	}
	// "on" when the BMC showed it within the read-back (5 s); on a loaded
	// machine ipmi_sim's chassis control may take longer to start QEMU,
	// and the answer is "requested on" (docs/power.md): then the polls
	// show it on.
	if out, err := cli("power", "vm-ipmi", "on", "--token-file", token); err != nil || !strings.Contains(out, "lab/vm-ipmi: on") && !strings.Contains(out, "lab/vm-ipmi: requested on") {
		t.Fatalf("power on: %v\n%s", err, out)
	}
	waitFor(t, "vm-ipmi on", time.Minute, func() bool {
		out, _ := cli("power", "vm-ipmi", "status")
		return strings.Contains(out, "lab/vm-ipmi: on")
	})
	waitFor(t, "the VM booting its disk", time.Minute, func() bool {
		b, _ := os.ReadFile(filepath.Join(bmcDir, "console-2.log"))
		return strings.Contains(string(b), "Booting from Hard Disk")
	})
	if out, err := cli("power", "lab/vm-ipmi", "off", "--token-file", token); err != nil || !strings.Contains(out, "lab/vm-ipmi: off") {
		t.Fatalf("power off: %v\n%s", err, out)
	}
	if out, err := cli("boot-device", "vm-ipmi", "disk", "--once", "--token-file", token); err != nil || !strings.Contains(out, "boots from disk for the next boot") {
		t.Errorf("boot-device: %v\n%s", err, out)
	}
	if c := controlLog(); !strings.Contains(c, "set boot default") && !strings.Contains(c, "set boot none") && !strings.Contains(c, "set boot disk") {
		t.Logf("the disk boot device reached the BMC as:\n%s", testutil.Tail(c, 5))
	}
	if s, _ := nodeState(l, "lab/vm-ipmi"); s != "provisioned" {
		t.Errorf("vm-ipmi after an operator's power on and off: %s", s)
	}

	// Git raises reprovision: the daemon sets PXE once and powers it on,
	// and it reinstalls, with no one touching it.
	n := filepath.Join(repo, "sites/lab/nodes/n0.yaml") // vm-ipmi, in power-ipmi.txtar
	b, _ := os.ReadFile(n)
	os.WriteFile(n, append(b, "reprovision: 1\n"...), 0o644)
	raised := time.Now()
	waitFor(t, "vm-ipmi reinstalled at generation 1", 6*time.Minute, func() bool {
		log, _ := cli("logs", "lab/vm-ipmi")
		return strings.Contains(log, "provisioned (generation 1)")
	})
	t.Logf("timing: commit raising reprovision → provisioned through IPMI: %s", time.Since(raised).Round(time.Second))
	time.Sleep(7 * time.Second) // two more polls: nothing more happens
	logs, _ = cli("logs", "lab/vm-ipmi")
	if got := strings.Count(logs, "for generation 1 (reprovision raised to 1)"); got != 1 {
		t.Errorf("cycled %d times for generation 1:\n%s", got, logs)
	}
	if c := controlLog(); !strings.Contains(c, "power on 3: -boot order=n") {
		t.Errorf("the reinstall was not a PXE boot set through the BMC:\n%s", c)
	}
	checkDisk(t, vmDisk, rawSHA)
	if out, _ := cli("status"); !strings.Contains(out, "POWER") || !strings.Contains(out, "unreachable") {
		t.Errorf("bootops status shows no power:\n%s", out)
	}
	metrics := run(t, "ip", "netns", "exec", l.lan, "curl", "-s", "http://198.18.0.1:8080/metrics")
	if !strings.Contains(metrics, `bootops_power_nodes{state="unreachable"} 4`) {
		t.Errorf("metrics:\n%s", grepLines(metrics, "bootops_power"))
	}
}
