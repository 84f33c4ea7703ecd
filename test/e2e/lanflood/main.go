// Command lanflood is a hostile machine on a provisioning LAN, for the
// end-to-end test of bootops under attack: from several source addresses
// at once it asks for the scripts of made-up machines (and checks them in
// with the tokens it gets, or with forged ones), holds idle keep-alive
// connections, and sends bodies one byte at a time. A probe from an
// address of its own meanwhile asks what a real machine asks and times
// the answers. Everything is bounded in count and in time, and it talks
// only to the -server it is given (an address inside the test's network
// namespaces). It prints a JSON summary.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bootops/bootops/test/flood"
)

type summary struct {
	Scripts       map[int]int `json:"scripts"`  // status → count
	CheckIns      map[int]int `json:"checkIns"` // with the tokens the scripts gave
	Forged        map[int]int `json:"forged"`   // check-ins with forged tokens
	Errors        int         `json:"errors"`
	Idle          int         `json:"idleOpened"`
	IdleClosed    int         `json:"idleClosedByServer"`
	Slow          int         `json:"slowOpened"`
	SlowClosed    int         `json:"slowClosedByServer"`
	SlowLongest   string      `json:"slowLongest"` // the longest a slow body was read before the server gave up
	Probes        int         `json:"probes"`
	ProbeFailures int         `json:"probeFailures"`
	ProbeMax      string      `json:"probeMax"`
	ProbeMedian   string      `json:"probeMedian"`
	Elapsed       string      `json:"elapsed"`

	mu sync.Mutex
}

func (s *summary) count(m map[int]int, code int) {
	s.mu.Lock()
	m[code]++
	s.mu.Unlock()
}

var (
	tokenRe   = regexp.MustCompile(`bootops\.token=([A-Za-z0-9.]+)`)
	machineRe = regexp.MustCompile(`bootops\.machine=([a-z]+:[A-Za-z0-9:._-]+)`)
)

