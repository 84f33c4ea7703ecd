// Command hostile measures a bootops daemon under attack from the LAN, and
// a reference bootops (an older commit) beside it in the same run, each
// fresh for each flood (-floods), under a 1,024 open-files limit:
//
//   - lan (against -reference): each serves N nodes that a simulated fleet
//     (package agent, as in test/fleet/sim) provisions first; then
//     test/e2e/lanflood attacks it from 50 loopback addresses (made-up
//     machines, their check-ins, forged ones, idle keep-alive connections,
//     slow bodies) while a probe from an address of its own asks for a
//     provisioned node's script. Also measured: how many provisioned nodes
//     would be reinstalled (wiped) on their next boot.
//   - report (against -authority-reference, as the next two): the same
//     fleet, whose nodes' report scripts (cloud-init) carry their report
//     credentials; test/bench/hostileflood sends one provisioned node's
//     reports, with its credential (some claiming another install) and
//     with forged ones and another node's, while the probe asks for
//     another node's script. Also measured: how many of the node's earlier
//     events its timeline still holds, and whether its delivery record
//     still names the install it did.
//   - challenge: thousands of TPM challenges asked for a registered node
//     from four addresses (with the boot tokens of its script, forged ones
//     and none), while the probe, from another address each time, asks as
//     the machine would (its script, its check-in with a TPM) and must get
//     a challenge.
//   - lease: DHCPv4 REQUESTs from made-up MACs that never DISCOVERed,
//     naming the pool's addresses, against a daemon in reservation mode
//     (-lease-repo) inside the network namespaces -netns names, while the
//     probe, a MAC the repository reserves an address for, DISCOVERs.
//     Also measured: the ACKs and NAKs on the wire, the pool addresses the
//     ACKs gave away, and whether a new machine still gets an address.
//
// Measured in every flood: the daemon's RSS and open files (idle and
// peak) and the probe's answers. Everything on loopback (127.0.0.0/8), or
// inside the lease flood's namespaces (198.18.2.0/24).
//
//	go run ./test/bench/hostile -floods lan -bootops bin/bootops -reference /tmp/ref/bootops -flood /tmp/lanflood
//	go run ./test/bench/hostile -floods report,challenge -bootops bin/bootops -authority-reference /tmp/ref2/bootops -attacker /tmp/hostileflood
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bootops/bootops/agent"
	"github.com/bootops/bootops/test/fleet"
	"github.com/bootops/bootops/test/procstat"
)

// The lease flood's link (hostile.sh makes it, and adapts the repository
// to it): the daemon on vsrv, the attacker and the probe on vcli.
const (
	leaseServer   = "198.18.2.1"
	leasePool     = "198.18.2.100-198.18.2.199"
	leasePoolSize = 100
	leaseProbeMAC = "52:54:00:de:00:03" // node vm-mac of sites/
	leaseProbeIP  = "198.18.2.10"       // its reservation
)

