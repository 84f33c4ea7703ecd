package agentapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// agentEvents stores a batch of the agent's events and acknowledges them.
// Its credential is the session the check-in returned, and the current one
// for the machine; the events must follow the workflow (advance).
func (s *Server) agentEvents(w http.ResponseWriter, r *http.Request) {
	tok := bearer(r)
	if ref := s.precheck(tok, "events", false, boot.KindSession); ref != nil {
		s.refuse(w, status.Event{}, ref)
		return
	}
	body, code, err := readBody(w, r, maxEventsBody)
	var b plan.EventBatch
	if err == nil {
		b, code, err = parseBatch(body)
	}
	if err != nil {
		s.refuse(w, status.Event{}, badRequest(code, "events: "+err.Error()))
		return
	}
	key, g, ref := s.sessionGrant(tok, "events", b.Site, b.Node, b.Machine)
	if ref != nil {
		s.refuse(w, status.Event{}, ref)
		return
	}
	defer s.lock(key)()
	cur, ref := s.currentSession("events", key, g)
	if ref == nil {
		ref = s.takeBatch(key, cur, b)
	}
	if ref != nil {
		ev := agentEvent(b, plan.AgentEvent{Type: plan.AgentLog, Time: s.now()})
		ev.IP = clientIP(r)
		s.refuse(w, ev, ref)
		return
	}
	s.count(ResultOK)
	// What this batch held is stored (or was already): acknowledge up to
	// its highest number, never more — a store's older, higher numbers
	// (from an earlier boot) must not acknowledge events not sent yet.
	var acked uint64
	for _, a := range b.Events {
		acked = max(acked, a.Seq)
	}
	writeJSON(w, plan.EventAck{Acked: acked})
}

// parseBatch decodes a batch of events; on error, the status to refuse it
// with (413 for more events than a batch may hold).
func parseBatch(body []byte) (plan.EventBatch, int, error) {
	var b plan.EventBatch
	if err := json.Unmarshal(body, &b); err != nil {
		return b, http.StatusBadRequest, err
	}
	if len(b.Events) > plan.MaxEventBatch {
		return b, http.StatusRequestEntityTooLarge, fmt.Errorf("%d in one batch, at most %d", len(b.Events), plan.MaxEventBatch)
	}
	return b, 0, nil
}

// takeBatch checks a batch against the machine's session cur (advance),
// stores its events durably and moves the session on.
func (s *Server) takeBatch(key string, cur status.Session, b plan.EventBatch) *refusal {
	why := checkEscrows(b.Events)
	if why == "" {
		why = checkErasures(b.Events)
	}
	if why != "" {
		return &refusal{status: http.StatusBadRequest, result: ResultBadRequest, reason: "events refused: " + why, note: "agent events refused: " + why}
	}
	next, why := advance(cur, b.Events)
	if why != "" {
		return &refusal{status: http.StatusConflict, result: ResultRefused, reason: "events refused: " + why, note: "agent events refused: " + why}
	}
	evs := make([]status.Event, 0, len(b.Events))
	for _, a := range b.Events {
		e := agentEvent(b, a)
		if cur.Commission != "" {
			// A held node's QA: not an install.
			if e.State == status.StateProvisioning {
				e.State = status.StateCommissioning
			}
			if a.Type == plan.AgentCommissioned {
				e.Commissioned = cur.Commission
			}
		}
		if e.State == status.StateProvisioned {
			// What the session's workflow installed, named by the session.
			e.Install, e.Revision, e.InstallID, e.ReportKey = cur.Install, cur.Revision, cur.ID, cur.ReportKey
		}
		if a.Escrow != nil {
			// Of the install the session runs, whatever the agent says.
			e.Escrow = s.escrowOf(cur, *a.Escrow)
		}
		if a.Erasure != nil {
			e.Erasure = cleanErasure(*a.Erasure)
		}
		evs = append(evs, e)
	}
	if err := s.Store.RecordSync(evs...); err != nil {
		return unavailable("status store: " + err.Error())
	}
	if next.Provisioned && !cur.Provisioned && cur.Retire {
		if ref := s.certify(key, cur, b); ref != nil {
			return ref
		}
	}
	if next.Done != cur.Done || next.DoneSeq != cur.DoneSeq || next.Provisioned != cur.Provisioned { // what advance moves
		if err := s.Store.PutSession(key, next); err != nil {
			return unavailable("session store: " + err.Error())
		}
	}
	return nil
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
		if why := inWorkflow(s, a); why != "" {
			return s, why
		}
		switch a.Type {
		case plan.AgentActionDone:
			if a.Step != s.Done+1 {
				return s, fmt.Sprintf("action %d reported done while action %d of %d is the one running", a.Step, s.Done+1, s.Steps)
			}
			s.Done, s.DoneSeq = s.Done+1, a.Seq
		case plan.AgentRetired:
			if !retires(s) {
				return s, "retired reported by a workflow that retires nothing"
			}
			if s.Done < s.Need {
				return s, fmt.Sprintf("retired reported after %d of the %d actions that must be done first", s.Done, s.Need)
			}
			s.Provisioned, s.DoneSeq = true, a.Seq // the session is over, as an install's
		case plan.AgentCommissioned:
			if s.Commission == "" {
				return s, "commissioned reported by a workflow that is no held node's QA"
			}
			if s.Done < s.Need {
				return s, fmt.Sprintf("commissioned reported after %d of its %d QA actions", s.Done, s.Need)
			}
			s.Provisioned, s.DoneSeq = true, a.Seq // the session is over
		case plan.AgentProvisioned:
			if retires(s) {
				return s, "provisioned reported by a retirement's workflow"
			}
			if s.Commission != "" {
				return s, "provisioned reported by a held node's QA"
			}
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
		case plan.AgentErased:
			if !retires(s) || !slices.Contains(s.Kinds, plan.ActionEraseDisks) {
				return s, "an erased disk reported by a workflow that erases none"
			}
			if a.Step != s.Done+1 {
				return s, fmt.Sprintf("an erased disk of action %d while action %d of %d is the one running", a.Step, s.Done+1, s.Steps)
			}
		case plan.AgentLog, plan.AgentEscrow:
			if a.Step > s.Done+1 {
				return s, fmt.Sprintf("a log line of action %d while action %d of %d is the one running", a.Step, s.Done+1, s.Steps)
			}
		}
	}
	return s, ""
}

