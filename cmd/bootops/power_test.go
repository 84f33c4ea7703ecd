package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// The operator token comes from --token-file or BOOTOPS_TOKEN; without
// one, on/off/cycle and boot-device stop before asking anyone.
func TestPowerNeedsTheOperatorToken(t *testing.T) {
	for _, args := range [][]string{{"power", "lab/n1", "on"}, {"boot-device", "lab/n1", "pxe"}} {
		code, _, errs := bootops(t, nil, args...)
		if code != 2 || !strings.Contains(errs, "need an operator token with the operate role") {
			t.Errorf("%v without a token: %d %s", args, code, errs)
		}
	}
	// With BOOTOPS_TOKEN it goes on, to the daemon (none here).
	code, _, errs := bootops(t, map[string]string{"BOOTOPS_TOKEN": "t"}, "power", "lab/n1", "on", "--server", "http://127.0.0.1:1")
	if code != 1 || !strings.Contains(errs, "no answer from the daemon") {
		t.Errorf("with BOOTOPS_TOKEN: %d %s", code, errs)
	}
	if code, _, errs := bootops(t, nil, "power", "lab/n1", "reboot"); code != 2 || !strings.Contains(errs, `unknown action "reboot"`) {
		t.Errorf("bad action: %d %s", code, errs)
	}
}

// `power NODE status` reads the last poll; with the operator token it asks
// the BMC now (the daemon answers a GET with the token so). An unreachable
// BMC is said with why.
func TestPowerStatusSendsTheTokenWhenItHasOne(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Write([]byte(`{"node":"lab/n1","power":"unreachable","error":"secret \"rack\" may not be sent to 198.18.0.5"}`))
	}))
	defer srv.Close()
	code, out, errs := bootops(t, nil, "power", "lab/n1", "status", "--server", srv.URL)
	if code != 0 || out != "lab/n1: unreachable (secret \"rack\" may not be sent to 198.18.0.5)\n" {
		t.Errorf("status: %d %q %s", code, out, errs)
	}
	if code, _, errs := bootops(t, map[string]string{"BOOTOPS_TOKEN": "op"}, "power", "lab/n1", "status", "--server", srv.URL); code != 0 {
		t.Errorf("status with the token: %d %s", code, errs)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "GET /api/v1/power/lab/n1 |GET /api/v1/power/lab/n1 Bearer op"; strings.Join(auth, "|") != want {
		t.Errorf("the daemon saw %q, want %q", auth, want)
	}
}

// serve's BMC flags: where credentials may go, and whether tlsVerify:
// false may be obeyed; a bad entry stops it at the start.
func TestServeBMCFlags(t *testing.T) {
	code, _, errs := bootops(t, nil, "serve", "--source", t.TempDir(), "--bmc-allow", "10.1.2.0/24, 10.1.3.0/33")
	if code != 2 || !strings.Contains(errs, `--bmc-allow: "10.1.3.0/33": not an address, a network (CIDR) or a host name`) {
		t.Errorf("a bad --bmc-allow: %d %s", code, errs)
	}
	code, out, _ := bootops(t, nil, "serve", "--help")
	for _, flag := range []string{"-bmc-allow", "-bmc-insecure-tls-allowed"} {
		if code != 0 || !strings.Contains(out, flag) {
			t.Errorf("serve --help lacks %s", flag)
		}
	}
}
