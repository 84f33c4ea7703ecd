// Command p2p benchmarks image delivery between machines (a site's
// imageDelivery: peers, package swarm) on a LAN made of network
// namespaces, every link shaped with tc tbf, against the same fleet
// streaming the image from the server, one machine alone, and, when a
// BitTorrent client is given, BitTorrent. It needs root.
//
//	go build -o /tmp/p2pbench ./test/bench/p2p
//	/tmp/p2pbench -bootops bin/bootops -n 50 -image-mb 128 [-torrent /tmp/p2ptorrent]
//
// (test/bench/p2p.sh builds both and runs it.)
//
// The LAN: namespace p2p-sw holds bridge br0, the switch; namespace
// p2p-srv is the boot server (198.18.0.1/16), namespaces p2p-m001… the
// machines (198.18.1.1/16, 198.18.1.2/16, …, 250 per /24). Each is joined
// to the bridge by a veth pair, and both ends of each pair are shaped with
// tbf: the end inside the host's namespace is its upload, the end on the
// bridge its download (-server-mbit for the server, -machine-mbit for the
// machines). Everything the server sends crosses its one uplink, whose
// byte counter (tx_bytes of its veth) is the server's cost of a mode.
//
// In p2p-srv run a static file server holding the raw image (the image's
// URL, :8081) and `bootops serve` (:8080) with a generated repository of
// two sites on the same address: srv (imageDelivery: server) and peer
// (imageDelivery: peers), each with its own nodes, as a provisioned node
// gets no boot token again. Each machine runs one agent (this program's
// `agent` subcommand, package agent as bootops-agent runs it): it fetches
// its iPXE script for its boot token, checks in, writes the image to a
// sparse file standing for its disk, writes its cloud-init seed and powers
// off (recorded, not done).
//
// Modes, in one run: alone (one machine, site srv), server (N machines,
// site srv: all stream the image from its URL), peers (N machines, site
// peer) and torrent (N machines and a seed on the server, with the
// p2ptorrent client of test/bench/p2p/torrent, no bootops). Every disk's
// sha256 must be the image's. The work folder is /var/tmp/p2p-bench; the
// namespaces, links and work folder are removed at the end, also on an
// error or Ctrl-C.
//
// Subcommands (run inside the namespaces by the benchmark itself):
//
//	p2p agent -script URL -disk FILE -sys DIR -node NAME
//	p2p fileserver -dir D -addr IP:PORT
//	p2p fetch [-discard] [-bytes N] [-wait D] URL
//	p2p probe [-wait D] IP:PORT
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bootops/bootops/agent"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/test/fleet"
	"github.com/bootops/bootops/test/procstat"
)

// The LAN. Nothing outside 198.18.0.0/15, in namespaces of this program's
// own, is ever addressed (checkAddr).
const (
	nsSwitch   = "p2p-sw"  // holds the bridge
	nsServer   = "p2p-srv" // the boot server
	bridge     = "br0"
	serverVeth = "vsrv" // the server's veth on the bridge (its download)
	hostIf     = "eth0" // every host's end of its veth (its upload)
	serverIP   = "198.18.0.1"
	httpPort   = "8080" // bootops serve
	filePort   = "8081" // the image's URL
	seedPort   = "6881" // BitTorrent, seed and machines
	workRoot   = "/var/tmp/p2p-bench"
	lockPath   = "/var/tmp/p2p-bench.lock"
	maxN       = 500
	imageFile  = "image.raw"
)

var benchNet = netip.MustParsePrefix("198.18.0.0/15")

func machineNS(i int) string   { return fmt.Sprintf("p2p-m%03d", i) }
func machineVeth(i int) string { return fmt.Sprintf("vm%03d", i) }

// machineIP is machine i's address (i from 1): 198.18.1.1, …, 198.18.1.250,
// 198.18.2.1, …
func machineIP(i int) string {
	j := i - 1
	return fmt.Sprintf("198.18.%d.%d", 1+j/250, 1+j%250)
}

// checkAddr refuses any host:port outside the benchmark's network.
func checkAddr(hostport string) error {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return fmt.Errorf("%q: want IP:PORT: %w", hostport, err)
	}
	if !benchNet.Contains(ap.Addr()) {
		return fmt.Errorf("%s is outside %s: the benchmark addresses nothing else", hostport, benchNet)
	}
	return nil
}

func checkURL(u string) error {
	p, err := url.Parse(u)
	if err != nil {
		return err
	}
	if p.Scheme != "http" {
		return fmt.Errorf("%s: http only", u)
	}
	return checkAddr(p.Host)
}

func main() {
	if len(os.Args) > 1 {
		sub := map[string]func([]string) error{"agent": agentMain, "fileserver": fileserverMain, "fetch": fetchMain, "probe": probeMain}
		if f, ok := sub[os.Args[1]]; ok {
			if err := f(os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "p2p %s: %v\n", os.Args[1], err)
				os.Exit(1)
			}
			return
		}
	}
	b := &bench{}
	flag.StringVar(&b.bootops, "bootops", "bin/bootops", "the bootops binary")
	flag.IntVar(&b.n, "n", 50, "machines")
	flag.IntVar(&b.imageMB, "image-mb", 128, "image size in MiB (random, uncompressed)")
	flag.IntVar(&b.serverMbit, "server-mbit", 100, "the server's link, each way, in Mbit/s")
	flag.IntVar(&b.machineMbit, "machine-mbit", 100, "each machine's link, each way, in Mbit/s")
	modes := flag.String("modes", "alone,server,peers,torrent", "modes to run, in this order: alone, server, peers, torrent")
	flag.StringVar(&b.torrent, "torrent", "", "the p2ptorrent binary (test/bench/p2p/torrent); empty: no torrent mode")
	flag.BoolVar(&b.keep, "keep", false, "keep the work folder "+workRoot+" (logs, repository, state) afterwards")
	flag.DurationVar(&b.timeout, "timeout", time.Hour, "the longest a mode may take")
	flag.IntVar(&b.perMachine, "per-machine", 4, "site peer: peers.perMachine")
	flag.StringVar(&b.linger, "linger", "5m", "site peer: peers.linger")
	flag.IntVar(&b.swarmStreams, "swarm-streams", 0, "bootops serve --swarm-streams (0: its default)")
	flag.StringVar(&b.logLevel, "log-level", "warn", "bootops serve --log-level (its log is "+workRoot+"/serve.log)")
	flag.Parse()
	for _, m := range strings.Split(*modes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			b.modes = append(b.modes, m)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := b.run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "p2p:", err)
		os.Exit(1)
	}
}

// bench is one run of the benchmark.
type bench struct {
	// The flags.
	bootops, torrent         string
	n, imageMB               int
	serverMbit, machineMbit  int
	modes                    []string
	keep                     bool
	timeout                  time.Duration
	perMachine, swarmStreams int
	linger, logLevel         string

	self        string // this program, run in the namespaces
	imgPath     string // the image
	size        int64  // its bytes
	sum         string // its sha256
	torrentFile string
	repoSites   string // what bootops validate said of the repository
	serve       *proc
	serveLog    string
	namespaces  []string // made, in order: removed at the end

	mu    sync.Mutex
	procs []*proc // everything started: stopped at the end

	started              time.Time
	calibration          []string
	results              []*result
	skipped              []string
	shaRuns, shaMismatch int
}

