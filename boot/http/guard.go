package http

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Timeouts of every listener the daemon opens (NewHTTPServer). Routes
// that stream (artifacts, image chunks, the dashboard's event stream) lift
// the write deadline for themselves (Streaming); nothing else may take
// longer than WriteTimeout to answer.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second // every body bootops takes is small
	WriteTimeout      = 60 * time.Second
	IdleTimeout       = 60 * time.Second
	MaxHeaderBytes    = 64 << 10
)

// NewHTTPServer is an http.Server for h with the timeouts above, whose
// connections g bounds (g may be nil).
func NewHTTPServer(h http.Handler, g *Guard, log *slog.Logger) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes}
	if log != nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	if g != nil {
		srv.ConnState = g.ConnState
	}
	return srv
}

// Streaming lifts the write (and read) deadline of NewHTTPServer for h:
// a route whose answer may rightly take long (a 100 MB initrd to a slow
// machine, a dashboard watching for hours).
func Streaming(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.SetWriteDeadline(time.Time{}) // a recorder in tests has none: nothing to lift
		rc.SetReadDeadline(time.Time{})
		h.ServeHTTP(w, r)
	})
}

// Guard bounds the connections of the listeners it wraps, together: at
// most PerSource open at once from one address, and at most Max in all.
// When all Max are taken, the connection idle longest (a keep-alive no
// request is using) is closed to make room; when none is idle the new one
// is refused. So a thousand idle connections cannot lock out a machine
// that asks for its script, and one address cannot take them all.
type Guard struct {
	PerSource int // default 64
	Max       int // default 768

	mu       sync.Mutex
	open     int
	sources  map[string]int
	idle     map[net.Conn]time.Time
	refused  atomic.Uint64
	reclaims atomic.Uint64
}

// Refused counts connections closed at once (their source, or every
// slot, was taken); Reclaimed counts idle ones closed to make room.
func (g *Guard) Refused() uint64   { return g.refused.Load() }
func (g *Guard) Reclaimed() uint64 { return g.reclaims.Load() }

// Open is how many connections are open now.
func (g *Guard) Open() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// Listener wraps ln: its connections count against the guard.
func (g *Guard) Listener(ln net.Listener) net.Listener { return &guardedListener{Listener: ln, g: g} }

// ConnState tracks which connections are idle (http.Server.ConnState).
func (g *Guard) ConnState(c net.Conn, st http.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.idle == nil {
		g.idle = map[net.Conn]time.Time{}
	}
	switch st {
	case http.StateIdle:
		g.idle[c] = time.Now()
	default:
		delete(g.idle, c)
	}
}

// admit takes a slot for a connection from src; false to refuse it.
func (g *Guard) admit(src string) bool {
	g.mu.Lock()
	if g.sources == nil {
		g.sources = map[string]int{}
	}
	if g.sources[src] >= orInt(g.PerSource, 64) {
		g.mu.Unlock()
		return false
	}
	var victim net.Conn
	if g.open >= orInt(g.Max, 768) {
		var oldest time.Time
		for c, t := range g.idle {
			if victim == nil || t.Before(oldest) {
				victim, oldest = c, t
			}
		}
		if victim == nil {
			g.mu.Unlock()
			return false
		}
		delete(g.idle, victim)
	}
	g.open++
	g.sources[src]++
	g.mu.Unlock()
	if victim != nil {
		g.reclaims.Add(1)
		victim.Close() // its release frees its slot; this one is counted already
	}
	return true
}

func (g *Guard) release(src string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open--
	if g.sources[src]--; g.sources[src] <= 0 {
		delete(g.sources, src)
	}
}

func orInt(n, d int) int {
	if n > 0 {
		return n
	}
	return d
}

type guardedListener struct {
	net.Listener
	g *Guard
}

func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		if !l.g.admit(src) {
			l.g.refused.Add(1)
			c.Close()
			continue
		}
		return &guardedConn{Conn: c, g: l.g, src: src}, nil
	}
}

type guardedConn struct {
	net.Conn
	g    *Guard
	src  string
	once sync.Once
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.g.release(c.src) })
	return err
}
