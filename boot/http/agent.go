package http

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// AgentStore keeps the agent's events durably: the server acknowledges an
// event only once RecordSync returned for it.
type AgentStore interface {
	RecordSync(events ...status.Event) error
}

// Results of agent requests, for a counter.
const (
	AgentOK           = "ok"
	AgentUnauthorized = "unauthorized" // no token, or a wrong one: 401
	AgentMismatch     = "mismatch"     // the machine is not the node it claims to be: 409
	AgentBadRequest   = "bad_request"
	AgentConflict     = "conflict"  // identity-conflict: a used token, a provisioned node claimed again: 401/409
	AgentRefused      = "refused"   // events out of the workflow's order (provisioned before its actions): 409
	AgentThrottled    = "throttled" // a machine new to the server, past its address's budget: 429
)

// What each route reads of a body at most: a check-in's identity, disks,
// inventory and TPM proof (a server's firmware event log runs to tens of
// KiB, base64 in JSON), a batch of events (at most plan.MaxEventBatch, each message
// within plan.MaxEventMessage), an installed OS's report, a swarm report.
const (
	maxCheckInBody = 512 << 10
	maxEventsBody  = 512 << 10
	maxReportBody  = 16 << 10
	maxSwarmBody   = 64 << 10
)

// keyed sets the identifier of e that makes e.Key() the machine key.
func keyed(e *status.Event, key string) {
	kind, v, _ := strings.Cut(key, ":")
	switch kind {
	case "mac":
		e.MAC = v
	case "uuid":
		e.UUID = v
	case "serial":
		e.Serial = v
	case "ip":
		e.IP = v
	}
}

func (s *Server) count(result string) {
	if s.AgentCount != nil {
		s.AgentCount(result)
	}
}

// Authorized checks the request's bearer token against want, in constant
// time; an empty want authorizes nothing.
func Authorized(r *http.Request, want string) bool {
	got := bearer(r)
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func (s *Server) agentFail(w http.ResponseWriter, code int, result, msg string) {
	s.count(result)
	http.Error(w, msg, code)
}

// readJSON reads a body of at most limit bytes into v; the status to
// refuse it with when it cannot (413 past the limit, else 400).
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) (int, error) {
	b, code, err := readBody(w, r, limit)
	if err != nil {
		return code, err
	}
	return http.StatusBadRequest, json.Unmarshal(b, v)
}

// readBody reads a request's body of at most limit bytes; on error, the
// status to answer with.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, int, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("body over %d bytes", limit)
	}
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	return b, 0, nil
}

// precheck refuses a request whose credential is missing, malformed, of
// none of kinds or expired, before its body is read (true: go on).
// optional lets a request without one through (a check-in over TLS).
func (s *Server) precheck(w http.ResponseWriter, r *http.Request, what string, optional bool, kinds ...string) bool {
	tok := bearer(r)
	if tok == "" && optional {
		return true
	}
	if err := boot.Peek(tok, s.now(), kinds...); err != nil {
		msg := what + ": " + credentialError(err)
		if errors.Is(err, boot.ErrWrongKind) && what == "events" {
			msg = what + ": a boot token is good for the check-in only: events need the session credential the check-in returned"
		}
		s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, msg)
		return false
	}
	return true
}

// Sessions keeps, across restarts, which boot tokens were used and each
// machine's current session (status.Durable, or status.MemorySessions).
type Sessions interface {
	UseToken(id string, expires time.Time) (fresh bool, err error)
	Session(key string) (status.Session, bool)
	PutSession(key string, s status.Session) error
}

// Default lifetimes of the agent's credentials.
const (
	// DefaultBootTokenTTL bounds the time from a served script to the
	// agent's check-in (the Micro-OS's download and boot).
	DefaultBootTokenTTL = 30 * time.Minute
	// DefaultSessionTTL bounds a workflow, from check-in to its last
	// event; a held machine's session is renewed at each check-in.
	DefaultSessionTTL = 24 * time.Hour
)

// errSuperseded says a session credential is not the machine's current
// session's: a newer check-in replaced it.
var errSuperseded = errors.New("the session was replaced by a newer check-in for this machine")

// subject is who an agent's credential is for: the node, or "unknown-" and
// an unknown machine's key.
func subject(node, machine string) string {
	if node != "" {
		return node
	}
	if machine == "" {
		return ""
	}
	return "unknown-" + machine
}

