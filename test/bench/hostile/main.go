// Command hostile measures a bootops daemon under attack from the LAN, and
// a reference bootops (an older commit) beside it in the same run: each
// serves N nodes that a simulated fleet (package agent, as in
// test/fleet/sim) provisions first; then test/e2e/lanflood attacks it from
// 50 loopback addresses (made-up machines, their check-ins, forged ones,
// idle keep-alive connections, slow bodies) while a probe from an address
// of its own asks for a provisioned node's script. Measured: the daemon's
// RSS and open files (idle and peak, under a 1,024 open-files limit), the
// probe's answers, and how many provisioned nodes would be reinstalled
// (wiped) on their next boot. Everything on loopback (127.0.0.0/8).
//
//	go run ./test/bench/hostile -bootops bin/bootops -reference /tmp/ref/bootops -flood /tmp/lanflood
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/bootops/bootops/agent"
	"github.com/bootops/bootops/test/fleet"
	"github.com/bootops/bootops/test/procstat"
)

func main() {
	bin := flag.String("bootops", "bin/bootops", "the bootops binary")
	ref := flag.String("reference", "", "the reference bootops binary (an older commit)")
	refName := flag.String("reference-name", "reference", "what to call it")
	flood := flag.String("flood", "", "the lanflood binary")
	nodes := flag.Int("nodes", 20, "nodes provisioned before the attack")
	identities := flag.Int("identities", 50000, "made-up machines")
	flag.Parse()
	fmt.Printf("| daemon | nodes wiped on next boot (of %d) | scripts answered / 429 | RSS idle → peak (MB) | open files idle → peak (limit 1024) | probe median / max | probe failures | attack took |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n", *nodes)
	for _, d := range [][2]string{{"bootops (this commit)", *bin}, {*refName, *ref}} {
		if d[1] == "" {
			continue
		}
		row, err := measure(d[1], *flood, *nodes, *identities)
		if err != nil {
			fmt.Fprintf(os.Stderr, "hostile: %s: %v\n", d[0], err)
			os.Exit(1)
		}
		fmt.Printf("| %s | %s\n", d[0], row)
	}
}

func measure(bin, flood string, nodes, identities int) (string, error) {
	work, err := os.MkdirTemp("", "bench-hostile-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	// A 1 MB image, served from here.
	data := make([]byte, 1<<20)
	sum := sha256.Sum256(data)
	imgLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer imgLn.Close()
	go http.Serve(imgLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(data) }))
	port := procstat.FreePort()
	repo := filepath.Join(work, "repo")
	files := map[string]string{
		"microos.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\nkernel: {url: \"http://127.0.0.1/k\", sha256: " + strings.Repeat("1a", 32) + "}\ninitrd: {url: \"http://127.0.0.1/i\", sha256: " + strings.Repeat("1a", 32) + "}\n",
		"profile.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: sim\nos: {type: immutable}\nimage: {url: \"http://" + imgLn.Addr().String() + "/image.raw\", sha256: " + hex.EncodeToString(sum[:]) + ", compression: none}\n" +
			"workflow:\n- {action: image-to-disk}\n- {action: reboot}\n",
		"sites/lab/site.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: lab\nnetwork: {serverAddress: 127.0.0.1, httpPort: " + port + ", dhcp: off}\ndefaultProfile: sim\nunknownNodes: provision\n",
	}
	for i := range nodes {
		files[fmt.Sprintf("sites/lab/nodes/n%03d.yaml", i)] = fmt.Sprintf("apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n%03d\nidentity: {serial: HOST-%03d}\n", i, i)
	}
	for name, body := range files {
		p := filepath.Join(repo, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	serve := exec.Command("prlimit", "--nofile=1024:1024", bin, "serve", "--open-reads", "--source", repo, "--state-dir", filepath.Join(work, "state"),
		"--http-addr", "127.0.0.1:"+port, "--dhcp", "off", "--tftp-addr", "", "--log-level", "error")
	if err := serve.Start(); err != nil {
		return "", err
	}
	defer func() { serve.Process.Kill(); serve.Wait() }()
	server := "http://127.0.0.1:" + port
	pid := serve.Process.Pid
	if err := waitReady(server); err != nil {
		return "", err
	}
	// The fleet installs.
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args, err := fleet.ScriptArgs(context.Background(), server+fmt.Sprintf("/ipxe?serial=HOST-%03d&site=lab", i))
			if err != nil {
				errs <- err
				return
			}
			sysfs := fleet.FakeSysfs(filepath.Join(work, "sys", fmt.Sprint(i)), fmt.Sprintf("HOST-%03d", i), fmt.Sprintf("52:54:00:77:00:%02x", i))
			errs <- agent.Session(context.Background(), args, sysfs, io.Discard, func(r *agent.Runner) {
				r.ResolveDisk = func(string) (string, error) { return "/dev/null", nil }
				r.Mount = func(dev, fstype, dir string) error { return nil }
				r.Unmount = func(string) error { return nil }
				r.Power = func(string) error { return nil }
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return "", fmt.Errorf("provisioning: %w", err)
		}
	}
	if n := wiped(server, nodes); n != 0 {
		return "", fmt.Errorf("%d nodes not provisioned before the attack", n)
	}
	time.Sleep(2 * time.Second)
	idleRSS, _ := procstat.Mem(pid)
	idleFDs := procstat.OpenFiles(pid)
	peak := procstat.Peak(pid, 200*time.Millisecond)
	out, err := exec.Command(flood, "-server", server, "-sources", "127.0.1.1-127.0.1.50", "-identities", fmt.Sprint(identities),
		"-idle", "1000", "-slow", "200", "-hold", "60s", "-deadline", "10m", "-probe-source", "127.0.2.1", "-probe", "/ipxe?serial=HOST-000&site=lab").Output()
	peakRSS, peakFDs := peak()
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
	return fmt.Sprintf("%d | %d / %d (%d errors) | %.0f → %.0f | %d → %d | %s / %s | %d of %d | %s |",
		wiped(server, nodes), s.Scripts["200"], s.Scripts["429"], s.Errors, float64(idleRSS)/1024, float64(peakRSS)/1024,
		idleFDs, peakFDs, s.ProbeMedian, s.ProbeMax, s.ProbeFailures, s.Probes, s.Elapsed), nil
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
