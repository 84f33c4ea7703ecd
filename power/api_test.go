package power

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bootops/bootops/plan"
)

// get asks the power API for key's power, with the bearer token when it is
// not "", and returns the HTTP status and the answer.
func get(t *testing.T, h http.Handler, key, token string) (int, Status) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/api/v1/power/"+key, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var st Status
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("GET %s: %d %q", key, w.Code, w.Body)
	}
	return w.Code, st
}

// Anyone may read a node's power, but only as last polled: an anonymous
// GET never makes the daemon log in to a BMC. The operator's token asks
// the BMC now.
func TestAnonymousPowerReadIsTheLastPoll(t *testing.T) {
	r := newRig(t, "", bmcNode("n1", "10.0.0.1", 0), &plan.Node{Name: "n2"})
	mux := http.NewServeMux()
	for pattern, h := range r.m.Routes(func(req *http.Request) bool { return req.Header.Get("Authorization") == "Bearer op" }) {
		mux.Handle(pattern, h)
	}
	b := r.bmcs["10.0.0.1"]
	calls := func() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.calls) }

	// Not polled yet: unknown, and the BMC is not asked.
	if code, st := get(t, mux, "lab/n1", ""); code != http.StatusOK || st.Power != Unknown || calls() != 0 {
		t.Errorf("before the first poll: %d %+v, %d BMC calls", code, st, calls())
	}
	r.m.Round(context.Background())
	b.mu.Lock()
	b.power = On // since the poll: the answer stays the polled one
	b.mu.Unlock()
	for i := 0; i < 3; i++ {
		if code, st := get(t, mux, "lab/n1", ""); code != http.StatusOK || st.Power != Off || st.Checked.IsZero() {
			t.Errorf("anonymous GET: %d %+v", code, st)
		}
		if code, _ := get(t, mux, "lab/n1", "wrong"); code != http.StatusOK {
			t.Errorf("GET with a wrong token: %d", code)
		}
	}
	if n := calls(); n != 1 {
		t.Errorf("%d BMC calls for one poll and six GETs without the token", n)
	}
	if code, st := get(t, mux, "lab/n1", "op"); code != http.StatusOK || st.Power != On || calls() != 2 {
		t.Errorf("the operator's GET: %d %+v, %d BMC calls", code, st, calls())
	}
	if code, st := get(t, mux, "lab/n1", ""); code != http.StatusOK || st.Power != On {
		t.Errorf("anonymous GET after the operator's: %d %+v", code, st)
	}
	if code, _ := get(t, mux, "lab/n2", ""); code != http.StatusConflict {
		t.Errorf("a node without a BMC: %d", code)
	}
	if code, _ := get(t, mux, "lab/n9", ""); code != http.StatusNotFound {
		t.Errorf("no such node: %d", code)
	}
}

// An action or boot device the API does not know is the operator's
// mistake, a 400 that names it, and no BMC is asked.
func TestUnknownActionIsBadRequest(t *testing.T) {
	r := newRig(t, "", bmcNode("n1", "10.0.0.1", 0))
	mux := http.NewServeMux()
	for pattern, h := range r.m.Routes(func(*http.Request) bool { return true }) {
		mux.Handle(pattern, h)
	}
	b := r.bmcs["10.0.0.1"]
	calls := func() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.calls) }
	for _, c := range []struct{ path, body, want string }{
		{"/api/v1/power/lab/n1", `{"action":"reboot"}`, `unknown power action "reboot"`},
		{"/api/v1/boot-device/lab/n1", `{"device":"cdrom"}`, `unknown boot device "cdrom"`},
		{"/api/v1/power/lab/n1", `{"action":`, "bad request"},
	} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body)))
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("POST %s %s: %d %q, want 400 with %q", c.path, c.body, w.Code, w.Body, c.want)
		}
	}
	if n := calls(); n != 0 {
		t.Errorf("the BMC was asked %d times", n)
	}
	// A known action still reaches it.
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/api/v1/power/lab/n1", strings.NewReader(`{"action":"on"}`)))
	if w.Code != http.StatusOK || calls() == 0 {
		t.Errorf("POST on: %d %q, %d BMC calls", w.Code, w.Body, calls())
	}
}
