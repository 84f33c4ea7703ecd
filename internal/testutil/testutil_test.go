package testutil

import (
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	n := 0
	if !Poll(10*time.Second, time.Millisecond, func() bool { n++; return n == 3 }) {
		t.Fatal("a condition that holds at the third ask: Poll said it never held")
	}
	if n != 3 {
		t.Errorf("asked %d times, want 3 (it stops once the condition holds)", n)
	}
	start := time.Now()
	asked := 0
	if Poll(50*time.Millisecond, 10*time.Millisecond, func() bool { asked++; return false }) {
		t.Fatal("a condition that never holds: Poll said it held")
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("gave up after %s, before the 50ms timeout", waited)
	}
	if asked < 2 {
		t.Errorf("asked %d times in 50ms at 10ms", asked)
	}
}

func TestWaitFor(t *testing.T) {
	var mu sync.Mutex
	done := false
	go func() {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		done = true
		mu.Unlock()
	}()
	WaitFor(t, "the goroutine", 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return done })
}

func TestFreePorts(t *testing.T) {
	addrs := FreePorts(t, 5)
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Errorf("%s given twice in %v", a, addrs)
		}
		seen[a] = true
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("%s: not free: %v", a, err)
			continue
		}
		ln.Close()
	}
	if host, _, _ := net.SplitHostPort(FreePort(t)); host != "127.0.0.1" {
		t.Errorf("FreePort on %s, want 127.0.0.1", host)
	}
}

func TestFreeUDP(t *testing.T) {
	for _, network := range []string{"udp4", "udp6"} {
		a := FreeUDP(t, network)
		if !a.Addr().IsLoopback() || a.Port() == 0 {
			t.Errorf("%s: %s is not a loopback port", network, a)
		}
		c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(a))
		if err != nil {
			t.Errorf("%s: %s not free: %v", network, a, err)
			continue
		}
		c.Close()
	}
}

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	WriteFiles(t, dir, map[string]string{"a.yaml": "a\n", "sites/lab/nodes/n0.yaml": "n0\n"})
	for name, want := range map[string]string{"a.yaml": "a\n", "sites/lab/nodes/n0.yaml": "n0\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
}

func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := len(b.String()); n != 800 {
		t.Errorf("%d bytes, want 800", n)
	}
}

func TestTail(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb", 5, "a\nb"},
	} {
		if got := Tail(c.in, c.n); got != c.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