// bearer is the request's bearer credential ("" without the "Bearer "
// scheme).
func bearer(r *http.Request) string {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return tok
}

// credentialError says, in words an operator can act on, why a credential
// was refused.
func credentialError(err error) string {
	switch {
	case errors.Is(err, boot.ErrExpired):
		return "the credential expired: boot the machine again for a new one"
	case errors.Is(err, errSuperseded):
		return err.Error()
	default:
		return "wrong or missing credential"
	}
}

// conflict records an identity-conflict: a second claim to be a machine
// that is booting or provisioned. It is an error on the machine's
// timeline (a refused claim is also counted as AgentConflict).
func (s *Server) conflict(ev status.Event, why string) {
	ev.Error, ev.State, ev.Message = true, "", "identity-conflict: "+why
	s.Events.Record(ev)
	s.logger().Warn("identity-conflict", "site", ev.Site, "node", ev.Node, "mac", ev.MAC, "ip", ev.IP, "why", why)
}

// checkin answers an agent's first request. Its credential is the boot
// token of the script the machine was served (good for one check-in), or
// a held machine's session credential; the machine's identity is checked
// against the Plan; the reply is the workflow and a session credential for
// its events.
func (s *Server) checkin(w http.ResponseWriter, r *http.Request) {
	if !s.precheck(w, r, "check-in", r.TLS != nil, boot.KindBoot, boot.KindSession) {
		return
	}
	var c plan.CheckIn
	if code, err := readJSON(w, r, maxCheckInBody, &c); err != nil {
		s.agentFail(w, code, AgentBadRequest, "check-in: "+err.Error())
		return
	}
	if err := checkInIdentity(&c); err != nil {
		s.agentFail(w, http.StatusBadRequest, AgentBadRequest, "check-in: "+err.Error())
		return
	}
	p := s.Plans.Current()
	if p == nil {
		http.Error(w, "no plan loaded yet", http.StatusServiceUnavailable)
		return
	}
	site := p.Site(c.Site)
	if site == nil {
		s.agentFail(w, http.StatusNotFound, AgentBadRequest, fmt.Sprintf("check-in: no site %q is served here", c.Site))
		return
	}
	now := s.now()
	ev := status.Event{Kind: status.KindAgent, Site: site.Name, UUID: c.Identity.UUID, Serial: c.Identity.Serial, IP: clientIP(r)}
	var n *plan.Node
	if c.Node != "" {
		if n = p.Node(site.Name, c.Node); n == nil {
			s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "check-in: no node "+c.Node+" on site "+site.Name)
			return
		}
		ev.Node = n.Name
	} else {
		keyed(&ev, c.Machine)
		if strings.HasPrefix(c.Machine, "serial:") {
			ev.UUID = "" // the key is the serial: the event must not be keyed by the UUID
		}
	}
	// Over TLS, an agent with no credential (a UKI, a script that carried
	// none) checks in by its identity: the server finds the node, as it
	// would have for its script.
	byIdentity := bearer(r) == "" && r.TLS != nil
	if byIdentity && c.Node == "" {
		var reason string
		n, c.Machine, reason = identify(p, site.Name, c.Identity)
		if reason != "" {
			ev.State, ev.Error, ev.Message = status.StateMismatch, true, "agent refused: "+reason
			s.Events.Record(ev)
			s.agentFail(w, http.StatusConflict, AgentMismatch, "check-in refused: "+reason)
			return
		}
		if n != nil {
			c.Node, ev.Node = n.Name, n.Name
		} else {
			keyed(&ev, c.Machine)
		}
	}
	subj := subject(c.Node, c.Machine)
	key := site.Name + "/" + subj
	var g boot.Grant
	var err error
	if byIdentity {
		g = boot.Grant{ID: boot.NewID()}
		if n != nil {
			g.Generation = n.Reprovision
		}
	} else {
		g, err = s.Secret.Verify(bearer(r), boot.KindBoot, site.Name, subj, now)
	}
	ev.Boot = c.Boot.String()
	var sess status.Session
	resumed := false
	if errors.Is(err, boot.ErrWrongKind) {
		// A held machine asking again, with the session it was given.
		if g, err = s.Secret.Verify(bearer(r), boot.KindSession, site.Name, subj, now); err == nil {
			cur, ok := s.sessions().Session(key)
			if !ok || cur.ID != g.ID {
				err = errSuperseded
			}
			sess, resumed = cur, true
		}
	}
	if subj == "" || err != nil {
		what := "node " + c.Node
		if c.Node == "" {
			what = "the unknown machine " + c.Machine
		}
		s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "check-in: "+what+": "+credentialError(err))
		return
	}
	if n != nil {
		if reason := verifyIdentity(p, site.Name, n, c.Identity); reason != "" {
			ev.State, ev.Error, ev.Message = status.StateMismatch, true, "agent refused: "+reason
			s.Events.Record(ev)
			s.agentFail(w, http.StatusConflict, AgentMismatch, "check-in refused: "+reason)
			return
		}
		if gen, ok := s.provisioned(site.Name, n.Name); ok && gen >= n.Reprovision && byIdentity {
			// What the script would have said: boot from the disk.
			// Anyone over TLS can say this much: it is on the node's
			// timeline within its budget of boot-plane events, and
			// changes nothing of the node's.
			reply := plan.CheckInReply{Hold: fmt.Sprintf("node %s is provisioned (generation %d): boot from its disk", n.Name, gen)}
			ev.Message = "agent told to boot from its disk: provisioned at generation " + fmt.Sprint(gen)
			s.Events.Record(ev)
			s.count(AgentOK)
			writeJSON(w, reply)
			return
		}
		if gen, ok := s.provisioned(site.Name, n.Name); ok && gen >= n.Reprovision {
			// With a boot token minted before, or with a session: a
			// session opened for an install cannot outlive it.
			what := "a token minted before"
			if resumed {
				what = "a session credential"
			}
			why := fmt.Sprintf("node %s is provisioned (generation %d), yet a machine at %s checks in as it with %s", n.Name, gen, ev.IP, what)
			s.conflict(ev, why)
			s.agentFail(w, http.StatusConflict, AgentConflict, "check-in refused: "+why)
			return
		}
	}
	if n == nil && s.newcomer(ev, ev.IP) {
		// A machine the store never saw, past its address's budget:
		// turned away before it costs a token or a session.
		w.Header().Set("Retry-After", "10")
		s.agentFail(w, http.StatusTooManyRequests, AgentThrottled, "check-in: "+tooMany(ev.IP))
		return
	}
	// A machine with a TPM proves it first (a held machine asking again
	// with its session did, when it was given the session), from the
	// address and with the boot token it asked with.
	asker := "tls@" + ev.IP
	if !byIdentity {
		asker = g.ID + "@" + ev.IP
	}
	var reportKey string
	if !resumed {
		ak, answered := s.attest(w, c, p, site, n, key, asker, &ev)
		if answered {
			return
		}
		if ak != nil {
			reportKey = base64.StdEncoding.EncodeToString(ak)
		}
	}
	if !resumed && !byIdentity {
		fresh, err := s.sessions().UseToken(g.ID, g.Expires)
		if err != nil {
			http.Error(w, "session store: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !fresh {
			why := fmt.Sprintf("a boot token already used was presented again, from %s: a second machine claims this identity, or the token was copied", ev.IP)
			s.conflict(ev, why)
			s.agentFail(w, http.StatusUnauthorized, AgentConflict, "check-in: the boot token was already used: boot the machine again for a new one")
			return
		}
	}
	if !resumed {
		if cur, ok := s.sessions().Session(key); ok && cur.Active(now) {
			s.conflict(ev, fmt.Sprintf("claimed again from %s while the session opened from %s at %s is in flight (%d of %d actions done): the newer check-in replaces it",
				ev.IP, cur.Peer, cur.Started.UTC().Format(time.RFC3339), cur.Done, cur.Steps))
		}
		sess = status.Session{ID: boot.NewID(), Generation: g.Generation, Peer: ev.IP, Started: now, ReportKey: reportKey}
	}

	var reply plan.CheckInReply
	var seedOf *plan.Artifacts
	ev.Inventory = cleanInventory(c.Inventory)
	if n != nil {
		unmet := unmetExpectations(n, ev.Inventory)
		switch {
		case g.Generation != n.Reprovision:
			reply = plan.CheckInReply{Hold: fmt.Sprintf("node %s's reprovision generation is %d, this machine booted for %d: reboot it", n.Name, n.Reprovision, g.Generation)}
			ev.Message = "agent told to reboot: " + reply.Hold
		case len(unmet) > 0:
			// Before any disk is touched: the machine is not what the
			// order said. It asks again; a fixed machine (at its next
			// boot) or a fixed expectation in Git lets it go on.
			reply = plan.CheckInReply{Hold: "expectations not met: " + strings.Join(unmet, "; "), RetrySeconds: 30}
			ev.State, ev.Error, ev.Held = status.StateHeld, true, strings.Join(unmet, "; ")
			ev.Message = "held before any disk is touched: " + strings.Join(unmet, "; ")
		default:
			wf := n.Artifacts.Workflow
			reply = plan.CheckInReply{Workflow: &wf, Generation: n.Reprovision}
			seedOf = &n.Artifacts
			in := n.Install
			sess.Install, sess.Revision = &in, s.revision()
			ev.Installing = true
			ev.Message = "agent checked in: " + inventory(c) + "; workflow of profile " + n.Profile + fmt.Sprintf(", %d actions", len(wf.Actions))
		}
	} else {
		m := plan.Machine{UUID: c.Identity.UUID, Serial: c.Identity.Serial}
		if mac, ok := strings.CutPrefix(c.Machine, "mac:"); ok {
			m.MAC = mac
		}
		d := p.Decide(site.Name, m)
		switch {
		case d.Outcome == plan.Unknown && d.Policy == plan.PolicyProvision && site.Unknown != nil:
			wf := site.Unknown.Workflow
			reply = plan.CheckInReply{Workflow: &wf}
			seedOf = site.Unknown
			ev.Message = "unknown machine checked in: " + inventory(c) + "; workflow of the default profile " + d.Profile
		case d.Outcome == plan.Unknown && d.Policy == plan.PolicyHold:
			reply = plan.CheckInReply{Hold: d.Reason, RetrySeconds: 30}
			ev.State, ev.Message = status.StateHeld, "unknown machine held: "+inventory(c)
		default:
			// Registered since it booted, or refused: it boots again and
			// gets what the Plan says now.
			reply = plan.CheckInReply{Hold: "the plan changed since this machine booted: reboot it (" + d.Reason + ")", RetrySeconds: 0}
			ev.Message = "unknown machine told to reboot: " + d.Reason
		}
	}
	if reply.Workflow != nil && site.Peers != nil && s.Swarm != nil {
		reply.Peers = site.Peers
	}
	if reply.Workflow != nil || reply.RetrySeconds > 0 {
		if reply.Workflow != nil {
			sess.Steps, sess.Need = len(reply.Workflow.Actions), needed(*reply.Workflow)
			sess.Actions, sess.Kinds = nil, nil
			for _, a := range reply.Workflow.Actions {
				sess.Actions, sess.Kinds = append(sess.Actions, actionLabel(a)), append(sess.Kinds, a.Action)
			}
		}
		if !resumed {
			// A session's life is set once, at the check-in that opened
			// it: asking again never extends it.
			sess.Expires = now.Add(orDuration(s.SessionTTL, DefaultSessionTTL))
		}
		if err := s.sessions().PutSession(key, sess); err != nil {
			http.Error(w, "session store: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		reply.Session = s.Secret.Mint(boot.Grant{Kind: boot.KindSession, Site: site.Name, Subject: subj, Generation: sess.Generation, ID: sess.ID, Expires: sess.Expires})
		if byIdentity {
			reply.Node, reply.Machine = c.Node, c.Machine
		}
		if seedOf != nil {
			reply.CloudInit = seed(*seedOf, reply.Session, forFamily(site, ev.IP))
			if n != nil && reply.CloudInit != nil {
				reply.CloudInit.Report = forFamily(site, ev.IP)(s.report(site, n, n.Install.Digest, sess))
				if mac := plan.NormalizeMAC(first(c.Identity.MACs)); mac != "" {
					reply.CloudInit.NetworkConfig = strings.Replace(reply.CloudInit.NetworkConfig, plan.NetworkMatchAny,
						fmt.Sprintf("    match:\n      macaddress: %q\n", mac), 1)
				}
			}
		}
	}
	if ev.State == "" {
		ev.State = status.StateMicroOS
	}
	if ev.TPM != "" {
		ev.Message += "; " + ev.TPM
	}
	if err := s.record(ev); err != nil {
		http.Error(w, "status store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.count(AgentOK)
	writeJSON(w, reply)
}

// identify finds the node a machine that checked in by its identity is:
// any of its MACs with its UUID and serial, as plan.Decide judges them.
// No node: an unknown machine, keyed by its first MAC (else its UUID or
// serial). A machine whose identifiers point at different nodes, or
// contradict one, is refused with the reason.
func identify(p *plan.Plan, site string, id plan.Identity) (*plan.Node, string, string) {
	macs := id.MACs
	if len(macs) == 0 {
		macs = []string{""}
	}
	var found *plan.Node
	for _, mac := range macs {
		d := p.Decide(site, plan.Machine{MAC: plan.NormalizeMAC(mac), UUID: id.UUID, Serial: id.Serial})
		switch d.Outcome {
		case plan.Match:
			if found != nil && found != d.Node {
				return nil, "", fmt.Sprintf("its NICs belong to nodes %s and %s", found.Name, d.Node.Name)
			}
			found = d.Node
		case plan.Mismatch:
			return nil, "", d.Reason
		}
	}
	if found != nil {
		return found, "", ""
	}
	key := plan.MachineKey(plan.Machine{MAC: plan.NormalizeMAC(macs[0]), UUID: id.UUID, Serial: id.Serial})
	if key == "" || !safeKey(key) {
		return nil, "", "it reports no MAC, UUID or serial"
	}
	return nil, key, ""
}

// needed is how many actions of wf must be done before the agent may
// report it provisioned: those before the first power action.
func needed(wf plan.Workflow) int {
	for i, a := range wf.Actions {
		if plan.IsPowerAction(a.Action) {
			return i
		}
	}
	return len(wf.Actions)
}

// advance checks a batch of the agent's events against its session: the
// workflow's actions are reported in order, each done before the next
// starts, and "provisioned" only once every action before the first power
// action is done. It returns the session moved on, or why the batch is
// refused. Events at or below the session's DoneSeq were checked when they
// first came (a resend after a lost acknowledgement).
func advance(s status.Session, evs []plan.AgentEvent) (status.Session, string) {
	for _, a := range evs {
		if a.Seq <= s.DoneSeq {
			continue
		}
		if a.Steps != 0 && a.Steps != s.Steps {
			return s, fmt.Sprintf("event %d reports a workflow of %d actions; the check-in gave %d", a.Seq, a.Steps, s.Steps)
		}
		if a.Step < 0 || a.Step > s.Steps {
			return s, fmt.Sprintf("event %d names action %d of a workflow of %d", a.Seq, a.Step, s.Steps)
		}
		if a.Action != "" && a.Step > 0 && len(s.Actions) == s.Steps && len(s.Kinds) == s.Steps &&
			a.Action != s.Actions[a.Step-1] && a.Action != s.Kinds[a.Step-1] {
			return s, fmt.Sprintf("event %d names action %q at step %d; the workflow's is %s", a.Seq, status.Printable(a.Action), a.Step, s.Actions[a.Step-1])
		}
		switch a.Type {
		case plan.AgentActionDone:
			if a.Step != s.Done+1 {
				return s, fmt.Sprintf("action %d reported done while action %d of %d is the one running", a.Step, s.Done+1, s.Steps)
			}
			s.Done, s.DoneSeq = s.Done+1, a.Seq
		case plan.AgentProvisioned:
			if s.Done < s.Need {
				return s, fmt.Sprintf("provisioned reported after %d of the %d actions that must be done first", s.Done, s.Need)
			}
			if a.Generation != s.Generation {
				return s, fmt.Sprintf("provisioned reported for generation %d; the check-in was for generation %d", a.Generation, s.Generation)
			}
			s.Provisioned, s.DoneSeq = true, a.Seq
		case plan.AgentStarted, plan.AgentProgress, plan.AgentRetry, plan.AgentFailed:
			if a.Step != s.Done+1 {
				return s, fmt.Sprintf("%s of action %d while action %d of %d is the one running", a.Type, a.Step, s.Done+1, s.Steps)
			}
		case plan.AgentLog:
			if a.Step > s.Done+1 {
				return s, fmt.Sprintf("a log line of action %d while action %d of %d is the one running", a.Step, s.Done+1, s.Steps)
			}
		}
	}
	return s, ""
}

// actionLabel is what the agent names an action's events by: its name,
// else its kind (agent.step.emit).
func actionLabel(a plan.Action) string {
	if a.Name != "" {
		return a.Name
	}
	return a.Action
}

// lock serializes the batches of one machine's session (the agent sends
// one at a time; a second sender must not interleave its checks).
func (s *Server) lock(key string) func() {
	h := fnv.New32a()
	io.WriteString(h, key)
	m := &s.locks[h.Sum32()%uint32(len(s.locks))]
	m.Lock()
	return m.Unlock
}

// agentEvents stores a batch of the agent's events and acknowledges them.
// Its credential is the session the check-in returned, and the current one
// for the machine; the events must follow the workflow (advance).
func (s *Server) agentEvents(w http.ResponseWriter, r *http.Request) {
	if !s.precheck(w, r, "events", false, boot.KindSession) {
		return
	}
	var b plan.EventBatch
	if code, err := readJSON(w, r, maxEventsBody, &b); err != nil {
		s.agentFail(w, code, AgentBadRequest, "events: "+err.Error())
		return
	}
	if len(b.Events) > plan.MaxEventBatch {
		s.agentFail(w, http.StatusRequestEntityTooLarge, AgentBadRequest, fmt.Sprintf("events: %d in one batch, at most %d", len(b.Events), plan.MaxEventBatch))
		return
	}
	subj := subject(b.Node, b.Machine)
	key := b.Site + "/" + subj
	g, err := s.Secret.Verify(bearer(r), boot.KindSession, b.Site, subj, s.now())
	if errors.Is(err, boot.ErrWrongKind) {
		s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "events: a boot token is good for the check-in only: events need the session credential the check-in returned")
		return
	}
	if subj == "" || err != nil {
		s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "events: "+credentialError(err))
		return
	}
	defer s.lock(key)()
	cur, ok := s.sessions().Session(key)
	if !ok || cur.ID != g.ID {
		s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "events: "+errSuperseded.Error())
		return
	}
	next, why := advance(cur, b.Events)
	if why != "" {
		ev := agentEvent(b, plan.AgentEvent{Type: plan.AgentLog, Time: s.now()})
		ev.Error, ev.Message, ev.IP = true, "agent events refused: "+why, clientIP(r)
		s.Events.Record(ev)
		s.agentFail(w, http.StatusConflict, AgentRefused, "events refused: "+why)
		return
	}
	evs := make([]status.Event, 0, len(b.Events))
	for _, a := range b.Events {
		e := agentEvent(b, a)
		if e.State == status.StateProvisioned {
			// What the session's workflow installed, named by the session.
			e.Install, e.Revision, e.InstallID, e.ReportKey = cur.Install, cur.Revision, cur.ID, cur.ReportKey
		}
		evs = append(evs, e)
	}
	if err := s.record(evs...); err != nil {
		http.Error(w, "status store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if next.Done != cur.Done || next.DoneSeq != cur.DoneSeq || next.Provisioned != cur.Provisioned { // what advance moves
		if err := s.sessions().PutSession(key, next); err != nil {
			http.Error(w, "session store: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	s.count(AgentOK)
	// What this batch held is stored (or was already): acknowledge up to
	// its highest number, never more — a store's older, higher numbers
	// (from an earlier boot) must not acknowledge events not sent yet.
	var acked uint64
	for _, a := range b.Events {
		acked = max(acked, a.Seq)
	}
	writeJSON(w, plan.EventAck{Acked: acked})
}

// record stores events durably when there is a durable store.
func (s *Server) record(evs ...status.Event) error {
	if s.Store != nil {
		return s.Store.RecordSync(evs...)
	}
	for _, e := range evs {
		s.Events.Record(e)
	}
	return nil
}

// seed is the rendered cloud-init of a node (or of a site's unknown
// machines), the token in place and its URLs in the agent's family.
func seed(a plan.Artifacts, token string, family func(string) string) *plan.CloudInitSeed {
	if a.UserData == "" && a.MetaData == "" {
		return nil
	}
	fill := func(s string) string { return family(strings.ReplaceAll(s, plan.TokenPlaceholder, token)) }
	return &plan.CloudInitSeed{UserData: fill(a.UserData), MetaData: fill(a.MetaData), NetworkConfig: fill(a.NetworkConfig)}
}

// agentEvent turns what the agent said into a timeline event.
func agentEvent(b plan.EventBatch, a plan.AgentEvent) status.Event {
	e := status.Event{Time: a.Time.UTC(), Kind: status.KindAgent, Site: b.Site, Node: b.Node,
		Action: a.Action, Step: a.Step, Steps: a.Steps, Bytes: a.Bytes, Total: a.Total, Rate: a.Rate, Seq: a.Seq, Generation: a.Generation,
		FromServer: a.FromServer, FromPeers: a.FromPeers}
	if b.Node == "" {
		keyed(&e, b.Machine)
	}
	step := ""
	if a.Steps > 0 {
		step = fmt.Sprintf("%d/%d %s", a.Step, a.Steps, a.Action)
	}
	switch a.Type {
	case plan.AgentStarted:
		e.State, e.Message = status.StateProvisioning, "started "+step
	case plan.AgentProgress:
		e.State, e.Message = status.StateProvisioning, fmt.Sprintf("%s: %s", step, progress(a))
	case plan.AgentActionDone:
		e.State, e.Message = status.StateProvisioning, "done "+step
	case plan.AgentRetry:
		e.Error, e.Message = true, fmt.Sprintf("%s failed, retrying: %s", step, a.Message)
	case plan.AgentFailed:
		e.State, e.Error, e.Message = status.StateFailed, true, fmt.Sprintf("%s failed: %s", step, a.Message)
	case plan.AgentProvisioned:
		e.State, e.Message = status.StateProvisioned, fmt.Sprintf("provisioned (generation %d)", a.Generation)
	default:
		e.Message = a.Message
		if step != "" {
			e.Message = step + ": " + a.Message
		}
	}
	return e
}

func progress(a plan.AgentEvent) string {
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
	s := mb(a.Bytes)
	if a.Total > 0 {
		s = fmt.Sprintf("%s of %s (%d%%)", mb(a.Bytes), mb(a.Total), a.Bytes*100/a.Total)
	}
	if a.Rate > 0 {
		s += fmt.Sprintf(", %.1f MB/s", a.Rate/1e6)
	}
	return s
}

func inventory(c plan.CheckIn) string {
	var disks []string
	for _, d := range c.Disks {
		if d.Size >= 10e9 {
			disks = append(disks, fmt.Sprintf("%s %.0f GB", d.Name, float64(d.Size)/1e9))
		} else {
			disks = append(disks, fmt.Sprintf("%s %.0f MB", d.Name, float64(d.Size)/1e6))
		}
	}
	return fmt.Sprintf("serial %q, uuid %s, %d NICs, disks [%s]", c.Identity.Serial, c.Identity.UUID, len(c.Identity.MACs), strings.Join(disks, ", "))
}

// verifyIdentity says why the machine is not node n ("" when it is): what
// the node registers must be what the machine reports, and nothing the
// machine reports may belong to another node.
func verifyIdentity(p *plan.Plan, site string, n *plan.Node, id plan.Identity) string {
	reg := n.Identity
	var why []string
	if reg.Serial != "" && plan.NormalizeSerial(id.Serial) != reg.Serial {
		why = append(why, fmt.Sprintf("node %s is registered with serial %s (%s), the machine reports serial %q", n.Name, reg.Serial, n.Source, id.Serial))
	}
	if reg.UUID != "" && plan.NormalizeUUID(id.UUID) != reg.UUID {
		why = append(why, fmt.Sprintf("node %s is registered with uuid %s (%s), the machine reports uuid %q", n.Name, reg.UUID, n.Source, id.UUID))
	}
	if len(reg.MACs) > 0 {
		found := false
		for _, m := range id.MACs {
			for _, r := range reg.MACs {
				found = found || plan.NormalizeMAC(m) == r
			}
		}
		if !found {
			why = append(why, fmt.Sprintf("node %s is registered with mac %s (%s), the machine has %s", n.Name, strings.Join(reg.MACs, ", "), n.Source, strings.Join(id.MACs, ", ")))
		}
	}
	// Identifiers of another node (a NIC nobody registered is fine).
	if d := p.Decide(site, plan.Machine{UUID: id.UUID, Serial: id.Serial}); d.Outcome == plan.Mismatch || (d.Outcome == plan.Match && d.Node != n) {
		why = append(why, d.Reason)
	}
	for _, m := range id.MACs {
		if d := p.Decide(site, plan.Machine{MAC: m}); d.Outcome == plan.Match && d.Node != n {
			why = append(why, fmt.Sprintf("the machine's mac %s is registered to node %s (%s)", m, d.Node.Name, d.Node.Source))
		}
	}
	return strings.Join(why, "; ")
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
