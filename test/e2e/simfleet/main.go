// Command simfleet runs simulated machines through a whole provisioning
// against a boot server, each with the agent's own code (package agent,
// what bootops-agent runs): its boot token from its iPXE script, the
// check-in, the image written to a file standing for its disk, cloud-init,
// the reboot (recorded, not done). It prints one JSON line per machine
// (node, how often image-to-disk started and was retried, the sha256 of
// the disk's first -image-bytes, whether it rebooted, its error), and "ready N" on stderr once
// every machine has its script. It runs inside the test's namespace and
// talks only to the server it is given.
//
//	simfleet -server http://198.18.0.1:8080 -site lab -node sim-01:SIM-01 -node … -dir DIR -image-bytes N
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bootops/bootops/agent"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/test/fleet"
)

type nodes []string

func (n *nodes) String() string     { return strings.Join(*n, ",") }
func (n *nodes) Set(s string) error { *n = append(*n, s); return nil }

// result is a machine's line.
type result struct {
	Node         string  `json:"node"`
	ImageStarts  int32   `json:"image_starts"`
	ImageRetries int32   `json:"image_retries"`
	DiskSHA256   string  `json:"disk_sha256"`
	Rebooted     bool    `json:"rebooted"`
	Err          string  `json:"err,omitempty"`
	Seconds      float64 `json:"seconds"`
}

func main() {
	server := flag.String("server", "", "the boot server's base URL")
	site := flag.String("site", "", "the machines' site")
	dir := flag.String("dir", "", "a folder for the machines' disks and /sys")
	size := flag.Int64("disk-bytes", 64<<20, "each disk's size")
	hashed := flag.Int64("image-bytes", 0, "how much of each disk its sha256 covers (the image's size)")
	timeout := flag.Duration("timeout", 15*time.Minute, "give up after this long")
	var ns nodes
	flag.Var(&ns, "node", "a machine, NAME:SERIAL (repeated; at most 200)")
	flag.Parse()
	if *server == "" || *site == "" || *dir == "" || len(ns) == 0 || len(ns) > 200 {
		fmt.Fprintln(os.Stderr, "usage: simfleet -server URL -site SITE -dir DIR -node NAME:SERIAL…")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var ready sync.WaitGroup
	ready.Add(len(ns))
	go func() { ready.Wait(); fmt.Fprintf(os.Stderr, "ready %d\n", len(ns)) }()
	out := make([]result, len(ns))
	var wg sync.WaitGroup
	for i, spec := range ns {
		name, serial, _ := strings.Cut(spec, ":")
		wg.Go(func() {
			out[i] = machine(ctx, *server, *site, name, serial, filepath.Join(*dir, name), *size, *hashed, i, ready.Done)
		})
	}
	wg.Wait()
	enc := json.NewEncoder(os.Stdout)
	for _, r := range out {
		enc.Encode(r)
	}
}

// machine is one simulated machine's life.
func machine(ctx context.Context, server, site, name, serial, dir string, size, hashed int64, i int, scripted func()) result {
	t0 := time.Now()
	res := result{Node: name}
	disk := filepath.Join(dir, "disk")
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(disk, nil, 0o644); err == nil {
		os.Truncate(disk, size)
	}
	sysfs := fleet.FakeSysfs(filepath.Join(dir, "sys"), serial, fmt.Sprintf("52:54:00:5e:00:%02x", i))
	var args map[string]string
	var err error
	for try := 0; try < 10; try++ {
		if args, err = fleet.ScriptArgs(ctx, server+"/ipxe?serial="+serial+"&site="+site); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	scripted()
	if err != nil {
		res.Err = "script: " + err.Error()
		return res
	}
	var starts, retries atomic.Int32
	var rebooted atomic.Bool
	err = agent.Session(ctx, args, sysfs, io.Discard, func(r *agent.Runner) {
		r.ResolveDisk = func(string) (string, error) { return disk, nil }
		r.Mount = func(dev, fstype, dir string) error { return nil }
		r.Unmount = func(string) error { return nil }
		r.Power = func(string) error { rebooted.Store(true); return nil }
		r.Report = counting{inner: r.Report, starts: &starts, retries: &retries}
	})
	res.ImageStarts, res.ImageRetries, res.Rebooted = starts.Load(), retries.Load(), rebooted.Load()
	res.Seconds = time.Since(t0).Seconds()
	if err != nil {
		res.Err = err.Error()
	}
	if f, err := os.Open(disk); err == nil {
		h := sha256.New()
		io.Copy(h, io.LimitReader(f, hashed))
		f.Close()
		res.DiskSHA256 = hex.EncodeToString(h.Sum(nil))
	}
	return res
}

// counting counts the image-to-disk action's starts and retries on the
// way to the agent's own reporter (which it flushes as the agent asks).
type counting struct {
	inner           agent.Reporter
	starts, retries *atomic.Int32
}

func (c counting) Report(e plan.AgentEvent) {
	if e.Action == "image-to-disk" {
		switch e.Type {
		case plan.AgentStarted:
			c.starts.Add(1)
		case plan.AgentRetry:
			c.retries.Add(1)
		}
	}
	c.inner.Report(e)
}

func (c counting) Flush(ctx context.Context) error {
	if f, ok := c.inner.(agent.Flusher); ok {
		return f.Flush(ctx)
	}
	return nil
}
