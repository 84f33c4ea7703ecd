// Package testutil holds the helpers that the tests of several packages
// share: waiting for a condition with a deadline, loopback addresses free
// to listen on, a repository's files written into a folder, a log buffer
// several goroutines write to. Only tests import it: nothing here belongs
// in a binary.
package testutil

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every is how often WaitFor asks its condition: often enough that a test
// goes on soon after the condition holds, seldom enough that asking costs
// little beside the code under test.
const Every = 10 * time.Millisecond

// WaitFor asks cond every Every until it holds, and fails the test, saying
// what it waited for and how long, when it still does not after timeout.
// Timeouts are margins for a loaded machine (tests run under -race on two
// cores), not expectations of speed.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	WaitEvery(t, what, timeout, Every, cond)
}

// WaitEvery is WaitFor asking cond every every: for a condition that costs
// more to ask (a process run, a file read).
func WaitEvery(t testing.TB, what string, timeout, every time.Duration, cond func() bool) {
	t.Helper()
	if !Poll(timeout, every, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Poll asks cond every every until it holds or timeout has passed, and
// reports whether it held: for a test that says itself what went wrong,
// or that goes on after a wait that may end either way. cond is asked
// once more at the deadline, so a wait never ends false before timeout.
func Poll(timeout, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(min(every, max(time.Until(deadline), time.Millisecond)))
	}
}

// FreePort is a TCP address on 127.0.0.1 ("127.0.0.1:N") whose port was
// free when asked. Another test may take it before the caller binds it:
// a server that must have it retries on another (see hub's cluster).
func FreePort(t testing.TB) string {
	t.Helper()
	return FreePorts(t, 1)[0]
}

// FreePorts is n FreePort addresses, n different ports: all are held
// open until the last is found.
func FreePorts(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("a free port on 127.0.0.1: %v", err)
		}
		defer ln.Close()
		addrs[i] = ln.Addr().String()
	}
	return addrs
}

// FreeUDP is a UDP address on loopback whose port was free when asked:
// network "udp4" is on 127.0.0.1, "udp6" on [::1].
func FreeUDP(t testing.TB, network string) netip.AddrPort {
	t.Helper()
	ip := net.IPv4(127, 0, 0, 1)
	if network == "udp6" {
		ip = net.IPv6loopback
	}
	c, err := net.ListenUDP(network, &net.UDPAddr{IP: ip})
	if err != nil {
		t.Fatalf("a free %s port on loopback: %v", network, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// WriteFile writes body to dir/name, making the folders on the way; name
// is slash-separated, as a repository's paths are.
func WriteFile(t testing.TB, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// WriteFiles writes each of files (name → body) into dir, as WriteFile.
func WriteFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		WriteFile(t, dir, name, body)
	}
}

// SyncBuffer is a log several goroutines write to while the test reads it
// (a server's slog handler, say).
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what has been written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Tail is the last n lines of s (a final newline ends the last line, it
// starts no other): the end of a long log, for a failure's message.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Slow skips t under -short, as make check runs the tests: it takes many
// seconds under the race detector, and make test runs it in full.
func Slow(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow: make test runs it (make check passes -short)")
	}
}