// result is what one mode measured.
type result struct {
	mode        string
	machines    int
	secs        []float64 // each machine's time to its power action (torrent: to complete)
	imageSecs   []float64 // each machine's time to the image on its disk
	failures    []string
	serverTx    int64 // bytes the server sent on its uplink
	fromServer  int64 // bytes the machines got from the server (bootops: status API; torrent: its JSON)
	fromPeers   int64 // ... and from each other
	sourcesNote string
	rssKB       []int // peak RSS of each machine's client
	wall        time.Duration
	serveCPU    time.Duration
	serveHWM    int
	swarm       map[string]float64 // bootops_swarm_* counters of the server over the mode
	hostBusy    float64            // the host's CPUs busy during the mode, 0 to 1
	hostUser    float64            // the host's CPU-seconds in user space (programs: hashing, copying to and from sockets and files)
	hostSys     float64            // ... and in the kernel (veths, the bridge, tc, the page cache)
	note        string
}

// run is long on purpose: a benchmark reads best top to bottom, step by
// step as BENCHMARKS.md ("Machines fetching the image from each other")
// describes it.
func (b *bench) run(ctx context.Context) error {
	b.started = time.Now()
	if os.Geteuid() != 0 {
		return errors.New("run as root: the benchmark makes network namespaces and shapes links with tc")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing (iproute2)", tool)
		}
	}
	if b.n < 1 || b.n > maxN {
		return fmt.Errorf("-n %d: want 1 to %d", b.n, maxN)
	}
	if b.imageMB < 1 || b.imageMB > 64<<10 {
		return fmt.Errorf("-image-mb %d: want 1 to 65536", b.imageMB)
	}
	if b.serverMbit < 1 || b.machineMbit < 1 || b.serverMbit > 100000 || b.machineMbit > 100000 {
		return errors.New("-server-mbit and -machine-mbit: want 1 to 100000")
	}
	for _, m := range b.modes {
		if !slices.Contains([]string{"alone", "server", "peers", "torrent"}, m) {
			return fmt.Errorf("-modes: unknown mode %q (alone, server, peers, torrent)", m)
		}
	}
	var err error
	if b.self, err = os.Executable(); err != nil {
		return err
	}
	if b.bootops, err = filepath.Abs(b.bootops); err != nil {
		return err
	}
	if _, err := os.Stat(b.bootops); err != nil {
		return fmt.Errorf("-bootops: %w (go build -o bin/bootops ./cmd/bootops)", err)
	}
	if b.torrent != "" {
		b.torrent, _ = filepath.Abs(b.torrent)
	}

	// One run at a time: the namespaces and the work folder have fixed
	// names.
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("another run holds %s: wait for it to end", lockPath)
	}
	if err := b.removeLeftovers(ctx); err != nil {
		return err
	}
	// From here on, whatever happens, everything made is taken down.
	defer b.cleanup()

	if err := os.MkdirAll(filepath.Join(workRoot, "logs"), 0o755); err != nil {
		return err
	}
	if err := b.makeImage(); err != nil {
		return err
	}
	if err := b.makeLAN(ctx); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := b.startServer(ctx); err != nil {
		return err
	}
	if err := b.calibrate(ctx); err != nil {
		return fmt.Errorf("shaping check: %w", err)
	}
	for _, m := range b.modes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var r *result
		var err error
		switch m {
		case "alone":
			r, err = b.bootopsMode(ctx, "alone", "srv", "a", 1)
		case "server":
			r, err = b.bootopsMode(ctx, "server", "srv", "s", b.n)
		case "peers":
			r, err = b.bootopsMode(ctx, "peers", "peer", "p", b.n)
		case "torrent":
			if b.torrent == "" {
				b.skipped = append(b.skipped, "torrent: skipped (no -torrent BIN)")
				continue
			}
			r, err = b.torrentMode(ctx)
			if err != nil && ctx.Err() == nil {
				// The comparison is optional: say why it is missing and go on.
				b.skipped = append(b.skipped, "torrent: "+err.Error())
				fmt.Fprintf(os.Stderr, "p2p: torrent mode: %v (the other modes go on)\n", err)
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("mode %s: %w", m, err)
		}
		b.results = append(b.results, r)
		fmt.Fprintf(os.Stderr, "p2p: %s: %d machines, fleet %.1f s, %d failures\n", r.mode, r.machines, maxf(r.secs), len(r.failures))
	}
	b.report(os.Stdout)
	if b.shaMismatch > 0 {
		return fmt.Errorf("SHA256 MISMATCH: %d disks do not hold the image (see above)", b.shaMismatch)
	}
	for _, r := range b.results {
		if len(r.failures) > 0 {
			return fmt.Errorf("%d machines failed in mode %s (see above)", len(r.failures), r.mode)
		}
	}
	return nil
}

// ---- processes and commands

// proc is a process this program started (most in a namespace, through
// `ip netns exec`, which execs it: its pid is the process's own).
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// spawn starts argv with its stdout to out (nil: discarded) and its
// stderr to the log file logName under the work folder. Each child is a
// process group of its own (Ctrl-C reaches this program only, which stops
// them in order) and is killed if this program dies.
func (b *bench) spawn(logName string, out io.Writer, env []string, argv ...string) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = out
	logf, err := os.Create(filepath.Join(workRoot, "logs", logName+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd.Stderr = logf
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", logName, err)
	}
	p := &proc{name: logName, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	b.mu.Lock()
	b.procs = append(b.procs, p)
	b.mu.Unlock()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends p: SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// sh runs a short command (ip, tc, …) and returns its output.
func sh(ctx context.Context, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// inNS runs this program's subcommand in namespace ns and returns its
// stdout.
func (b *bench) inNS(ctx context.Context, ns string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, b.self}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("in %s: %s: %v: %s", ns, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// ---- the namespaces

var ourNS = regexp.MustCompile(`^p2p-(sw|srv|m[0-9]{3})$`)

// listOurNS lists the namespaces that have this benchmark's names.
func listOurNS(ctx context.Context) ([]string, error) {
	out, err := sh(ctx, "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	var ours []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && ourNS.MatchString(f[0]) {
			ours = append(ours, f[0])
		}
	}
	return ours, nil
}

// removeLeftovers takes down what an earlier run left (it was killed):
// namespaces with no process in them, and the work folder. A namespace
// with processes still in it is refused: those processes are not ours to
// end.
func (b *bench) removeLeftovers(ctx context.Context) error {
	ours, err := listOurNS(ctx)
	if err != nil {
		return err
	}
	for _, ns := range ours {
		if pids, _ := sh(ctx, "ip", "netns", "pids", ns); strings.TrimSpace(pids) != "" {
			return fmt.Errorf("namespace %s from an earlier run still has processes (%s): end them, then `ip netns del %s`",
				ns, strings.Join(strings.Fields(pids), " "), ns)
		}
	}
	for _, ns := range ours {
		if _, err := sh(ctx, "ip", "netns", "del", ns); err != nil {
			return err
		}
	}
	if len(ours) > 0 {
		fmt.Fprintf(os.Stderr, "p2p: removed %d namespaces an earlier run left\n", len(ours))
	}
	return os.RemoveAll(workRoot)
}

// cleanup stops every process, removes the namespaces (their veths and
// the bridge go with them) and the work folder.
func (b *bench) cleanup() {
	b.mu.Lock()
	procs := slices.Clone(b.procs)
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(5 * time.Second) }()
	}
	wg.Wait()
	ctx := context.Background()
	for _, ns := range slices.Backward(b.namespaces) {
		if _, err := sh(ctx, "ip", "netns", "del", ns); err != nil {
			fmt.Fprintln(os.Stderr, "p2p: cleanup:", err)
		}
	}
	if left, _ := listOurNS(ctx); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "p2p: cleanup: namespaces left: %v\n", left)
	}
	if b.keep {
		fmt.Fprintf(os.Stderr, "p2p: kept %s (the next run removes it)\n", workRoot)
		return
	}
	os.RemoveAll(workRoot)
}

