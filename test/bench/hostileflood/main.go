// Command hostileflood is the attacker of test/bench/hostile's newer
// floods, one per subcommand, each bounded in count and in time and sent
// only to the -server (or -server-ip) it is given (loopback, or inside the
// bench's network namespaces):
//
//	report     the installed OS's reports of one provisioned node, with its
//	           real credential and with forged ones
//	challenge  TPM challenges (check-ins with a TPM identity and no proof),
//	           from a few addresses, with real boot tokens, forged ones and none
//	lease      DHCPv4 REQUESTs that never DISCOVERed, from made-up MACs,
//	           naming the pool's addresses
//
// Meanwhile a probe from an address of its own asks what a real machine
// asks and times the answers. It prints a JSON summary.
//
//	hostileflood report -server http://127.0.0.1:8080 -token … -node n000 -install …
//	hostileflood challenge -server http://127.0.0.1:8080 -serial TPM-000 -node t000
//	hostileflood lease -iface vcli -server-ip 198.18.2.1 -pool 198.18.2.100-198.18.2.199 -probe-mac 52:54:00:de:00:03
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/bootops/bootops/test/flood"
)

func main() {
	modes := map[string]func([]string) (any, error){"report": report, "challenge": challenge, "lease": lease}
	if len(os.Args) < 2 || modes[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: hostileflood report|challenge|lease [flags] (-h: the flags)")
		os.Exit(2)
	}
	out, err := modes[os.Args[1]](os.Args[2:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostileflood %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

// options are the flags every HTTP flood takes.
type options struct {
	server     string
	sources    []string
	probeFrom  []string
	probeEvery time.Duration
	probeAfter time.Duration
	deadline   time.Duration
	workers    int
	sourceList string
	probeList  string
	flags      *flag.FlagSet
}

func httpFlags(name string) *options {
	o := &options{flags: flag.NewFlagSet(name, flag.ExitOnError)}
	o.flags.StringVar(&o.server, "server", "http://127.0.0.1:8080", "the daemon (loopback or inside the bench's namespaces)")
	o.flags.StringVar(&o.sourceList, "sources", "127.0.1.1-127.0.1.4", "the attacker's addresses, comma-separated, or FIRST-LAST")
	o.flags.StringVar(&o.probeList, "probe-sources", "127.0.2.1", "the probe's addresses (taken in turn), comma-separated, or FIRST-LAST")
	o.flags.DurationVar(&o.probeEvery, "probe-every", 200*time.Millisecond, "how often the probe asks")
	o.flags.DurationVar(&o.probeAfter, "probe-after", 2*time.Second, "how long the probe goes on asking after the flood")
	o.flags.DurationVar(&o.deadline, "deadline", time.Minute, "give up on everything after this long (at most 60s)")
	o.flags.IntVar(&o.workers, "workers", 16, "concurrent requests")
	return o
}

func (o *options) parse(args []string) error {
	o.flags.Parse(args)
	var err1, err2 error
	o.sources, err1 = flood.Sources(o.sourceList)
	o.probeFrom, err2 = flood.Sources(o.probeList)
	switch {
	case err1 != nil || err2 != nil:
		return fmt.Errorf("addresses: %v", firstErr(err1, err2))
	case o.deadline > time.Minute || o.probeAfter > 30*time.Second:
		return fmt.Errorf("-deadline %s, -probe-after %s: at most 1m and 30s", o.deadline, o.probeAfter)
	case o.workers < 1 || o.workers > 256:
		return fmt.Errorf("-workers %d: 1 to 256", o.workers)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// codes counts answers by status (0: no answer).
type codes struct {
	mu sync.Mutex
	m  map[string]map[int]int
}

func (c *codes) add(kind string, code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]map[int]int{}
	}
	if c.m[kind] == nil {
		c.m[kind] = map[int]int{}
	}
	c.m[kind][code]++
}

// probe is a real machine's request, asked every so often while a flood
// runs, timed.
type probe struct {
	mu       sync.Mutex
	took     []time.Duration
	asked    int
	failures int
	first    string // the first failure, to say what went wrong
}

// run asks until stop is closed: ask(i) is the i-th request, an error a
// failure.
func (p *probe) run(every time.Duration, stop <-chan struct{}, ask func(i int) error) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(every):
		}
		t0 := time.Now()
		err := ask(i)
		p.mu.Lock()
		p.asked++
		if err != nil {
			p.failures++
			if p.first == "" {
				p.first = err.Error()
			}
		} else {
			p.took = append(p.took, time.Since(t0))
		}
		p.mu.Unlock()
	}
}

// ProbeSummary is what the probe saw.
type ProbeSummary struct {
	Probes        int    `json:"probes"`
	ProbeFailures int    `json:"probeFailures"`
	FirstFailure  string `json:"firstFailure,omitempty"`
	ProbeMedian   string `json:"probeMedian"`
	ProbeMax      string `json:"probeMax"`
}

func (p *probe) summary() ProbeSummary {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := ProbeSummary{Probes: p.asked, ProbeFailures: p.failures, FirstFailure: p.first, ProbeMedian: "-", ProbeMax: "-"}
	if len(p.took) > 0 {
		t := slices.Clone(p.took)
		slices.Sort(t)
		s.ProbeMedian = round(t[len(t)/2])
		s.ProbeMax = round(t[len(t)-1])
	}
	return s
}

func round(d time.Duration) string {
	if d < 10*time.Millisecond {
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// flood runs n requests on o.workers workers spread over o.sources (send(c,
// i) is the i-th) while the probe asks, and returns how long the flood
// took; the probe stops o.probeAfter later.
func (o *options) flood(ctx context.Context, n int, send func(c *http.Client, i int), p *probe, ask func(i int) error) time.Duration {
	stop := make(chan struct{})
	var pw sync.WaitGroup
	pw.Add(1)
	go func() {
		defer pw.Done()
		p.run(o.probeEvery, stop, ask)
	}()
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for w := range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := flood.Client(o.sources[w%len(o.sources)], 2, 10*time.Second)
			for i := range next {
				send(c, i)
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	took := time.Since(start)
	time.Sleep(o.probeAfter)
	close(stop)
	pw.Wait()
	return took
}
