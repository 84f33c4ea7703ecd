package http

import (
	"bufio"
	"fmt"
	"github.com/bootops/bootops/internal/testutil"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// serveGuarded serves a tiny handler behind g on loopback.
func serveGuarded(t *testing.T, g *Guard) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), g, nil)
	go srv.Serve(g.Listener(ln))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// request sends one keep-alive request on c and reads its answer; false
// when the connection was closed instead.
func request(c net.Conn, r *bufio.Reader) bool {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == 200
}

// One address holds at most PerSource connections; the rest are closed
// at once, and counted.
func TestGuardPerSource(t *testing.T) {
	g := &Guard{PerSource: 3, Max: 100}
	addr := serveGuarded(t, g)
	ok := 0
	for range 5 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if request(c, bufio.NewReader(c)) {
			ok++
		}
	}
	if ok != 3 || g.Refused() != 2 {
		t.Errorf("%d answered, %d refused; want 3 and 2", ok, g.Refused())
	}
}

// With every slot taken by idle keep-alive connections, a new one is
// answered: the longest idle is closed to make room.
func TestGuardReclaimsIdle(t *testing.T) {
	g := &Guard{PerSource: 100, Max: 4}
	addr := serveGuarded(t, g)
	var idle []net.Conn
	for i := range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if !request(c, bufio.NewReader(c)) {
			t.Fatal("an idle connection's first request failed")
		}
		idle = append(idle, c)
		// The server marks it idle once it has written its answer (the
		// client may read the answer first): wait, so that the order of
		// the idle ones is the order they were opened in.
		testutil.Poll(10*time.Second, 5*time.Millisecond, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.idle) == i+1
		})
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !request(c, bufio.NewReader(c)) {
		t.Fatalf("a new connection was not answered with %d slots idle (open %d)", len(idle), g.Open())
	}
	if g.Reclaimed() != 1 || g.Open() > 4 {
		t.Errorf("reclaimed %d, open %d", g.Reclaimed(), g.Open())
	}
	// The one reclaimed is the first, idle longest: closed.
	idle[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle[0].Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("the longest idle connection was not closed: %v", err)
	}
}

// TLS over a guarded listener: the connection is counted, and a request
// still carries its TLS state (a check-in by identity needs it).
func TestGuardUnderTLS(t *testing.T) {
	g := &Guard{PerSource: 8, Max: 8}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "no TLS state", http.StatusTeapot)
			return
		}
		fmt.Fprint(w, g.Open())
	}))
	srv.Listener = g.Listener(srv.Listener)
	srv.Config.ConnState = g.ConnState
	srv.StartTLS()
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "1" {
		t.Errorf("%d %q: want 200 and one connection counted", resp.StatusCode, b)
	}
}
