package daemon

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/api/contract"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/internal/testutil"
)

// checker validates every request and response the daemon's HTTP server
// answers in this package's tests against api/openapi.json; patterns are
// the routes of the last server built.
var (
	checker  *contract.Checker
	mu       sync.Mutex
	patterns []string
)

func TestMain(m *testing.M) {
	contract.Main(m, func(c *contract.Checker) {
		checker = c
		testHTTP = func(s *bhttp.Server) {
			s.Middleware = c.Wrap
			mu.Lock()
			patterns = s.Patterns()
			mu.Unlock()
		}
	})
}

// startDaemon runs a daemon on the demo repository, with an operator
// token and a webhook secret, and returns its HTTP address.
func startDaemon(t testing.TB) string {
	t.Helper()
	var log lockedBuffer
	cfg := demoConfig(t, &log)
	dir := t.TempDir()
	cfg.Dashboard.TokenFile = filepath.Join(dir, "ui-token")
	cfg.Source.WebhookSecretFile = filepath.Join(dir, "hook-secret")
	cfg.Dashboard.OperatorsFile = filepath.Join(dir, "operators")
	os.WriteFile(cfg.Dashboard.TokenFile, []byte("operator-token\n"), 0o600)
	os.WriteFile(cfg.Dashboard.OperatorsFile, []byte("# role token name\nread reader-token-0123456789 alice\n"), 0o600)
	os.WriteFile(cfg.Source.WebhookSecretFile, []byte("hook-secret\n"), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	// Each ask reads the whole log, which grows as the daemon starts: a
	// wide margin.
	var addr string
	testutil.Poll(10*time.Second, 10*time.Millisecond, func() bool {
		addr = log.field("started", "http")
		return addr != "" && log.field("serving", "site") != ""
	})
	if addr == "" {
		t.Fatalf("not started:\n%s", log.String())
	}
	return "http://" + addr
}

func do(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Every route the daemon serves (the boot plane's, the webhook, the
// metrics, the dashboard, power, --pprof-addr's) is in api/openapi.json,
// and every operation there is served; the daemon's own routes answer
// as documented.
func TestDaemonContract(t *testing.T) {
	base := startDaemon(t)
	const reader = "reader-token-0123456789"
	mu.Lock()
	ps := append(slices.Clone(patterns), slices.Collect(maps.Keys(PprofRoutes))...)
	mu.Unlock()
	undocumented, unserved := checker.Compare(ps)
	if len(undocumented) > 0 {
		t.Errorf("routes missing from api/openapi.json (add them to api/spec/paths.go, then go generate ./api): %v", undocumented)
	}
	if len(unserved) > 0 {
		t.Errorf("operations of api/openapi.json no route serves: %v", unserved)
	}
	for _, c := range []struct {
		method, path, token, body string
		want                      int
	}{
		// Reads need an operator's credential: the read role does.
		{"GET", "/api/v1/status", "", "", 401},
		{"GET", "/api/v1/status", "not-an-operator-token", "", 403},
		{"GET", "/api/v1/status", reader, "", 200},
		{"GET", "/api/v1/status", "operator-token", "", 200},
		{"GET", "/api/v1/events?site=lab&node=vm-serial", "", "", 401},
		{"GET", "/api/v1/events?site=lab&node=vm-serial", reader, "", 200},
		{"GET", "/api/v1/report?site=lab", "", "", 401},
		{"GET", "/api/v1/report?site=lab", reader, "", 200},
		{"POST", "/api/v1/sync", reader, "", 403},
		{"POST", "/api/v1/power/lab/vm-serial", reader, `{"action":"on"}`, 401},
		{"GET", "/api/v1/openapi.json", "", "", 200},
		{"GET", "/metrics", "", "", 200},
		{"GET", "/", "", "", 200},
		{"GET", "/ui/app.css", "", "", 200},
		{"GET", "/favicon.ico", "", "", 204},
		{"GET", "/readyz", "", "", 200},
		// Power: the demo's nodes have no BMC.
		{"GET", "/api/v1/power/lab/vm-serial", "", "", 401},
		{"GET", "/api/v1/power/lab/vm-serial", reader, "", 409},
		{"GET", "/api/v1/power/lab/nobody", "operator-token", "", 404},
		{"POST", "/api/v1/power/lab/vm-serial", "", `{"action":"on"}`, 401},
		{"POST", "/api/v1/power/lab/vm-serial", "operator-token", `{"action":"on"}`, 409},
		{"POST", "/api/v1/boot-device/lab/vm-serial", "operator-token", `{"device":"pxe","once":true}`, 409},
		{"POST", "/api/v1/sync", "", "", 401},
		{"POST", "/api/v1/sync", "operator-token", "", 202},
		// The webhook: an unsigned push, and another method.
		{"POST", "/hooks/git", "", `{"ref":"refs/heads/main"}`, 401},
		{"GET", "/hooks/git", "", "", 405},
	} {
		if code, body := do(t, c.method, base+c.path, c.token, c.body); code != c.want {
			t.Errorf("%s %s: %d, want %d: %s", c.method, c.path, code, c.want, body)
		}
	}
	// The dashboard signs in: its cookie reads, and acts on nothing.
	req, _ := http.NewRequest("POST", base+"/api/v1/login", nil)
	req.Header.Set("Authorization", "Bearer "+reader)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != 204 || len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %d %+v", resp.StatusCode, cookies)
	}
	for _, c := range []struct {
		method, path string
		want         int
	}{{"GET", "/api/v1/status", 200}, {"POST", "/api/v1/sync", 403}} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		req.AddCookie(cookies[0])
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != c.want {
			t.Errorf("%s %s with the dashboard's cookie: %v %v, want %d", c.method, c.path, resp, err, c.want)
		} else {
			resp.Body.Close()
		}
	}
	// The stream: its first event, then the browser goes away.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "GET", base+"/api/v1/stream", nil)
	req.Header.Set("Authorization", "Bearer "+reader)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 64)
	n, _ := resp.Body.Read(first)
	cancel()
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(first[:n]), "retry:") {
		t.Errorf("stream: %d %q", resp.StatusCode, first[:n])
	}
	if f := checker.Failures(); len(f) > 0 {
		t.Errorf("contract: %v", f)
	}
}

// --pprof-addr's routes answer as documented.
func TestPprofContract(t *testing.T) {
	mux := http.NewServeMux()
	for p, h := range PprofRoutes {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(checker.Wrap(mux))
	defer srv.Close()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=0.1"} {
		if code, _ := do(t, "GET", srv.URL+path, "", ""); code != 200 {
			t.Errorf("GET %s: %d", path, code)
		}
	}
	if f := checker.Failures(); len(f) > 0 {
		t.Errorf("contract: %v", f)
	}
}
