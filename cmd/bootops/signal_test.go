package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/bootops/bootops/internal/testutil"
)

// TestMain lets a test run this test binary as the bootops command (with
// BOOTOPS_TEST_AS_MAIN=1), to send it real signals or run a script with
// it; testscript's Main puts it on the scripts' PATH as bootops
// (TestScripts).
func TestMain(m *testing.M) {
	if os.Getenv("BOOTOPS_TEST_AS_MAIN") == "1" {
		os.Args[0] = "bootops"
		main()
		return
	}
	testscript.Main(m, map[string]func(){"bootops": main})
}

// daemonProcess starts `bootops serve` as a process and returns it with
// its HTTP address.
func daemonProcess(t *testing.T, args ...string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), "BOOTOPS_TEST_AS_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	logs := &lockedBuffer{}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			var l struct{ Msg, HTTP string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "started" {
				addr <- l.HTTP
			}
		}
	}()
	select {
	case a := <-addr:
		return cmd, a, logs
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not start:\n%s", logs.String())
	}
	return nil, "", nil
}

// slowRead reads a response body at about rate bytes per second and
// returns its sha256 and length.
func slowRead(r io.Reader, rate int) ([32]byte, int, error) {
	h := sha256.New()
	buf := make([]byte, rate/20)
	n := 0
	for {
		k, err := io.ReadFull(r, buf)
		h.Write(buf[:k])
		n += k
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			var sum [32]byte
			copy(sum[:], h.Sum(nil))
			return sum, n, nil
		}
		if err != nil {
			return [32]byte{}, n, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSIGTERMDrains(t *testing.T) {
	repo := demoRepo(t)
	initrd := make([]byte, 8<<20)
	for i := range initrd {
		initrd[i] = byte(i * 7)
	}
	write(t, repo, "microos/initrd.img", string(initrd))
	want := sha256.Sum256(initrd)

	for _, tc := range []struct {
		drain    string
		complete bool
	}{
		{"30s", true},    // the download (about 2 s) finishes, then the process exits 0
		{"300ms", false}, // the deadline cuts it
	} {
		cmd, addr, logs := daemonProcess(t, "--source", repo, "--state-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--dhcp", "off", "--tftp-addr", "", "--drain-timeout", tc.drain)
		resp, err := http.Get("http://" + addr + "/artifacts/microos/default/initrd")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan [32]byte, 1)
		go func() {
			sum, _, _ := slowRead(resp.Body, 4<<20)
			resp.Body.Close()
			got <- sum
		}()
		time.Sleep(300 * time.Millisecond) // the download is under way
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var sum [32]byte
		var exitErr error
		select {
		case exitErr = <-exited:
			sum = <-got
		case sum = <-got:
			select {
			case exitErr = <-exited:
			case <-time.After(10 * time.Second):
				t.Fatalf("drain %s: the process did not exit after the download\n%s", tc.drain, logs.String())
			}
		}
		if exitErr != nil {
			t.Errorf("drain %s: exit: %v\n%s", tc.drain, exitErr, logs.String())
		}
		if (sum == want) != tc.complete {
			t.Errorf("drain %s: download complete = %v, want %v", tc.drain, sum == want, tc.complete)
		}
		// A drained daemon answers nothing more.
		if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
			t.Errorf("drain %s: still answering after exit", tc.drain)
		}
	}

}

// The README's GitOps walk-through, run as written there (with the bootops
// on PATH being this test binary), its shown output checked.
func TestReadmeGitOps(t *testing.T) {
	testutil.Slow(t)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := readmeBlock(t, string(readme), "## GitOps in five minutes\n")
	dir := walkthroughDir(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", block)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=ops", "GIT_AUTHOR_EMAIL=ops@example.invalid",
		"GIT_COMMITTER_NAME=ops", "GIT_COMMITTER_EMAIL=ops@example.invalid", "BOOTOPS_HTTP_ADDR="+addr, "BOOTOPS_SERVER=http://"+addr)
	// The daemon the walk-through starts is in bash's process group: the
	// group goes when the test ends, whatever happened.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var buf lockedBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	out := []byte(buf.String())
	if err != nil {
		log, _ := exec.Command("sh", "-c", "cat /tmp/tmp.*/serve.log 2>/dev/null | tail -5").Output()
		t.Fatalf("walk-through: %v\n%s\n%s", err, out, log)
	}
	// Every output the README shows (the "# …" lines after a status
	// command) is in the real output, SHAs and times aside.
	var shown []string
	after := false
	for _, line := range strings.Split(block, "\n") {
		switch {
		case strings.Contains(line, "bootops status"):
			after = true
		case after && strings.HasPrefix(line, "# "):
			shown = append(shown, strings.TrimPrefix(line, "# "))
		default:
			after = false
		}
	}
	if len(shown) < 4 {
		t.Fatalf("README shows %d output lines", len(shown))
	}
	for _, s := range shown {
		re := regexp.QuoteMeta(s)
		re = regexp.MustCompile(`[0-9a-f]+…`).ReplaceAllString(re, `[0-9a-f]+`)
		re = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`).ReplaceAllString(re, `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`)
		re = regexp.MustCompile(` +`).ReplaceAllString(re, `\s+`)
		if !regexp.MustCompile(`(?m)^` + re + `\s*$`).Match(out) {
			t.Errorf("README shows %q; the walk-through printed:\n%s", s, out)
		}
	}
}

// readmeBlock is the first ```sh block after heading in the README.
func readmeBlock(t *testing.T, readme, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, heading)
	_, rest, ok2 := strings.Cut(rest, "```sh\n")
	block, _, ok3 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("README: no sh block after %q", heading)
	}
	return block
}

// walkthroughDir is a folder laid out as this repository's root for a
// README walk-through: bin/bootops (this test binary acting as bootops)
// and examples/warehouse.
func walkthroughDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write(t, dir, "bin/bootops", "#!/bin/sh\nBOOTOPS_TEST_AS_MAIN=1 exec "+os.Args[0]+" \"$@\"\n")
	os.Chmod(filepath.Join(dir, "bin/bootops"), 0o755)
	if err := os.CopyFS(filepath.Join(dir, "examples/warehouse"), os.DirFS("../../examples/warehouse")); err != nil {
		t.Fatal(err)
	}
	return dir
}
