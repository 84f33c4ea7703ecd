package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
)

// runQAAction runs a workflow of the one QA action a with r and returns
// Run's error, the log lines and the failed event's message.
func runQAAction(t *testing.T, r *Runner, rec *recorder, a plan.Action) (logs []string, failed string, err error) {
	t.Helper()
	a.Name, a.Retries = a.Action, 2
	err = r.Run(context.Background(), wf(a))
	if f := rec.of(plan.AgentFailed); len(f) > 0 {
		failed = f[0].Message
	}
	if err != nil && len(rec.of(plan.AgentRetry)) > 0 {
		t.Errorf("a failed QA check was retried: %v", rec.of(plan.AgentRetry))
	}
	return rec.logs(), failed, err
}

func wantQA(t *testing.T, err error, logs []string, failed string, wantLog, wantErr string) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("failed: %v (logs %q)", err, logs)
		}
	} else if err == nil || !strings.Contains(err.Error(), wantErr) || !strings.Contains(failed, wantErr) {
		t.Fatalf("error %v, failed event %q; want %q in both", err, failed, wantErr)
	}
	if wantLog != "" && !strings.Contains(strings.Join(logs, "\n"), wantLog) {
		t.Errorf("logs %q, want %q in them", logs, wantLog)
	}
}

func TestQAMemory(t *testing.T) {
	flip := func(pattern string, word int, bit uint) func(string, []uint64) {
		return func(p string, buf []uint64) {
			if p == pattern {
				buf[word] ^= 1 << bit
			}
		}
	}
	for name, tc := range map[string]struct {
		share            string
		corrupt          func(string, []uint64)
		wantLog, wantErr string
	}{
		"pass":                  {"25%", nil, "qa-memory: 8 MiB tested (25% of 32 MiB available), 4 patterns in ", ""},
		"default share":         {"", nil, "qa-memory: 3 MiB tested (10% of 32 MiB available)", ""},
		"a bit of 0x55 flipped": {"25%", flip("0x55", 3, 0), "", "memory mismatch at offset 0x18 (0 MiB) with pattern 0x55: wrote 0x5555555555555555, read 0x5555555555555554 (bits 0x0000000000000001 flipped; 1 bad words in its part)"},
		"a walking one stuck":   {"25%", flip("walking ones", 1<<19, 63), "", "offset 0x400000 (4 MiB) with pattern walking ones: wrote 0x0000000000000001, read 0x8000000000000001"},
		// A word copied onto another 64 words away: invisible to the
		// constant patterns and to walking ones; address-in-address
		// catches it.
		"an address line": {"25%", func(p string, buf []uint64) { buf[100] = buf[164] }, "", "with pattern address-in-address: wrote 0x0000000000000320, read 0x0000000000000520"},
	} {
		t.Run(name, func(t *testing.T) {
			r, rec := newRunner(t)
			r.qaHook.memAvailable = func() (int64, error) { return 32 << 20, nil }
			r.qaHook.corruptMem = tc.corrupt
			logs, failed, err := runQAAction(t, r, rec, plan.Action{Action: plan.QAMemory, Share: tc.share})
			wantQA(t, err, logs, failed, tc.wantLog, tc.wantErr)
		})
	}
}

// TestCheckMemory runs the checker over a buffer with a flipped bit under
// every pattern and in every worker's part.
func TestCheckMemory(t *testing.T) {
	buf := make([]uint64, 1<<18) // 2 MiB, 4 parts
	for _, p := range memPatterns {
		for _, word := range []int{0, 1 << 16, len(buf) - 1} {
			err := checkMemory(context.Background(), buf, 4, func(name string, b []uint64) {
				if name == p.name {
					b[word] ^= 1 << 7
				}
			})
			var mm *memMismatch
			if !errors.As(err, &mm) || mm.pattern != p.name || mm.offset != int64(word)*8 || mm.want^mm.got != 1<<7 {
				t.Errorf("pattern %s, word %d flipped: %v", p.name, word, err)
			}
		}
	}
	if err := checkMemory(context.Background(), buf, 4, nil); err != nil {
		t.Errorf("intact: %v", err)
	}
}

func TestQACPU(t *testing.T) {
	last := runtime.NumCPU() - 1
	for name, tc := range map[string]struct {
		a                plan.Action
		corrupt          func(int, uint64, *[32]byte)
		wantLog, wantErr string
	}{
		"pass": {plan.Action{Duration: "150ms", MinOpsPerSec: 100}, nil,
			"qa-cpu: " + strconv.Itoa(runtime.NumCPU()) + " CPUs for 150ms, sha256 hashes a second per CPU: ", ""},
		"a worker's round 0 is wrong": {plan.Action{Duration: "150ms"}, func(w int, round uint64, sum *[32]byte) {
			if w == last && round == 0 {
				sum[31] ^= 0x80
			}
		}, "", "wrong results: worker " + strconv.Itoa(last)},
		"too slow": {plan.Action{Duration: "150ms", MinOpsPerSec: 1e12}, nil, "(average ", "sha256 hashes a second, below minOpsPerSec 1e+12"},
	} {
		t.Run(name, func(t *testing.T) {
			r, rec := newRunner(t)
			r.qaHook.corruptCPU = tc.corrupt
			tc.a.Action = plan.QACPU
			logs, failed, err := runQAAction(t, r, rec, tc.a)
			wantQA(t, err, logs, failed, tc.wantLog, tc.wantErr)
		})
	}
}

