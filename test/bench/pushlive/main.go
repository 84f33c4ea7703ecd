// Command pushlive measures push-to-live latency: a generated fleet
// repository is served by `git daemon` on loopback and followed by
// `bootops serve`; each of N pushes changes one node, a webhook tells the
// daemon, and the time until GET /api/v1/status reports the pushed commit
// as served is recorded. In the same run, the reference: what a cron job
// would do per push — `git clone --depth 1` of the same remote and
// `bootops validate` of the checkout. At the end the daemon's RSS is read
// from /proc. It prints the machine it ran on and, per push, where the time
// went: the daemon's stages from its status (queued, list, fetch, read,
// compile, swap) and the rest (the webhook's POST, the poll).
//
//	go run ./test/bench/pushlive -bootops bin/bootops -nodes 1000 -pushes 50
package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bootops/bootops/test/fleet"
	"github.com/bootops/bootops/test/procstat"
)

func main() {
	bin := flag.String("bootops", "bin/bootops", "the bootops binary")
	nodes := flag.Int("nodes", 1000, "nodes in the repository")
	sites := flag.Int("sites", 10, "sites in the repository")
	pushes := flag.Int("pushes", 50, "pushes to measure")
	reference := flag.Bool("reference", true, "also time the reference (git clone --depth 1 + bootops validate) per push")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write the daemon's CPU profile during the pushes to this file (serve --pprof-addr)")
	flag.StringVar(&allocProfile, "allocprofile", "", "write what the daemon allocated during the pushes to this file (a delta of /debug/pprof/allocs)")
	flag.Parse()
	if err := run(*bin, *nodes, *sites, *pushes, *reference); err != nil {
		fmt.Fprintln(os.Stderr, "pushlive:", err)
		os.Exit(1)
	}
}

var cpuProfile, allocProfile string

