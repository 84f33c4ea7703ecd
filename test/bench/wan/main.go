// Command wan benchmarks a file download across a WAN, side by side in one
// run: curl, and the agent's own resumable download (agent.Fetch, what the
// image action streams an image with). It needs root.
//
//	go build -o /tmp/wanbench ./test/bench/wan
//	/tmp/wanbench [-mib 64] [-delay 50ms] [-loss 1] [-mbit 20] [-cut 20s] [-rounds 1] [-timeout 10m]
//
// (test/bench/wan.sh builds and runs it; `make bench` runs that.)
//
// Three network namespaces: wanb-srv holds the server (198.19.60.10, a Go
// HTTP server with Range support and a strong ETag, serving N MiB of
// random bytes from memory), wanb-store the client (198.19.61.2), and
// wanb-wan between them routes and shapes each direction with package
// wanem: -delay one way, -loss percent, -mbit Mbit/s (this kernel has no
// netem). Every download writes its file to disk and is checked by its
// sha256.
//
// Scenarios, each client in turn:
//   - goodput: the download's wall time, its goodput in Mbit/s and as a
//     fraction of the shaped rate;
//   - cut: the link cut for -cut once the server has sent a third of the
//     file (every packet dropped; the connection itself survives it);
//   - cut, connection lost: the same, and the server's end of the
//     connection aborted at the cut, as when the store router's NAT forgets
//     it or the server restarts: the client learns of it only by its own
//     probes once the link is back.
//
// For the cuts it prints the time, how long after the link came back the
// file flowed again, the HTTP requests, the agent's resumes, and what was
// fetched again: the body bytes the server wrote beyond the file's size
// (sent twice, or lost in a dead socket's buffer), and the IP bytes the
// link carried down per byte of the file (headers and TCP's retransmissions
// included; about 1.04 without a cut). Clients: curl (plain),
// curl with -C - --retry and a stall limit, and agent.Fetch (the agent's
// HTTP transport: the default one, keep-alive probes every 30 s).
//
// curl and the agent's download each run as a process of their own in
// wanb-store (the agent's: this program's fetch subcommand). Each download
// is bounded by -timeout; namespaces and files are removed
// at the end, also on an error or Ctrl-C. Nothing outside 198.19.60.0/23
// in these namespaces is ever addressed.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bootops/bootops/agent"
	"github.com/bootops/bootops/test/bench/wan/wanem"
)

const (
	nsServer, nsWAN, nsStore = "wanb-srv", "wanb-wan", "wanb-store"
	serverIP, storeIP        = "198.19.60.10", "198.19.61.2"
	serverAddr               = serverIP + ":8080"
	fileURL                  = "http://" + serverAddr + "/image.raw"
)

type config struct {
	mib     int
	shape   wanem.Shape
	cut     time.Duration
	rounds  int
	timeout time.Duration
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "fetch" {
		if err := fetchMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "wan fetch:", err)
			os.Exit(1)
		}
		return
	}
	var c config
	var loss, mbit float64
	flag.IntVar(&c.mib, "mib", 64, "the file's size in MiB")
	flag.DurationVar(&c.shape.Delay, "delay", 50*time.Millisecond, "one-way delay, each direction")
	flag.Float64Var(&loss, "loss", 1, "packets lost at random, percent, each direction")
	flag.Float64Var(&mbit, "mbit", 20, "rate in Mbit/s, each direction")
	flag.DurationVar(&c.cut, "cut", 20*time.Second, "how long the link is cut in the cut scenarios (0: none)")
	flag.IntVar(&c.rounds, "rounds", 1, "goodput downloads per client")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Minute, "each download's limit")
	flag.Parse()
	c.shape.Loss, c.shape.Rate = loss/100, int64(mbit*1e6)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, c)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "wan:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	if os.Geteuid() != 0 {
		return errors.New("run as root (network namespaces, TUN devices)")
	}
	for _, bin := range []string{"ip", "curl"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is missing (Debian packages iproute2, curl)", bin)
		}
	}
	work, err := os.MkdirTemp("/var/tmp", "wan-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	removeNetns()
	defer removeNetns()
	if err := makeNetns(); err != nil {
		return err
	}
	link, err := wanem.Start(nsWAN, "srv", "store", c.shape)
	if err != nil {
		return err
	}
	defer link.Close()
	srv, err := startServer(c.mib << 20)
	if err != nil {
		return err
	}
	defer srv.Close()
	b := &bench{config: c, link: link, srv: srv, work: work}
	b.header()
	return b.scenarios(ctx)
}