// TestCheckCPU: workers that disagree on a later round (whose right
// result is not known in advance) fail the check too.
func TestCheckCPU(t *testing.T) {
	res, err := checkCPU(context.Background(), 100*time.Millisecond, 3, nil)
	if err != nil || len(res) != 3 || res[2].hashes < cpuChain+1 {
		t.Fatalf("intact: %v %+v", err, res)
	}
	_, err = checkCPU(context.Background(), 5*time.Second, 3, func(w int, round uint64, sum *[32]byte) {
		if w == 1 && round == 5 {
			sum[0] ^= 1
		}
	})
	if err == nil || !strings.Contains(err.Error(), "disagree on round 5") {
		t.Fatalf("worker 1 corrupted on round 5: %v", err)
	}
}

func TestQADisk(t *testing.T) {
	const mib = 1 << 20
	for name, tc := range map[string]struct {
		a                plan.Action
		wantLog, wantErr string
		written          bool // the first 4 MiB changed, the rest not
	}{
		"read":                {plan.Action{Size: "4Mi", MinReadMBps: 0.1}, "qa-disk: read 4 MiB of ", "", false},
		"read too slow":       {plan.Action{Size: "4Mi", MinReadMBps: 1e9}, "min 1e+09): FAIL", "qa-disk: read 4 MiB at ", false},
		"read all of a small": {plan.Action{Size: "1Gi"}, "has 8 MiB: testing all of it", "", false},
		"write":               {plan.Action{Size: "4Mi", Write: true, MinReadMBps: 0.1, MinWriteMBps: 0.1}, "qa-disk: wrote 4 MiB of ", "", true},
		"write too slow":      {plan.Action{Size: "4Mi", Write: true, MinWriteMBps: 1e9}, "read it back intact: FAIL", "qa-disk: wrote 4 MiB at ", true},
	} {
		t.Run(name, func(t *testing.T) {
			disk := filepath.Join(t.TempDir(), "disk")
			orig := bytes.Repeat([]byte("bootops!"), 8*mib/8)
			if err := os.WriteFile(disk, orig, 0o600); err != nil {
				t.Fatal(err)
			}
			r, rec := newRunner(t)
			tc.a.Action, tc.a.Disk = plan.QADisk, disk
			logs, failed, err := runQAAction(t, r, rec, tc.a)
			wantQA(t, err, logs, failed, tc.wantLog, tc.wantErr)
			if tc.wantErr != "" && !strings.Contains(failed, "MB/s, below min") {
				t.Errorf("the failure does not give the measured value: %q", failed)
			}
			got, _ := os.ReadFile(disk)
			if changed := !bytes.Equal(got[:4*mib], orig[:4*mib]); changed != tc.written || !bytes.Equal(got[4*mib:], orig[4*mib:]) {
				t.Errorf("first 4 MiB changed: %v, want %v; rest intact: %v", changed, tc.written, bytes.Equal(got[4*mib:], orig[4*mib:]))
			}
		})
	}
	// A word the disk does not give back as written.
	b := make([]byte, 64<<10)
	fillDisk(b, 7, mib)
	if err := verifyDisk(b, 7, mib); err != nil {
		t.Fatal(err)
	}
	b[4097] ^= 4
	var dm *diskMismatch
	if err := verifyDisk(b, 7, mib); !errors.As(err, &dm) || dm.offset != mib+4096 {
		t.Errorf("a flipped bit at %d: %v", mib+4097, err)
	}
}

func TestQANetwork(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.String())
		if r.URL.Path != plan.QAStreamPath || r.Header.Get("Authorization") != "Bearer sess" {
			http.Error(w, "qa: no session", http.StatusUnauthorized)
			return
		}
		n, _ := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		if r.URL.Query().Get("node") == "short" {
			n /= 2 // the connection ends early
		}
		io.CopyN(w, zeroReader{}, n)
	}))
	defer srv.Close()
	for name, tc := range map[string]struct {
		node, token      string
		a                plan.Action
		wantLog, wantErr string
	}{
		"pass":         {"n1", "sess", plan.Action{Size: "2Mi", MinMbps: 1}, "qa-network: downloaded 2 MiB from the boot server at ", ""},
		"default size": {"n1", "sess", plan.Action{}, "qa-network: downloaded 64 MiB", ""},
		"too slow":     {"n1", "sess", plan.Action{Size: "2Mi", MinMbps: 1e9}, "(min 1e+09): FAIL", "qa-network: downloaded 2 MiB at "},
		"refused":      {"n1", "forged", plan.Action{Size: "1Mi"}, "", "401 Unauthorized: qa: no session"},
		"cut short":    {"short", "sess", plan.Action{Size: "1Mi"}, "", "download: 524288 of 1048576 bytes"},
		"over the 1Gi": {"n1", "sess", plan.Action{Size: "2Gi"}, "", `size "2Gi": want at most 1Gi`},
	} {
		t.Run(name, func(t *testing.T) {
			r, rec := newRunner(t)
			r.QAStream = newUplink(srv.URL, "lab", tc.node, "", tc.token, io.Discard).qaStream(srv.Client())
			tc.a.Action = plan.QANetwork
			tc.a.Name, tc.a.Retries = tc.a.Action, 0
			err := r.Run(context.Background(), wf(tc.a))
			var failed string
			if f := rec.of(plan.AgentFailed); len(f) > 0 {
				failed = f[0].Message
			}
			wantQA(t, err, rec.logs(), failed, tc.wantLog, tc.wantErr)
		})
	}
	if want := plan.QAStreamPath + "?bytes=2097152&machine=&node=n1&site=lab"; !slices.Contains(asked, want) {
		t.Errorf("asked for %q, want %s among them", asked, want)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
