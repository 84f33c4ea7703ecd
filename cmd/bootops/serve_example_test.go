package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serve --help's first example runs as written from a fresh checkout, as
// any user (nothing below port 1024, no state under /var): the daemon, the
// curl of a machine's script, the status read with the state folder's
// token. Only its address and state folder are swapped for the test's.
func TestServeHelpExample(t *testing.T) {
	_, help, _ := bootops(t, nil, "serve", "--help")
	var lines []string
	for _, l := range strings.Split(help, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "bootops serve --source examples/") || strings.HasPrefix(l, "curl ") || strings.HasPrefix(l, "BOOTOPS_TOKEN_FILE=") {
			lines = append(lines, l)
		}
		if l == "" && len(lines) > 0 {
			break // the first example only
		}
	}
	if len(lines) != 3 || !strings.HasSuffix(lines[0], " &") {
		t.Fatalf("serve --help: want a serve line (in the background), a curl and a status; got %q", lines)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	state := filepath.Join(t.TempDir(), "bootops")
	bin := walkthroughDir(t) // bin/bootops: this test binary as bootops
	run := func(l string) *exec.Cmd {
		l = strings.ReplaceAll(strings.ReplaceAll(l, "127.0.0.1:8080", addr), "/tmp/bootops", state)
		cmd := exec.Command("bash", "-c", l)
		cmd.Dir = "../.." // the checkout's root, as the example has it
		cmd.Env = append(os.Environ(), "PATH="+filepath.Join(bin, "bin")+":"+os.Getenv("PATH"), "BOOTOPS_SERVER=http://"+addr)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd
	}
	daemon := run(strings.TrimSuffix(lines[0], " &"))
	var logs lockedBuffer
	daemon.Stderr = &logs
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-daemon.Process.Pid, syscall.SIGKILL); daemon.Wait() })
	ready := false
	for deadline := time.Now().Add(time.Minute); !ready && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
	}
	if !ready {
		t.Fatalf("the example's daemon is not ready within a minute:\n%s", logs.String())
	}
	script, err := run(lines[1]).Output()
	if err != nil || !strings.HasPrefix(string(script), "#!ipxe\n# bootops: node rack1-01, site warehouse") {
		t.Errorf("%s: %v\n%s", lines[1], err, script)
	}
	st, err := run(lines[2]).CombinedOutput()
	if err != nil || !strings.Contains(string(st), "rack1-01") {
		t.Errorf("%s: %v\n%s", lines[2], err, st)
	}
}