func main() {
	bin := flag.String("bootops", "bin/bootops", "the bootops binary")
	ref := flag.String("reference", "", "the reference bootops binary of the lan flood (an older commit)")
	refName := flag.String("reference-name", "reference", "what to call it")
	authRef := flag.String("authority-reference", "", "the reference bootops binary of the report, challenge and lease floods (default: -reference)")
	authRefName := flag.String("authority-reference-name", "", "what to call it (default: -reference-name)")
	flood := flag.String("flood", "", "the lanflood binary")
	attacker := flag.String("attacker", "", "the hostileflood binary (report, challenge and lease floods)")
	floods := flag.String("floods", "lan,report,challenge,lease", "the floods to run, comma-separated: lan, report, challenge, lease")
	netns := flag.String("netns", "", "the lease flood's network namespaces, SERVER,CLIENT, joined by a veth pair vsrv–vcli ("+leaseServer+"/24 on vsrv)")
	leaseRepo := flag.String("lease-repo", "", "the lease flood's repository: reservation mode on vsrv, pool "+leasePool+", "+leaseProbeMAC+" reserved "+leaseProbeIP)
	nodes := flag.Int("nodes", 20, "nodes provisioned before the attack")
	identities := flag.Int("identities", 50000, "made-up machines (lan flood)")
	flag.Parse()
	if *authRef == "" {
		*authRef, *authRefName = *ref, *refName
	}
	if *authRefName == "" {
		*authRefName = *refName
	}
	srvNS, cliNS, _ := strings.Cut(*netns, ",")
	tables := map[string]table{
		"lan": {
			header:  fmt.Sprintf("| daemon | nodes wiped on next boot (of %d) | scripts answered / 429 | RSS idle → peak (MB) | open files idle → peak (limit 1024) | probe median / max | probe failures | attack took |\n| --- | --- | --- | --- | --- | --- | --- | --- |", *nodes),
			ref:     *ref,
			refName: *refName,
			row:     func(bin string) (string, error) { return measure(bin, *flood, *nodes, *identities) },
		},
		"report": {
			title:   fmt.Sprintf("Report flood: %d reports of one provisioned node (n000) from 4 addresses, as fast as they are answered: half with its real credential, a sixth with it and another install's digest, a sixth with its signature changed, a sixth with node n001's; the probe GETs n001's script every 200 ms from another address. Answers: count × status (200: recorded).", reportCount),
			header:  "| daemon | real credential | real, another install claimed | forged credential | another node's credential | n000's earlier events kept | n000's install record | RSS idle → peak (MB) | open files idle → peak | probe median / max | probe failures | flood took |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
			ref:     *authRef,
			refName: *authRefName,
			row:     func(bin string) (string, error) { return reportFlood(bin, *attacker, *nodes) },
		},
		"challenge": {
			title:   fmt.Sprintf("TPM challenge flood: %d check-ins with a TPM identity and no proof for registered node t000 from 4 addresses, as fast as they are answered: two thirds with a boot token from t000's script (fetched from the same address), a sixth with a forged token, a sixth with none; the probe, from another address each time, fetches t000's script and checks in with its TPM every 500 ms, and must get a challenge (its time: both requests).", challengeCount),
			header:  "| daemon | with a boot token | forged token | no token | challenges handed out | RSS idle → peak (MB) | open files idle → peak | probe median / max | probe failures | flood took |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
			ref:     *authRef,
			refName: *authRefName,
			row:     func(bin string) (string, error) { return challengeFlood(bin, *attacker, *nodes) },
		},
		"lease": {
			title:   fmt.Sprintf("DHCP lease flood: %d DHCPv4 REQUESTs at 2,000/s, each from a made-up MAC that never sent a DISCOVER, naming the pool's %d addresses in turn, against a daemon in reservation mode, over a veth pair between two network namespaces; the probe, node vm-mac's MAC (reserved %s), sends a DISCOVER every 200 ms and must get an OFFER of its address within 1 s. Counted on the wire.", leaseCount, leasePoolSize, leaseProbeIP),
			header:  fmt.Sprintf("| daemon | REQUESTs sent | ACK / NAK / other / none | pool addresses ACKed (of %d) | a new MAC's DISCOVER afterwards | RSS idle → peak (MB) | open files idle → peak | probe median / max | probe failures | flood took |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |", leasePoolSize),
			ref:     *authRef,
			refName: *authRefName,
			row:     func(bin string) (string, error) { return leaseFlood(bin, *attacker, *leaseRepo, srvNS, cliNS) },
		},
	}
	for i, name := range strings.Split(*floods, ",") {
		t, ok := tables[name]
		if !ok {
			fail("-floods", fmt.Errorf("no flood %q (want lan, report, challenge or lease)", name))
		}
		if i > 0 {
			fmt.Println()
		}
		if t.title != "" {
			fmt.Printf("%s Reference: %s.\n\n", t.title, t.refName)
		}
		fmt.Println(t.header)
		for _, d := range [][2]string{{"bootops (this commit)", *bin}, {t.refName, t.ref}} {
			if d[1] == "" {
				continue
			}
			row, err := t.row(d[1])
			if err != nil {
				fail(name+": "+d[0], err)
			}
			fmt.Printf("| %s | %s\n", d[0], row)
		}
	}
}

// table is one flood's table: a row for each daemon.
type table struct {
	title, header string
	ref, refName  string
	row           func(bin string) (string, error)
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "hostile: %s: %v\n", what, err)
	os.Exit(1)
}

// Bounds of the newer floods.
const (
	reportCount    = 3600
	challengeCount = 7200
	leaseCount     = 20000
)