// run is long on purpose: a benchmark reads best top to bottom, step by
// step as BENCHMARKS.md ("Reconciler: push to live") describes it.
func run(bin string, nodes, sites, pushes int, reference bool) error {
	bin, _ = filepath.Abs(bin)
	work, err := os.MkdirTemp("", "pushlive-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	repo := filepath.Join(work, "fleet")
	if err := fleet.Generate(repo, sites, nodes); err != nil {
		return err
	}
	bare := filepath.Join(work, "srv", "fleet.git")
	for _, args := range [][]string{
		{"-C", repo, "init", "-q", "-b", "main"}, {"-C", repo, "add", "-A"}, {"-C", repo, "commit", "-q", "-m", "fleet"},
		{"init", "-q", "--bare", "-b", "main", bare}, {"-C", repo, "push", "-q", bare, "main"},
	} {
		if _, err := git(args...); err != nil {
			return err
		}
	}
	gitPort, httpPort, pprofPort := procstat.FreePort(), procstat.FreePort(), procstat.FreePort()
	daemon := exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1", "--port="+gitPort, "--base-path="+filepath.Dir(bare), filepath.Dir(bare))
	// git daemon runs its listener as a child: the group goes, not only
	// the parent (it was left listening after every run).
	daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := daemon.Start(); err != nil {
		return err
	}
	defer syscall.Kill(-daemon.Process.Pid, syscall.SIGKILL)
	url := "git://127.0.0.1:" + gitPort + "/fleet.git"
	secret := filepath.Join(work, "secret")
	os.WriteFile(secret, []byte("bench-secret\n"), 0o600)
	serve := exec.Command(bin, "serve", "--open-reads", "--source", url, "--interval", "1h", "--webhook-secret-file", secret,
		"--state-dir", filepath.Join(work, "state"), "--http-addr", "127.0.0.1:"+httpPort, "--dhcp", "off", "--tftp-addr", "",
		"--log-level", "warn")
	if cpuProfile != "" || allocProfile != "" {
		serve.Args = append(serve.Args, "--pprof-addr", "127.0.0.1:"+pprofPort)
	}
	serve.Stderr = os.Stderr
	if err := serve.Start(); err != nil {
		return err
	}
	defer serve.Process.Kill()
	api := "http://127.0.0.1:" + httpPort
	head, _ := git("-C", repo, "rev-parse", "HEAD")
	fmt.Println("machine:", machine())
	start := time.Now()
	if _, err := awaitServed(api, head, 5*time.Minute); err != nil {
		return err
	}
	first := time.Since(start)
	time.Sleep(time.Second) // the garbage of the first compilation is returned
	rss0, hwm0 := procstat.Mem(serve.Process.Pid)
	fmt.Printf("repository: %d nodes, %d sites; git daemon on loopback; first revision served %.2f s after start; then RSS %d MB, peak so far %d MB\n", nodes, sites, first.Seconds(), rss0>>10, hwm0>>10)

	var live, ref []time.Duration
	var breakdown []stages
	// The daemon's CPU and allocations over the pushes (one per 100 ms or
	// so, with the reference off): where the time goes.
	secs := max(2, pushes/3)
	profiles := map[string]string{"profile": cpuProfile, "allocs": allocProfile}
	profiled := make(chan error, len(profiles))
	for kind, file := range profiles {
		if file == "" {
			profiled <- nil
			continue
		}
		go func() {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%s/debug/pprof/%s?seconds=%d", pprofPort, kind, secs))
			if err != nil {
				profiled <- err
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(file)
			if err == nil {
				_, err = io.Copy(f, resp.Body)
				f.Close()
			}
			profiled <- err
		}()
	}
	node := filepath.Join(repo, "sites", "site-000", "nodes")
	files, _ := filepath.Glob(filepath.Join(node, "*.yaml"))
	if len(files) == 0 {
		return fmt.Errorf("no node files in %s", node)
	}
	for i := range pushes {
		f := files[i%len(files)]
		b, _ := os.ReadFile(f)
		b = append(b, []byte(fmt.Sprintf("# push %d\n", i))...)
		os.WriteFile(f, b, 0o644)
		if _, err := git("-C", repo, "commit", "-q", "-am", fmt.Sprintf("push %d", i)); err != nil {
			return err
		}
		if _, err := git("-C", repo, "push", "-q", bare, "main"); err != nil {
			return err
		}
		sha, _ := git("-C", repo, "rev-parse", "HEAD")
		t0 := time.Now()
		if err := hook(api, "bench-secret", sha); err != nil {
			return err
		}
		posted := time.Since(t0)
		st, err := awaitServed(api, sha, time.Minute)
		if err != nil {
			return err
		}
		live = append(live, time.Since(t0))
		st.post, st.total = posted, live[len(live)-1]
		breakdown = append(breakdown, st)
		if reference {
			d, err := cronJob(bin, url, work)
			if err != nil {
				return err
			}
			ref = append(ref, d)
		}
	}
	for range profiles {
		if err := <-profiled; err != nil {
			return fmt.Errorf("profile: %w", err)
		}
	}
	fmt.Printf("bootops webhook → served, %d pushes: %s\n", pushes, summary(live))
	fmt.Println("where the time went (p50 of each part over the pushes; the daemon's from its status):")
	for _, part := range []struct {
		name string
		of   func(stages) time.Duration
	}{
		{"webhook POST answered (202)", func(s stages) time.Duration { return s.post }},
		{"daemon: queued (trigger → look)", func(s stages) time.Duration { return msDur(s.QueuedMS) }},
		{"daemon: list the remote's refs", func(s stages) time.Duration { return msDur(s.ListMS) }},
		{"daemon: fetch the commit", func(s stages) time.Duration { return msDur(s.FetchMS) }},
		{"daemon: read the tree, find what changed", func(s stages) time.Duration { return msDur(s.ReadMS) }},
		{"daemon: compile, check, materialize", func(s stages) time.Duration { return msDur(s.CompileMS) }},
		{"daemon: swap in", func(s stages) time.Duration { return msDur(s.SwapMS) }},
		{"daemon: trigger → served, all stages", func(s stages) time.Duration { return s.daemon() }},
		{"the rest (POST to trigger, status, poll every 5 ms)", func(s stages) time.Duration { return s.total - s.daemon() }},
	} {
		var d []time.Duration
		for _, s := range breakdown {
			d = append(d, part.of(s))
		}
		fmt.Printf("  %-52s %s\n", part.name, summary(d))
	}
	if reference {
		fmt.Printf("reference git clone --depth 1 + bootops validate, per push: %s\n", summary(ref))
	}
	rss, hwm := procstat.Mem(serve.Process.Pid)
	fmt.Printf("bootops serve memory after %d pushes: RSS %d MB, peak RSS %d MB\n", pushes, rss>>10, hwm>>10)
	return nil
}

// cronJob is the reference: a fresh shallow clone and a validation.
func cronJob(bin, url, work string) (time.Duration, error) {
	dir := filepath.Join(work, "cron")
	os.RemoveAll(dir)
	t0 := time.Now()
	if _, err := git("clone", "-q", "--depth", "1", "--single-branch", url, dir); err != nil {
		return 0, err
	}
	if b, err := exec.Command(bin, "validate", dir).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("validate: %v\n%s", err, b)
	}
	return time.Since(t0), nil
}

func summary(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	pct := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
	}
	return fmt.Sprintf("p50 %s, p90 %s, p99 %s, max %s", ms(pct(0.50)), ms(pct(0.90)), ms(pct(0.99)), ms(s[len(s)-1]))
}

