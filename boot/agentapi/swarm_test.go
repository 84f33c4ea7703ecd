package agentapi

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/swarm"
)

// A machine of a peers site gets the limits at check-in, the manifest of
// its own image once the server prepared it (a bad download refused), and
// work from the scheduler; a credential of another machine, an image that
// is not its own, a site without peers are refused; chunks need the
// swarm's key.
func TestSwarmEndpoints(t *testing.T) {
	raw := bytes.Repeat([]byte("bootops"), 1<<20) // 7 MiB: two chunks
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	sum := sha256.Sum256(gz.Bytes())
	good := hex.EncodeToString(sum[:])
	bad := strings.Repeat("0", 64) // the file's sha256 is not this
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(gz.Bytes()) }))
	defer files.Close()

	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	image := func(sha string) plan.Action {
		return plan.Action{Action: "image-to-disk", URL: files.URL + "/img.gz", SHA256: sha, Compression: "gz"}
	}
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Node: "a", Actions: []plan.Action{image(good)}}
	p.Sites[0].Nodes[1].Artifacts.Workflow = plan.Workflow{Node: "b", Actions: []plan.Action{image(bad)}}
	p.Sites[0].Peers = &plan.Peers{PerMachine: 2, Linger: "1m"}
	s, _ := newServer(t, p)
	s.Swarm = &Swarm{Cache: &swarm.Cache{Dir: t.TempDir()}, Scheduler: &swarm.Scheduler{}}
	h := s.Handler()

	checkIn := func(node, query string, id plan.Identity) string {
		code, body := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", node), plan.CheckIn{Site: "lab", Node: node, Identity: id})
		if code != 200 || !strings.Contains(body, `"peers":{"perMachine":2,"linger":"1m"}`) {
			t.Fatalf("check-in of %s: %d %s", node, code, body)
		}
		return sessionOf(t, body)
	}
	sessA := checkIn("a", "serial=SER-A&site=lab", plan.Identity{Serial: "SER-A"})
	do := func(method, path, token string, in any) (int, string) {
		var b []byte
		if in != nil {
			b, _ = json.Marshal(in)
		}
		req := httptest.NewRequest(method, path, bytes.NewReader(b))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	manifest := plan.AgentSwarmPath + good + "/manifest?site=lab&node=a"
	var code int
	var body string
	testutil.Poll(10*time.Second, 20*time.Millisecond, func() bool {
		if code, body = do("GET", manifest, sessA, nil); code != http.StatusServiceUnavailable {
			return true
		}
		if !strings.Contains(body, "preparing the image") {
			t.Fatalf("while preparing: %s", body)
		}
		return false
	})
	var m swarm.Manifest
	if code != 200 || json.Unmarshal([]byte(body), &m) != nil || m.Check() != nil || m.Size != int64(len(raw)) || m.Chunks() != 2 {
		t.Fatalf("manifest: %d %.300s", code, body)
	}
	rawSum := sha256.Sum256(raw)
	if m.SHA256 != hex.EncodeToString(rawSum[:]) || m.Source != good {
		t.Errorf("manifest: raw sha256 %s, source %s", m.SHA256, m.Source)
	}

	for _, tc := range []struct {
		name, method, path, token string
		code                      int
		want                      string
	}{
		{"no credential", "GET", manifest, "", 401, "swarm:"},
		{"another machine's credential", "GET", plan.AgentSwarmPath + good + "/manifest?site=lab&node=b", sessA, 401, "swarm:"},
		{"not its image", "GET", plan.AgentSwarmPath + bad + "/manifest?site=lab&node=a", sessA, 404, "no image-to-disk action of this machine's workflow"},
		{"a chunk without the key", "GET", "/swarm/" + good + "/chunk/0", "", 401, "not a member"},
	} {
		if code, body := do(tc.method, tc.path, tc.token, nil); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s; want %d %q", tc.name, code, body, tc.code, tc.want)
		}
	}

	// The scheduler: the first report gets a chunk from this server (one
	// first copy at a time per machine: the others spread them).
	code, body = do("POST", plan.AgentSwarmPath+good+"?site=lab&node=a", sessA, swarm.Report{Instance: "i1", Addr: "0.0.0.0:7000", Want: 4})
	var reply swarm.Reply
	if code != 200 || json.Unmarshal([]byte(body), &reply) != nil || len(reply.Assign) != 1 || reply.Key == "" {
		t.Fatalf("report: %d %s", code, body)
	}
	if a := reply.Assign[0]; a.From != "" || a.URL != p.Sites[0].ServerURL() {
		t.Errorf("assignment %+v: want the server %s", a, p.Sites[0].ServerURL())
	}
	req := httptest.NewRequest("GET", "/swarm/"+good+"/chunk/1", nil)
	req.Header.Set("Authorization", "Bearer "+reply.Key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if off, n := m.Span(1); rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), raw[off:off+n]) || !m.Verify(1, rec.Body.Bytes()) {
		t.Errorf("chunk 1: %d, %d bytes", rec.Code, rec.Body.Len())
	}

	// Node b's image does not have the sha256 Git gives: refused, said.
	sessB := checkIn("b", "mac=52:54:00:00:00:0b&site=lab", plan.Identity{MACs: []string{"52:54:00:00:00:0b"}})
	testutil.Poll(10*time.Second, 20*time.Millisecond, func() bool {
		code, body = do("GET", plan.AgentSwarmPath+bad+"/manifest?site=lab&node=b", sessB, nil)
		return code != http.StatusServiceUnavailable
	})
	if code != http.StatusBadGateway || !strings.Contains(body, "Git says "+bad+": not served to peers") {
		t.Errorf("a bad image: %d %s", code, body)
	}

	// A site without peers: no limits at check-in, no swarm.
	p.Sites[0].Peers = nil
	code, body = post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}})
	if code != 200 || strings.Contains(body, `"peers"`) {
		t.Errorf("check-in on a site without peers: %d %s", code, body)
	}
	if code, body := do("GET", plan.AgentSwarmPath+good+"/manifest?site=lab&node=a", sessionOf(t, body), nil); code != 404 || !strings.Contains(body, "does not share images") {
		t.Errorf("a site without peers: %d %s", code, body)
	}
}
