package http

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

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
)

const maxAgentBody = 4 << 20

// UnknownToken is the token of an unknown machine, bound to its key
// (plan.MachineKey): the script it gets carries both.
func UnknownToken(t Tokens, site, key string) string {
	return t.Token(site, "unknown-"+key)
}

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
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func (s *Server) agentFail(w http.ResponseWriter, code int, result, msg string) {
	s.count(result)
	http.Error(w, msg, code)
}

func readJSON(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxAgentBody+1))
	if err != nil {
		return err
	}
	if len(b) > maxAgentBody {
		return fmt.Errorf("body over %d bytes", maxAgentBody)
	}
	return json.Unmarshal(b, v)
}

// checkin answers an agent's first request: the token and the machine's
// identity are checked against the Plan, and the workflow is the reply.
func (s *Server) checkin(w http.ResponseWriter, r *http.Request) {
	var c plan.CheckIn
	if err := readJSON(r, &c); err != nil {
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
	ev := status.Event{Kind: status.KindAgent, Site: site.Name, UUID: c.Identity.UUID, Serial: c.Identity.Serial}
	var reply plan.CheckInReply
	if c.Node != "" {
		n := p.Node(site.Name, c.Node)
		if n == nil || !Authorized(r, s.Tokens.Token(site.Name, c.Node)) {
			s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "check-in: wrong or missing token for node "+c.Node)
			return
		}
		ev.Node = n.Name
		if reason := verifyIdentity(p, site.Name, n, c.Identity); reason != "" {
			ev.State, ev.Error, ev.Message = status.StateMismatch, true, "agent refused: "+reason
			s.Events.Record(ev)
			s.agentFail(w, http.StatusConflict, AgentMismatch, "check-in refused: "+reason)
			return
		}
		wf := n.Artifacts.Workflow
		reply = plan.CheckInReply{Workflow: &wf, Generation: n.Reprovision, CloudInit: seed(n.Artifacts, s.Tokens.Token(site.Name, n.Name))}
		ev.Message = "agent checked in: " + inventory(c) + "; workflow of profile " + n.Profile + fmt.Sprintf(", %d actions", len(wf.Actions))
	} else {
		if c.Machine == "" || !Authorized(r, UnknownToken(s.Tokens, site.Name, c.Machine)) {
			s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "check-in: wrong or missing token for the unknown machine "+c.Machine)
			return
		}
		keyed(&ev, c.Machine)
		if strings.HasPrefix(c.Machine, "serial:") {
			ev.UUID = "" // the key is the serial: the event must not be keyed by the UUID
		}
		m := plan.Machine{UUID: c.Identity.UUID, Serial: c.Identity.Serial}
		if mac, ok := strings.CutPrefix(c.Machine, "mac:"); ok {
			m.MAC = mac
		}
		d := p.Decide(site.Name, m)
		switch {
		case d.Outcome == plan.Unknown && d.Policy == plan.PolicyProvision && site.Unknown != nil:
			wf := site.Unknown.Workflow
			reply = plan.CheckInReply{Workflow: &wf, CloudInit: seed(*site.Unknown, UnknownToken(s.Tokens, site.Name, c.Machine))}
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
	if ev.State == "" {
		ev.State = status.StateMicroOS
	}
	if err := s.record(ev); err != nil {
		http.Error(w, "status store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.count(AgentOK)
	writeJSON(w, reply)
}

// agentEvents stores a batch of the agent's events and acknowledges them.
func (s *Server) agentEvents(w http.ResponseWriter, r *http.Request) {
	var b plan.EventBatch
	if err := readJSON(r, &b); err != nil {
		s.agentFail(w, http.StatusBadRequest, AgentBadRequest, "events: "+err.Error())
		return
	}
	var want string
	if b.Node != "" {
		want = s.Tokens.Token(b.Site, b.Node)
	} else if b.Machine != "" {
		want = UnknownToken(s.Tokens, b.Site, b.Machine)
	}
	if !Authorized(r, want) {
		s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "events: wrong or missing token")
		return
	}
	evs := make([]status.Event, 0, len(b.Events))
	for _, a := range b.Events {
		evs = append(evs, agentEvent(b, a))
	}
	if err := s.record(evs...); err != nil {
		http.Error(w, "status store: "+err.Error(), http.StatusServiceUnavailable)
		return
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
// machines), the token in place.
func seed(a plan.Artifacts, token string) *plan.CloudInitSeed {
	if a.UserData == "" && a.MetaData == "" {
		return nil
	}
	fill := func(s string) string { return strings.ReplaceAll(s, plan.TokenPlaceholder, token) }
	return &plan.CloudInitSeed{UserData: fill(a.UserData), MetaData: fill(a.MetaData), NetworkConfig: fill(a.NetworkConfig)}
}

// agentEvent turns what the agent said into a timeline event.
func agentEvent(b plan.EventBatch, a plan.AgentEvent) status.Event {
	e := status.Event{Time: a.Time.UTC(), Kind: status.KindAgent, Site: b.Site, Node: b.Node,
		Action: a.Action, Step: a.Step, Steps: a.Steps, Bytes: a.Bytes, Total: a.Total, Rate: a.Rate, Seq: a.Seq, Generation: a.Generation}
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
