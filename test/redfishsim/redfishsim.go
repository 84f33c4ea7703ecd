// Package redfishsim is a Redfish BMC for tests and benchmarks, with the
// faults real BMCs have injected at will: slow answers, dropped
// connections, hangs, a power state that changes late, refused logins,
// a broken session service. It serves the tree in testdata (shaped like a
// Dell iDRAC 9's), logs in with sessions (X-Auth-Token) or HTTP Basic, and
// keeps the system's PowerState and Boot override as a BMC does.
package redfishsim

import (
	"embed"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed testdata/*.json
var tree embed.FS

// Faults are what a BMC does wrong; the zero value does nothing wrong.
type Faults struct {
	// Latency delays every answer.
	Latency time.Duration
	// DropEvery closes every Nth connection as soon as it is accepted,
	// before its TLS handshake (a BMC whose web server drops the
	// connections it cannot serve); 0: none.
	DropEvery int
	// Hang keeps every request after the login unanswered until the
	// client gives up.
	Hang bool
	// LateState: a power change is taken at once but shows in the
	// system's PowerState only this long after.
	LateState time.Duration
	// RefuseLogin refuses every login, session or Basic (401), as for a
	// wrong password.
	RefuseLogin bool
	// SessionBroken fails the session login (500), as on BMCs whose
	// session service is broken; HTTP Basic works.
	SessionBroken bool
}

// BMC is one simulated BMC. Start it with Start (or serve it yourself:
// it is an http.Handler).
type BMC struct {
	User, Pass string

	mu       sync.Mutex
	faults   Faults
	system   map[string]any
	pending  string    // a power state taken, not shown yet (LateState)
	showAt   time.Time // when pending shows
	requests []string
	conns    int // connections accepted
	logins   int
}

// dropping closes every DropEvery'th connection it accepts at once.
type dropping struct {
	net.Listener
	b *BMC
}

func (l *dropping) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.b.mu.Lock()
		l.b.conns++
		drop := l.b.faults.DropEvery > 0 && l.b.conns%l.b.faults.DropEvery == 0
		l.b.mu.Unlock()
		if !drop {
			return c, nil
		}
		c.Close()
	}
}

// SessionToken is the X-Auth-Token a session login returns.
const SessionToken = "c2Vzc2lvbi0x"

// New is a BMC with user root, password calvin, powered off.
func New() *BMC {
	b := &BMC{User: "root", Pass: "calvin"}
	if err := json.Unmarshal(file("system.json"), &b.system); err != nil {
		panic(err)
	}
	return b
}

// Start serves b over TLS (a self-signed certificate) on a loopback port;
// close the server when done.
func (b *BMC) Start() *httptest.Server {
	srv := httptest.NewUnstartedServer(b)
	srv.Listener = &dropping{Listener: srv.Listener, b: b}
	srv.StartTLS()
	return srv
}

// Addr is a started server's host and port.
func Addr(srv *httptest.Server) (string, int) {
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	return host, p
}

// SetFaults changes what b does wrong, from its next request.
func (b *BMC) SetFaults(f Faults) {
	b.mu.Lock()
	b.faults = f
	b.mu.Unlock()
}

// Power is the power state b shows now ("On", "Off").
func (b *BMC) Power() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settle()
	return fmt.Sprint(b.system["PowerState"])
}

// SetPowerState sets the power state ("On", "Off") as a button would:
// at once, whatever the faults.
func (b *BMC) SetPowerState(s string) {
	b.mu.Lock()
	b.system["PowerState"], b.pending = s, ""
	b.mu.Unlock()
}

// Logins counts the logins b was asked for (session or Basic), taken or
// refused.
func (b *BMC) Logins() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.logins
}

// Saw lists the requests b was asked that start with prefix ("" for all):
// method and path, then what a reset or a boot override asked for.
func (b *BMC) Saw(prefix string) []string {
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

func file(name string) []byte {
	raw, err := tree.ReadFile("testdata/" + name)
	if err != nil {
		panic(err)
	}
	return raw
}

// settle shows a pending power state whose time has come (b.mu held).
func (b *BMC) settle() {
	if b.pending != "" && !time.Now().Before(b.showAt) {
		b.system["PowerState"], b.pending = b.pending, ""
	}
}

// setPower takes a power state, shown now or after LateState (b.mu held).
func (b *BMC) setPower(s string) {
	if b.faults.LateState > 0 {
		b.pending, b.showAt = s, time.Now().Add(b.faults.LateState)
		return
	}
	b.system["PowerState"], b.pending = s, ""
}

// shown is the power state as a reader sees it now (b.mu held).
func (b *BMC) shown() string {
	b.settle()
	return fmt.Sprint(b.system["PowerState"])
}

func (b *BMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	f := b.faults
	b.mu.Unlock()
	if f.Latency > 0 {
		select {
		case <-time.After(f.Latency):
		case <-r.Context().Done():
			return
		}
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	login := r.Method == http.MethodPost && path == "/redfish/v1/SessionService/Sessions"
	if f.Hang && !login && path != "/redfish/v1" && path != "/redfish" {
		<-r.Context().Done()
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requests = append(b.requests, r.Method+" "+path)
	w.Header().Set("Content-Type", "application/json;odata.metadata=minimal;charset=utf-8")
	w.Header().Set("OData-Version", "4.0")
	if path == "/redfish/v1" || path == "/redfish" {
		w.Write(file("serviceroot.json"))
		return
	}
	if login {
		b.login(w, r, f)
		return
	}
	user, pass, basic := r.BasicAuth()
	if basic {
		b.logins++
	}
	if (r.Header.Get("X-Auth-Token") != SessionToken || f.RefuseLogin) && !(basic && !f.RefuseLogin && user == b.User && pass == b.Pass) {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"code":"Base.1.12.NoValidSession","message":"There is no valid session established with the implementation."}}`))
		return
	}
	switch r.Method + " " + path {
	case "GET /redfish/v1/SessionService":
		w.Write(file("sessionservice.json"))
	case "GET /redfish/v1/SessionService/Sessions/1":
		w.Write([]byte(`{"@odata.id":"/redfish/v1/SessionService/Sessions/1","Id":"1","UserName":"root"}`))
	case "DELETE /redfish/v1/SessionService/Sessions/1":
		w.WriteHeader(http.StatusNoContent)
	case "GET /redfish/v1/Systems":
		w.Write(file("systems.json"))
	case "GET /redfish/v1/Systems/System.Embedded.1":
		b.settle()
		json.NewEncoder(w).Encode(b.system)
	case "POST /redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset":
		b.reset(w, r)
	case "PATCH /redfish/v1/Systems/System.Embedded.1":
		b.patchBoot(w, r)
	default:
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"code":"Base.1.12.ResourceMissingAtURI","message":"The resource at the URI ` + path + ` was not found."}}`))
	}
}

// login answers a Redfish session login: a token for the right user and
// password, else 401 (or 500, the session service broken by f). b.mu is
// held.
func (b *BMC) login(w http.ResponseWriter, r *http.Request, f Faults) {
	b.logins++
	if f.SessionBroken {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"error":{"code":"Base.1.12.InternalError","message":"The request failed due to an internal service error."}}`))
		return
	}
	var in struct{ UserName, Password string }
	json.NewDecoder(r.Body).Decode(&in)
	if f.RefuseLogin || in.UserName != b.User || in.Password != b.Pass {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"@Message.ExtendedInfo":[{"Message":"Unable to complete the operation because an invalid username and/or password is entered, and therefore authentication failed.","MessageId":"IDRAC.2.8.SYS415","Severity":"Warning"}],"code":"Base.1.12.GeneralError","message":"A general error has occurred. See ExtendedInfo for more information"}}`))
		return
	}
	w.Header().Set("X-Auth-Token", SessionToken)
	w.Header().Set("Location", "/redfish/v1/SessionService/Sessions/1")
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte(`{"@odata.id":"/redfish/v1/SessionService/Sessions/1","@odata.type":"#Session.v1_3_0.Session","Id":"1","Name":"User Session","UserName":"` + in.UserName + `"}`))
}

// reset answers ComputerSystem.Reset: power on or off; a restart only of
// a machine that is on (409 otherwise). b.mu is held.
func (b *BMC) reset(w http.ResponseWriter, r *http.Request) {
	var in struct{ ResetType string }
	json.NewDecoder(r.Body).Decode(&in)
	b.requests[len(b.requests)-1] += " " + in.ResetType
	switch in.ResetType {
	case "On":
		b.setPower("On")
	case "ForceOff", "GracefulShutdown":
		b.setPower("Off")
	case "ForceRestart", "PowerCycle", "GracefulRestart":
		if b.shown() != "On" {
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"error":{"code":"Base.1.12.ActionNotSupported","message":"The requested operation is not supported in the present power state."}}`))
			return
		}
	default:
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// patchBoot answers a PATCH of the system's Boot settings, recording the
// BootSourceOverride ones it set. b.mu is held.
func (b *BMC) patchBoot(w http.ResponseWriter, r *http.Request) {
	var in struct{ Boot map[string]any }
	json.NewDecoder(r.Body).Decode(&in)
	boot := b.system["Boot"].(map[string]any)
	var set []string
	for k, v := range in.Boot {
		boot[k] = v
		if strings.HasPrefix(k, "BootSourceOverride") {
			set = append(set, fmt.Sprintf("%s=%v", k, v))
		}
	}
	slices.Sort(set)
	b.requests[len(b.requests)-1] += " " + strings.Join(set, " ")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(b.system)
}
