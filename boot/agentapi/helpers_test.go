package agentapi

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/api/contract"
	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/internal/boottest"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// The fixtures both HTTP packages test with.
var (
	testPlan    = boottest.Plan
	inventoryOf = boottest.Inventory
)

// checker validates every request and response of this package's tests
// against api/openapi.json: Handler wraps its routes with it.
var checker *contract.Checker

func TestMain(m *testing.M) {
	contract.Main(m, func(c *contract.Checker) { checker, checkRoutes = c, c.Wrap })
}

// testSecret signs the tests' credentials.
var testSecret = boot.Secret(strings.Repeat("k", 32))

// memStore is the status store in memory, with its sessions.
type memStore struct {
	*status.Memory
	*status.MemorySessions
}

func (m memStore) RecordSync(evs ...status.Event) error {
	for _, e := range evs {
		m.Record(e)
	}
	return nil
}

// newServer serves p from a store in memory; node b is provisioned at
// generation 1 (it is at 2).
func newServer(t testing.TB, p *plan.Plan) (*Server, *status.Memory) {
	t.Helper()
	live := &boot.Live{}
	live.Swap(p)
	mem := &status.Memory{}
	s := &Server{Plans: live, Secret: testSecret, Store: memStore{Memory: mem, MemorySessions: &status.MemorySessions{}},
		Provisioned: func(site, node string) (int, bool) {
			if node == "b" {
				return 1, true // provisioned at generation 1; the node is at 2
			}
			return 0, false
		}}
	return s, mem
}

// bootTokenTTL is the life of the tests' boot tokens (boot/http's
// default).
const bootTokenTTL = 30 * time.Minute

// nodeToken is the boot token a node's script carries, as boot/http mints
// it: for the node, at its generation in the Plan served now.
func nodeToken(s *Server, site, node string) string {
	n := s.Plans.Current().Node(site, node)
	return s.Secret.Mint(boot.Grant{Kind: boot.KindBoot, Site: site, Subject: node, Generation: n.Reprovision, ID: boot.NewID(), Expires: s.now().Add(bootTokenTTL)})
}

// machineToken is the boot token of an unknown machine's script, bound to
// the key it is known by.
func machineToken(s *Server, site, key string) string {
	return s.Secret.Mint(boot.Grant{Kind: boot.KindBoot, Site: site, Subject: boot.Subject("", key), ID: boot.NewID(), Expires: s.now().Add(bootTokenTTL)})
}

func post(t testing.TB, h http.Handler, path, token string, v any) (int, string) {
	t.Helper()
	return agentPost(t, h, path, token, v, false)
}

// postOverTLS is post over a TLS connection (r.TLS set), as the HTTPS
// listener's requests are.
func postOverTLS(t *testing.T, h http.Handler, path, token string, v any) (int, string) {
	t.Helper()
	return agentPost(t, h, path, token, v, true)
}

func agentPost(t testing.TB, h http.Handler, path, token string, v any, overTLS bool) (int, string) {
	t.Helper()
	b, _ := json.Marshal(v)
	req := httptest.NewRequest("POST", path, bytes.NewReader(b))
	if overTLS {
		req.TLS = &tls.ConnectionState{HandshakeComplete: true}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var c bytes.Buffer
	if json.Compact(&c, rec.Body.Bytes()) == nil {
		return rec.Code, c.String()
	}
	return rec.Code, rec.Body.String()
}

// sessionOf is the session credential of a check-in's reply.
func sessionOf(t *testing.T, body string) string {
	t.Helper()
	var r plan.CheckInReply
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Session == "" {
		t.Fatalf("no session in the check-in reply %s (%v)", body, err)
	}
	return r.Session
}

func reply(t testing.TB, body string) plan.CheckInReply {
	t.Helper()
	var r plan.CheckInReply
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("reply %s: %v", body, err)
	}
	return r
}