// makeNetns builds server — wan — store, each link a veth pair.
func makeNetns() error {
	steps := [][]string{
		{"netns", "add", nsServer}, {"netns", "add", nsWAN}, {"netns", "add", nsStore},
		{"-n", nsWAN, "link", "add", "name", "srv", "type", "veth", "peer", "name", "eth0", "netns", nsServer},
		{"-n", nsWAN, "link", "add", "name", "store", "type", "veth", "peer", "name", "eth0", "netns", nsStore},
		{"-n", nsWAN, "addr", "add", "198.19.60.1/24", "dev", "srv"},
		{"-n", nsWAN, "addr", "add", "198.19.61.1/24", "dev", "store"},
		{"-n", nsServer, "addr", "add", serverIP + "/24", "dev", "eth0"},
		{"-n", nsStore, "addr", "add", storeIP + "/24", "dev", "eth0"},
	}
	for _, ns := range []string{nsServer, nsWAN, nsStore} {
		steps = append(steps, []string{"-n", ns, "link", "set", "lo", "up"})
	}
	steps = append(steps,
		[]string{"-n", nsWAN, "link", "set", "srv", "up"}, []string{"-n", nsWAN, "link", "set", "store", "up"},
		[]string{"-n", nsServer, "link", "set", "eth0", "up"}, []string{"-n", nsStore, "link", "set", "eth0", "up"},
		[]string{"-n", nsServer, "route", "add", "198.19.61.0/24", "via", "198.19.60.1"},
		[]string{"-n", nsStore, "route", "add", "198.19.60.0/24", "via", "198.19.61.1"})
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// removeNetns kills what runs in the namespaces and removes them (a
// previous run's too, should it have been killed).
func removeNetns() {
	for _, ns := range []string{nsStore, nsWAN, nsServer} {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		for _, f := range strings.Fields(string(out)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		exec.Command("ip", "netns", "del", ns).Run()
	}
}

// server serves the file from memory in the server's namespace, counting
// the requests and the body bytes it writes, and can abort every open
// connection.
type server struct {
	file []byte
	sum  string
	http *http.Server

	sent, requests atomic.Int64
	mu             sync.Mutex
	conns          map[net.Conn]bool
}

func startServer(size int) (*server, error) {
	s := &server{file: make([]byte, size), conns: map[net.Conn]bool{}}
	rand.Read(s.file)
	h := sha256.Sum256(s.file)
	s.sum = hex.EncodeToString(h[:])
	var ln net.Listener
	if err := wanem.Do(nsServer, func() (err error) {
		ln, err = net.Listen("tcp", serverAddr)
		return err
	}); err != nil {
		return nil, err
	}
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ConnState: s.track}
	go s.http.Serve(ln)
	return s, nil
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	w.Header().Set("ETag", `"`+s.sum[:16]+`"`)
	http.ServeContent(countingWriter{w, &s.sent}, r, "image.raw", time.Unix(1_700_000_000, 0), bytes.NewReader(s.file))
}

func (s *server) track(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == http.StateClosed || st == http.StateHijacked {
		delete(s.conns, c)
	} else {
		s.conns[c] = true
	}
}

// abort drops every open connection at once, without a FIN: a reset the
// client sees only when it next sends.
func (s *server) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
}

func (s *server) Close() error { return s.http.Close() }

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

func (b *bench) header() {
	cc, _ := exec.Command("ip", "netns", "exec", nsServer, "sysctl", "-n", "net.ipv4.tcp_congestion_control").Output()
	curl, _ := exec.Command("curl", "--version").Output()
	fmt.Printf("WAN: %s (wanem); a %d MiB file; the server's TCP congestion control: %s; %s; %d cores; %s\n",
		b.shape, b.mib, strings.TrimSpace(string(cc)), strings.Join(strings.Fields(string(curl))[:2], " "), runtime.NumCPU(), runtime.Version())
}

// download is one client's fetch of the file into path.
type download func(ctx context.Context, path string) (resumes int, err error)

type client struct {
	name string
	get  download
}

func curl(args ...string) download {
	return func(ctx context.Context, path string) (int, error) {
		argv := append([]string{"netns", "exec", nsStore, "curl", "-sS", "-o", path}, args...)
		out, err := exec.CommandContext(ctx, "ip", append(argv, fileURL)...).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("curl: %v: %s", err, strings.TrimSpace(string(out)))
		}
		return 0, nil
	}
}

// agentFetch runs this program's fetch subcommand in the store's
// namespace: a process of its own, as curl is, and as the agent is.
func agentFetch(ctx context.Context, path string) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", nsStore, self, "fetch", "-o", path, fileURL).CombinedOutput()
	resumes := strings.Count(string(out), "connection lost")
	if err != nil {
		return resumes, fmt.Errorf("agent.Fetch: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return resumes, nil
}

// fetchMain is `wan fetch -o FILE URL`: agent.Fetch with the agent's
// transport (http.DefaultTransport's settings: keep-alive probes every
// 30 s), its log on stderr.
func fetchMain(args []string) error {
	fs := flag.NewFlagSet("fetch", flag.ContinueOnError)
	out := fs.String("o", "", "the file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *out == "" {
		return errors.New("usage: wan fetch -o FILE URL")
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	_, _, err = agent.Fetch(context.Background(), client, fs.Arg(0), f, func(msg string) { fmt.Fprintln(os.Stderr, msg) })
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