// shape is the tbf qdisc of a link of mbit Mbit/s: burst at least 96 KiB
// (above a 64 KiB GSO packet) and two timer ticks at HZ=250 of the rate.
func shape(mbit int) []string {
	rate := int64(mbit) * 125000 // bytes/s
	burst := max(96<<10, rate/125)
	return []string{"root", "tbf", "rate", strconv.Itoa(mbit) + "mbit", "burst", strconv.FormatInt(burst, 10), "latency", "50ms"}
}

// addNS creates namespace ns and records it for the cleanup first.
func (b *bench) addNS(ctx context.Context, ns string) error {
	if _, err := sh(ctx, "ip", "netns", "add", ns); err != nil {
		return err
	}
	b.namespaces = append(b.namespaces, ns)
	cmds := [][]string{
		{"ip", "-n", ns, "link", "set", "dev", "lo", "up"},
		// No IPv6 chatter on the counted links.
		{"ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"},
	}
	for _, c := range cmds {
		if _, err := sh(ctx, c...); err != nil {
			return err
		}
	}
	return nil
}

// addHost creates namespace ns with address ip/16 on its end of a veth
// pair whose other end, brEnd, is a port of the bridge, each end shaped
// to mbit.
func (b *bench) addHost(ctx context.Context, ns, brEnd, ip string, mbit int) error {
	if err := b.addNS(ctx, ns); err != nil {
		return err
	}
	cmds := [][]string{
		{"ip", "-n", nsSwitch, "link", "add", "name", brEnd, "type", "veth", "peer", "name", hostIf, "netns", ns},
		{"ip", "-n", nsSwitch, "link", "set", "dev", brEnd, "gso_max_size", "65536", "master", bridge, "up"},
		{"ip", "-n", ns, "link", "set", "dev", hostIf, "gso_max_size", "65536", "up"},
		{"ip", "-n", ns, "addr", "add", ip + "/16", "dev", hostIf},
		append([]string{"tc", "-n", nsSwitch, "qdisc", "replace", "dev", brEnd}, shape(mbit)...), // its download
		append([]string{"tc", "-n", ns, "qdisc", "replace", "dev", hostIf}, shape(mbit)...),      // its upload
	}
	for _, c := range cmds {
		if _, err := sh(ctx, c...); err != nil {
			return err
		}
	}
	return nil
}

// makeLAN builds the switch, the server and the machines.
func (b *bench) makeLAN(ctx context.Context) error {
	t0 := time.Now()
	if err := b.addNS(ctx, nsSwitch); err != nil {
		return err
	}
	for _, c := range [][]string{
		{"ip", "-n", nsSwitch, "link", "add", "name", bridge, "type", "bridge"},
		{"ip", "-n", nsSwitch, "link", "set", "dev", bridge, "up"},
	} {
		if _, err := sh(ctx, c...); err != nil {
			return err
		}
	}
	if err := b.addHost(ctx, nsServer, serverVeth, serverIP, b.serverMbit); err != nil {
		return err
	}
	for i := 1; i <= b.n; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := b.addHost(ctx, machineNS(i), machineVeth(i), machineIP(i), b.machineMbit); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "p2p: LAN of %d namespaces made in %.1f s\n", len(b.namespaces), time.Since(t0).Seconds())
	return nil
}

// tbfStats reads the counters of the tbf on dev in ns.
type tbfStats struct {
	Kind       string `json:"kind"`
	Bytes      int64  `json:"bytes"`
	Drops      int64  `json:"drops"`
	Overlimits int64  `json:"overlimits"`
	Options    struct {
		Rate  int64 `json:"rate"`
		Burst int64 `json:"burst"`
	} `json:"options"`
}

func tbfOf(ctx context.Context, ns, dev string) (tbfStats, error) {
	out, err := sh(ctx, "tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev)
	if err != nil {
		return tbfStats{}, err
	}
	var qs []tbfStats
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		return tbfStats{}, fmt.Errorf("tc -j qdisc show dev %s: %w", dev, err)
	}
	for _, q := range qs {
		if q.Kind == "tbf" {
			return q, nil
		}
	}
	return tbfStats{}, fmt.Errorf("no tbf on %s in %s: %s", dev, ns, out)
}

// serverTx is every byte the server sent on its uplink so far.
func (b *bench) serverTx(ctx context.Context) (int64, error) {
	out, err := sh(ctx, "ip", "netns", "exec", nsServer, "cat", "/sys/class/net/"+hostIf+"/statistics/tx_bytes")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(out), 10, 64)
}

// calibrate checks the shaping holds: a download from the server to
// machine 1 (server uplink, machine 1's download) and, with two machines
// or more, from machine 2 to machine 1 (machine 2's upload), each against
// its rate, with the tbf counters showing the qdisc at work.
func (b *bench) calibrate(ctx context.Context) error {
	check := func(what, ns, dev, from string, mbit int) error {
		rate := float64(mbit) * 125000
		n := min(b.size, int64(rate*3)) // about 3 s
		q0, err := tbfOf(ctx, ns, dev)
		if err != nil {
			return err
		}
		out, err := b.inNS(ctx, machineNS(1), "fetch", "-discard", "-bytes", strconv.FormatInt(n, 10), "-wait", "10s", from)
		if err != nil {
			return err
		}
		var got struct {
			Bytes   int64
			Seconds float64
		}
		if err := json.Unmarshal(out, &got); err != nil || got.Seconds <= 0 {
			return fmt.Errorf("fetch said %q", out)
		}
		q1, err := tbfOf(ctx, ns, dev)
		if err != nil {
			return err
		}
		mbps := float64(got.Bytes) * 8 / got.Seconds / 1e6
		line := fmt.Sprintf("%s: %.1f MB in %.2f s = %.1f Mbit/s (set: %d); tbf on %s/%s: rate %d Mbit/s, burst %d B, sent %.1f MB, overlimits %d, dropped %d",
			what, float64(got.Bytes)/1e6, got.Seconds, mbps, mbit, ns, dev, q1.Options.Rate*8/1e6, q1.Options.Burst,
			float64(q1.Bytes-q0.Bytes)/1e6, q1.Overlimits-q0.Overlimits, q1.Drops-q0.Drops)
		b.calibration = append(b.calibration, line)
		fmt.Fprintln(os.Stderr, "p2p: shaping:", line)
		switch {
		case mbps > 1.2*float64(mbit):
			return fmt.Errorf("%s: %.1f Mbit/s, above the %d set: the shaping does not hold", what, mbps, mbit)
		case q1.Bytes-q0.Bytes < got.Bytes:
			return fmt.Errorf("%s: the tbf on %s/%s passed %d bytes of a %d-byte download: traffic goes around it", what, ns, dev, q1.Bytes-q0.Bytes, got.Bytes)
		case mbps < 0.6*float64(mbit):
			b.calibration = append(b.calibration, fmt.Sprintf("WARNING: %s below 60%% of its rate: this machine may be too slow for the rates asked", what))
		}
		return nil
	}
	// Server → machine 1: the slower of the server's upload and the
	// machine's download; the qdisc checked is that slower one.
	ns, dev, mbit := nsServer, hostIf, b.serverMbit
	if b.machineMbit < b.serverMbit {
		ns, dev, mbit = nsSwitch, machineVeth(1), b.machineMbit
	}
	if err := check("server → m001", ns, dev, "http://"+serverIP+":"+filePort+"/"+imageFile, mbit); err != nil {
		return err
	}
	if b.n < 2 {
		return nil
	}
	// Machine 2 → machine 1, a file server of its own for the test.
	fs, err := b.spawn("fileserver-m002", nil, nil, "ip", "netns", "exec", machineNS(2), b.self, "fileserver", "-dir", workRoot, "-addr", machineIP(2)+":"+filePort)
	if err != nil {
		return err
	}
	defer fs.stop(2 * time.Second)
	return check("m002 → m001", machineNS(2), hostIf, "http://"+machineIP(2)+":"+filePort+"/"+imageFile, b.machineMbit)
}

