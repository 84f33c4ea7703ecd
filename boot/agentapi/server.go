package agentapi

import (
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// Server is the agent API. Plans, Secret and Store are required.
type Server struct {
	Plans boot.Plans
	// Secret signs the agent's credentials: it verifies the boot token a
	// served script carried (boot/http mints it), and mints sessions and
	// report credentials.
	Secret boot.Secret
	// Store keeps what machines say and the state of their credentials.
	Store Store
	// Provisioned reports the generation a node was last provisioned at
	// (nil: no node is provisioned); Revision the Git revision of the
	// Plan served (nil: none), which a node's install records.
	Provisioned func(site, node string) (generation int, ok bool)
	Revision    func() string
	// Limits bound what a source or a node may cost, and sessions' lives.
	Limits Limits
	// Swarm, when set, has the machines of sites with imageDelivery: peers
	// fetch their image from each other (nil: every site from the server).
	Swarm *Swarm
	// SiteCA is the PEM CA of the TLS sites, which their installed OS's
	// report script trusts.
	SiteCA string
	// Certify signs a retired node's erase certificate (JSON of a
	// plan.EraseCertificate) as the site's server; nil: none is signed.
	Certify func(doc []byte) (string, error)
	// Count counts requests by result (ResultOK, …); may be nil.
	Count func(result string)
	// Now is the clock (default time.Now).
	Now func() time.Time
	Log *slog.Logger

	reportsOnce    sync.Once
	challengesOnce sync.Once
	locks          [64]sync.Mutex
	challenges     challenges
	pace           pacer
}

// Store keeps what machines say (the timeline: Record as it comes,
// RecordSync what is acknowledged to an agent), what the status store
// holds of each machine, and the agent's credentials' state: status.Durable
// in the daemon.
type Store interface {
	status.Recorder
	RecordSync(events ...status.Event) error
	Machine(key string) (status.Machine, bool)
	// Known reports whether the store keeps a machine: one it does not is
	// a newcomer, spent from its address's budget (Limits.Newcomers).
	Known(key string) bool
	Sessions
}

// Sessions keeps, across restarts, which boot tokens were used and each
// machine's current session (status.Durable, or status.MemorySessions).
type Sessions interface {
	UseToken(id string, expires time.Time) (fresh bool, err error)
	Session(key string) (status.Session, bool)
	PutSession(key string, s status.Session) error
}

// Limits bound what one source or node may cost the server. Zero values
// take the defaults.
type Limits struct {
	// SessionTTL bounds a session (default DefaultSessionTTL).
	SessionTTL time.Duration
	// Newcomers is each source address's budget of machines new to the
	// server, shared with the script server (nil: no budget). A machine
	// that is no node and that Store does not know must fit in it before
	// it is given a credential.
	Newcomers *status.Newcomers
	// Reports is each node's budget of installed-OS reports (nil: a burst
	// of DefaultReportBurst, then one per DefaultReportEvery).
	Reports *status.Budgets
	// Challenges is each source's budget of TPM challenges (nil: a burst
	// of DefaultChallengeBurst, then one per DefaultChallengeEvery).
	Challenges *status.Budgets
}

// DefaultSessionTTL bounds a workflow, from check-in to its last event; a
// held machine's session is never extended by asking again.
const DefaultSessionTTL = 24 * time.Hour

// Results of agent requests, for a counter.
const (
	ResultOK            = "ok"
	ResultUnauthorized  = "unauthorized" // no token, or a wrong one: 401
	ResultMismatch      = "mismatch"     // the machine is not the node it claims to be: 409
	ResultBadRequest    = "bad_request"
	ResultConflict      = "conflict"       // identity-conflict: a used token, a provisioned node claimed again: 401/409
	ResultRefused       = "refused"        // events out of the workflow's order (provisioned before its actions): 409
	ResultThrottled     = "throttled"      // past a budget (a newcomer's address, TPM challenges, a node's reports): 429
	ResultChallenged    = "challenged"     // answered with a TPM challenge
	ResultReportRefused = "report_refused" // an installed OS's report refused (see osReport)
)

// Route is one of the API's patterns (net/http's ServeMux syntax) and its
// handler. Streams says its answer may rightly take long: the server that
// mounts it lifts its write deadline for it.
type Route struct {
	Pattern string
	Handler http.Handler
	Streams bool
}

// Routes are the API's routes, for the server that mounts them.
func (s *Server) Routes() []Route {
	return []Route{
		{Pattern: "POST " + plan.AgentCheckInPath, Handler: http.HandlerFunc(s.checkin)},
		{Pattern: "POST " + plan.AgentEventsPath, Handler: http.HandlerFunc(s.agentEvents)},
		{Pattern: "POST " + plan.ReportPath, Handler: http.HandlerFunc(s.osReport)},
		{Pattern: "GET " + plan.AgentSwarmPath + "{image}/manifest", Handler: http.HandlerFunc(s.swarmManifest)},
		{Pattern: "POST " + plan.AgentSwarmPath + "{image}", Handler: http.HandlerFunc(s.swarmReport)},
		{Pattern: "GET /swarm/{source}/chunk/{i}", Handler: http.HandlerFunc(s.swarmChunk), Streams: true},
		{Pattern: "GET " + plan.QAStreamPath, Handler: http.HandlerFunc(s.qaStream), Streams: true},
	}
}

// Handler is the API's routes on a mux of their own (the daemon mounts
// Routes on boot/http's server).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range s.Routes() {
		mux.Handle(r.Pattern, r.Handler)
	}
	if checkRoutes != nil {
		return checkRoutes(mux)
	}
	return mux
}

