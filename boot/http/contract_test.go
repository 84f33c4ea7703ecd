package http

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/bootops/bootops/api"
	"github.com/bootops/bootops/api/contract"
	"github.com/bootops/bootops/boot/status"
)

// checker validates every request and response of this package's tests
// against api/openapi.json: Handler wraps its routes with it.
var checker *contract.Checker

func TestMain(m *testing.M) {
	contract.Main(m, func(c *contract.Checker) { checker, checkRoutes = c, c.Wrap })
}

// Every route of the server is in the document (the daemon's, the
// hub's and the documented paths no route serves: daemon's and
// cmd/bootops' tests).
func TestRoutesDocumented(t *testing.T) {
	s, _, _ := newServer(t, testPlan("", ""))
	undocumented, _ := checker.Compare(s.Patterns())
	if len(undocumented) > 0 {
		t.Errorf("routes missing from api/openapi.json (add them to api/spec/paths.go, then go generate ./api): %v", undocumented)
	}
	if ps := s.Patterns(); !slices.Contains(ps, "GET "+api.Path) || !slices.IsSorted(ps) {
		t.Errorf("Patterns: %v", ps)
	}
	// A route the document does not have is reported.
	if u, _ := checker.Compare([]string{"GET /nowhere"}); !slices.Equal(u, []string{"GET /nowhere"}) {
		t.Errorf("Compare missed an undocumented route: %v", u)
	}
}

// GET /api/v1/openapi.json is the embedded document.
func TestServesOpenAPI(t *testing.T) {
	s, _, _ := newServer(t, testPlan("", ""))
	r := get(t, s.Handler(), api.Path)
	var doc struct {
		OpenAPI string `json:"openapi"`
	}
	if err := json.NewDecoder(r.Body).Decode(&doc); err != nil || r.StatusCode != 200 || doc.OpenAPI != "3.1.0" {
		t.Fatalf("%d %q %v", r.StatusCode, doc.OpenAPI, err)
	}
}

// The status API's three reads, each answered as documented.
func TestStatusEventsReport(t *testing.T) {
	s, mem, _ := newServer(t, testPlan("", ""))
	h := s.Handler()
	body(t, get(t, h, "/ipxe?serial=SER-A"))
	mem.Record(status.Event{Kind: status.KindReport, Site: "lab", Node: "a", State: status.StateRunning, Message: "running"})
	var doc StatusDoc
	if err := json.NewDecoder(get(t, h, "/api/v1/status?inventory=1").Body).Decode(&doc); err != nil || len(doc.Nodes) != 2 || doc.Plan != "h1" {
		t.Fatalf("status: %+v %v", doc, err)
	}
	if err := json.NewDecoder(get(t, h, "/api/v1/status?nodes=0").Body).Decode(&doc); err != nil || doc.Nodes != nil {
		t.Fatalf("status?nodes=0: %+v %v", doc, err)
	}
	var evs []status.Event
	if err := json.NewDecoder(get(t, h, "/api/v1/events?site=lab&node=a").Body).Decode(&evs); err != nil || len(evs) != 2 {
		t.Fatalf("events: %v %v", evs, err)
	}
	if r := get(t, h, "/api/v1/events?key=mac:nobody"); body(t, r) != "[]\n" {
		t.Errorf("events of no machine: not []")
	}
	var recs []DeliveryRecord
	if err := json.NewDecoder(get(t, h, "/api/v1/report?site=lab").Body).Decode(&recs); err != nil {
		t.Fatalf("report: %v", err)
	}
	if r := get(t, h, "/api/v1/report?format=csv"); r.Header.Get("Content-Type") != "text/csv; charset=utf-8" {
		t.Errorf("report csv: %s", r.Header.Get("Content-Type"))
	}
	if r := get(t, h, "/api/v1/report?since=yesterday"); r.StatusCode != http.StatusBadRequest {
		t.Errorf("report since=yesterday: %d", r.StatusCode)
	}
	for _, p := range []string{"/healthz", "/readyz", "/boot.ipxe?site=lab"} {
		if r := get(t, h, p); r.StatusCode != 200 {
			t.Errorf("%s: %d", p, r.StatusCode)
		}
	}
	if f := checker.Failures(); len(f) > 0 {
		t.Errorf("contract: %v", f)
	}
}

type binaries map[string][]byte

func (b binaries) Lookup(name string) ([]byte, bool) { v, ok := b[name]; return v, ok }

// GET /tftp/{file}: an iPXE build over HTTP, whole or a range, and 404
// for a build the server does not have.
func TestServesIPXEBinary(t *testing.T) {
	s, _, _ := newServer(t, testPlan("", ""))
	s.Files.Binaries = binaries{"ipxe.efi": []byte("MZ-an-efi-binary")}
	h := s.Handler()
	if r := get(t, h, "/tftp/ipxe.efi"); r.StatusCode != 200 || r.Header.Get("Content-Type") != "application/efi" || body(t, r) != "MZ-an-efi-binary" {
		t.Errorf("ipxe.efi: %d %s", r.StatusCode, r.Header.Get("Content-Type"))
	}
	if r := get(t, h, "/tftp/ipxe.efi", "Range", "bytes=0-1"); r.StatusCode != http.StatusPartialContent || body(t, r) != "MZ" {
		t.Errorf("a range of ipxe.efi: %d", r.StatusCode)
	}
	if r := get(t, h, "/tftp/undionly.kpxe"); r.StatusCode != http.StatusNotFound {
		t.Errorf("a build not there: %d", r.StatusCode)
	}
	if f := checker.Failures(); len(f) > 0 {
		t.Errorf("contract: %v", f)
	}
}
