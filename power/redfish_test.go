package power

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
)

// redfishBMC is a test double of a Redfish BMC: it serves the tree in
// testdata/redfish, logs in with sessions (X-Auth-Token), and keeps the
// system's PowerState and Boot override as a BMC would.
type redfishBMC struct {
	t        *testing.T
	user     string
	pass     string
	mu       sync.Mutex
	system   map[string]any
	requests []string
	// sessionBroken: the session login fails (500), as on BMCs whose
	// session service is broken; HTTP Basic authentication works.
	sessionBroken bool
}

const sessionToken = "c2Vzc2lvbi0x"

func newRedfishBMC(t *testing.T) (*redfishBMC, *httptest.Server) {
	b := &redfishBMC{t: t, user: "root", pass: "calvin"}
	if err := json.Unmarshal(b.file("system.json"), &b.system); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(b)
	t.Cleanup(srv.Close)
	return b, srv
}

func (b *redfishBMC) file(name string) []byte {
	raw, err := os.ReadFile("testdata/redfish/" + name)
	if err != nil {
		b.t.Fatal(err)
	}
	return raw
}

func (b *redfishBMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	path := strings.TrimSuffix(r.URL.Path, "/")
	b.requests = append(b.requests, r.Method+" "+path)
	w.Header().Set("Content-Type", "application/json;odata.metadata=minimal;charset=utf-8")
	w.Header().Set("OData-Version", "4.0")
	if path == "/redfish/v1" || path == "/redfish" {
		w.Write(b.file("serviceroot.json"))
		return
	}
	if r.Method == http.MethodPost && path == "/redfish/v1/SessionService/Sessions" && b.sessionBroken {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"error":{"code":"Base.1.12.InternalError","message":"The request failed due to an internal service error."}}`))
		return
	}
	if r.Method == http.MethodPost && path == "/redfish/v1/SessionService/Sessions" {
		var login struct{ UserName, Password string }
		json.NewDecoder(r.Body).Decode(&login)
		if login.UserName != b.user || login.Password != b.pass {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"@Message.ExtendedInfo":[{"Message":"Unable to complete the operation because an invalid username and/or password is entered, and therefore authentication failed.","MessageId":"IDRAC.2.8.SYS415","Severity":"Warning"}],"code":"Base.1.12.GeneralError","message":"A general error has occurred. See ExtendedInfo for more information"}}`))
			return
		}
		w.Header().Set("X-Auth-Token", sessionToken)
		w.Header().Set("Location", "/redfish/v1/SessionService/Sessions/1")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"@odata.id":"/redfish/v1/SessionService/Sessions/1","@odata.type":"#Session.v1_3_0.Session","Id":"1","Name":"User Session","UserName":"` + login.UserName + `"}`))
		return
	}
	user, pass, basic := r.BasicAuth()
	if r.Header.Get("X-Auth-Token") != sessionToken && !(basic && user == b.user && pass == b.pass) {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"code":"Base.1.12.NoValidSession","message":"There is no valid session established with the implementation."}}`))
		return
	}
	switch r.Method + " " + path {
	case "GET /redfish/v1/SessionService":
		w.Write(b.file("sessionservice.json"))
	case "GET /redfish/v1/SessionService/Sessions/1":
		w.Write([]byte(`{"@odata.id":"/redfish/v1/SessionService/Sessions/1","Id":"1","UserName":"root"}`))
	case "DELETE /redfish/v1/SessionService/Sessions/1":
		w.WriteHeader(http.StatusNoContent)
	case "GET /redfish/v1/Systems":
		w.Write(b.file("systems.json"))
	case "GET /redfish/v1/Systems/System.Embedded.1":
		json.NewEncoder(w).Encode(b.system)
	case "POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset":
		var req struct{ ResetType string }
		json.NewDecoder(r.Body).Decode(&req)
		b.requests[len(b.requests)-1] += " " + req.ResetType
		switch req.ResetType {
		case "On":
			b.system["PowerState"] = "On"
		case "ForceOff", "GracefulShutdown":
			b.system["PowerState"] = "Off"
		case "ForceRestart", "PowerCycle", "GracefulRestart":
			if b.system["PowerState"] != "On" {
				w.WriteHeader(http.StatusConflict)
				w.Write([]byte(`{"error":{"code":"Base.1.12.ActionNotSupported","message":"The requested operation is not supported in the present power state."}}`))
				return
			}
		default:
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case "PATCH /redfish/v1/Systems/System.Embedded.1":
		var req struct{ Boot map[string]any }
		json.NewDecoder(r.Body).Decode(&req)
		boot := b.system["Boot"].(map[string]any)
		var set []string
		for k, v := range req.Boot {
			boot[k] = v
			if strings.HasPrefix(k, "BootSourceOverride") {
				set = append(set, fmt.Sprintf("%s=%v", k, v))
			}
		}
		b.requests[len(b.requests)-1] += " " + strings.Join(sorted(set), " ")
		w.WriteHeader(http.StatusOK)
		json.NewEncoder(w).Encode(b.system)
	default:
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"code":"Base.1.12.ResourceMissingAtURI","message":"The resource at the URI ` + path + ` was not found."}}`))
	}
}

func sorted(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func (b *redfishBMC) saw(prefix string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, r := range b.requests {
		if strings.HasPrefix(r, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// loopback is where the tests' BMCs are: every BMC is reached at the
// address the daemon checked.
var loopback = netip.MustParseAddr("127.0.0.1")

func redfishPlan(srv *httptest.Server) *plan.BMC {
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	return &plan.BMC{Address: host, Port: p, Protocol: plan.BMCRedfish}
}

// bmclib's Redfish provider against the double: power status, on, cycle,
// off and a one-time PXE boot, each as the BMC sees it.
func TestRedfishThroughBMCLib(t *testing.T) {
	b, srv := newRedfishBMC(t)
	c := DialBMCLib(redfishPlan(srv), loopback, Credentials{Username: "root", Password: "calvin"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if s, err := c.PowerState(ctx); err != nil || s != Off {
		t.Fatalf("power status: %q %v", s, err)
	}
	if err := c.SetBootDevice(ctx, "pxe", true); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPower(ctx, "on"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPower(ctx, "cycle"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPower(ctx, "off"); err != nil {
		t.Fatal(err)
	}
	if s, err := c.PowerState(ctx); err != nil || s != Off {
		t.Errorf("power status after off: %q %v", s, err)
	}
	got := strings.Join(append(b.saw("PATCH"), b.saw("POST /redfish/v1/Systems")...), "\n")
	want := "PATCH /redfish/v1/Systems/System.Embedded.1 BootSourceOverrideEnabled=Once BootSourceOverrideMode=UEFI BootSourceOverrideTarget=Pxe\n" +
		"POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset On\n" +
		"POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset ForceRestart\n" +
		"POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset ForceOff"
	if got != want {
		t.Errorf("the BMC saw:\n%s\nwant:\n%s", got, want)
	}
	if n, m := len(b.saw("POST /redfish/v1/SessionService/Sessions")), len(b.saw("DELETE /redfish/v1/SessionService/Sessions/1")); n == 0 || n != m {
		t.Errorf("%d logins, %d logouts", n, m)
	}
}

// A wrong password, a BMC that is down, one that accepts and never
// answers, and a certificate that does not verify: each a clear error,
// the last two within the deadline.
func TestRedfishFailures(t *testing.T) {
	_, srv := newRedfishBMC(t)
	ctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 3*time.Second)
	}
	c1, cancel := ctx()
	defer cancel()
	_, err := DialBMCLib(redfishPlan(srv), loopback, Credentials{Username: "root", Password: "wrong"}).PowerState(c1)
	if err == nil || !strings.Contains(err.Error(), "power status: BMC 127.0.0.1:") || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong password: %v", err)
	}

	down, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := down.Addr().String()
	down.Close()
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	c2, cancel2 := ctx()
	defer cancel2()
	_, err = DialBMCLib(&plan.BMC{Address: host, Port: p, Protocol: plan.BMCRedfish}, loopback, Credentials{Username: "root", Password: "calvin"}).PowerState(c2)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("BMC down: %v", err)
	}

	hang, _ := net.Listen("tcp", "127.0.0.1:0")
	defer hang.Close()
	go func() {
		for {
			conn, err := hang.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never answered
		}
	}()
	host, port, _ = net.SplitHostPort(hang.Addr().String())
	p, _ = strconv.Atoi(port)
	c3, cancel3 := ctx()
	defer cancel3()
	start := time.Now()
	_, err = DialBMCLib(&plan.BMC{Address: host, Port: p, Protocol: plan.BMCRedfish}, loopback, Credentials{Username: "root", Password: "calvin"}).PowerState(c3)
	if !isTimeout(err) || !strings.Contains(err.Error(), "did not answer within 3s") {
		t.Errorf("hanging BMC: %v", err)
	}
	if d := time.Since(start); d > 4500*time.Millisecond {
		t.Errorf("a hanging BMC held the call %s", d)
	}

	verify := redfishPlan(srv)
	verify.TLSVerify = true
	c4, cancel4 := ctx()
	defer cancel4()
	_, err = DialBMCLib(verify, loopback, Credentials{Username: "root", Password: "calvin"}).PowerState(c4)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("tlsVerify against a self-signed BMC: %v", err)
	}
}

// A BMC is reached at the address the daemon checked, never at what its
// name resolves to when the call is made: a Redfish BMC named in Git by a
// name that resolves nowhere is reached at the checked address, with the
// name kept for TLS and the Host header; IPMI is given the address.
func TestBMCReachedAtTheCheckedAddress(t *testing.T) {
	b, srv := newRedfishBMC(t)
	named := redfishPlan(srv)
	named.Address = "bmc.invalid"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, err := DialBMCLib(named, loopback, Credentials{Username: "root", Password: "calvin"}).PowerState(ctx); err != nil || s != Off {
		t.Fatalf("power status of bmc.invalid at 127.0.0.1: %q %v", s, err)
	}
	if len(b.saw("POST /redfish/v1/SessionService/Sessions")) == 0 {
		t.Error("no login at the checked address")
	}
	_, err := DialBMCLib(named, netip.Addr{}, Credentials{Username: "root", Password: "calvin"}).PowerState(ctx)
	if err == nil || !strings.Contains(err.Error(), "no checked address") {
		t.Errorf("without a checked address: %v", err)
	}
	// A redirect to another host is not followed there.
	x := &bmcLib{b: *named, to: loopback}
	if _, err := x.dialChecked(ctx, "tcp", "bmc-elsewhere.invalid:443"); err == nil || !strings.Contains(err.Error(), "refused to connect to bmc-elsewhere.invalid: the daemon checked only bmc.invalid (127.0.0.1)") {
		t.Errorf("another host: %v", err)
	}
	ipmi := &bmcLib{b: plan.BMC{Address: "bmc.invalid", Protocol: plan.BMCIPMI}, to: loopback}
	if h := ipmi.client(time.Time{}, "").Auth.Host; h != "127.0.0.1" {
		t.Errorf("ipmitool is sent to %q", h)
	}
}

// A BMC that takes the login and then hangs, on the read and on the
// logout: the whole call, login, read and logout, ends by its one
// deadline (it was the deadline for each, twice the time).
func TestRedfishHangAfterLoginEndsByTheDeadline(t *testing.T) {
	b := &redfishBMC{t: t, user: "root", pass: "calvin"}
	if err := json.Unmarshal(b.file("system.json"), &b.system); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/redfish/v1" && r.URL.Path != "/redfish/v1/" && r.URL.Path != "/redfish/v1/SessionService/Sessions" || r.Method == http.MethodDelete {
			select { // hung
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		b.ServeHTTP(w, r)
	}))
	defer srv.Close()
	defer close(release)
	const timeout = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	_, err := DialBMCLib(redfishPlan(srv), loopback, Credentials{Username: "root", Password: "calvin"}).PowerState(ctx)
	d := time.Since(start)
	if !isTimeout(err) {
		t.Errorf("hanging read: %v", err)
	}
	if len(b.saw("POST /redfish/v1/SessionService/Sessions")) == 0 {
		t.Error("no login: the test hung elsewhere")
	}
	if d > timeout*3/2 {
		t.Errorf("a call with a %s deadline took %s", timeout, d)
	}
}

// A BMC whose session login fails (500) is read with auth: basic in Git:
// HTTP Basic authentication on every request, no session.
func TestRedfishBasicAuth(t *testing.T) {
	b, srv := newRedfishBMC(t)
	b.sessionBroken = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	session := redfishPlan(srv)
	if _, err := DialBMCLib(session, loopback, Credentials{Username: "root", Password: "calvin"}).PowerState(ctx); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("a broken session login: %v", err)
	}
	basic := redfishPlan(srv)
	basic.Auth = plan.AuthBasic
	if s, err := DialBMCLib(basic, loopback, Credentials{Username: "root", Password: "calvin"}).PowerState(ctx); err != nil || s != Off {
		t.Fatalf("power status with auth: basic: %q %v", s, err)
	}
	if _, err := DialBMCLib(basic, loopback, Credentials{Username: "root", Password: "wrong"}).PowerState(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("auth: basic, a wrong password: %v", err)
	}
}