func measure(bin, flood string, nodes, identities int) (string, error) {
	l, err := newLab(bin, nodes, false)
	if err != nil {
		return "", err
	}
	defer l.close()
	if n := wiped(l.server, nodes); n != 0 {
		return "", fmt.Errorf("%d nodes not provisioned before the attack", n)
	}
	u, out, err := during(l.pid, 200*time.Millisecond, exec.Command(flood, "-server", l.server, "-sources", "127.0.1.1-127.0.1.50", "-identities", fmt.Sprint(identities),
		"-idle", "1000", "-slow", "200", "-hold", "60s", "-deadline", "10m", "-probe-source", "127.0.2.1", "-probe", "/ipxe?serial=HOST-000&site=lab"))
	if err != nil {
		return "", fmt.Errorf("lanflood: %v", err)
	}
	var s struct {
		Scripts                        map[string]int
		Errors, Probes, ProbeFailures  int
		ProbeMax, ProbeMedian, Elapsed string
	}
	if err := json.Unmarshal(out, &s); err != nil {
		return "", fmt.Errorf("lanflood's summary %q: %v", out, err)
	}
	fmt.Fprintf(os.Stderr, "%s: %s", bin, out)
	return fmt.Sprintf("%d | %d / %d (%d errors) | %s | %s / %s | %d of %d | %s |",
		wiped(l.server, nodes), s.Scripts["200"], s.Scripts["429"], s.Errors, u, s.ProbeMedian, s.ProbeMax, s.ProbeFailures, s.Probes, s.Elapsed), nil
}

// probed is the probe's part of a hostileflood summary.
type probed struct {
	Probes, ProbeFailures                        int
	ProbeMedian, ProbeMax, FirstFailure, Elapsed string
}

func (p probed) cells() string {
	failures := fmt.Sprintf("%d of %d", p.ProbeFailures, p.Probes)
	if p.FirstFailure != "" {
		failures += " (first: " + strings.ReplaceAll(strings.Join(strings.Fields(p.FirstFailure), " "), "|", "/") + ")"
	}
	return fmt.Sprintf("%s / %s | %s | %s |", p.ProbeMedian, p.ProbeMax, failures, p.Elapsed)
}

// reportFlood floods node n000 with reports (hostileflood report).
func reportFlood(bin, attacker string, nodes int) (string, error) {
	l, err := newLab(bin, nodes, true)
	if err != nil {
		return "", err
	}
	defer l.close()
	token, install, err := reportCredential(l.reports["n000"])
	if err != nil {
		return "", fmt.Errorf("node n000: %w", err)
	}
	other, _, err := reportCredential(l.reports["n001"])
	if err != nil {
		return "", fmt.Errorf("node n001: %w", err)
	}
	before, err := timeline(l.server, "n000")
	if err != nil {
		return "", err
	}
	was, err := installRecord(l.server, "n000")
	if err != nil {
		return "", err
	}
	u, out, err := during(l.pid, 100*time.Millisecond, exec.Command(attacker, "report", "-server", l.server, "-token", token, "-other-token", other,
		"-node", "n000", "-install", install, "-count", fmt.Sprint(reportCount), "-probe", "/ipxe?serial=HOST-001&site=lab"))
	if err != nil {
		return "", err
	}
	var s struct {
		Reports map[string]map[string]int
		probed
	}
	if err := json.Unmarshal(out, &s); err != nil {
		return "", fmt.Errorf("hostileflood's summary %q: %v", out, err)
	}
	fmt.Fprintf(os.Stderr, "%s: report: %s", bin, out)
	after, err := timeline(l.server, "n000")
	if err != nil {
		return "", err
	}
	kept := 0
	for _, e := range before {
		if slices.Contains(after, e) {
			kept++
		}
	}
	now, err := installRecord(l.server, "n000")
	if err != nil {
		return "", err
	}
	rec := "kept (" + now.State + ")"
	var changed []string
	if now.Install != was.Install {
		changed = append(changed, "install "+short(was.Install)+" → "+short(now.Install))
	}
	if !now.Provisioned.Equal(was.Provisioned) {
		changed = append(changed, "provisioned "+clock(was.Provisioned)+" → "+clock(now.Provisioned))
	}
	if changed != nil {
		rec = "**changed**: " + strings.Join(changed, ", ") + " (" + now.State + ")"
	}
	return fmt.Sprintf("%s | %s | %s | %s | %d of %d (%d events now) | %s | %s | %s", answers(s.Reports["real"]), answers(s.Reports["claim"]), answers(s.Reports["forged"]), answers(s.Reports["other"]),
		kept, len(before), len(after), rec, u, s.cells()), nil
}

