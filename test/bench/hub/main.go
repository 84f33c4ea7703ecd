// Command hub measures the hub: S site daemons' status stores and
// forwarders (in this process) send a full provisioning's events of M
// machines each to a `bootops hub` process (TLS, per-site nkeys, a file
// stream) and the figures are the hub's: events/s until its view has
// every event, its RSS and CPU, the lag from a site's store to the hub's
// view, and the catch-up of sites cut off while their machines provision.
// The reference, in the same run: the same number of messages of the same
// size published straight to a JetStream stream on the same kind of
// server (nats.go async publish, no store, no outbox, no view): the floor.
//
//	go run ./test/bench/hub -bootops bin/bootops -sites 50 -machines 200 -cut 10
package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/hub"
	"github.com/bootops/bootops/test/fleet"
	"github.com/bootops/bootops/test/procstat"
	"github.com/bootops/bootops/trust"
)

func main() {
	bin := flag.String("bootops", "bin/bootops", "the bootops binary")
	nSites := flag.Int("sites", 50, "site daemons")
	machines := flag.Int("machines", 200, "machines per site")
	cut := flag.Int("cut", 10, "sites cut off while their machines provision, then reconnected")
	var o options
	flag.StringVar(&o.hubLog, "hub-log", "", "copy the hub's log to this file at the end")
	siteLogFile := flag.String("site-log", "", "write the forwarders' log to this file")
	flag.BoolVar(&o.timeline, "timeline", false, "print, every second, what the forwarders sent, what waits in the outboxes, the stream sequence the hub's view applied, its events and refusals")
	flag.StringVar(&o.hubPprof, "hub-pprof", "", "the hub serves its profiles on this address (bootops hub --pprof-addr)")
	flag.Parse()
	o.siteLog = slog.New(slog.DiscardHandler)
	if *siteLogFile != "" {
		f, err := os.Create(*siteLogFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hub bench:", err)
			os.Exit(1)
		}
		defer f.Close()
		o.siteLog = slog.New(slog.NewTextHandler(f, nil))
	}
	err := run(*bin, *nSites, *machines, *cut, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hub bench:", err)
		os.Exit(1)
	}
}

// options are the bench's diagnostics.
type options struct {
	hubLog   string       // copy the hub's log here at the end ("": nowhere)
	hubPprof string       // the hub's --pprof-addr ("": none)
	timeline bool         // print the run's progress every second
	siteLog  *slog.Logger // the forwarders'
}

type site struct {
	name  string
	idx   int
	store *status.Durable
	fwd   *hub.Forwarder
	log   *slog.Logger
	stop  context.CancelFunc
	done  chan struct{}
}