// checkRoutes, when set (by this package's tests), wraps Handler: the
// contract check of api/openapi.json.
var checkRoutes func(http.Handler) http.Handler

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Server) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.New(slog.DiscardHandler)
}

func (s *Server) count(result string) {
	if s.Count != nil && result != "" {
		s.Count(result)
	}
}

func (s *Server) revision() string {
	if s.Revision == nil {
		return ""
	}
	return s.Revision()
}

func (s *Server) provisioned(site, node string) (int, bool) {
	if s.Provisioned == nil {
		return 0, false
	}
	return s.Provisioned(site, node)
}

// newcomer reports whether the machine e is about is one the store does
// not keep and its source ip has no budget left for: it is turned away,
// unrecorded. A node is never a newcomer.
func (s *Server) newcomer(e status.Event, ip string) bool {
	if e.Node != "" || s.Limits.Newcomers == nil || s.Store.Known(e.Key()) {
		return false
	}
	return !s.Limits.Newcomers.Allow(ip)
}

// lock serializes the requests of one machine's session (the agent sends
// one batch at a time; a second sender must not interleave its checks).
func (s *Server) lock(key string) func() {
	h := fnv.New32a()
	io.WriteString(h, key)
	m := &s.locks[h.Sum32()%uint32(len(s.locks))]
	m.Lock()
	return m.Unlock
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// describe is the text of a check-in's machine on its timeline.
func describe(c plan.CheckIn) string {
	var disks []string
	for _, d := range c.Disks {
		if d.Size >= 10e9 {
			disks = append(disks, fmt.Sprintf("%s %.0f GB", d.Name, float64(d.Size)/1e9))
		} else {
			disks = append(disks, fmt.Sprintf("%s %.0f MB", d.Name, float64(d.Size)/1e6))
		}
	}
	arch := ""
	if a := boot.AgentArch(c.Arch); a != "" {
		arch = a + ", "
	}
	return fmt.Sprintf("%sserial %q, uuid %s, %d NICs, disks [%s]", arch, c.Identity.Serial, c.Identity.UUID, len(c.Identity.MACs), strings.Join(disks, ", "))
}
