package contract

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The checker reports what the document does not allow, and only that.
func TestChecker(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	h := c.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			io.WriteString(w, "ok\n") // text/plain, sniffed
		case "/api/v1/status":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"plan": 7}`) // no source, and plan is no string
		case "/api/v1/agent/events":
			io.ReadAll(r.Body)
			w.WriteHeader(http.StatusOK) // took a request without a credential
		default:
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	for _, r := range []*http.Request{
		httptest.NewRequest("GET", "/healthz", nil),
		httptest.NewRequest("GET", "/api/v1/status", nil),
		httptest.NewRequest("POST", "/api/v1/agent/events", strings.NewReader(`{}`)),
		httptest.NewRequest("GET", "/nowhere", nil),
	} {
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	f := c.Failures()
	if len(f) != 4 {
		t.Fatalf("%d failures, want 4 (status; events' request and its empty 200; nowhere):\n%s", len(f), strings.Join(f, "\n"))
	}
	for i, want := range []string{"GET /api/v1/status: response 200", "POST /api/v1/agent/events: the document refuses the request",
		"POST /api/v1/agent/events: response 200", "GET /nowhere: 418"} {
		if !strings.HasPrefix(f[i], want) {
			t.Errorf("failure %d: %s, want %s…", i, f[i], want)
		}
	}
	if seen := c.Seen(); seen["healthz"] != 1 || seen["getStatus"] != 1 {
		t.Errorf("seen: %v", seen)
	}
	var out strings.Builder
	if code := c.Finish(&out, 0); code != 1 || !strings.Contains(out.String(), "3 of 37 documented operations exercised") {
		t.Errorf("Finish: %d\n%s", code, out.String())
	}
}

// Compare: a route the document lacks, an operation no route serves;
// method-less and subtree patterns.
func TestCompare(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	undocumented, unserved := c.Compare([]string{"GET /healthz", "/hooks/git", "GET /ui/", "GET /{$}", "GET /extra"})
	if len(undocumented) != 1 || undocumented[0] != "GET /extra" {
		t.Errorf("undocumented: %v", undocumented)
	}
	for _, served := range []string{"GET /healthz", "POST /hooks/git", "GET /ui/{file}", "GET /"} {
		for _, u := range unserved {
			if u == served {
				t.Errorf("%s is served, but reported not", served)
			}
		}
	}
	if len(unserved) != len(c.Operations())-4 {
		t.Errorf("%d unserved of %d", len(unserved), len(c.Operations()))
	}
}