func hook(api, secret, sha string) error {
	body := []byte(`{"ref":"refs/heads/main","after":"` + sha + `"}`)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req, _ := http.NewRequest("POST", api+"/hooks/git", bytes.NewReader(body))
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	req.Header.Set("X-GitHub-Event", "push")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("webhook: %s", resp.Status)
	}
	return nil
}

// stages is one push's breakdown: the daemon's (Attempt.Stages in its
// status) and what the client saw.
type stages struct {
	QueuedMS, ListMS, FetchMS, ReadMS, CompileMS, SwapMS float64
	post, total                                          time.Duration
}

func (s stages) daemon() time.Duration {
	return msDur(s.QueuedMS + s.ListMS + s.FetchMS + s.ReadMS + s.CompileMS + s.SwapMS)
}

func msDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// machine says what the benchmark ran on: CPU model and count, memory,
// kernel, load, Go and Git.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			kb, _ := strconv.Atoi(f[1])
			mem = fmt.Sprintf(", %d GB", (kb+(1<<19))>>20)
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	load, _ := os.ReadFile("/proc/loadavg")
	avg := strings.Fields(string(load))
	avg = avg[:min(3, len(avg))] // 1, 5 and 15 min
	gitV, _ := git("version")
	return fmt.Sprintf("%s × %d%s; Linux %s; load %s; %s; %s", model, runtime.NumCPU(), mem,
		strings.TrimSpace(string(kernel)), strings.Join(avg, " "), runtime.Version(), gitV)
}

// awaitServed polls the status API (every 5 ms) until sha is served, and
// gives the stages the daemon recorded for it.
func awaitServed(api, sha string, timeout time.Duration) (stages, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", api+"/api/v1/status?nodes=0", nil)
		resp, err := client.Do(req)
		if err == nil {
			var doc struct {
				Source struct {
					Applied struct {
						Revision string
						Stages   *stages
					}
					Attempted struct{ Revision, Error string }
				}
			}
			err = json.NewDecoder(resp.Body).Decode(&doc)
			resp.Body.Close()
			if a := doc.Source.Applied; err == nil && a.Revision == sha {
				if a.Stages == nil {
					return stages{}, nil
				}
				return *a.Stages, nil
			}
			if err == nil && doc.Source.Attempted.Revision == sha && doc.Source.Attempted.Error != "" {
				return stages{}, fmt.Errorf("%s refused: %s", sha, doc.Source.Attempted.Error)
			}
		}
		select {
		case <-ctx.Done():
			return stages{}, fmt.Errorf("%s not served within %s (last error: %v)", sha, timeout, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func git(args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.invalid", "GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}
