package redfishvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config is a BMC's machine and settings; the zero values of the
// settings are the defaults.
type Config struct {
	Machine Machine
	// User and Pass log in, with a session or HTTP Basic; default root
	// and calvin.
	User, Pass string
	// MediaDir is where InsertMedia keeps the images it downloads; it
	// must exist.
	MediaDir string
	// MaxImage bounds an image's size; default 256 MiB.
	MaxImage int64
	// DownloadTimeout bounds an image's download; default 60 s.
	DownloadTimeout time.Duration
	// OrderTimeout bounds what the machine does for one request (a
	// power-on, a reset); default 60 s. A client that gives up does not
	// cut an order short.
	OrderTimeout time.Duration
	// AllowDownload says whether the BMC may fetch an image from addr;
	// default only loopback and 198.18.0.0/15, the tests' own networks.
	AllowDownload func(addr netip.Addr) bool
}

// BMC is a Redfish service in front of one Machine. It is an
// http.Handler; Start serves it.
type BMC struct {
	cfg    Config
	client *http.Client // downloads images

	// order runs one order at a time (power, boot override, media);
	// mu guards the state below, and is never held across an order.
	order    sync.Mutex
	mu       sync.Mutex
	boot     bootOverride
	media    media
	sessions map[string]string // token → session id
	lastID   int               // the last session id given
	logins   int
	log      []string
}

// testNets is where a test's image servers may be: loopback, and the
// benchmarking range the tests' namespaces use.
var testNets = netip.MustParsePrefix("198.18.0.0/15")

// New is a BMC in front of cfg.Machine, with no boot override and an
// empty CD.
func New(cfg Config) *BMC {
	if cfg.User == "" && cfg.Pass == "" {
		cfg.User, cfg.Pass = "root", "calvin"
	}
	if cfg.MaxImage <= 0 {
		cfg.MaxImage = 256 << 20
	}
	if cfg.DownloadTimeout <= 0 {
		cfg.DownloadTimeout = time.Minute
	}
	if cfg.OrderTimeout <= 0 {
		cfg.OrderTimeout = time.Minute
	}
	if cfg.AllowDownload == nil {
		cfg.AllowDownload = func(a netip.Addr) bool { return a.IsLoopback() || testNets.Contains(a) }
	}
	b := &BMC{cfg: cfg, sessions: map[string]string{}}
	b.boot = bootOverride{Target: "None", Enabled: "Disabled", Mode: "UEFI"}
	b.client = downloadClient(cfg.AllowDownload)
	return b
}

// Start serves b over TLS (a self-signed certificate) at addr, a
// loopback or test-namespace address ("127.0.0.1:0" for any port);
// close the server when done.
func (b *BMC) Start(addr string) (*httptest.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("redfishvm: %w", err)
	}
	srv := httptest.NewUnstartedServer(b)
	srv.Listener.Close()
	srv.Listener = l
	srv.StartTLS()
	return srv, nil
}

// Saw lists what b was asked that starts with prefix ("" for all), in
// order: method and path, then what an order asked for ("On", "Cd Once
// UEFI", the image), and " -> status" when it was refused or failed.
func (b *BMC) Saw(prefix string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, r := range b.log {
		if strings.HasPrefix(r, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// Logins counts the logins asked for, session or Basic, taken or refused.
func (b *BMC) Logins() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.logins
}

// request is one request being answered: what it asked, and what the
// log says of it.
type request struct {
	w      http.ResponseWriter
	r      *http.Request
	path   string
	note   []string
	status int
}

// say appends to the request's line in the log.
func (q *request) say(format string, args ...any) {
	q.note = append(q.note, fmt.Sprintf(format, args...))
}

// reply answers v as JSON with status.
func (q *request) reply(status int, v any) {
	q.status = status
	q.w.Header().Set("Content-Type", "application/json;odata.metadata=minimal;charset=utf-8")
	q.w.Header().Set("OData-Version", "4.0")
	q.w.WriteHeader(status)
	if v != nil {
		json.NewEncoder(q.w).Encode(v)
	}
}

// fail answers a Redfish error: code is the message's id in the Base
// registry ("ResourceMissingAtURI").
func (q *request) fail(status int, code, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	q.say("(%s)", msg)
	q.reply(status, map[string]any{"error": map[string]any{
		"code":    "Base.1.12." + code,
		"message": msg,
	}})
}

// done answers an order taken: 204, no body.
func (q *request) done() {
	q.status = http.StatusNoContent
	q.w.WriteHeader(http.StatusNoContent)
}

// decode reads the JSON body into v, answering 400 when it cannot.
func (q *request) decode(v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(q.w, q.r.Body, 64<<10)).Decode(v); err != nil {
		q.fail(http.StatusBadRequest, "MalformedJSON", "The request body is not JSON that fits: %v", err)
		return false
	}
	return true
}

// orderContext bounds an order by OrderTimeout, not by the client: one
// that gives up does not leave the machine half-way.
func (b *BMC) orderContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), b.cfg.OrderTimeout)
}