// run is long on purpose: a benchmark reads best top to bottom, step by
// step as BENCHMARKS.md ("Many sites: events into the hub") describes it.
func run(bin string, nSites, machines, cut int, o options) error {
	work, err := os.MkdirTemp("", "bootops-hub-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	tlsDir := filepath.Join(work, "hubstate")
	if out, err := exec.Command(bin, "ca", "init", "--host", "127.0.0.1", "--state-dir", tlsDir).CombinedOutput(); err != nil {
		return fmt.Errorf("ca init: %v\n%s", err, out)
	}
	sitesDir := filepath.Join(work, "sites")
	seeds := map[string][]byte{}
	for i := range nSites {
		name := fmt.Sprintf("site-%02d", i)
		seedFile := filepath.Join(work, name+".seed")
		if out, err := exec.Command(bin, "hub", "add-site", name, "--sites-dir", sitesDir, "-o", seedFile).CombinedOutput(); err != nil {
			return fmt.Errorf("add-site: %v\n%s", err, out)
		}
		b, _ := os.ReadFile(seedFile)
		seeds[name] = []byte(strings.TrimSpace(string(b)))
	}
	natsAddr, httpAddr := "127.0.0.1:"+procstat.FreePort(), "127.0.0.1:"+procstat.FreePort()
	hubCmd := exec.Command(bin, "hub", "--name", "bench", "--sites-dir", sitesDir, "--store", filepath.Join(work, "js"),
		"--tls-cert", filepath.Join(tlsDir, "tls/server.pem"), "--tls-key", filepath.Join(tlsDir, "tls/server-key.pem"),
		"--nats-addr", natsAddr, "--http-addr", httpAddr, "--log-format", "text")
	if o.hubPprof != "" {
		hubCmd.Args = append(hubCmd.Args, "--pprof-addr", o.hubPprof)
	}
	hubLog, _ := os.Create(filepath.Join(work, "hub.log"))
	hubCmd.Stdout, hubCmd.Stderr = hubLog, hubLog
	if o.hubLog != "" {
		defer func() {
			b, _ := os.ReadFile(hubLog.Name())
			os.WriteFile(o.hubLog, b, 0o644)
		}()
	}
	if err := hubCmd.Start(); err != nil {
		return err
	}
	defer func() { hubCmd.Process.Kill(); hubCmd.Wait() }()
	hubURL := "http://" + httpAddr
	if err := waitHTTP(hubURL+"/metrics", 30*time.Second); err != nil {
		return err
	}
	ca, _ := os.ReadFile(filepath.Join(tlsDir, "tls/ca.pem"))
	pool, err := trust.PoolFromPEM(string(ca))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sites []*site
	for i := range nSites {
		name := fmt.Sprintf("site-%02d", i)
		st, err := status.Open(filepath.Join(work, name+".db"), status.Options{Outbox: true})
		if err != nil {
			return err
		}
		s := &site{name: name, idx: i, store: st, log: o.siteLog.With("site", name)}
		s.start(ctx, natsAddr, seeds[name], pool)
		sites = append(sites, s)
	}
	pid := hubCmd.Process.Pid
	cpu0 := procstat.CPU(pid)

	// Probes: an event every 100 ms at site-00, timed to the hub's view.
	var lags []time.Duration
	var lagMu sync.Mutex
	probeCtx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	probesDone := make(chan struct{})
	go func() {
		defer close(probesDone)
		for i := 0; probeCtx.Err() == nil; i++ {
			msg := fmt.Sprintf("probe %d", i)
			t0 := time.Now()
			sites[0].store.RecordSync(status.Event{Kind: status.KindAgent, Site: sites[0].name, Node: "probe", Message: msg})
			sites[0].fwd.Poke()
			for probeCtx.Err() == nil && time.Since(t0) < 30*time.Second {
				if hubHas(hubURL, sites[0].name+"/probe", msg) {
					lagMu.Lock()
					lags = append(lags, time.Since(t0))
					lagMu.Unlock()
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	// Every site provisions its machines at once.
	start := time.Now()
	timelineCtx, stopTimeline := context.WithCancel(ctx)
	defer stopTimeline()
	timelineDone := make(chan struct{})
	go func() {
		defer close(timelineDone)
		if o.timeline {
			printTimeline(timelineCtx, start, hubURL, sites)
		}
	}()
	var wg sync.WaitGroup
	for _, s := range sites {
		wg.Add(1)
		go func() { defer wg.Done(); s.provision(0, machines) }()
	}
	wg.Wait()
	written := time.Since(start)
	total := nSites * machines * fleet.EventsPerMachine
	if err := waitApplied(hubURL, sites, 10*time.Minute); err != nil {
		return err
	}
	elapsed := time.Since(start)
	stopProbes()
	<-probesDone
	stopTimeline()
	<-timelineDone
	cpu := procstat.CPU(pid) - cpu0
	rss, hwm := procstat.Mem(pid)
	slices.Sort(lags)
	pct := func(p float64) time.Duration {
		if len(lags) == 0 {
			return 0
		}
		return lags[min(len(lags)-1, int(p*float64(len(lags))))].Round(time.Millisecond)
	}
	fmt.Printf("bootops hub: %d sites × %d machines × %d events = %d events (plus %d probes): written to the sites' stores in %s, all in the hub's view after %s: %.0f events/s\n",
		nSites, machines, fleet.EventsPerMachine, total, len(lags), written.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds())
	fmt.Printf("  hub process: CPU %s (%.2f cores over the run), RSS %d MiB, peak RSS %d MiB\n", cpu.Round(time.Millisecond), cpu.Seconds()/elapsed.Seconds(), rss>>10, hwm>>10)
	fmt.Printf("  lag, site store → hub view, under that load (%d probes, one every 100 ms): p50 %s, p99 %s, max %s\n", len(lags), pct(0.50), pct(0.99), pct(1))

	// Cut sites off; their machines provision; they come back.
	if cut > 0 {
		cutSites := sites[len(sites)-cut:]
		for _, s := range cutSites {
			s.stop()
			<-s.done
		}
		for _, s := range cutSites {
			wg.Add(1)
			go func() { defer wg.Done(); s.provision(machines, 2*machines) }()
		}
		wg.Wait()
		backlog := 0
		for _, s := range cutSites {
			out, _ := s.store.Pending(0, 1<<30)
			backlog += len(out)
		}
		t0 := time.Now()
		for _, s := range cutSites {
			s.start(ctx, natsAddr, seeds[s.name], pool)
		}
		if err := waitApplied(hubURL, sites, 10*time.Minute); err != nil {
			return err
		}
		fmt.Printf("  catch-up: %d sites cut off while their %d machines each provisioned (%d events waiting in their outboxes), reconnected: all in the hub's view %s later (%.0f events/s)\n",
			cut, machines, backlog, time.Since(t0).Round(time.Millisecond), float64(backlog)/time.Since(t0).Seconds())
	}
	for _, s := range sites {
		s.stop()
		<-s.done
		s.store.Close()
	}

	// The reference: the same count of same-size messages into a
	// JetStream file stream, published straight with nats.go.
	return reference(work, total)
}

func (s *site) start(ctx context.Context, addr string, seed []byte, pool *x509.CertPool) {
	cctx, cancel := context.WithCancel(ctx)
	s.stop = cancel
	s.done = make(chan struct{})
	s.fwd = &hub.Forwarder{Site: s.name, URLs: []string{"nats://" + addr}, Seed: seed, RootCAs: pool, Outbox: s.store,
		Hello: func() hub.Hello { return hub.Hello{Plan: "bench"} }, Log: s.log}
	go func() { defer close(s.done); s.fwd.Run(cctx) }()
}

// provision writes a full provisioning's events of machines from..to-1.
func (s *site) provision(from, to int) {
	var batch []status.Event
	for i := from; i < to; i++ {
		batch = append(batch, fleet.Provisioning(s.name, s.idx, i)...)
		if len(batch) >= 240 || i == to-1 {
			s.store.RecordSync(batch...)
			s.fwd.Poke()
			batch = nil
		}
	}
}

// printTimeline prints, every second until ctx ends, the events the
// forwarders had acknowledged, those waiting in the outboxes and the
// stream sequence the hub's view has applied.
func printTimeline(ctx context.Context, start time.Time, base string, sites []*site) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var sent uint64
		unsent := 0
		for _, s := range sites {
			sent += s.fwd.Sent()
			n, _ := s.store.Unsent()
			unsent += n
		}
		fmt.Printf("  %5.1fs acknowledged %6d, in the outboxes %6d, view applied %s messages, events %d, refused %v\n",
			time.Since(start).Seconds(), sent, unsent, metric(base, "bootops_hub_applied_messages_total"), viewEvents(base), refused(base))
	}
}

// viewEvents is the events the hub's view applied, all sites.
func viewEvents(base string) uint64 {
	var doc struct{ Sites []struct{ Events uint64 } }
	resp, err := http.Get(base + "/api/v1/status")
	if err != nil {
		return 0
	}
	json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	var n uint64
	for _, s := range doc.Sites {
		n += s.Events
	}
	return n
}

// refused is the hub's refusals by reason, all sites.
func refused(base string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "bootops_hub_refused_total{")
		if !ok {
			continue
		}
		labels, val, _ := strings.Cut(rest, "} ")
		_, reason, _ := strings.Cut(labels, `reason="`)
		reason, _, _ = strings.Cut(reason, `"`)
		f, _ := strconv.ParseFloat(val, 64)
		out[reason] += f
	}
	return out
}

// metric is one of the hub's metrics, as /metrics says it.
func metric(base, name string) string {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return "?"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return "?"
}

func hubHas(base, key, msg string) bool {
	resp, err := http.Get(base + "/api/v1/events?key=" + key)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var evs []status.Event
	json.NewDecoder(resp.Body).Decode(&evs)
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Message == msg {
			return true
		}
	}
	return false
}

