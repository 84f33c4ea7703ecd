//go:build e2e

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// A site of three daemons, each in a namespace of its own on the lab's
// bridge (198.18.0.11-13), the site's address 198.18.0.1 held by the one
// answering its DHCP. 200 PXE DISCOVERs get one answer each; 20 simulated
// machines (the agent's code) start installing; the holder's server dies
// (kill -9, its link down) while they write their images and DISCOVERs
// keep coming: another member holds the address and answers within
// seconds (printed), no DISCOVER is ever answered twice; every machine
// finishes, each image written once, each node told to install once (on
// the site's timeline, which every member has); a boot token the dead
// member minted checks in at the new holder, the node's install is
// recorded, and its next script sends it to its disk.
func TestSiteCluster(t *testing.T) {
	t.Parallel()
	began := time.Now()
	l := newLabNS(t, true) // the site's own DHCP server (addresses) starts for the VM
	// The bridge's side is the machines': its own address, not the site's.
	run(t, "ip", "-n", l.lan, "addr", "del", "198.18.0.1/24", "dev", "br0")
	run(t, "ip", "-n", l.lan, "addr", "add", "198.18.0.254/24", "dev", "br0")
	// The simulated machines' image: 8 MiB, served at 400 kB/s each (20 s).
	images := filepath.Join(l.dir, "images")
	os.MkdirAll(images, 0o755)
	img := make([]byte, 8<<20)
	rand.NewChaCha8([32]byte{42}).Read(img)
	sum := sha256.Sum256(img)
	os.WriteFile(filepath.Join(images, "sim.raw"), img, 0o644)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", images, "-addr", "198.18.0.254:8081", "-rate", "400000")
	// The VM's image, the test image, slowly (1 kB/s, about 40 s: its
	// download spans the kill, with a loaded machine's margin), from a
	// second image server; the real Micro-OS.
	vmImages := filepath.Join(l.dir, "vm-images")
	os.MkdirAll(vmImages, 0o755)
	gzSHA, rawSHA := osImage(t, vmImages)
	l.start("vm-images", "ip", "netns", "exec", l.lan, imageServer, "-dir", vmImages, "-addr", "198.18.0.254:8082", "-rate", "1000")
	repo := filepath.Join(l.dir, "repo")
	run(t, bootops, "microos", "build", "--kernel", kernel(t), "--agent", agentBin, "-o", filepath.Join(repo, "microos"))
	writeRepo(t, repo, vars{"SimSHA": hex.EncodeToString(sum[:]), "Images": "http://198.18.0.254:8082", "ImageSHA": gzSHA}, "base-provision", "cluster")
	const sims = 20
	for i := 1; i <= sims; i++ {
		testutil.WriteFile(t, repo, fmt.Sprintf("sites/lab/nodes/sim-%02d.yaml", i),
			fmt.Sprintf("apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: sim-%02d\nidentity: {serial: SIM-%02d}\nprofile: sim\n", i, i))
	}
	ca := filepath.Join(l.dir, "ca")
	run(t, bootops, "ca", "init", "--host", "198.18.0.1", "--state-dir", ca)
	names := []string{"m1", "m2", "m3"}
	addr := func(i int) string { return fmt.Sprintf("198.18.0.%d", 11+i) }
	nss := make([]string, 3)
	procs := make([]*exec.Cmd, 3)
	for i, name := range names {
		nss[i] = "bo-" + name + "-" + labID()
		ns := nss[i]
		t.Cleanup(func() { killNetns(ns); exec.Command("ip", "netns", "del", ns).Run() })
		run(t, "ip", "netns", "add", ns)
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", l.lan, "link", "add", "v"+name, "type", "veth", "peer", "name", "eth0", "netns", ns)
		run(t, "ip", "-n", l.lan, "link", "set", "v"+name, "master", "br0", "up")
		run(t, "ip", "-n", ns, "addr", "add", addr(i)+"/24", "dev", "eth0")
		run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
		state := filepath.Join(l.dir, "state-"+name)
		tls := filepath.Join(state, "tls")
		os.MkdirAll(tls, 0o700)
		run(t, bootops, "ca", "peer", name, "--host", addr(i), "--state-dir", ca, "--out", tls)
		os.Rename(filepath.Join(tls, name+".pem"), filepath.Join(tls, "peer.pem"))
		os.Rename(filepath.Join(tls, name+"-key.pem"), filepath.Join(tls, "peer-key.pem"))
		b, _ := os.ReadFile(filepath.Join(ca, "tls", "ca.pem"))
		os.WriteFile(filepath.Join(tls, "ca.pem"), b, 0o644)
	}
	// serve starts member i's daemon, its log in dir/<log>.log.
	serve := func(i int, log string) {
		var peers []string
		for j := range names {
			if j != i {
				peers = append(peers, addr(j)+":7422")
			}
		}
		procs[i] = l.start(log, "ip", "netns", "exec", nss[i], bootops, "serve", "--open-reads", "--source", repo, "--state-dir", filepath.Join(l.dir, "state-"+names[i]),
			"--http-addr", ":8080", "--tftp-addr", ":69", "--dhcp", "proxy", "--interface", "eth0", "--ipxe-dir", "/usr/lib/ipxe", "--log-format", "text",
			"--peer-listen", addr(i)+":7422", "--peers", strings.Join(peers, ","), "--peer-name", names[i])
	}
	for i, name := range names {
		serve(i, name)
	}
	get := func(path string) (int, string) { return getAt(t, l, "http://198.18.0.1:8080"+path) }
	holder := func() string {
		code, body := get("/api/v1/status")
		var doc bhttp.StatusDoc
		if code != 200 || json.Unmarshal([]byte(body), &doc) != nil || doc.Cluster == nil || !doc.Cluster.Quorum {
			return ""
		}
		return doc.Cluster.Roles["dhcp.lab"]
	}
	var first string
	if !testutil.Poll(3*time.Minute, 500*time.Millisecond, func() bool { first = holder(); return first != "" }) {
		t.Fatalf("no member holds the site's address and DHCP in 3 min:\n%s", l.log("m1"))
	}
	t.Logf("timing: three daemons started → %s answers at 198.18.0.1: %s", first, time.Since(began).Round(time.Second))
	flood := filepath.Join(l.dir, "dhcpflood")
	if out, err := exec.Command("go", "build", "-o", flood, "./dhcpflood").CombinedOutput(); err != nil {
		t.Fatalf("build dhcpflood: %v\n%s", err, out)
	}
	// The bridge's DHCP replies, all through the test: a transaction
	// answered by two members would show as two senders of one xid.
	pcap := filepath.Join(l.dir, "dhcp.pcap")
	l.start("tcpdump", "ip", "netns", "exec", l.lan, "tcpdump", "-U", "-i", "br0", "-n", "-w", pcap, "udp and (src port 67 or src port 4011)")
	// Built now: nothing slow between the VM's image starting and the kill.
	sim := filepath.Join(l.dir, "simfleet")
	if out, err := exec.Command("go", "build", "-o", sim, "./simfleet").CombinedOutput(); err != nil {
		t.Fatalf("build simfleet: %v\n%s", err, out)
	}
	discover := func(n int) (replies, multi int) {
		out := run(t, "ip", "netns", "exec", l.lan, flood, "-i", "br0", "-pxe", "-server", "198.18.0.1", "-n", fmt.Sprint(n), "-wait", "3s")
		var sent int
		if _, err := fmt.Sscanf(strings.TrimSpace(out), "sent %d replies %d multi %d", &sent, &replies, &multi); err != nil {
			t.Fatalf("dhcpflood: %q", out)
		}
		return replies, multi
	}
	if replies, multi := discover(200); replies != 200 || multi != 0 {
		t.Errorf("200 PXE DISCOVERs to three daemons: %d replies, %d answered more than once", replies, multi)
	}

	// A UEFI VM PXE-boots through the holder (the site's own DHCP server,
	// dnsmasq, gives it an address; the holder's proxy answer sends OVMF to
	// 198.18.0.1 for ipxe.efi over TFTP, then iPXE for the script, kernel
	// and initrd over HTTP), checks in and starts writing its image.
	l.start("dnsmasq", "ip", "netns", "exec", l.dhc, "dnsmasq", "--keep-in-foreground", "--no-daemon", "--port=0",
		"--interface=eth0", "--bind-interfaces", "--dhcp-range=198.18.0.100,198.18.0.199,255.255.255.0,10m",
		"--dhcp-leasefile="+filepath.Join(l.dir, "leases"), "--log-dhcp", "--pid-file="+filepath.Join(l.dir, "dnsmasq.pid"))
	l.vms(2)
	// The wait for VM slots can be long (50 min in a loaded run): the
	// address may have moved meanwhile (a member that missed renewing its
	// role under load hands it on, as it should). The holder is the one
	// now.
	var now string
	if !testutil.Poll(time.Minute, 500*time.Millisecond, func() bool { now = holder(); return now != "" }) {
		t.Fatalf("no member holds the site's address after the wait for VM slots:\n%s", l.log(first))
	}
	if now != first {
		t.Logf("while the test waited for VM slots the site's address moved from %s to %s", first, now)
		first = now
	}
	vmStart := time.Now()
	vmDisk := disk(t, l, "c-vm")
	v := l.uefiVM("c-vm", "52:54:00:e2:73:09", withDisk(vmDisk)...)
	if !testutil.Poll(8*time.Minute, time.Second, func() bool { return strings.Contains(l.logs("lab/c-vm"), "started 2/4 image-to-disk") }) {
		t.Fatalf("c-vm never started its image:\n%s\n%s", l.logs("lab/c-vm"), testutil.Tail(mustRead(v.console), 20))
	}
	t.Logf("timing: a UEFI VM through %s (proxy DHCP, TFTP, HTTP, the agent) → writing its image: %s", first, time.Since(vmStart).Round(time.Second))
	if log := l.log(first); !strings.Contains(log, "file=ipxe.efi") {
		t.Errorf("ipxe.efi was not fetched over TFTP from %s, the holder:\n%s", first, testutil.Tail(log, 30))
	}

	// The simulated machines start; once all are writing their images
	// (provisioning, on the site's status), the holder dies.
	simArgs := []string{"netns", "exec", l.lan, sim, "-server", "http://198.18.0.1:8080", "-site", "lab", "-dir", filepath.Join(l.dir, "sim"),
		"-image-bytes", fmt.Sprint(len(img)), "-disk-bytes", fmt.Sprint(2 * len(img))}
	for i := 1; i <= sims; i++ {
		simArgs = append(simArgs, "-node", fmt.Sprintf("sim-%02d:SIM-%02d", i, i))
	}
	simCmd := exec.Command("ip", simArgs...)
	var simOut strings.Builder
	simLog, _ := os.Create(filepath.Join(l.dir, "simfleet.log"))
	simCmd.Stdout, simCmd.Stderr = &simOut, simLog
	simStarted := time.Now()
	if err := simCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { simCmd.Process.Kill(); simCmd.Wait() })
	installing := func() int {
		_, body := get("/api/v1/status")
		var doc struct {
			Nodes []struct{ Node, State string }
		}
		json.Unmarshal([]byte(body), &doc)
		n := 0
		for _, m := range doc.Nodes {
			if strings.HasPrefix(m.Node, "sim-") && m.State == "provisioning" {
				n++
			}
		}
		return n
	}
	if !testutil.Poll(3*time.Minute, 500*time.Millisecond, func() bool { return installing() == sims }) {
		t.Fatalf("the %d simulated machines are not all installing after 3 min (%d are):\n%s", sims, installing(), testutil.Tail(l.log(first), 30))
	}
	t.Logf("timing: %d simulated machines started → all installing: %s", sims, time.Since(simStarted).Round(100*time.Millisecond))
	// DISCOVERs all through the takeover, one every 50 ms for 15 s.
	storm := exec.Command("ip", "netns", "exec", l.lan, flood, "-i", "br0", "-pxe", "-server", "198.18.0.1", "-n", "300", "-every", "50ms", "-wait", "3s")
	var floodOut strings.Builder
	storm.Stdout, storm.Stderr = &floodOut, &floodOut
	if err := storm.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // some answered before the kill

	// A boot token the holder mints, then the holder's server dies.
	code, script := get("/ipxe?mac=52:54:00:e2:73:01")
	m := regexp.MustCompile(`bootops\.token=([A-Za-z0-9.]+)`).FindStringSubmatch(script)
	if code != 200 || m == nil {
		t.Fatalf("c-1's script from %s: %d\n%s", first, code, script)
	}
	// install is a machine's check-in with its boot token and the events of
	// its whole workflow, at the site's address, as its agent sends them.
	install := func(token, node, mac string) error {
		ci, _ := json.Marshal(plan.CheckIn{Site: "lab", Node: node, Identity: plan.Identity{MACs: []string{mac}}})
		out, _ := exec.Command("ip", "netns", "exec", l.lan, "curl", "-s", "-m", "10", "-H", "Authorization: Bearer "+token, "-H", "Content-Type: application/json",
			"--data-binary", string(ci), "http://198.18.0.1:8080"+plan.AgentCheckInPath).Output()
		var r plan.CheckInReply
		if json.Unmarshal(out, &r) != nil || r.Workflow == nil || r.Session == "" {
			return fmt.Errorf("check-in: %s", out)
		}
		var evs []plan.AgentEvent
		for i, a := range r.Workflow.Actions {
			if plan.IsPowerAction(a.Action) {
				break
			}
			evs = append(evs, plan.AgentEvent{Seq: uint64(i + 1), Time: time.Now(), Type: plan.AgentActionDone, Step: i + 1, Steps: len(r.Workflow.Actions), Action: a.Action})
		}
		evs = append(evs, plan.AgentEvent{Seq: uint64(len(evs) + 1), Time: time.Now(), Type: plan.AgentProvisioned, Generation: r.Generation})
		batch, _ := json.Marshal(plan.EventBatch{Site: "lab", Node: node, Events: evs})
		out, _ = exec.Command("ip", "netns", "exec", l.lan, "curl", "-s", "-m", "10", "-w", "\n%{http_code}", "-H", "Authorization: Bearer "+r.Session, "-H", "Content-Type: application/json",
			"--data-binary", string(batch), "http://198.18.0.1:8080"+plan.AgentEventsPath).Output()
		if !strings.HasSuffix(strings.TrimSpace(string(out)), "200") {
			return fmt.Errorf("install events: %s", out)
		}
		return nil
	}
	// c-3 installed through the holder: the VM that boots as its server
	// dies.
	_, script3 := get("/ipxe?mac=52:54:00:e2:73:03")
	m3 := regexp.MustCompile(`bootops\.token=([A-Za-z0-9.]+)`).FindStringSubmatch(script3)
	if m3 == nil {
		t.Fatalf("c-3's script from %s:\n%s", first, script3)
	}
	if err := install(m3[1], "c-3", "52:54:00:e2:73:03"); err != nil {
		t.Fatalf("c-3 at %s: %v", first, err)
	}
	dead := -1
	for i, name := range names {
		if name == first {
			dead = i
		}
	}
	// The VM is still writing its image as its server dies.
	if tl := l.logs("lab/c-vm"); strings.Contains(tl, "done 2/4 image-to-disk") {
		t.Errorf("c-vm wrote its image before the kill: no install across the takeover:\n%s", tl)
	}
	killed := time.Now()
	syscall.Kill(-procs[dead].Process.Pid, syscall.SIGKILL)
	run(t, "ip", "-n", nss[dead], "link", "set", "eth0", "down") // the server is gone, its address with it
	// c-3, installed, powers on as the server dies: its firmware's DHCP
	// and iPXE's script reach whoever holds the site's address.
	c3 := l.vm("c-3", "52:54:00:e2:73:03")
	// Which member holds the address, from its namespace, and HTTP there.
	var next string
	if !testutil.Poll(60*time.Second, 100*time.Millisecond, func() bool {
		for i, name := range names {
			if i != dead && strings.Contains(run(t, "ip", "-n", nss[i], "-4", "addr", "show", "dev", "eth0"), "198.18.0.1/32") {
				next = name
			}
		}
		if next == "" {
			return false // no HTTP asked of an address no one holds: each try would wait out ARP
		}
		code, _ := getAt(t, l, "http://198.18.0.1:8080/readyz")
		return code == 200
	}) {
		t.Fatalf("no other member answers at 198.18.0.1 within 60 s of %s's death", first)
	}
	t.Logf("timing: %s killed → %s holds 198.18.0.1 and answers HTTP there: %s", first, next, time.Since(killed).Round(100*time.Millisecond))
	c3.wait(t, "booting from its disk", 5*time.Minute)
	t.Logf("timing: c-3 powered on as %s died → sent to its disk by %s: %s", first, next, time.Since(killed).Round(time.Second))
	if !strings.Contains(l.log(next), "node=c-3") {
		t.Errorf("c-3's script was not served by %s, the new holder:\n%s", next, testutil.Tail(l.log(next), 20))
	}
	c3.cmd.Process.Kill()
	if !testutil.Poll(60*time.Second, 200*time.Millisecond, func() bool { return holder() == next }) {
		t.Fatalf("the status at 198.18.0.1 does not say %s answers the site's DHCP", next)
	}
	storm.Wait()
	var sent, replies, multi int
	if _, err := fmt.Sscanf(strings.TrimSpace(floodOut.String()), "sent %d replies %d multi %d", &sent, &replies, &multi); err != nil || multi != 0 || replies == 0 {
		t.Errorf("300 PXE DISCOVERs through the takeover: %q (want none answered twice)", floodOut.String())
	}
	t.Logf("through the takeover: %d PXE DISCOVERs, %d answered, %d more than once", sent, replies, multi)
	if replies, multi := discover(100); replies != 100 || multi != 0 {
		t.Errorf("100 PXE DISCOVERs after the takeover: %d replies, %d answered more than once", replies, multi)
	}

	// Every simulated machine finishes: its image written once, whole, its
	// reboot done; the site's timeline (any member's) tells each node to
	// install once, and has it provisioned.
	done := make(chan error, 1)
	go func() { done <- simCmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("simfleet: %v\n%s", err, l.log("simfleet"))
		}
	case <-time.After(10 * time.Minute):
		t.Fatalf("the simulated machines did not finish within 10 min of their start:\n%s", l.log("simfleet"))
	}
	t.Logf("timing: %d simulated machines started → all finished, across the takeover: %s", sims, time.Since(simStarted).Round(100*time.Millisecond))
	finished := 0
	for _, line := range strings.Split(strings.TrimSpace(simOut.String()), "\n") {
		var r struct {
			Node         string
			ImageStarts  int    `json:"image_starts"`
			ImageRetries int    `json:"image_retries"`
			DiskSHA256   string `json:"disk_sha256"`
			Rebooted     bool
			Err          string
		}
		if json.Unmarshal([]byte(line), &r) != nil {
			t.Errorf("simfleet: %q", line)
			continue
		}
		if r.Err != "" || !r.Rebooted || r.ImageStarts != 1 || r.ImageRetries != 0 || r.DiskSHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: %+v (want its image written once, whole, and its reboot)", r.Node, r)
			continue
		}
		finished++
	}
	if finished != sims {
		t.Errorf("%d of %d simulated machines finished as they should", finished, sims)
	}
	toldToInstall := func(base, node string) (told int, provisioned bool) {
		_, body := getAt(t, l, base+"/api/v1/events?site=lab&node="+node)
		var tl []status.Event
		json.Unmarshal([]byte(body), &tl)
		for _, e := range tl {
			if e.Installing {
				told++
			}
			provisioned = provisioned || e.State == status.StateProvisioned
		}
		return told, provisioned
	}
	for i := 1; i <= sims; i++ {
		node := fmt.Sprintf("sim-%02d", i)
		if told, prov := toldToInstall("http://198.18.0.1:8080", node); told != 1 || !prov {
			t.Errorf("%s on the site's timeline at %s: told to install %d times, provisioned %v (want once, true)", node, next, told, prov)
		}
	}

	// The VM finishes across the takeover: provisioned, its image on its
	// disk, told to install once, every event it sent stored once, in
	// order (the dead member's and the new holder's alike).
	waitState(t, l, "lab/c-vm", "provisioned", 6*time.Minute)
	checkDisk(t, vmDisk, rawSHA)
	t.Logf("timing: the VM, its image written across the takeover → provisioned: %s from its start", time.Since(vmStart).Round(time.Second))
	var seqs []uint64
	told := 0
	for _, e := range timeline(t, l, "lab/c-vm") {
		if e.Seq != 0 {
			seqs = append(seqs, e.Seq)
		}
		if e.Installing {
			told++
		}
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Errorf("c-vm's agent events %d and %d stored next to each other: a gap (or a duplicate)", seqs[i-1], seqs[i])
		}
	}
	if told != 1 || len(seqs) < 8 {
		t.Errorf("c-vm: told to install %d times (want once), %d agent events stored", told, len(seqs))
	}
	// It reboots (QEMU ends: -no-reboot) and boots again: the new holder
	// sends it to its disk.
	exited := make(chan struct{})
	go func() { v.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(3 * time.Minute):
		t.Errorf("c-vm did not reboot within 3 min of its install:\n%s", testutil.Tail(mustRead(v.console), 20))
		v.cmd.Process.Kill()
		<-exited
	}
	again := l.uefiVM("c-vm-again", "52:54:00:e2:73:09", withDisk(vmDisk)...)
	again.wait(t, "booting from its disk", 5*time.Minute)
	again.cmd.Process.Kill()
	l.releaseSlots()

	// The dead member's token checks in at the new holder; the install is
	// recorded; the node's next script is its disk.
	if err := install(m[1], "c-1", "52:54:00:e2:73:01"); err != nil {
		t.Fatalf("%s's token for c-1 at %s: %v", first, next, err)
	}
	if _, script := get("/ipxe?mac=52:54:00:e2:73:01"); !strings.Contains(script, "booting from its disk") {
		t.Errorf("c-1's script once installed:\n%s", script)
	}

	// The capture: every OFFER and ACK bootops sent (server identifier
	// 198.18.0.1) came, for each transaction, from one member alone. A
	// transaction is an xid within 10 s: a firmware that boots again uses
	// its xid again (OVMF's comes from its NIC), a minute later, and then
	// the new holder answers it.
	time.Sleep(2 * time.Second) // tcpdump -U writes each packet as it goes
	captured, err := dhcpReplies(pcap)
	if err != nil {
		t.Fatalf("the capture: %v", err)
	}
	last := map[dhcpv4.TransactionID]dhcpReply{}
	seen := map[string]int{}
	transactions, twice := 0, 0
	for _, r := range captured {
		if r.serverID != "198.18.0.1" {
			continue // dnsmasq's
		}
		seen[r.src]++
		prev, ok := last[r.xid]
		switch {
		case !ok || r.at.Sub(prev.at) > 10*time.Second:
			transactions++
		case prev.src != r.src:
			twice++
			t.Errorf("transaction %s answered by two members: %s %s from %s, %s %s from %s (%s after the kill)", r.xid,
				prev.at.Format("15:04:05.000"), prev.msgType, prev.src, r.at.Format("15:04:05.000"), r.msgType, r.src, r.at.Sub(killed).Round(time.Millisecond))
		}
		last[r.xid] = r
	}
	if transactions < 300 || len(seen) < 2 {
		t.Errorf("the capture holds %d of bootops' transactions from %d members; want the DISCOVERs' and the VMs', from the holder before and after the kill", transactions, len(seen))
	}
	t.Logf("the bridge's capture: %d transactions answered by bootops, from %d members (replies each: %v), %d answered by two", transactions, len(seen), seen, twice)

	// The third member cut off from the others (its cluster port dropped
	// both ways), machines still reaching it: it answers no check-in; healed,
	// it catches up and sends c-1 to its disk.
	third := -1
	for i, name := range names {
		if i != dead && name != next {
			third = i
		}
	}
	at := func(i int) string { return "http://" + addr(i) + ":8080" }
	nft := func(args ...string) { run(t, "ip", append([]string{"netns", "exec", nss[third], "nft"}, args...)...) }
	nft("add", "table", "inet", "cut")
	nft("add", "chain", "inet", "cut", "in", "{ type filter hook input priority 0 ; }")
	nft("add", "chain", "inet", "cut", "out", "{ type filter hook output priority 0 ; }")
	nft("add", "rule", "inet", "cut", "in", "tcp", "dport", "7422", "drop")
	nft("add", "rule", "inet", "cut", "out", "tcp", "dport", "7422", "drop")
	cut := time.Now()
	_, script2 := getAt(t, l, at(third)+"/ipxe?mac=52:54:00:e2:73:02")
	m2 := regexp.MustCompile(`bootops\.token=([A-Za-z0-9.]+)`).FindStringSubmatch(script2)
	if m2 == nil {
		t.Fatalf("c-2's script from %s, cut off:\n%s", names[third], script2)
	}
	o, _ := exec.Command("ip", "netns", "exec", l.lan, "curl", "-s", "-m", "20", "-w", "\n%{http_code}", "-H", "Authorization: Bearer "+m2[1], "-H", "Content-Type: application/json",
		"--data-binary", `{"site":"lab","node":"c-2","identity":{"macs":["52:54:00:e2:73:02"]}}`, at(third)+plan.AgentCheckInPath).Output()
	// Refused as the store's failure (503), saying the cluster did not
	// take the spent token: not answered alone, not refused for another
	// reason.
	if !strings.HasSuffix(strings.TrimSpace(string(o)), "503") || !strings.Contains(string(o), "the site's cluster did not record the spent token") {
		t.Errorf("%s, cut off, a check-in: %q, want 503 and the cluster's word", names[third], o)
	}
	t.Logf("timing: %s cut off → its check-in refused in %s: %q", names[third], time.Since(cut).Round(100*time.Millisecond), o)
	nft("delete", "table", "inet", "cut")
	healed := time.Now()
	if !testutil.Poll(90*time.Second, time.Second, func() bool {
		_, script := getAt(t, l, at(third)+"/ipxe?mac=52:54:00:e2:73:01")
		return strings.Contains(script, "booting from its disk")
	}) {
		t.Errorf("%s, healed, does not send c-1 to its disk", names[third])
	}
	t.Logf("timing: %s healed → caught up: %s", names[third], time.Since(healed).Round(100*time.Millisecond))

	// All restarted at once (the dead one's link back): nothing durable
	// lost — the member that never saw c-1 installed sends it to its disk.
	for i := range names {
		if i != dead {
			syscall.Kill(-procs[i].Process.Pid, syscall.SIGKILL)
		}
	}
	for i := range names {
		if i != dead {
			procs[i].Wait()
		}
	}
	run(t, "ip", "-n", nss[dead], "link", "set", "eth0", "up")
	for i, name := range names {
		serve(i, name+"-again")
	}
	restarted := time.Now()
	if !testutil.Poll(3*time.Minute, time.Second, func() bool {
		_, script := getAt(t, l, at(third)+"/ipxe?mac=52:54:00:e2:73:01")
		return strings.Contains(script, "booting from its disk")
	}) {
		t.Errorf("after all three restarted, %s does not send c-1 to its disk:\n%s", names[third], testutil.Tail(l.log(names[third]+"-again"), 20))
	}
	if !testutil.Poll(time.Minute, time.Second, func() bool { return holder() != "" }) {
		t.Error("after all three restarted, no member answers at 198.18.0.1")
	}
	t.Logf("timing: all three restarted → serving again: %s", time.Since(restarted).Round(time.Second))
	// Its timelines too, once it has applied the site's log again.
	caught := time.Now()
	for i := 1; i <= sims; i++ {
		node := fmt.Sprintf("sim-%02d", i)
		var told int
		var prov bool
		if !testutil.Poll(90*time.Second, time.Second, func() bool {
			told, prov = toldToInstall(at(third), node)
			return told == 1 && prov
		}) {
			t.Errorf("%s after the restart, at %s: told to install %d times, provisioned %v, after 90 s:\n%s", node, names[third], told, prov, testutil.Tail(l.log(names[third]+"-again"), 30))
			break
		}
	}
	t.Logf("timing: all three restarted → %s's timelines have every simulated machine provisioned: %s", names[third], time.Since(caught).Round(100*time.Millisecond))
	t.Logf("timing: TestSiteCluster %s", time.Since(began).Round(time.Second))
}

// getAt GETs url from the lab's bridge: the status code and body.
func getAt(t *testing.T, l *lab, url string) (int, string) {
	out, err := exec.Command("ip", "netns", "exec", l.lan, "curl", "-s", "-m", "10", "-w", "\n%{http_code}", url).Output()
	if err != nil {
		return 0, ""
	}
	s := string(out)
	i := strings.LastIndexByte(s, '\n')
	var code int
	fmt.Sscan(s[i+1:], &code)
	return code, s[:i]
}