// main is long on purpose: the attack reads best top to bottom, phase by
// phase as the package comment tells it, every bound in sight.
func main() {
	server := flag.String("server", "http://198.18.0.1:8080", "the daemon (inside the test's namespaces)")
	sourceList := flag.String("sources", "", "source addresses, comma-separated, or FIRST-LAST")
	identities := flag.Int("identities", 50000, "made-up machines to ask scripts for (at most 200000)")
	workers := flag.Int("workers", 32, "concurrent requests")
	idle := flag.Int("idle", 1000, "idle keep-alive connections to hold")
	slow := flag.Int("slow", 200, "bodies to send one byte at a time")
	hold := flag.Duration("hold", 60*time.Second, "how long idle and slow connections are held")
	probeFrom := flag.String("probe-source", "", "the probe's source address (none: no probe)")
	probePath := flag.String("probe", "/healthz", "what the probe asks for, every second")
	deadline := flag.Duration("deadline", 5*time.Minute, "give up on everything after this long")
	flag.Parse()
	sources, err := flood.Sources(*sourceList)
	if err != nil || len(sources) == 0 || *identities > 200000 || *idle > 5000 || *slow > 1000 {
		fmt.Fprintln(os.Stderr, "lanflood: want -sources, and bounded counts:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *deadline)
	defer cancel()
	host := strings.TrimPrefix(*server, "http://")
	s := &summary{Scripts: map[int]int{}, CheckIns: map[int]int{}, Forged: map[int]int{}}
	start := time.Now()
	var wg sync.WaitGroup
	// The probe runs until the flood and the held connections are done.
	var probes []time.Duration
	probeStop := make(chan struct{})
	var probeWG sync.WaitGroup
	if *probeFrom != "" {
		probeWG.Add(1)
		go func() {
			defer probeWG.Done()
			c := flood.Client(*probeFrom, 1, 30*time.Second)
			c.Timeout = 30 * time.Second
			for {
				select {
				case <-probeStop:
					return
				case <-time.After(time.Second):
				}
				t0 := time.Now()
				resp, err := c.Get(*server + *probePath)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				s.mu.Lock()
				s.Probes++
				if err != nil || resp.StatusCode != 200 {
					s.ProbeFailures++
				} else {
					probes = append(probes, time.Since(t0))
				}
				s.mu.Unlock()
			}
		}()
	}
	// Idle keep-alive connections, spread over the sources.
	for i := range *idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held, closed := holdIdle(ctx, sources[i%len(sources)], host, *hold)
			s.mu.Lock()
			if held {
				s.Idle++
			}
			if closed {
				s.IdleClosed++
			}
			s.mu.Unlock()
		}()
		if i%50 == 49 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Bodies one byte at a time, with a credential of the right shape.
	forged := fmt.Sprintf("s1.0.%d.0123456789abcdef.%s", time.Now().Add(24*time.Hour).Unix(), strings.Repeat("A", 43))
	var longest atomic.Int64
	for i := range *slow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opened, closed, lasted := slowBody(ctx, sources[(i+7)%len(sources)], host, forged, *hold)
			s.mu.Lock()
			if opened {
				s.Slow++
			}
			if closed {
				s.SlowClosed++
			}
			s.mu.Unlock()
			for {
				cur := longest.Load()
				if int64(lasted) <= cur || longest.CompareAndSwap(cur, int64(lasted)) {
					break
				}
			}
		}()
	}
	// The flood: scripts of made-up machines, their check-ins, forged ones.
	next := atomic.Int64{}
	var fw sync.WaitGroup
	for w := range *workers {
		fw.Add(1)
		go func() {
			defer fw.Done()
			c := flood.Client(sources[w%len(sources)], 2, 30*time.Second)
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= *identities {
					return
				}
				serial := fmt.Sprintf("FLOOD-%06d", i)
				mac := fmt.Sprintf("02:f1:%02x:%02x:%02x:%02x", w, i>>16&0xff, i>>8&0xff, i&0xff)
				code, body, err := flood.Do(ctx, c, "GET", *server+"/ipxe?serial="+serial+"&mac="+mac+"&site=lab", "", nil)
				if err != nil {
					s.mu.Lock()
					s.Errors++
					s.mu.Unlock()
					continue
				}
				s.count(s.Scripts, code)
				if tok, key := tokenRe.FindStringSubmatch(body), machineRe.FindStringSubmatch(body); code == 200 && tok != nil && key != nil {
					in := map[string]any{"site": "lab", "machine": key[1], "identity": map[string]any{"serial": serial, "macs": []string{strings.TrimPrefix(key[1], "mac:")}}}
					if code, _, err := flood.Do(ctx, c, "POST", *server+"/api/v1/agent/checkin", tok[1], in); err == nil {
						s.count(s.CheckIns, code)
					}
				}
				if i%5 == 0 {
					in := map[string]any{"site": "lab", "machine": "serial:" + serial + "-X", "identity": map[string]any{"serial": serial + "-X"}}
					if code, _, err := flood.Do(ctx, c, "POST", *server+"/api/v1/agent/checkin", strings.Replace(forged, "s1", "b1", 1), in); err == nil {
						s.count(s.Forged, code)
					}
				}
			}
		}()
	}
	fw.Wait()
	wg.Wait()
	close(probeStop)
	probeWG.Wait()
	slices.Sort(probes)
	if len(probes) > 0 {
		s.ProbeMax = probes[len(probes)-1].Round(time.Millisecond).String()
		s.ProbeMedian = probes[len(probes)/2].Round(time.Millisecond).String()
	}
	s.SlowLongest = time.Duration(longest.Load()).Round(time.Second).String()
	s.Elapsed = time.Since(start).Round(time.Second).String()
	json.NewEncoder(os.Stdout).Encode(s)
}

func dial(ctx context.Context, src, host string) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	return d.DialContext(ctx, "tcp", host)
}

// holdIdle makes one request on a connection, then holds it idle; held
// when the request was answered, closed when the server closed it before
// the hold ended.
func holdIdle(ctx context.Context, src, host string, hold time.Duration) (held, closed bool) {
	c, err := dial(ctx, src, host)
	if err != nil {
		return false, false
	}
	defer c.Close()
	end := time.Now().Add(hold)
	c.SetDeadline(end)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return false, true
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_, err = r.ReadByte() // nothing comes; the server may close it
	return true, err != nil && time.Now().Before(end.Add(-time.Second))
}

// slowBody sends a body one byte every two seconds; closed when the
// server gave up on it before the hold ended, and how long it read.
func slowBody(ctx context.Context, src, host, token string, hold time.Duration) (opened, closed bool, lasted time.Duration) {
	c, err := dial(ctx, src, host)
	if err != nil {
		return false, false, 0
	}
	defer c.Close()
	start := time.Now()
	end := start.Add(hold)
	fmt.Fprintf(c, "POST /api/v1/agent/events HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n{", host, token)
	for time.Now().Before(end) && ctx.Err() == nil {
		time.Sleep(2 * time.Second)
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte(" ")); err != nil {
			return true, true, time.Since(start)
		}
		// A server that gave up answers (408, 400) and closes: look.
		c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
			return true, true, time.Since(start)
		}
	}
	return true, false, time.Since(start)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