// challengeFlood asks for TPM challenges for node t000 (hostileflood
// challenge).
func challengeFlood(bin, attacker string, nodes int) (string, error) {
	l, err := newLab(bin, nodes, true)
	if err != nil {
		return "", err
	}
	defer l.close()
	u, out, err := during(l.pid, 100*time.Millisecond, exec.Command(attacker, "challenge", "-server", l.server, "-node", "t000", "-serial", "TPM-000",
		"-count", fmt.Sprint(challengeCount), "-probe-sources", "127.0.2.1-127.0.2.200", "-probe-every", "500ms", "-probe-after", "5s"))
	if err != nil {
		return "", err
	}
	var s struct {
		CheckIns   map[string]map[string]int
		Scripts    map[string]int
		Challenged int
		probed
	}
	if err := json.Unmarshal(out, &s); err != nil {
		return "", fmt.Errorf("hostileflood's summary %q: %v", out, err)
	}
	fmt.Fprintf(os.Stderr, "%s: challenge: %s", bin, out)
	return fmt.Sprintf("%s | %s | %s | %d | %s | %s", answers(s.CheckIns["token"]), answers(s.CheckIns["forged"]), answers(s.CheckIns["none"]), s.Challenged, u, s.cells()), nil
}

// leaseFlood runs the daemon in reservation mode in namespace srv and the
// attacker in cli (hostileflood lease).
func leaseFlood(bin, attacker, repo, srv, cli string) (string, error) {
	if srv == "" || cli == "" || repo == "" {
		return "", errors.New("the lease flood needs -netns SERVER,CLIENT and -lease-repo (hostile.sh makes them)")
	}
	work, err := os.MkdirTemp("", "bench-hostile-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	d, err := start([]string{"ip", "netns", "exec", srv}, bin, "--source", repo, "--state-dir", filepath.Join(work, "state"),
		"--http-addr", leaseServer+":8080", "--dhcp", "reservation", "--interface", "vsrv")
	if err != nil {
		return "", err
	}
	defer d.stop()
	flood := func(args ...string) *exec.Cmd {
		return exec.Command("ip", append([]string{"netns", "exec", cli, attacker, "lease", "-iface", "vcli", "-server-ip", leaseServer, "-pool", leasePool,
			"-probe-mac", leaseProbeMAC, "-probe-ip", leaseProbeIP}, args...)...)
	}
	if _, err := run(flood("-wait")); err != nil {
		return "", fmt.Errorf("the daemon never answered: %v", err)
	}
	u, out, err := during(d.pid, 100*time.Millisecond, flood("-count", fmt.Sprint(leaseCount), "-rate", "2000"))
	if err != nil {
		return "", err
	}
	var s struct {
		Sent, Acks, Naks, Other, Unanswered, Addresses int
		Newcomer                                       string
		probed
	}
	if err := json.Unmarshal(out, &s); err != nil {
		return "", fmt.Errorf("hostileflood's summary %q: %v", out, err)
	}
	fmt.Fprintf(os.Stderr, "%s: lease: %s", bin, out)
	return fmt.Sprintf("%d | %d / %d / %d / %d | %d | %s | %s | %s", s.Sent, s.Acks, s.Naks, s.Other, s.Unanswered, s.Addresses, s.Newcomer, u, s.cells()), nil
}