// waitApplied waits until the hub's view has every event the sites'
// stores held when it looked (and their outboxes are empty). What the
// stores hold is counted before the view is asked: the probes go on
// meanwhile, and a probe recorded while the view's status is on its way
// is not one the view can have yet.
func waitApplied(base string, sites []*site, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var want uint64
		for _, s := range sites {
			for _, m := range s.store.Machines() {
				want += uint64(m.Events)
			}
		}
		empty := true
		for _, s := range sites {
			if out, _ := s.store.Pending(0, 1); len(out) > 0 {
				empty = false
				break
			}
		}
		if empty && viewEvents(base) >= want {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the hub's view did not catch up in %s", d)
}

func waitHTTP(url string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer in %s", url, d)
}

// reference publishes n messages of an event's size to a JetStream file
// stream on an embedded server, async, and reports the rate.
func reference(work string, n int) error {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(work, "ref"), NoSigs: true, NoLog: true})
	if err != nil {
		return err
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("reference server not ready")
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "REF", Subjects: []string{"ref.>"}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute}); err != nil {
		return err
	}
	b, _ := json.Marshal(status.Event{Time: time.Now(), Kind: status.KindAgent, Site: "site-00", Node: "n00000", State: status.StateProvisioning, Action: "image-to-disk", Step: 2, Steps: 4, Seq: 5, Bytes: 64 << 20, Total: 64 << 20, Rate: 4e7, Message: "done image-to-disk"})
	start := time.Now()
	for i := range n {
		msg := nats.NewMsg("ref." + strconv.Itoa(i%50))
		msg.Header.Set(jetstream.MsgIDHeader, strconv.Itoa(i))
		msg.Data = b
		// A full window waits for acknowledgements (nats.go's default
		// gives up after 200 ms, which a loaded machine exceeds).
		if _, err := js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute)); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("reference: not acknowledged")
	}
	el := time.Since(start)
	fmt.Printf("reference, nats.go async publish of %d messages of %d bytes (message IDs on) into a JetStream file stream, one embedded server, no TLS: %s, %.0f messages/s\n", n, len(b), el.Round(time.Millisecond), float64(n)/el.Seconds())
	return nil
}
