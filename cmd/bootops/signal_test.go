package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestMain lets a test run this test binary as the bootops command, to
// send it real signals.
func TestMain(m *testing.M) {
	if os.Getenv("BOOTOPS_TEST_AS_MAIN") == "1" {
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv("BOOTOPS_TEST_ARGS")), &args); err != nil {
			panic(err)
		}
		os.Args = append([]string{"bootops"}, args...)
		main()
		return
	}
	os.Exit(m.Run())
}

// daemonProcess starts `bootops serve` as a process and returns it with
// its HTTP address.
func daemonProcess(t *testing.T, args ...string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	argv, _ := json.Marshal(append([]string{"serve"}, args...))
	cmd.Env = append(os.Environ(), "BOOTOPS_TEST_AS_MAIN=1", "BOOTOPS_TEST_ARGS="+string(argv))
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