// answers is "count × status, …", by status.
func answers(m map[string]int) string {
	var out []string
	for _, code := range slices.Sorted(maps.Keys(m)) {
		what := code
		if code == "0" {
			what = "no answer"
		}
		out = append(out, fmt.Sprintf("%d × %s", m[code], what))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

// clock is t's time of day, or "none".
func clock(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.Format(time.TimeOnly)
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	if digest == "" {
		return "none"
	}
	return digest
}

// usage is a daemon's RSS (kB) and open files, idle and at their peak.
type usage struct{ idleRSS, idleFDs, peakRSS, peakFDs int }

func (u usage) String() string {
	return fmt.Sprintf("%.0f → %.0f | %d → %d", float64(u.idleRSS)/1024, float64(u.peakRSS)/1024, u.idleFDs, u.peakFDs)
}

// during measures process pid, idle then while cmd runs (sampled every
// interval), and returns cmd's output.
func during(pid int, every time.Duration, cmd *exec.Cmd) (usage, []byte, error) {
	time.Sleep(2 * time.Second)
	var u usage
	u.idleRSS, _ = procstat.Mem(pid)
	u.idleFDs = procstat.OpenFiles(pid)
	peak := procstat.Peak(pid, every)
	out, err := run(cmd)
	u.peakRSS, u.peakFDs = peak()
	return u, out, err
}

// run is cmd's output; its error says what it wrote on stderr.
func run(cmd *exec.Cmd) ([]byte, error) {
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = fmt.Errorf("%s: %v: %s", filepath.Base(cmd.Args[0]), err, strings.TrimSpace(string(ee.Stderr)))
	}
	return out, err
}

// daemon is a bootops serve.
type daemon struct {
	cmd *exec.Cmd
	pid int
}

func (d *daemon) stop() {
	d.cmd.Process.Kill()
	d.cmd.Wait()
}

// start runs bin serve with args, --open-reads when bin knows it (the
// commits before it read openly), no TFTP, errors only in the log, and a
// 1,024 open-files limit; wrap runs before it (ip netns exec NS), and
// execs it, as prlimit does: the process is the daemon.
func start(wrap []string, bin string, args ...string) (*daemon, error) {
	if knows(bin, "-open-reads") {
		args = append(args, "--open-reads")
	}
	argv := append(append(slices.Clone(wrap), "prlimit", "--nofile=1024:1024", bin, "serve"), args...)
	argv = append(argv, "--tftp-addr", "", "--log-level", "error")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // the driver's end is the daemon's
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &daemon{cmd: cmd, pid: cmd.Process.Pid}, nil
}

// knows says whether bin serve takes flag (its --help lists it).
func knows(bin, flag string) bool {
	out, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
	return regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(flag) + `\b`).Match(out)
}

// lab is a daemon on loopback serving N nodes (n000…, serial HOST-000…)
// that a simulated fleet provisioned, a 1 MB image served beside it, and
// with cloud-init: each node's report script, and node t000 (serial
// TPM-000), registered, never provisioned.
type lab struct {
	server  string
	pid     int
	reports map[string]string // node → its report script
	close   func()
}

func newLab(bin string, nodes int, cloudInit bool) (*lab, error) {
	work, err := os.MkdirTemp("", "bench-hostile-")
	if err != nil {
		return nil, err
	}
	var undo []func()
	l := &lab{reports: map[string]string{}, close: func() {
		for _, f := range slices.Backward(undo) {
			f()
		}
	}}
	undo = append(undo, func() { os.RemoveAll(work) })
	ok := false
	defer func() {
		if !ok {
			l.close()
		}
	}()
	// A 1 MB image, served from here.
	data := make([]byte, 1<<20)
	sum := sha256.Sum256(data)
	imgLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { imgLn.Close() })
	go http.Serve(imgLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(data) }))
	port := procstat.FreePort()
	profile := "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: sim\nos: {type: immutable}\nimage: {url: \"http://" + imgLn.Addr().String() + "/image.raw\", sha256: " + hex.EncodeToString(sum[:]) + ", compression: none}\n" +
		"workflow:\n- {action: image-to-disk}\n- {action: reboot}\n"
	if cloudInit {
		profile = strings.Replace(profile, "immutable", "mutable", 1)
		profile = strings.Replace(profile, "- {action: reboot}", "- {action: cloud-init}\n- {action: reboot}", 1) + "cloudInit: {hostname: \"${hostname}\"}\n"
	}
	files := map[string]string{
		"microos.yaml":        "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\nkernel: {url: \"http://127.0.0.1/k\", sha256: " + strings.Repeat("1a", 32) + "}\ninitrd: {url: \"http://127.0.0.1/i\", sha256: " + strings.Repeat("1a", 32) + "}\n",
		"profile.yaml":        profile,
		"sites/lab/site.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: lab\nnetwork: {serverAddress: 127.0.0.1, httpPort: " + port + ", dhcp: off}\ndefaultProfile: sim\nunknownNodes: provision\n",
	}
	for i := range nodes {
		files[fmt.Sprintf("sites/lab/nodes/n%03d.yaml", i)] = fmt.Sprintf("apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n%03d\nidentity: {serial: HOST-%03d}\n", i, i)
	}
	if cloudInit {
		files["sites/lab/nodes/t000.yaml"] = "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: t000\nidentity: {serial: TPM-000}\n"
	}
	repo := filepath.Join(work, "repo")
	for name, body := range files {
		p := filepath.Join(repo, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return nil, err
		}
	}
	d, err := start(nil, bin, "--source", repo, "--state-dir", filepath.Join(work, "state"), "--http-addr", "127.0.0.1:"+port, "--dhcp", "off")
	if err != nil {
		return nil, err
	}
	undo = append(undo, d.stop)
	l.server, l.pid = "http://127.0.0.1:"+port, d.pid
	if err := waitReady(l.server); err != nil {
		return nil, err
	}
	if err := l.provision(work, nodes); err != nil {
		return nil, fmt.Errorf("provisioning: %w", err)
	}
	ok = true
	return l, nil
}

