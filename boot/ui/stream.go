package ui

import (
	"embed"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
)

//go:embed assets
var assets embed.FS

// Routes are the dashboard's handlers by pattern, for the boot plane's
// HTTP server: the page, its files, the stream and the one action.
func (s *Server) Routes() map[string]http.Handler {
	files, _ := fs.Sub(assets, "assets")
	static := http.StripPrefix("/ui/", http.FileServerFS(files))
	return map[string]http.Handler{
		"GET /{$}":           http.HandlerFunc(s.page),
		"GET /ui/":           static,
		"GET /api/v1/stream": http.HandlerFunc(s.stream),
		"POST /api/v1/sync":  http.HandlerFunc(s.sync),
		"GET /favicon.ico":   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }),
	}
}

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	b, _ := assets.ReadFile("assets/index.html")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(b)
}

// stream is GET /api/v1/stream: a snapshot of the fleet, then its changes.
// With ?key=K the stream also carries machine K's timeline: all of it
// first, then each new event.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if len(key) > 1024 {
		http.Error(w, "key: too long", http.StatusBadRequest)
		return
	}
	c, snapshot, ok := s.subscribe()
	if !ok {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many dashboard streams open", http.StatusServiceUnavailable)
		return
	}
	defer s.unsubscribe(c)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	timeout := orDuration(s.WriteTimeout, 10*time.Second)
	send := func(b []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(timeout))
		_, err := w.Write(b)
		if err == nil {
			err = rc.Flush()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The browser stopped reading: let it go.
			s.mu.Lock()
			s.dropped++
			s.mu.Unlock()
			s.logger().Info("ui: dropped a stream that was not read", "write_timeout", timeout.String())
		}
		return err == nil
	}
	// A reconnecting browser waits 2 s, not its default 3.
	if !send(append([]byte("retry: 2000\n"), snapshot...)) {
		return
	}
	var tl timeline
	if key != "" && !send(tl.next(s, key)) {
		return
	}
	beat := time.NewTicker(orDuration(s.Heartbeat, 15*time.Second))
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.gone:
			return
		case <-beat.C:
			if !send([]byte(": keep-alive\n\n")) {
				return
			}
		case m := <-c.ch:
			if !send(m.data) {
				return
			}
			if key != "" && m.keys[key] {
				if b := tl.next(s, key); b != nil && !send(b) {
					return
				}
			}
		}
	}
}

// timeline tracks what of one machine's events a stream has sent.
type timeline struct {
	started bool
	last    status.Event // the newest event sent (zero: none)
}

// next returns a "timeline" event with the events not sent yet; all of
// them (reset) when the one sent last is no longer there (trimmed, or a
// history merged in before it); nil when nothing is new.
func (t *timeline) next(s *Server, key string) []byte {
	var evs []status.Event
	if s.Events != nil {
		evs = s.Events(key)
	}
	from, reset := 0, true
	if t.last != (status.Event{}) {
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i] == t.last {
				from, reset = i+1, false
				break
			}
		}
	}
	if t.started && !reset && from == len(evs) {
		return nil
	}
	t.started = true
	if len(evs) > 0 {
		t.last = evs[len(evs)-1]
	}
	msg := struct {
		Key    string         `json:"key"`
		Reset  bool           `json:"reset,omitempty"`
		Events []status.Event `json:"events"`
	}{key, reset, append([]status.Event{}, evs[from:]...)}
	return frame("timeline", msg)
}

// sync is POST /api/v1/sync: fetch the source now. It needs the bearer
// token; without one configured the dashboard is read-only.
func (s *Server) sync(w http.ResponseWriter, r *http.Request) {
	if !s.actions() {
		http.Error(w, "the dashboard is read-only: start bootops serve with --ui-token-file to allow actions", http.StatusForbidden)
		return
	}
	if s.Authorize != nil && !s.Authorize(r, bhttp.RoleOperate) {
		bhttp.Refuse(w, r, bhttp.RoleOperate)
		return
	}
	if s.Authorize == nil && !bhttp.Authorized(r, s.Token()) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bootops"`)
		http.Error(w, "a valid token is needed (Authorization: Bearer …)", http.StatusUnauthorized)
		return
	}
	s.Sync("dashboard")
	w.WriteHeader(http.StatusAccepted)
	w.Write([]byte("fetching the source\n"))
}
