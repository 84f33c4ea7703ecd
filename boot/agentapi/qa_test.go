package agentapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bootops/bootops/plan"
)

// TestQAStream: qa-network's download needs the machine's current session
// credential and a size up to plan.MaxQAStream, and streams exactly that
// many bytes with a Content-Length.
func TestQAStream(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	p.Sites[0].Nodes[0].Artifacts.Workflow = plan.Workflow{Node: "a", Profile: "base", Actions: []plan.Action{{Action: plan.QANetwork, Name: "qa-network", Size: "64Mi"}}}
	s, _ := newServer(t, p)
	h := s.Handler()
	code, reply := post(t, h, plan.AgentCheckInPath, nodeToken(s, "lab", "a"), plan.CheckIn{Site: "lab", Node: "a", Identity: plan.Identity{Serial: "SER-A"}})
	if code != 200 {
		t.Fatalf("check-in: %d %s", code, reply)
	}
	sess := sessionOf(t, reply)
	srv := httptest.NewServer(h)
	defer srv.Close()

	for name, tc := range map[string]struct {
		query, token string
		code         int
		n            int64 // bytes of a 200
		want         string
	}{
		"authorized":                   {"?bytes=3000001&site=lab&node=a", sess, 200, 3000001, ""},
		"one byte":                     {"?bytes=1&site=lab&node=a", sess, 200, 1, ""},
		"no credential":                {"?bytes=1024&site=lab&node=a", "", 401, 0, "qa:"},
		"a forged credential":          {"?bytes=1024&site=lab&node=a", sess + "x", 401, 0, "qa:"},
		"another machine's credential": {"?bytes=1024&site=lab&node=b", sess, 401, 0, "qa:"},
		"too big":                      {"?bytes=1073741825&site=lab&node=a", sess, 400, 0, "from 1 to 1073741824"},
		"zero":                         {"?bytes=0&site=lab&node=a", sess, 400, 0, "want a count"},
		"not a number":                 {"?bytes=1Gi&site=lab&node=a", sess, 400, 0, "want a count"},
		"none":                         {"?site=lab&node=a", sess, 400, 0, "want a count"},
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL+plan.QAStreamPath+tc.query, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.code {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, b, tc.code)
			}
			if tc.code != 200 {
				b, _ := io.ReadAll(resp.Body)
				if !strings.Contains(string(b), tc.want) {
					t.Errorf("body %q, want %q in it", b, tc.want)
				}
				return
			}
			if resp.ContentLength != tc.n {
				t.Errorf("Content-Length %d, want %d", resp.ContentLength, tc.n)
			}
			got, err := io.Copy(io.Discard, resp.Body)
			if err != nil || got != tc.n {
				t.Errorf("read %d bytes (%v), want %d", got, err, tc.n)
			}
		})
	}
}