// ---- the image, the repository, the server

// makeImage writes the raw random image.
func (b *bench) makeImage() error {
	b.imgPath = filepath.Join(workRoot, imageFile)
	f, err := os.Create(b.imgPath)
	if err != nil {
		return err
	}
	defer f.Close()
	b.size = int64(b.imageMB) << 20
	rng := rand.NewChaCha8([32]byte{'p', '2', 'p'})
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for range b.imageMB {
		rng.Read(buf)
		h.Write(buf)
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	b.sum = hex.EncodeToString(h.Sum(nil))
	return f.Close()
}

// writeRepo writes the repository: a MicroOS (never fetched here), one
// profile with the image, sites srv and peer on the same server address,
// and nodes by serial: a001 (alone) and s001… (server) in srv, p001…
// (peers) in peer.
func (b *bench) writeRepo(dir string) error {
	fake := strings.Repeat("1a", 32)
	files := map[string]string{
		"microos.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\n" +
			"kernel: {url: \"http://" + serverIP + "/k\", sha256: " + fake + "}\ninitrd: {url: \"http://" + serverIP + "/i\", sha256: " + fake + "}\n",
		"profile.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: bench\nos: {type: immutable}\n" +
			"image: {url: \"http://" + serverIP + ":" + filePort + "/" + imageFile + "\", sha256: " + b.sum + ", compression: none}\n" +
			"cloudInit: {packages: [htop]}\nworkflow:\n- {action: image-to-disk}\n- {action: cloud-init}\n- {action: reboot}\n",
		"sites/srv/site.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: srv\n" +
			"network: {serverAddress: " + serverIP + ", httpPort: " + httpPort + ", dhcp: off}\ndefaultProfile: bench\nimageDelivery: server\n",
		"sites/peer/site.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: peer\n" +
			"network: {serverAddress: " + serverIP + ", httpPort: " + httpPort + ", dhcp: off}\ndefaultProfile: bench\nimageDelivery: peers\n" +
			fmt.Sprintf("peers: {perMachine: %d, linger: %s}\n", b.perMachine, b.linger),
	}
	node := func(site, prefix string, i int) {
		name := fmt.Sprintf("%s%03d", prefix, i)
		files["sites/"+site+"/nodes/"+name+".yaml"] = fmt.Sprintf("apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: %s\nidentity: {serial: %s}\n", name, serial(prefix, i))
	}
	node("srv", "a", 1)
	for i := 1; i <= b.n; i++ {
		node("srv", "s", i)
		node("peer", "p", i)
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func serial(prefix string, i int) string { return fmt.Sprintf("%s-%03d", strings.ToUpper(prefix), i) }

// startServer starts the image's file server and bootops serve in
// p2p-srv.
func (b *bench) startServer(ctx context.Context) error {
	if _, err := b.spawn("fileserver", nil, nil, "ip", "netns", "exec", nsServer, b.self, "fileserver", "-dir", workRoot, "-addr", serverIP+":"+filePort); err != nil {
		return err
	}
	var err error
	repo := filepath.Join(workRoot, "repo")
	if err := b.writeRepo(repo); err != nil {
		return err
	}
	if out, err := sh(ctx, b.bootops, "validate", repo); err != nil {
		return fmt.Errorf("the generated repository: %w", err)
	} else {
		b.repoSites = strings.TrimSpace(out)
	}
	args := []string{"ip", "netns", "exec", nsServer, b.bootops, "serve", "--open-reads", "--source", repo, "--state-dir", filepath.Join(workRoot, "state"),
		"--http-addr", serverIP + ":" + httpPort, "--dhcp", "off", "--tftp-addr", "", "--log-level", b.logLevel}
	if b.swarmStreams > 0 {
		args = append(args, "--swarm-streams", strconv.Itoa(b.swarmStreams))
	}
	if b.serve, err = b.spawn("serve", nil, nil, args...); err != nil {
		return err
	}
	b.serveLog = filepath.Join(workRoot, "logs", "serve.log")
	// Both answer before anything is timed.
	if _, err := b.inNS(ctx, nsServer, "fetch", "-discard", "-bytes", "1", "-wait", "20s", "http://"+serverIP+":"+filePort+"/"+imageFile); err != nil {
		return fmt.Errorf("the image's file server: %w", err)
	}
	if _, err := b.inNS(ctx, nsServer, "fetch", "-wait", "30s", "http://"+serverIP+":"+httpPort+"/readyz"); err != nil {
		return fmt.Errorf("bootops serve not ready (%s): %w", b.serveLog, err)
	}
	return nil
}

// status reads the server's status document.
func (b *bench) status(ctx context.Context) ([]status.Machine, error) {
	out, err := b.inNS(ctx, nsServer, "fetch", "http://"+serverIP+":"+httpPort+"/api/v1/status")
	if err != nil {
		return nil, err
	}
	var doc struct {
		Nodes []status.Machine `json:"nodes"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return doc.Nodes, nil
}

// swarmMetrics reads the server's bootops_swarm_* counters, by their
// labels: "bytes_total{from=server}", "failed_transfers_total{why=gone}", …
func (b *bench) swarmMetrics(ctx context.Context) (map[string]float64, error) {
	out, err := b.inNS(ctx, nsServer, "fetch", "http://"+serverIP+":"+httpPort+"/metrics")
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		name, rest, ok := strings.Cut(line, "bootops_swarm_")
		if !ok || name != "" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		m[strings.ReplaceAll(f[0], `"`, "")] = v
	}
	return m, nil
}

// ---- the modes

// agentLine is what the agent subcommand prints.
type agentLine struct {
	Node         string  `json:"node"`
	Seconds      float64 `json:"seconds"`      // from its start to its power action
	ImageSeconds float64 `json:"imageSeconds"` // ... to the image on its disk
	OK           bool    `json:"ok"`
	Err          string  `json:"err"`
	FromServer   int64   `json:"fromServer"` // its own count, when it fetched with its peers
	FromPeers    int64   `json:"fromPeers"`
	RSSKB        int     `json:"rssKB"` // its peak RSS (VmHWM) at the end
}

// disk is machine i's disk: a sparse file of the image's size.
func disk(i int) string { return filepath.Join(workRoot, "disks", fmt.Sprintf("m%03d.img", i)) }

func (b *bench) newDisk(i int, sized bool) error {
	p := disk(i)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	os.Remove(p)
	if !sized {
		return nil
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if err := f.Truncate(b.size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// bootopsMode runs machines agents at once, nodes prefix001… of site,
// machine i in namespace p2p-m00i.
//
// It is long on purpose: a mode reads best top to bottom, step by step,
// as a benchmark should.
func (b *bench) bootopsMode(ctx context.Context, mode, site, prefix string, machines int) (*result, error) {
	r := &result{mode: mode, machines: machines}
	fmt.Fprintf(os.Stderr, "p2p: mode %s: %d machines, site %s\n", mode, machines, site)
	sectors := max(2097152, 2*b.size/512)
	for i := 1; i <= machines; i++ {
		node := fmt.Sprintf("%s%03d", prefix, i)
		if err := b.newDisk(i, true); err != nil {
			return nil, err
		}
		fakeSysfs(filepath.Join(workRoot, "sys", node), serial(prefix, i), fmt.Sprintf("52:54:00:%02x:%02x:%02x", prefix[0], i>>8&255, i&255), sectors)
		if err := os.MkdirAll(filepath.Join(workRoot, "tmp", node), 0o755); err != nil {
			return nil, err
		}
	}
	cpu0 := procstat.CPU(b.serve.pid())
	tx0, err := b.serverTx(ctx)
	if err != nil {
		return nil, err
	}
	sw0, err := b.swarmMetrics(ctx)
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	busy0, total0 := cpuTimes()
	user0, sys0 := cpuSplit()
	t0 := time.Now()
	outs := make([]*bytes.Buffer, machines+1)
	procs := make([]*proc, machines+1)
	for i := 1; i <= machines; i++ {
		node := fmt.Sprintf("%s%03d", prefix, i)
		outs[i] = new(bytes.Buffer)
		script := "http://" + serverIP + ":" + httpPort + "/ipxe?serial=" + serial(prefix, i) + "&site=" + site
		p, err := b.spawn(mode+"-"+node, outs[i], []string{"TMPDIR=" + filepath.Join(workRoot, "tmp", node)},
			"ip", "netns", "exec", machineNS(i), b.self, "agent", "-script", script, "-disk", disk(i),
			"-sys", filepath.Join(workRoot, "sys", node), "-node", node, "-timeout", b.timeout.String())
		if err != nil {
			return nil, err
		}
		procs[i] = p
	}
	// Every agent ends by itself, or at the mode's time limit, or on Ctrl-C.
	for i := 1; i <= machines; i++ {
		select {
		case <-procs[i].done:
		case <-mctx.Done():
		}
	}
	r.wall = time.Since(t0)
	r.hostBusy = busySince(busy0, total0)
	r.hostUser, r.hostSys = cpuSplitSince(user0, sys0)
	timedOut := mctx.Err() != nil
	for i := 1; i <= machines; i++ {
		procs[i].stop(5 * time.Second)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	tx1, err := b.serverTx(ctx)
	if err != nil {
		return nil, err
	}
	r.serverTx = tx1 - tx0
	r.serveCPU = procstat.CPU(b.serve.pid()) - cpu0
	_, r.serveHWM = procstat.Mem(b.serve.pid())
	sw1, err := b.swarmMetrics(ctx)
	if err != nil {
		return nil, err
	}
	r.swarm = map[string]float64{}
	for k, v := range sw1 {
		r.swarm[k] = v - sw0[k]
	}

	lines := map[string]agentLine{}
	for i := 1; i <= machines; i++ {
		node := fmt.Sprintf("%s%03d", prefix, i)
		var l agentLine
		if err := json.Unmarshal(bytes.TrimSpace(outs[i].Bytes()), &l); err != nil {
			why := fmt.Sprintf("no result line (%v)", procs[i].err)
			if timedOut {
				why = "timed out after " + b.timeout.String()
			}
			r.failures = append(r.failures, fmt.Sprintf("%s: %s; see %s", node, why, filepath.Join(workRoot, "logs", mode+"-"+node+".log")))
			continue
		}
		lines[node] = l
		if !l.OK {
			r.failures = append(r.failures, fmt.Sprintf("%s: %s", node, l.Err))
			continue
		}
		r.secs = append(r.secs, l.Seconds)
		r.imageSecs = append(r.imageSecs, l.ImageSeconds)
		r.rssKB = append(r.rssKB, l.RSSKB)
	}

	// The server's account: every node provisioned, and where its bytes
	// came from.
	nodes, err := b.status(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]status.Machine{}
	for _, m := range nodes {
		if m.Site == site {
			byName[m.Node] = m
		}
	}
	var agentServer, agentPeers int64
	for i := 1; i <= machines; i++ {
		node := fmt.Sprintf("%s%03d", prefix, i)
		m, ok := byName[node]
		switch {
		case !ok:
			r.failures = append(r.failures, fmt.Sprintf("%s: not in the server's status", node))
			continue
		case m.State != "provisioned":
			r.failures = append(r.failures, fmt.Sprintf("%s: state %q in the server's status, want provisioned", node, m.State))
		}
		if m.Image != nil {
			r.fromServer += m.Image.FromServer
			r.fromPeers += m.Image.FromPeers
		} else if site == "srv" {
			r.fromServer += b.size // streamed from the image's URL, on the server's uplink
		}
		agentServer += lines[node].FromServer
		agentPeers += lines[node].FromPeers
	}
	if site == "srv" {
		r.sourcesNote = "from the image's URL (the status API counts peers only)"
	} else {
		r.sourcesNote = "status API"
		if agentServer != r.fromServer || agentPeers != r.fromPeers {
			r.note = fmt.Sprintf("the agents counted %.1f MB from the server and %.1f MB from peers; the status API %.1f and %.1f",
				mb(agentServer), mb(agentPeers), mb(r.fromServer), mb(r.fromPeers))
		}
	}
	b.checkDisks(r, machines)
	return r, nil
}

// checkDisks compares every disk's sha256 with the image's, then removes
// the disks.
func (b *bench) checkDisks(r *result, machines int) {
	type bad struct {
		i   int
		why string
	}
	var mu sync.Mutex
	var bads []bad
	work := make(chan int)
	var wg sync.WaitGroup
	for range 2 { // two cores
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				got, err := hashFile(disk(i), b.size)
				if err == nil && got == b.sum {
					continue
				}
				why := fmt.Sprintf("sha256 %s, the image's is %s", got, b.sum)
				if err != nil {
					why = err.Error()
				}
				mu.Lock()
				bads = append(bads, bad{i, why})
				mu.Unlock()
			}
		}()
	}
	for i := 1; i <= machines; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	slices.SortFunc(bads, func(x, y bad) int { return x.i - y.i })
	for _, x := range bads {
		msg := fmt.Sprintf("machine %d: DISK DOES NOT HOLD THE IMAGE: %s", x.i, x.why)
		r.failures = append(r.failures, msg)
		fmt.Fprintf(os.Stderr, "p2p: %s: %s\n", r.mode, msg)
	}
	b.shaRuns += machines
	b.shaMismatch += len(bads)
	for i := 1; i <= machines; i++ {
		if !b.keep {
			os.Remove(disk(i))
		}
	}
}

// hashFile is the sha256 of the first size bytes of path, which must be
// that long.
func hashFile(path string, size int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if st.Size() != size {
		return "", fmt.Errorf("%s is %d bytes, the image %d", path, st.Size(), size)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// torrentLine is what p2ptorrent prints: get, once complete, then its
// upload when stopped; seed its upload when stopped.
type torrentLine struct {
	Role       string  `json:"role"`
	Seconds    float64 `json:"seconds"`
	Downloaded int64   `json:"downloaded"`
	FromSeed   int64   `json:"fromSeed"`
	FromPeers  int64   `json:"fromPeers"`
	BadPeers   int     `json:"badPeers"`
	Uploaded   *int64  `json:"uploaded"`
}

// lineWriter calls fn with each line written to it.
type lineWriter struct {
	buf []byte
	fn  func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.fn(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// torrentMode: the seed on the server, every machine a BitTorrent client
// given the seed and all the other machines as peers; no bootops.
//
// It is long on purpose: a mode reads best top to bottom, as bootopsMode
// does, so the two can be read side by side.
func (b *bench) torrentMode(ctx context.Context) (*result, error) {
	if st, err := os.Stat(b.torrent); err != nil || st.IsDir() {
		return nil, fmt.Errorf("%s: not there (build test/bench/p2p/torrent)", b.torrent)
	}
	machines := b.n
	r := &result{mode: "torrent", machines: machines, sourcesNote: "p2ptorrent's counts"}
	fmt.Fprintf(os.Stderr, "p2p: mode torrent: %d machines\n", machines)
	b.torrentFile = filepath.Join(workRoot, "image.torrent")
	if _, err := sh(ctx, b.torrent, "info", "-in", b.imgPath, "-piece", strconv.Itoa(4<<20), "-o", b.torrentFile); err != nil {
		return nil, err
	}
	seedAddr := serverIP + ":" + seedPort
	var seedMu sync.Mutex
	var seedUp *int64
	seed, err := b.spawn("torrent-seed", &lineWriter{fn: func(s string) {
		var l torrentLine
		if json.Unmarshal([]byte(s), &l) == nil && l.Uploaded != nil {
			seedMu.Lock()
			seedUp = l.Uploaded
			seedMu.Unlock()
		}
	}}, nil, "ip", "netns", "exec", nsServer, b.torrent, "seed", "-torrent", b.torrentFile, "-data", b.imgPath, "-listen", seedAddr)
	if err != nil {
		return nil, err
	}
	defer seed.stop(10 * time.Second)
	if _, err := b.inNS(ctx, machineNS(1), "probe", "-wait", "20s", seedAddr); err != nil {
		return nil, fmt.Errorf("the seed does not listen: %w (see %s)", err, filepath.Join(workRoot, "logs", "torrent-seed.log"))
	}
	for i := 1; i <= machines; i++ {
		if err := b.newDisk(i, false); err != nil {
			return nil, err
		}
	}
	tx0, err := b.serverTx(ctx)
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	type getter struct {
		p    *proc
		mu   sync.Mutex
		line *torrentLine
		hwm  int
		done chan struct{}
	}
	gs := make([]*getter, machines+1)
	defer func() { // on an error on the way
		for _, g := range gs {
			if g != nil && g.p != nil {
				g.p.stop(5 * time.Second)
			}
		}
	}()
	busy0, total0 := cpuTimes()
	user0, sys0 := cpuSplit()
	t0 := time.Now()
	for i := 1; i <= machines; i++ {
		peers := []string{seedAddr}
		for j := 1; j <= machines; j++ {
			if j != i {
				peers = append(peers, machineIP(j)+":"+seedPort)
			}
		}
		g := &getter{done: make(chan struct{})}
		gs[i] = g
		w := &lineWriter{fn: func(s string) {
			var l torrentLine
			if json.Unmarshal([]byte(s), &l) != nil || l.Role != "get" || l.Uploaded != nil {
				return
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.line == nil {
				g.line = &l
				// It goes on seeding: its peak so far is its download's.
				if g.p != nil {
					_, g.hwm = procstat.Mem(g.p.pid())
				}
				close(g.done)
			}
		}}
		g.mu.Lock()
		g.p, err = b.spawn(fmt.Sprintf("torrent-m%03d", i), w, nil, "ip", "netns", "exec", machineNS(i), b.torrent, "get",
			"-torrent", b.torrentFile, "-out", disk(i), "-listen", machineIP(i)+":"+seedPort, "-peers", strings.Join(peers, ","), "-linger", "30m")
		g.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	// Every machine complete (each then seeds on), or exited, or the time
	// limit.
	for i := 1; i <= machines; i++ {
		select {
		case <-gs[i].done:
		case <-gs[i].p.done:
		case <-mctx.Done():
		}
	}
	r.wall = time.Since(t0)
	r.hostBusy = busySince(busy0, total0)
	r.hostUser, r.hostSys = cpuSplitSince(user0, sys0)
	for i := 1; i <= machines; i++ {
		gs[i].p.stop(10 * time.Second)
	}
	seed.stop(10 * time.Second)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	tx1, err := b.serverTx(ctx)
	if err != nil {
		return nil, err
	}
	r.serverTx = tx1 - tx0
	for i := 1; i <= machines; i++ {
		g := gs[i]
		g.mu.Lock()
		l, hwm := g.line, g.hwm
		g.mu.Unlock()
		if l == nil {
			r.failures = append(r.failures, fmt.Sprintf("m%03d: never complete (%v); see %s", i, g.p.err, filepath.Join(workRoot, "logs", fmt.Sprintf("torrent-m%03d.log", i))))
			continue
		}
		r.secs = append(r.secs, l.Seconds)
		r.imageSecs = append(r.imageSecs, l.Seconds)
		r.rssKB = append(r.rssKB, hwm)
		r.fromServer += l.FromSeed
		r.fromPeers += l.FromPeers
		if l.BadPeers > 0 {
			r.failures = append(r.failures, fmt.Sprintf("m%03d: %d bad peers", i, l.BadPeers))
		}
	}
	seedMu.Lock()
	if seedUp != nil {
		r.note = fmt.Sprintf("the seed says it uploaded %.1f MB", mb(*seedUp))
	}
	seedMu.Unlock()
	b.checkDisks(r, machines)
	return r, nil
}

// cpuLine is /proc/stat's first line, the CPUs' times in ticks: user,
// nice, system, idle, iowait, irq, softirq, steal (guest times are counted
// in user already, and left out).
func cpuLine() [8]int64 {
	var out [8]int64
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i := 1; i < len(f) && i <= len(out); i++ {
		out[i-1], _ = strconv.ParseInt(f[i], 10, 64)
	}
	return out
}

// cpuTimes is the host's CPU time, all CPUs: busy and in all, in ticks.
func cpuTimes() (busy, total int64) {
	for i, n := range cpuLine() {
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// cpuSplit is the host's busy CPU time in ticks: in user space (user,
// nice) and in the kernel (system, irq, softirq).
func cpuSplit() (user, sys int64) {
	c := cpuLine()
	return c[0] + c[1], c[2] + c[5] + c[6]
}

// cpuSplitSince is the host's CPU-seconds in user space and in the kernel
// since user0, sys0 (/proc/stat counts in USER_HZ, 100 a second).
func cpuSplitSince(user0, sys0 int64) (user, sys float64) {
	u, k := cpuSplit()
	return float64(u-user0) / 100, float64(k-sys0) / 100
}

// busySince is the share of the host's CPU time busy since busy0, total0.
func busySince(busy0, total0 int64) float64 {
	busy, total := cpuTimes()
	if total <= total0 {
		return 0
	}
	return float64(busy-busy0) / float64(total-total0)
}

// ---- the report

func mb(n int64) float64 { return float64(n) / (1 << 20) }

func maxf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Max(v)
}

func minf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Min(v)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// report prints the run: its settings, the shaping check, the modes side
// by side, and the ratios the issue sets goals for.
//
// It is long on purpose: the report is printed in the order it is read.
func (b *bench) report(w io.Writer) {
	fmt.Fprintf(w, "\n== p2p image delivery benchmark\n")
	fmt.Fprintf(w, "command: %s\n", shellJoin(os.Args))
	fmt.Fprintf(w, "machines: %d; image: %d MiB raw random, compression none, sha256 %s; links (tbf, each way): server %d Mbit/s, machines %d Mbit/s; nproc %d\n",
		b.n, b.imageMB, b.sum[:16]+"…", b.serverMbit, b.machineMbit, nproc())
	fmt.Fprintf(w, "site peer: perMachine %d, linger %s; bootops serve --swarm-streams %s; repository: %s\n",
		b.perMachine, b.linger, or(strconv.Itoa(b.swarmStreams), "0", "default"), b.repoSites)
	for _, c := range b.calibration {
		fmt.Fprintf(w, "shaping: %s\n", c)
	}
	if len(b.results) == 0 {
		fmt.Fprintln(w, "no mode ran")
	} else {
		tw := &table{}
		head := []string{""}
		for _, r := range b.results {
			head = append(head, r.mode)
		}
		tw.row(head...)
		row := func(name string, f func(r *result) string) {
			cells := []string{name}
			for _, r := range b.results {
				cells = append(cells, f(r))
			}
			tw.row(cells...)
		}
		sec := func(v float64) string { return fmt.Sprintf("%.1f", v) }
		row("machines", func(r *result) string { return strconv.Itoa(r.machines) })
		row("fleet time (slowest machine), s", func(r *result) string { return sec(maxf(r.secs)) })
		row("median machine, s", func(r *result) string { return sec(median(r.secs)) })
		row("fastest machine, s", func(r *result) string { return sec(minf(r.secs)) })
		row("image on disk: slowest, s", func(r *result) string { return sec(maxf(r.imageSecs)) })
		row("image on disk: median, s", func(r *result) string { return sec(median(r.imageSecs)) })
		row("image on disk: fastest, s", func(r *result) string { return sec(minf(r.imageSecs)) })
		row("wall time of the mode, s", func(r *result) string { return sec(r.wall.Seconds()) })
		row("server sent on its uplink, MB", func(r *result) string { return fmt.Sprintf("%.1f", mb(r.serverTx)) })
		row("  as a multiple of the image", func(r *result) string { return fmt.Sprintf("%.2f", float64(r.serverTx)/float64(b.size)) })
		row("image bytes from the server, MB", func(r *result) string { return fmt.Sprintf("%.1f", mb(r.fromServer)) })
		row("image bytes from peers, MB", func(r *result) string { return fmt.Sprintf("%.1f", mb(r.fromPeers)) })
		row("failures", func(r *result) string { return strconv.Itoa(len(r.failures)) })
		row("client peak RSS: largest, MB", func(r *result) string {
			if len(r.rssKB) == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f", float64(slices.Max(r.rssKB))/1024)
		})
		row("host CPU busy during the mode, %", func(r *result) string { return fmt.Sprintf("%.0f", 100*r.hostBusy) })
		row("host CPU-seconds: user space / kernel", func(r *result) string { return fmt.Sprintf("%.1f / %.1f", r.hostUser, r.hostSys) })
		row("  per machine, CPU-s", func(r *result) string {
			return fmt.Sprintf("%.2f", (r.hostUser+r.hostSys)/float64(max(1, r.machines)))
		})
		row("  the least wall time the host's CPUs allow, s", func(r *result) string {
			return fmt.Sprintf("%.1f", (r.hostUser+r.hostSys)/float64(runtime.NumCPU()))
		})
		row("bootops serve CPU in the mode, s", func(r *result) string {
			if r.mode == "torrent" {
				return "-"
			}
			return fmt.Sprintf("%.1f", r.serveCPU.Seconds())
		})
		row("bootops serve peak RSS so far, MB", func(r *result) string {
			if r.mode == "torrent" {
				return "-"
			}
			return fmt.Sprintf("%.1f", float64(r.serveHWM)/1024)
		})
		row("swarm transfers failed: gone/slow/bad", func(r *result) string {
			if r.swarm == nil || r.mode != "peers" {
				return "-"
			}
			return fmt.Sprintf("%.0f/%.0f/%.0f", r.swarm["failed_transfers_total{why=gone}"], r.swarm["failed_transfers_total{why=slow}"], r.swarm["failed_transfers_total{why=bad}"])
		})
		tw.write(w)
		for _, r := range b.results {
			fmt.Fprintf(w, "%s: bytes by source: %s", r.mode, r.sourcesNote)
			if r.note != "" {
				fmt.Fprintf(w, "; %s", r.note)
			}
			fmt.Fprintln(w)
			for k, f := range r.failures {
				if k == 10 {
					fmt.Fprintf(w, "  … and %d more\n", len(r.failures)-10)
					break
				}
				fmt.Fprintf(w, "  FAILED %s\n", f)
			}
		}
	}
	for _, s := range b.skipped {
		fmt.Fprintln(w, s)
	}
	byMode := map[string]*result{}
	for _, r := range b.results {
		byMode[r.mode] = r
	}
	if alone := byMode["alone"]; alone != nil && len(alone.secs) > 0 {
		for _, m := range []string{"server", "peers", "torrent"} {
			r := byMode[m]
			if r == nil || len(r.secs) == 0 {
				continue
			}
			goal := ""
			if m != "server" {
				goal = " (goal ≤ 1.5)"
			}
			fmt.Fprintf(w, "%s: fleet time / one machine alone = %.1f / %.1f = %.2f%s", m, maxf(r.secs), maxf(alone.secs), maxf(r.secs)/maxf(alone.secs), goal)
			if m == "peers" {
				fmt.Fprintf(w, "; last image on disk / one machine alone = %.1f / %.1f = %.2f", maxf(r.imageSecs), maxf(alone.imageSecs), maxf(r.imageSecs)/maxf(alone.imageSecs))
			}
			fmt.Fprintln(w)
			if m == "peers" {
				// What this host's CPUs alone allow: the mode's CPU work
				// spread over every core without a moment idle.
				least := (r.hostUser + r.hostSys) / float64(runtime.NumCPU())
				fmt.Fprintf(w, "peers: the host's CPU work, %.1f CPU-s on %d cores, allows no less than %.1f s = %.2f × one machine alone\n", r.hostUser+r.hostSys, runtime.NumCPU(), least, least/maxf(alone.secs))
			}
		}
	}
	if r := byMode["peers"]; r != nil && len(r.secs) > 0 {
		// Every machine lingers until no other one fetches: they all power
		// off about when the last image is on its disk, give or take the
		// linger loop's second.
		if late := maxf(r.secs) - maxf(r.imageSecs); late > 5 {
			fmt.Fprintf(w, "NOTE: in peers mode the last power action came %.1f s after the last image was on its disk: the machines lingered although every one was complete (the site's linger is %s)\n", late, b.linger)
		}
	}
	for _, m := range []string{"server", "peers", "torrent"} {
		if r := byMode[m]; r != nil {
			goal := ""
			if m == "peers" {
				goal = " (goal ≤ 1.1)"
			}
			fmt.Fprintf(w, "%s: server bytes / image size = %.1f MB / %.1f MB = %.2f%s\n", m, mb(r.serverTx), mb(b.size), float64(r.serverTx)/float64(b.size), goal)
		}
	}
	fmt.Fprintf(w, "disks checked: %d, sha256 mismatches: %d; run took %.0f s\n", b.shaRuns, b.shaMismatch, time.Since(b.started).Seconds())
}

func or(s, zero, instead string) string {
	if s == zero {
		return instead
	}
	return s
}

// table prints aligned columns.
type table struct{ rows [][]string }

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	width := map[int]int{}
	for _, r := range t.rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, r := range t.rows {
		var line strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if i == 0 {
				line.WriteString(c + pad)
			} else {
				line.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(line.String(), " "))
	}
}

func shellJoin(args []string) string {
	var out []string
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$\\&;|<>*?()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

func nproc() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

// fakeSysfs makes the /sys an agent reads its identity and disks from.
func fakeSysfs(d, serial, mac string, sectors int64) string {
	for name, body := range map[string]string{
		"class/dmi/id/product_serial": serial, "class/dmi/id/product_uuid": "",
		"class/net/eth0/address": mac, "block/vda/size": strconv.FormatInt(sectors, 10), "block/vda/removable": "0",
	} {
		p := filepath.Join(d, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body+"\n"), 0o644)
	}
	os.MkdirAll(filepath.Join(d, "class/net/eth0/device"), 0o755)
	return d
}

// ---- subcommands, run in the namespaces

// agentMain is one machine: the agent with its disk a file, its mounts
// and power action fakes. It prints one agentLine.
func agentMain(args []string) error {
	t0 := time.Now()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	script := fs.String("script", "", "URL of the machine's iPXE script")
	diskPath := fs.String("disk", "", "the file standing for its disk")
	sysfs := fs.String("sys", "", "its fake /sys")
	node := fs.String("node", "", "its node name (for the result line)")
	timeout := fs.Duration("timeout", time.Hour, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkURL(*script); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()

	res := agentLine{Node: *node}
	w := &watcher{t0: t0}
	var mu sync.Mutex
	var powered time.Duration
	err := func() error {
		// The kernel command line of the script the machine is served,
		// with its boot token, as iPXE fetches it.
		var kargs map[string]string
		var err error
		for try := 0; try < 5; try++ {
			if kargs, err = fleet.ScriptArgs(ctx, *script); err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			return fmt.Errorf("script: %w", err)
		}
		return agent.Session(ctx, kargs, *sysfs, &stamped{t0: t0, w: os.Stderr}, func(r *agent.Runner) {
			r.ResolveDisk = func(string) (string, error) { return *diskPath, nil }
			// cloud-init writes its seed into a folder under $TMPDIR.
			r.Mount = func(dev, fstype, dir string) error { return nil }
			r.Unmount = func(string) error { return nil }
			r.Power = func(string) error {
				mu.Lock()
				defer mu.Unlock()
				if powered == 0 {
					powered = time.Since(t0)
				}
				return nil
			}
			w.inner = r.Report
			r.Report = w
		})
	}()
	mu.Lock()
	res.Seconds = powered.Seconds()
	mu.Unlock()
	res.OK = err == nil && res.Seconds > 0
	switch {
	case err != nil:
		res.Err = err.Error()
	case !res.OK:
		res.Err = "the workflow ended without its power action"
	}
	if res.Seconds == 0 {
		res.Seconds = time.Since(t0).Seconds()
	}
	w.mu.Lock()
	res.ImageSeconds = w.imageDone.Seconds()
	res.FromServer, res.FromPeers = w.fromServer, w.fromPeers
	w.mu.Unlock()
	_, res.RSSKB = procstat.Mem(os.Getpid())
	return json.NewEncoder(os.Stdout).Encode(res)
}

// watcher passes the agent's events on to its uplink and notes when the
// image is on the disk and where its bytes came from.
type watcher struct {
	inner                 agent.Reporter
	t0                    time.Time
	mu                    sync.Mutex
	imageDone             time.Duration
	fromServer, fromPeers int64
}

func (w *watcher) Report(e plan.AgentEvent) {
	w.mu.Lock()
	switch {
	case e.Type == plan.AgentActionDone && e.Action == "image-to-disk":
		w.imageDone = time.Since(w.t0)
	case e.Type == plan.AgentProgress && (e.FromServer > 0 || e.FromPeers > 0):
		w.fromServer, w.fromPeers = e.FromServer, e.FromPeers
	}
	w.mu.Unlock()
	w.inner.Report(e)
}

// Flush delivers the queued events (the Runner flushes before its power
// action).
func (w *watcher) Flush(ctx context.Context) error {
	if f, ok := w.inner.(agent.Flusher); ok {
		return f.Flush(ctx)
	}
	return nil
}

// stamped writes lines to w, each after the seconds since t0: the agent's
// console, in the machine's log file.
type stamped struct {
	mu  sync.Mutex
	t0  time.Time
	w   io.Writer
	buf []byte
}

func (s *stamped) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		fmt.Fprintf(s.w, "%8.3fs %s\n", time.Since(s.t0).Seconds(), s.buf[:i])
		s.buf = s.buf[i+1:]
	}
}

// fileserverMain serves a folder (sendfile, as any static server).
func fileserverMain(args []string) error {
	fs := flag.NewFlagSet("fileserver", flag.ContinueOnError)
	dir := fs.String("dir", "", "folder to serve")
	addr := fs.String("addr", "", "IP:PORT to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkAddr(*addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(*dir)), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// fetchMain GETs a URL: its body to stdout, or with -discard a JSON line
// of the bytes read and the seconds it took (-bytes N: the first N bytes
// only). -wait retries a refused connection that long.
func fetchMain(args []string) error {
	fs := flag.NewFlagSet("fetch", flag.ContinueOnError)
	discard := fs.Bool("discard", false, "count the body instead of printing it")
	n := fs.Int64("bytes", 0, "read only this many bytes (a Range request)")
	wait := fs.Duration("wait", 0, "retry failed connections this long")
	timeout := fs.Duration("timeout", time.Minute, "the longest the transfer may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u := fs.Arg(0)
	if err := checkURL(u); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *wait+*timeout)
	defer cancel()
	deadline := time.Now().Add(*wait)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		if *n > 0 {
			req.Header.Set("Range", fmt.Sprintf("bytes=0-%d", *n-1))
		}
		t0 := time.Now()
		resp, err := client.Do(req)
		if err == nil && resp.StatusCode/100 != 2 {
			resp.Body.Close()
			err = fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		if err != nil {
			if time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return err
		}
		defer resp.Body.Close()
		if !*discard {
			_, err := io.Copy(os.Stdout, resp.Body)
			return err
		}
		got, err := io.Copy(io.Discard, resp.Body)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"bytes": got, "seconds": time.Since(t0).Seconds()})
	}
}

// probeMain waits until a TCP port accepts a connection.
func probeMain(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	wait := fs.Duration("wait", 10*time.Second, "how long to try")
	if err := fs.Parse(args); err != nil {
		return err
	}
	addr := fs.Arg(0)
	if err := checkAddr(addr); err != nil {
		return err
	}
	deadline := time.Now().Add(*wait)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