// inWorkflow says why event a names no action of the session's workflow
// ("" when it does): its size, its step, the action at that step.
func inWorkflow(s status.Session, a plan.AgentEvent) string {
	if a.Steps != 0 && a.Steps != s.Steps {
		return fmt.Sprintf("event %d reports a workflow of %d actions; the check-in gave %d", a.Seq, a.Steps, s.Steps)
	}
	if a.Step < 0 || a.Step > s.Steps {
		return fmt.Sprintf("event %d names action %d of a workflow of %d", a.Seq, a.Step, s.Steps)
	}
	if a.Action != "" && a.Step > 0 && len(s.Actions) == s.Steps && len(s.Kinds) == s.Steps &&
		a.Action != s.Actions[a.Step-1] && a.Action != s.Kinds[a.Step-1] {
		return fmt.Sprintf("event %d names action %q at step %d; the workflow's is %s", a.Seq, status.Printable(a.Action), a.Step, s.Actions[a.Step-1])
	}
	return ""
}

// agentEvent turns what the agent said into a timeline event.
func agentEvent(b plan.EventBatch, a plan.AgentEvent) status.Event {
	e := status.Event{Time: a.Time.UTC(), Kind: status.KindAgent, Site: b.Site, Node: b.Node,
		Action: a.Action, Step: a.Step, Steps: a.Steps, Bytes: a.Bytes, Total: a.Total, Rate: a.Rate, Seq: a.Seq, Generation: a.Generation,
		FromServer: a.FromServer, FromPeers: a.FromPeers}
	if b.Node == "" {
		e.SetKey(b.Machine)
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
	case plan.AgentRetired:
		e.State, e.Message = status.StateRetired, "retired: every disk not kept erased and verified; powering off"
	case plan.AgentCommissioned:
		e.Message = "commissioned: every QA action passed; it waits until Git releases it"
	case plan.AgentErased:
		// The record's words (bounded by takeBatch), not the agent's.
		e.Message = "erased"
		if a.Erasure != nil {
			e.Error, e.Message = a.Erasure.Error != "", "erased "+cleanErasure(*a.Erasure).Line()
		}
		if step != "" {
			e.Message = step + ": " + e.Message
		}
	case plan.AgentEscrow:
		// What was escrowed, never the agent's words beside it: they
		// could be anything, the ciphertext too.
		e.Message = "recovery key escrowed"
		if a.Escrow != nil {
			e.Message = status.EscrowMessage(*a.Escrow)
		}
		if step != "" {
			e.Message = step + ": " + e.Message
		}
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
