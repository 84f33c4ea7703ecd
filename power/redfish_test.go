package power

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/test/redfishsim"
)

// newRedfishBMC is a Redfish BMC (test/redfishsim) served on loopback
// over TLS for the test's life.
func newRedfishBMC(t *testing.T) (*redfishsim.BMC, *httptest.Server) {
	b := redfishsim.New()
	srv := b.Start()
	t.Cleanup(srv.Close)
	return b, srv
}

// loopback is where the tests' BMCs are: every BMC is reached at the
// address the daemon checked.
var loopback = netip.MustParseAddr("127.0.0.1")

func redfishPlan(srv *httptest.Server) *plan.BMC {
	host, port := redfishsim.Addr(srv)
	return &plan.BMC{Address: host, Port: port, Protocol: plan.BMCRedfish}
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
	got := strings.Join(append(b.Saw("PATCH"), b.Saw("POST /redfish/v1/Systems")...), "\n")
	want := "PATCH /redfish/v1/Systems/System.Embedded.1 BootSourceOverrideEnabled=Once BootSourceOverrideMode=UEFI BootSourceOverrideTarget=Pxe\n" +
		"POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset On\n" +
		"POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset ForceRestart\n" +
		"POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset ForceOff"
	if got != want {
		t.Errorf("the BMC saw:\n%s\nwant:\n%s", got, want)
	}
	if n, m := len(b.Saw("POST /redfish/v1/SessionService/Sessions")), len(b.Saw("DELETE /redfish/v1/SessionService/Sessions/1")); n == 0 || n != m {
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
	if len(b.Saw("POST /redfish/v1/SessionService/Sessions")) == 0 {
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
	b := redfishsim.New()
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
	if len(b.Saw("POST /redfish/v1/SessionService/Sessions")) == 0 {
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
	b.SetFaults(redfishsim.Faults{SessionBroken: true})
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

// A BMC that drops every second connection before its TLS handshake
// (bmclib opens one per request): each call still goes through, the
// dropped connections opened again.
func TestRedfishDroppedConnections(t *testing.T) {
	b, srv := newRedfishBMC(t)
	b.SetFaults(redfishsim.Faults{DropEvery: 2})
	c := DialBMCLib(redfishPlan(srv), loopback, Credentials{Username: "root", Password: "calvin"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		if s, err := c.PowerState(ctx); err != nil || s != Off {
			t.Fatalf("power status %d: %q %v", i, s, err)
		}
	}
	if err := c.SetBootDevice(ctx, "pxe", true); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPower(ctx, "on"); err != nil {
		t.Fatal(err)
	}
	if p := b.Power(); p != "On" {
		t.Errorf("power %s after on", p)
	}
}
