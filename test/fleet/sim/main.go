// Command sim runs a fleet through the whole provisioning flow on one
// machine, without VMs: `bootops serve` (a process) serves a generated
// repository of N nodes; N agents (in this process, package agent, the
// code bootops-agent runs) check in with their tokens, get their workflow,
// stream a 64 MB image to /dev/null, write their cloud-init seed and
// report until "provisioned". The reference, in the same run: the same N
// downloads of the same image at the same concurrency, hashed, with no
// bootops at all — the pure transfer time.
//
//	go run ./test/fleet/sim -bootops bin/bootops -nodes 1000 -concurrency 100
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bootops/bootops/agent"
	"github.com/bootops/bootops/test/fleet"
	"github.com/bootops/bootops/test/procstat"
)

func main() {
	bin := flag.String("bootops", "bin/bootops", "the bootops binary")
	nodes := flag.Int("nodes", 1000, "simulated nodes")
	conc := flag.Int("concurrency", 100, "nodes provisioning at once")
	size := flag.Int("image-mb", 64, "image size in MB")
	rounds := flag.Int("rounds", 2, "rounds (downloads alone, then the fleet)")
	cpuprofile := flag.String("cpuprofile", "", "write this process's CPU profile (the agents' side) here")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(*bin, *nodes, *conc, *size<<20, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// run is long on purpose: a benchmark reads best top to bottom, step by
// step as BENCHMARKS.md ("Fleet: 1,000 nodes through the whole flow")
// describes it.
func run(bin string, nodes, conc, size, rounds int) error {
	work, err := os.MkdirTemp("", "fleet-sim-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	// The image, and a server for it (sendfile, as any static server).
	img := filepath.Join(work, "image.raw")
	data := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{1})
	rng.Read(data)
	os.WriteFile(img, data, 0o644)
	sum := sha256.Sum256(data)
	data = nil
	imgLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(imgLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(img)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer f.Close()
		http.ServeContent(w, r, "image.raw", time.Time{}, f)
	}))
	imageURL := "http://" + imgLn.Addr().String() + "/image.raw"

	// The repository: one site, one profile, N nodes by serial.
	port := procstat.FreePort()
	repo := filepath.Join(work, "repo")
	files := map[string]string{
		"microos.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\nkernel: {url: \"http://127.0.0.1/k\", sha256: " + strings.Repeat("1a", 32) + "}\ninitrd: {url: \"http://127.0.0.1/i\", sha256: " + strings.Repeat("1a", 32) + "}\n",
		"profile.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: sim\nos: {type: immutable}\nimage: {url: \"" + imageURL + "\", sha256: " + hex.EncodeToString(sum[:]) + ", compression: none}\n" +
			"cloudInit: {packages: [htop]}\nworkflow:\n- {action: image-to-disk}\n- {action: cloud-init}\n- {action: reboot}\n",
		"sites/sim/site.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: sim\nnetwork: {serverAddress: 127.0.0.1, httpPort: " + port + ", dhcp: off}\ndefaultProfile: sim\n",
	}
	// One set of nodes per round: a provisioned node boots from its disk
	// (its script carries no token), as a real one would.
	for i := range nodes * rounds {
		files[fmt.Sprintf("sites/sim/nodes/n%05d.yaml", i)] = fmt.Sprintf("apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n%05d\nidentity: {serial: SIM-%05d}\n", i, i)
	}
	for name, body := range files {
		p := filepath.Join(repo, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	state := filepath.Join(work, "state")
	serve := exec.Command(bin, "serve", "--open-reads", "--source", repo, "--state-dir", state, "--http-addr", "127.0.0.1:"+port, "--dhcp", "off", "--tftp-addr", "", "--log-level", "warn")
	serve.Stderr = os.Stderr
	if err := serve.Start(); err != nil {
		return err
	}
	defer serve.Process.Kill()
	server := "http://127.0.0.1:" + port
	if err := waitReady(server); err != nil {
		return err
	}
	fmt.Printf("fleet: %d nodes, %d at a time, a %d MB image each; %d cores; %d rounds\n", nodes, conc, size>>20, nproc(), rounds)

	// Reference: the same downloads, no bootops.
	reference := func() (time.Duration, int64) {
		t0 := time.Now()
		var fail atomic.Int64
		parallel(nodes, conc, func(int) {
			resp, err := http.Get(imageURL)
			if err != nil {
				fail.Add(1)
				return
			}
			h := sha256.New()
			io.Copy(h, resp.Body)
			resp.Body.Close()
			if !strings.EqualFold(hex.EncodeToString(h.Sum(nil)), hex.EncodeToString(sum[:])) {
				fail.Add(1)
			}
		})
		return time.Since(t0), fail.Load()
	}
	// The fleet: every node through its whole workflow.
	sysroot := filepath.Join(work, "sys")
	fleet := func(round int) (time.Duration, int64) {
		t0 := time.Now()
		var failed atomic.Int64
		var firstErr sync.Once
		parallel(nodes, conc, func(i int) {
			i += (round - 1) * nodes
			name := fmt.Sprintf("n%05d", i)
			sysfs := fleet.FakeSysfs(filepath.Join(sysroot, name), fmt.Sprintf("SIM-%05d", i), fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&255, i>>8&255, i&255))
			// The kernel command line of the script the node is served,
			// with its boot token, as iPXE fetches it.
			args, err := fleet.ScriptArgs(context.Background(), server+fmt.Sprintf("/ipxe?serial=SIM-%05d&site=sim", i))
			if err != nil {
				failed.Add(1)
				firstErr.Do(func() { fmt.Fprintf(os.Stderr, "%s: %v\n", name, err) })
				return
			}
			powered := false
			err = agent.Session(context.Background(), args, sysfs, io.Discard, func(r *agent.Runner) {
				r.ResolveDisk = func(string) (string, error) { return "/dev/null", nil }
				r.Mount = func(dev, fstype, dir string) error { return nil }
				r.Unmount = func(string) error { return nil }
				r.Power = func(string) error { powered = true; return nil }
			})
			if err != nil || !powered {
				failed.Add(1)
				firstErr.Do(func() { fmt.Fprintf(os.Stderr, "%s: %v (powered %v)\n", name, err, powered) })
			}
		})
		return time.Since(t0), failed.Load()
	}
	// The image file is read once before anything is timed (this VM hands
	// its page cache back to the host); then the two alternate.
	reference()
	cpu0 := procstat.CPU(serve.Process.Pid)
	var refSum, fleetSum time.Duration
	var failedTotal int64
	for round := 1; round <= rounds; round++ {
		r, rf := reference()
		f, ff := fleet(round)
		refSum, fleetSum, failedTotal = refSum+r, fleetSum+f, failedTotal+rf+ff
		fmt.Printf("round %d: downloads alone %.1f s (%d failed); bootops fleet %.1f s (%d failed)\n", round, r.Seconds(), rf, f.Seconds(), ff)
	}
	cpu := procstat.CPU(serve.Process.Pid) - cpu0
	_, hwm := procstat.Mem(serve.Process.Pid)
	wall, ref := fleetSum, refSum
	var failed atomic.Int64
	failed.Store(failedTotal)

	// Every node provisioned, by the server's own account.
	provisioned, err := countProvisioned(server)
	if err != nil {
		return err
	}
	fmt.Printf("all rounds: downloads alone %.1f s, bootops fleet %.1f s: bootops adds %.1f %%; %d failed; %d of %d nodes provisioned by the server's status\n",
		ref.Seconds(), wall.Seconds(), 100*(wall.Seconds()-ref.Seconds())/ref.Seconds(), failed.Load(), provisioned, nodes*rounds)
	fmt.Printf("bootops serve: CPU %.1f s over %d fleet rounds (%.2f ms per node); peak RSS %d MB\n", cpu.Seconds(), rounds, 1000*cpu.Seconds()/float64(rounds*nodes), hwm>>10)
	if failed.Load() > 0 || provisioned != nodes {
		return fmt.Errorf("%d agents failed, %d of %d provisioned", failed.Load(), provisioned, nodes*rounds)
	}
	return nil
}

func parallel(n, conc int, f func(int)) {
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

func countProvisioned(server string) (int, error) {
	resp, err := http.Get(server + "/api/v1/status")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var doc struct {
		Nodes []struct{ State string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return 0, err
	}
	n := 0
	for _, m := range doc.Nodes {
		if m.State == "provisioned" {
			n++
		}
	}
	return n, nil
}

func waitReady(server string) error {
	for range 200 {
		if resp, err := http.Get(server + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready", server)
}

func nproc() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}
