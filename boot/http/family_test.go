package http

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/bootops/bootops/plan"
)

// dualStack is a plan with one dual-stack site (127.0.0.1 and ::1) whose
// node's script was rendered, as the compiler does, with the site's URLs.
func dualStack(httpsPort int) *plan.Plan {
	st := &plan.Site{Name: "lab", UnknownNodes: plan.PolicyIgnore,
		Network: plan.Network{ServerAddress: "127.0.0.1", HTTPPort: 8080, HTTPSPort: httpsPort, IPv6: &plan.NetworkV6{ServerAddress: "::1"}}}
	script := "#!ipxe\nkernel " + st.ServerURL() + "/artifacts/microos/default/kernel bootops.server=" + st.AgentURL() +
		" bootops.token=" + plan.TokenPlaceholder + "\ninitrd " + st.ServerURL() + "/artifacts/microos/default/initrd\nboot\n"
	st.Nodes = []*plan.Node{{Name: "a", Site: "lab", Profile: "base", Identity: plan.Identity{Serial: "SER-A"}, Artifacts: plan.Artifacts{IPXE: script}}}
	return &plan.Plan{Hash: "h", Sites: []*plan.Site{st}}
}

// serveOn serves h on a loopback listener of addr's family.
func serveOn(t *testing.T, addr string, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestScriptURLsFollowTheRequestsFamily: the script names the server in
// the family the machine reached it over.
func TestScriptURLsFollowTheRequestsFamily(t *testing.T) {
	for _, httpsPort := range []int{0, 8443} {
		s, _, _ := newServer(t, dualStack(httpsPort))
		h := s.Handler()
		agent4, agent6 := "http://127.0.0.1:8080", "http://[::1]:8080"
		if httpsPort != 0 {
			agent4, agent6 = "https://127.0.0.1:8443", "https://[::1]:8443"
		}
		for listen, want := range map[string][]string{
			"127.0.0.1:0": {"kernel http://127.0.0.1:8080/artifacts/", "bootops.server=" + agent4 + " ", "initrd http://127.0.0.1:8080/"},
			"[::1]:0":     {"kernel http://[::1]:8080/artifacts/", "bootops.server=" + agent6 + " ", "initrd http://[::1]:8080/"},
		} {
			base := serveOn(t, listen, h)
			resp, err := http.Get(base + "/ipxe?serial=SER-A&site=lab")
			if err != nil {
				t.Fatal(err)
			}
			got := body(t, resp)
			for _, w := range want {
				if !strings.Contains(got, w) {
					t.Errorf("https port %d, over %s: script lacks %q:\n%s", httpsPort, listen, w, got)
				}
			}
			if other := map[bool]string{true: "127.0.0.1", false: "[::1]"}[strings.HasPrefix(listen, "[")]; strings.Contains(got, other) {
				t.Errorf("over %s the script names %s:\n%s", listen, other, got)
			}
		}
	}
}

// An unknown machine that reports no identifier and came over IPv6 is
// keyed by its IPv6 address: on its kernel command line, and in the
// status API.
func TestUnknownMachineKeyedByIPv6Address(t *testing.T) {
	s, _, _ := newServer(t, testPlan("", ""))
	base := serveOn(t, "[::1]:0", s.Handler())
	resp, err := http.Get(base + "/ipxe?site=lab")
	if err != nil {
		t.Fatal(err)
	}
	if got := body(t, resp); !strings.Contains(got, " bootops.machine=ip:::1\n") {
		t.Fatalf("script:\n%s", got)
	}
	resp, err = http.Get(base + "/api/v1/events?key=" + url.QueryEscape("ip:::1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := body(t, resp); !strings.Contains(got, `"ip": "::1"`) || !strings.Contains(got, "unknown machine") {
		t.Errorf("events of ip:::1: %s", got)
	}
}
