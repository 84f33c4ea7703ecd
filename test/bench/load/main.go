// Command load fetches one URL (http://…) or TFTP file (tftp://host:port/
// name) many times at once and prints what it measured as one JSON line:
// requests, failures, bytes, seconds, MB/s. It only talks to the address it
// is given (loopback or a test namespace), a bounded number of times.
//
//	go run ./test/bench/load -url http://127.0.0.1:8080/artifacts/microos/default/initrd -n 500 -c 500
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pin/tftp/v3"
)

type result struct {
	URL      string  `json:"url"`
	Requests int     `json:"requests"`
	Failures int64   `json:"failures"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	MBps     float64 `json:"mb_per_s"`
	Distinct int     `json:"distinct_bodies"` // among the bodies hashed
	FirstErr string  `json:"first_error,omitempty"`
}

func main() {
	target := flag.String("url", "", "http:// or tftp:// URL")
	n := flag.Int("n", 100, "requests in all (at most 10,000)")
	c := flag.Int("c", 10, "requests at once")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after")
	verify := flag.Int("verify-every", 1, "hash every Nth body to check they are identical (hashing costs the client CPU the server would otherwise get)")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "tftp") || *n < 1 || *n > 10000 || *c < 1 {
		flag.Usage()
		os.Exit(2)
	}
	fetch := httpFetch(*target, *timeout)
	if u.Scheme == "tftp" {
		fetch = tftpFetch(u.Host, strings.TrimPrefix(u.Path, "/"))
	}
	var bytesTotal, failures atomic.Int64
	var mu sync.Mutex
	sums := map[[32]byte]bool{}
	var firstErr string
	jobs := make(chan struct{}, *n)
	for range *n {
		jobs <- struct{}{}
	}
	close(jobs)
	start := time.Now()
	deadline := start.Add(*timeout)
	var wg sync.WaitGroup
	var seq atomic.Int64
	for range *c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				if time.Now().After(deadline) {
					failures.Add(1)
					continue
				}
				var h hash.Hash = discard{}
				hashed := seq.Add(1)%int64(max(*verify, 1)) == 1 || *verify <= 1
				if hashed {
					h = sha256.New()
				}
				nb, err := fetch(h)
				if err != nil {
					failures.Add(1)
					mu.Lock()
					if firstErr == "" {
						firstErr = err.Error()
					}
					mu.Unlock()
					continue
				}
				bytesTotal.Add(nb)
				if !hashed {
					continue
				}
				var sum [32]byte
				copy(sum[:], h.Sum(nil))
				mu.Lock()
				sums[sum] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	r := result{URL: *target, Requests: *n, Failures: failures.Load(), Bytes: bytesTotal.Load(), Seconds: secs,
		MBps: float64(bytesTotal.Load()) / 1e6 / secs, Distinct: len(sums), FirstErr: firstErr}
	json.NewEncoder(os.Stdout).Encode(r)
}

// discard is a hash.Hash that only counts.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) Sum(b []byte) []byte         { return b }
func (discard) Reset()                      {}
func (discard) Size() int                   { return 0 }
func (discard) BlockSize() int              { return 1 }

func httpFetch(target string, timeout time.Duration) func(io.Writer) (int64, error) {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1000, DisableCompression: true}}
	return func(w io.Writer) (int64, error) {
		resp, err := client.Get(target)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("%s", resp.Status)
		}
		return io.Copy(w, resp.Body)
	}
}

func tftpFetch(addr, file string) func(io.Writer) (int64, error) {
	return func(w io.Writer) (int64, error) {
		c, err := tftp.NewClient(addr)
		if err != nil {
			return 0, err
		}
		c.SetBlockSize(1468)
		c.SetTimeout(2 * time.Second)
		c.SetRetries(5)
		wt, err := c.Receive(file, "octet")
		if err != nil {
			return 0, err
		}
		var buf bytes.Buffer
		n, err := wt.WriteTo(io.MultiWriter(w, &buf))
		return n, err
	}
}
