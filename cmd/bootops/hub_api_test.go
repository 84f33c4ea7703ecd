package main

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bootops/bootops/api/contract"
	"github.com/bootops/bootops/boot/ui"
	bootopsd "github.com/bootops/bootops/daemon"
	"github.com/bootops/bootops/hub"
)

// The hub's routes are in api/openapi.json, and answer as it says,
// behind the view token.
func TestHubRoutesDocumented(t *testing.T) {
	c, err := contract.New()
	if err != nil {
		t.Fatal(err)
	}
	routes := hubRoutes(hub.NewView(), "hub-1", prometheus.NewRegistry(), &ui.Server{})
	ps := append(slices.Collect(maps.Keys(routes)), slices.Collect(maps.Keys(bootopsd.PprofRoutes))...)
	if undocumented, _ := c.Compare(ps); len(undocumented) > 0 {
		t.Errorf("hub routes missing from api/openapi.json: %v", undocumented)
	}
	if _, ok := routes["POST /api/v1/sync"]; ok {
		t.Error("the hub serves sync: it is read-only")
	}
	mux := http.NewServeMux()
	for p, h := range routes {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(c.Wrap(needToken("view", mux)))
	defer srv.Close()
	for _, r := range []struct {
		path, token string
		want        int
	}{
		{"/api/v1/status", "view", 200},
		{"/api/v1/status", "", 401},
		{"/api/v1/status?site=lab", "view", 200},
		{"/api/v1/status?site=lab", "", 401},
		// Whatever a site name holds, it only filters: an empty
		// document, valid as the contract says.
		{"/api/v1/status?site=" + strings.Repeat("%2F..%00", 500), "view", 200},
		{"/api/v1/events?key=lab/x", "view", 200},
		{"/api/v1/openapi.json", "view", 200},
		{"/metrics", "view", 200},
		{"/favicon.ico", "view", 204},
		{"/", "view", 200},
	} {
		req, _ := http.NewRequest("GET", srv.URL+r.path, nil)
		if r.token != "" {
			req.Header.Set("Authorization", "Bearer "+r.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != r.want {
			t.Errorf("GET %s: %d, want %d", r.path, resp.StatusCode, r.want)
		}
	}
	if f := c.Failures(); len(f) > 0 {
		t.Errorf("contract: %v", f)
	}
}