// provision installs nodes n000… with the agent, as test/fleet/sim does,
// keeping the report script each writes into its new system.
func (l *lab) provision(work string, nodes int) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := make(chan error, nodes)
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("n%03d", i)
			args, err := fleet.ScriptArgs(context.Background(), l.server+fmt.Sprintf("/ipxe?serial=HOST-%03d&site=lab", i))
			if err != nil {
				errs <- err
				return
			}
			sysfs := fleet.FakeSysfs(filepath.Join(work, "sys", fmt.Sprint(i)), fmt.Sprintf("HOST-%03d", i), fmt.Sprintf("52:54:00:77:00:%02x", i))
			errs <- agent.Session(context.Background(), args, sysfs, io.Discard, func(r *agent.Runner) {
				r.ResolveDisk = func(string) (string, error) { return "/dev/null", nil }
				r.Mount = func(dev, fstype, dir string) error { return nil }
				r.Unmount = func(dir string) error {
					if b, err := os.ReadFile(filepath.Join(dir, agent.ReportScriptPath)); err == nil {
						mu.Lock()
						l.reports[node] = string(b)
						mu.Unlock()
					}
					return os.RemoveAll(dir)
				}
				r.Power = func(string) error { return nil }
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

var reportRe = regexp.MustCompile(`url, token, site, node, ca, install = "[^"]*", "([^"]+)", "[^"]*", "[^"]*", "[^"]*", "([^"]*)"`)

// reportCredential reads a report script's credential and install digest.
func reportCredential(script string) (token, install string, err error) {
	m := reportRe.FindStringSubmatch(script)
	if m == nil {
		return "", "", fmt.Errorf("no report credential in its report script %q", script)
	}
	return m[1], m[2], nil
}

// event is what tells a node's events apart.
type event struct {
	Time          time.Time
	Kind, Message string
}

// timeline is a node's events (GET /api/v1/events).
func timeline(server, node string) ([]event, error) {
	var evs []event
	return evs, getJSON(server+"/api/v1/events?site=lab&node="+node, &evs)
}

// record is a node's line of the delivery record (GET /api/v1/report).
type record struct {
	Node, State, Install string
	Provisioned          time.Time
}

func installRecord(server, node string) (record, error) {
	var recs []record
	if err := getJSON(server+"/api/v1/report?site=lab", &recs); err != nil {
		return record{}, err
	}
	for _, r := range recs {
		if r.Node == node {
			return r, nil
		}
	}
	return record{}, fmt.Errorf("node %s is not in the delivery record", node)
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %v", url, err)
	}
	return nil
}

// wiped counts the nodes whose next boot would get the Micro-OS (its
// script carries a boot token) instead of their disk.
func wiped(server string, nodes int) int {
	n := 0
	for i := range nodes {
		resp, err := http.Get(server + fmt.Sprintf("/ipxe?serial=HOST-%03d&site=lab", i))
		if err != nil {
			n++
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "bootops.token=") {
			n++
		}
	}
	return n
}

func waitReady(server string) error {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(server + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
	}
	return fmt.Errorf("%s not ready", server)
}