func (b *BMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := &request{w: w, r: r, path: strings.TrimSuffix(r.URL.Path, "/")}
	defer b.record(q)
	switch {
	case q.path == "/redfish" || q.path == "/redfish/v1":
		if r.Method != http.MethodGet {
			q.fail(http.StatusMethodNotAllowed, "OperationNotAllowed", "%s of %s is not allowed", r.Method, q.path)
			return
		}
		q.reply(http.StatusOK, serviceRoot())
	case r.Method == http.MethodPost && q.path == sessionsPath:
		b.login(q)
	case !b.authorized(r):
		q.fail(http.StatusUnauthorized, "NoValidSession", "There is no valid session established with the implementation.")
	default:
		b.route(q)
	}
}

// record logs q as answered.
func (b *BMC) record(q *request) {
	line := strings.Join(append([]string{q.r.Method, q.path}, q.note...), " ")
	if q.status >= 300 {
		line += fmt.Sprintf(" -> %d", q.status)
	}
	b.mu.Lock()
	b.log = append(b.log, line)
	b.mu.Unlock()
}

// route answers an authorized request.
func (b *BMC) route(q *request) {
	switch q.r.Method + " " + q.path {
	case "GET " + sessionServicePath:
		q.reply(http.StatusOK, sessionService())
	case "GET " + sessionsPath:
		q.reply(http.StatusOK, b.sessionCollection())
	case "GET " + systemsPath:
		q.reply(http.StatusOK, collection("#ComputerSystemCollection.ComputerSystemCollection", "Computer System Collection", systemsPath, systemPath))
	case "GET " + systemPath:
		q.reply(http.StatusOK, b.system())
	case "PATCH " + systemPath:
		b.patchBoot(q)
	case "POST " + resetPath:
		b.reset(q)
	case "GET " + managersPath:
		q.reply(http.StatusOK, collection("#ManagerCollection.ManagerCollection", "Manager Collection", managersPath, managerPath))
	case "GET " + managerPath:
		q.reply(http.StatusOK, manager())
	case "GET " + mediaCollectionPath:
		q.reply(http.StatusOK, collection("#VirtualMediaCollection.VirtualMediaCollection", "Virtual Media Services", mediaCollectionPath, cdPath))
	case "GET " + cdPath:
		q.reply(http.StatusOK, b.cd())
	case "PATCH " + cdPath:
		b.patchMedia(q)
	case "POST " + insertPath:
		b.insertMedia(q)
	case "POST " + ejectPath:
		b.ejectMedia(q)
	default:
		b.session(q)
	}
}

// authorized says whether r carries a session's token or the right
// user and password.
func (b *BMC) authorized(r *http.Request) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.sessions[r.Header.Get("X-Auth-Token")]; ok {
		return true
	}
	user, pass, basic := r.BasicAuth()
	if !basic {
		return false
	}
	b.logins++
	return user == b.cfg.User && pass == b.cfg.Pass
}

// login answers a session login: a token for the right user and
// password, else 401.
func (b *BMC) login(q *request) {
	var in struct{ UserName, Password string }
	b.mu.Lock()
	b.logins++
	b.mu.Unlock()
	if !q.decode(&in) {
		return
	}
	if in.UserName != b.cfg.User || in.Password != b.cfg.Pass {
		q.fail(http.StatusUnauthorized, "NoValidSession", "Invalid username or password.")
		return
	}
	raw := make([]byte, 16)
	rand.Read(raw)
	token := hex.EncodeToString(raw)
	b.mu.Lock()
	b.lastID++
	id := fmt.Sprint(b.lastID)
	b.sessions[token] = id
	b.mu.Unlock()
	q.say("%s", in.UserName)
	q.w.Header().Set("X-Auth-Token", token)
	q.w.Header().Set("Location", sessionsPath+"/"+id)
	q.reply(http.StatusCreated, sessionResource(id, in.UserName))
}

// session answers a GET or DELETE (the logout) of one session; any
// other path is missing.
func (b *BMC) session(q *request) {
	id, ok := strings.CutPrefix(q.path, sessionsPath+"/")
	b.mu.Lock()
	token := ""
	for t, i := range b.sessions {
		if ok && i == id {
			token = t
		}
	}
	if token != "" && q.r.Method == http.MethodDelete {
		delete(b.sessions, token)
	}
	b.mu.Unlock()
	switch {
	case token == "":
		q.fail(http.StatusNotFound, "ResourceMissingAtURI", "The resource at the URI %s was not found.", q.path)
	case q.r.Method == http.MethodGet:
		q.reply(http.StatusOK, sessionResource(id, b.cfg.User))
	case q.r.Method == http.MethodDelete:
		q.done()
	default:
		q.fail(http.StatusMethodNotAllowed, "OperationNotAllowed", "%s of %s is not allowed", q.r.Method, q.path)
	}
}

func (b *BMC) sessionCollection() map[string]any {
	b.mu.Lock()
	var ids []string
	for _, id := range b.sessions {
		ids = append(ids, sessionsPath+"/"+id)
	}
	b.mu.Unlock()
	slices.Sort(ids)
	return collection("#SessionCollection.SessionCollection", "Session Collection", sessionsPath, ids...)
}
