//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// Commissioning on two VMs shaped alike (1 GiB, two NICs, two disks): one
// is held by Git (install: hold) with its inventory, held again after a
// reboot, released by a commit, then meets its node's expectations, runs
// the four QA actions and is installed; the other's node expects 2 GiB
// and it is held before any write, its disks untouched, the reason in
// `bootops status`. The inventory is what QEMU was told; `bootops report`
// has both rows.
func TestCommissioning(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	l.vms(2)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")
	repo := provisionRepo(t, images4, gzSHA, "commissioning", vars{"Install": "install: hold"})
	l.serve(repo)
	// Each node's two NICs; the first is the MAC commissioning.txtar
	// registers.
	macs := map[string][2]string{"c-good": {"52:54:00:e2:70:01", "52:54:00:e2:70:11"}, "c-small": {"52:54:00:e2:70:02", "52:54:00:e2:70:12"}}

	// Two disks each, the second smaller; the held machine's carry a
	// marker that must survive.
	marker := []byte("bootops e2e: this disk must not be touched\n")
	disks := map[string][2]string{}
	for name := range macs {
		var d [2]string
		for i, size := range []int64{256 << 20, 128 << 20} {
			d[i] = filepath.Join(l.dir, fmt.Sprintf("%s-%d.disk", name, i))
			f, _ := os.Create(d[i])
			f.Truncate(size)
			if name == "c-small" {
				f.WriteAt(marker, 0)
				f.WriteAt(marker, 1<<20)
			}
			f.Close()
		}
		disks[name] = d
	}
	vms := map[string]*vm{}
	boot := func(name, vmName string) {
		m := macs[name]
		// The second NIC on a hub of its own: a NIC with nothing behind it.
		vms[name] = l.vm(vmName, m[0], "-m", "1024", "-netdev", "hubport,id=n1,hubid=1", "-device", "virtio-net-pci,netdev=n1,mac="+m[1],
			"-drive", "file="+disks[name][0]+",if=virtio,format=raw", "-drive", "file="+disks[name][1]+",if=virtio,format=raw")
	}
	for name := range macs {
		boot(name, name)
	}

	// c-good: held by Git, its inventory on the status; held again after
	// a reboot; the commit that releases it starts its install.
	// Held, it runs the QA that writes no disk (qa-memory, qa-cpu,
	// qa-network; qa-disk writes) once, then waits.
	const heldWhy = "install: hold (sites/lab/nodes/c-good.yaml:6): it waits until a commit says install: auto"
	holds := func() int { return strings.Count(l.logs("lab/c-good"), "held until Git releases it") }
	waitFor(t, "c-good held by Git after its QA", 6*time.Minute, func() bool {
		m, _ := l.machine("lab/c-good")
		return m.State == "held" && m.Commissioned != ""
	})
	if m, _ := l.machine("lab/c-good"); m.Held != heldWhy || m.Inventory == nil {
		t.Errorf("c-good held by Git: held %q, inventory %v", m.Held, m.Inventory != nil)
	}
	commissioning := l.logs("lab/c-good")
	for _, want := range []string{"its profile's 3 QA actions first (qa-memory, qa-cpu, qa-network)", "qa-memory: ", "qa-cpu: ", "qa-network: ",
		"commissioned: every QA action passed"} {
		if !strings.Contains(commissioning, want) {
			t.Errorf("c-good's timeline while held lacks %q:\n%s", want, testutil.Tail(commissioning, 20))
		}
	}
	if strings.Contains(commissioning, "qa-disk") || strings.Contains(commissioning, "wipe-disk") {
		t.Errorf("c-good ran more than its QA while held:\n%s", testutil.Tail(commissioning, 20))
	}
	vms["c-good"].cmd.Process.Kill()
	waitVMs(time.Minute, vms["c-good"])
	before := holds()
	boot("c-good", "c-good-again")
	waitFor(t, "c-good held again after a reboot", 6*time.Minute, func() bool { return holds() > before })
	if out := run(t, "ip", "netns", "exec", l.lan, bootops, "status", "--server", "http://198.18.0.1:8080"); !strings.Contains(out, heldWhy) {
		t.Errorf("bootops status does not say why c-good is held:\n%s", out)
	}
	if strings.Contains(l.logs("lab/c-good"), "started 1/8") {
		t.Fatalf("c-good started its workflow while held:\n%s", l.logs("lab/c-good"))
	}
	released := time.Now()
	writeRepo(t, repo, vars{"Images": images4, "ImageSHA": gzSHA, "Install": "install: auto"}, "base-provision", "commissioning")
	waitFor(t, "c-good's install started", 2*time.Minute, func() bool { return strings.Contains(l.logs("lab/c-good"), "started 1/8 qa-memory") })
	t.Logf("timing: the commit that releases c-good → its install started: %s (it asks every 5 s; the daemon compiles the commit)", time.Since(released).Round(time.Second))
	if !strings.Contains(l.logs("lab/c-good"), "released by Git (it was held)") {
		t.Errorf("c-good's timeline does not say Git released it:\n%s", l.logs("lab/c-good"))
	}
	waitState(t, l, "lab/c-good", "provisioned", 8*time.Minute)
	t.Logf("timing: released → expectations met, four QA actions, installed: %s", time.Since(released).Round(time.Second))
	checkDisk(t, disks["c-good"][0], rawSHA)
	good := l.logs("lab/c-good")
	for _, a := range []string{"qa-memory", "qa-cpu", "qa-network", "qa-disk"} {
		if !strings.Contains(good, "[provisioning] done") || !strings.Contains(good, a+": ") {
			t.Errorf("c-good's timeline has no result of %s:\n%s", a, testutil.Tail(good, 40))
		}
	}
	for _, line := range strings.Split(good, "\n") {
		if strings.Contains(line, ": qa-") {
			t.Logf("%s", strings.TrimSpace(line))
		}
	}
	// What each QA action took on this VM: from its start to its end on
	// the timeline.
	began := map[string]time.Time{}
	for _, e := range timeline(t, l, "lab/c-good") {
		f := strings.Fields(e.Message)
		if len(f) == 3 && strings.HasPrefix(f[2], "qa-") {
			switch f[0] {
			case "started":
				began[f[2]] = e.Time
			case "done":
				t.Logf("timing: %s took %s on this VM", f[2], e.Time.Sub(began[f[2]]).Round(10*time.Millisecond))
			}
		}
	}

	// The held one: its reason in the status, its disks as they were.
	waitFor(t, "c-small held", 6*time.Minute, func() bool { s, _ := nodeState(l, "lab/c-small"); return s == "held" })
	time.Sleep(5 * time.Second) // had it been handed a workflow, it would be writing now
	out := run(t, "ip", "netns", "exec", l.lan, bootops, "status", "--server", "http://198.18.0.1:8080")
	if !strings.Contains(out, "held before any disk is touched: memory: expected >=2Gi, found") {
		t.Errorf("bootops status does not say why c-small is held:\n%s", out)
	}
	vms["c-small"].cmd.Process.Kill()
	waitVMs(time.Minute, vms["c-small"])
	for _, d := range disks["c-small"] {
		b, _ := os.ReadFile(d)
		if !bytes.HasPrefix(b, marker) || !bytes.HasPrefix(b[1<<20:], marker) || bytes.Count(b, []byte{0}) != len(b)-2*len(marker) {
			t.Errorf("%s was written to while its machine was held", d)
		}
	}

	// The inventory is what QEMU was told.
	var inv map[string]plan.Inventory // what the status API has, by machine key
	if err := json.Unmarshal([]byte(run(t, "ip", "netns", "exec", l.lan, bootops, "inventory", "-o", "json", "--server", "http://198.18.0.1:8080")), &inv); err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	json.Unmarshal([]byte(run(t, "ip", "netns", "exec", l.lan, bootops, "inventory", "lab/c-good", "-o", "json", "--server", "http://198.18.0.1:8080")), &raw)
	var compact bytes.Buffer
	json.Compact(&compact, raw["lab/c-good"])
	t.Logf("size: c-good's inventory is %d bytes of JSON", compact.Len())
	for name, m := range macs {
		in := inv["lab/"+name]
		var sizes, found []string
		for _, d := range in.Disks {
			sizes = append(sizes, fmt.Sprintf("%s=%d", d.Name, d.Size))
		}
		for _, n := range in.NICs {
			found = append(found, n.MAC)
		}
		if in.CPU.Threads != 1 || in.Memory.Total < 800<<20 || in.Memory.Total > 1<<30 ||
			strings.Join(sizes, " ") != "vda=268435456 vdb=134217728" || strings.Join(found, " ") != m[0]+" "+m[1] {
			t.Errorf("%s's inventory: threads %d, memory %d, disks %v, NICs %v", name, in.CPU.Threads, in.Memory.Total, sizes, found)
		}
	}

	// The delivery record: both rows, with their values.
	var recs []bhttp.DeliveryRecord // GET /api/v1/report?site=lab
	if err := json.Unmarshal([]byte(run(t, "ip", "netns", "exec", l.lan, bootops, "report", "--site", "lab", "-o", "json", "--server", "http://198.18.0.1:8080")), &recs); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Node != "c-good" || recs[1].Node != "c-small" {
		t.Fatalf("report rows: %+v", recs)
	}
	g, s := recs[0], recs[1]
	if g.Expectations != "met" || g.State != "provisioned" || g.Image != gzSHA || len(g.Install) != 64 || g.Provisioned.IsZero() || len(g.QA) != 4 {
		t.Errorf("c-good's row: %+v", g)
	}
	for _, q := range g.QA {
		if !q.Pass || !strings.HasSuffix(q.Result, ": pass") {
			t.Errorf("c-good's %s: %+v", q.Action, q)
		}
	}
	if !strings.HasPrefix(s.Expectations, "not met: memory: expected >=2Gi, found ") || s.State != "held" || s.Install != "" || len(s.QA) != 0 {
		t.Errorf("c-small's row: %+v", s)
	}
	csv := run(t, "ip", "netns", "exec", l.lan, bootops, "report", "--site", "lab", "--server", "http://198.18.0.1:8080")
	if lines := strings.Split(strings.TrimSpace(csv), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "site,node,serial,macs,hardware,expectations,qa,") {
		t.Errorf("report as CSV:\n%s", csv)
	}
}
