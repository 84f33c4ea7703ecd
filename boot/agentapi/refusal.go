package agentapi

import (
	"errors"
	"net/http"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
)

// refusal is one way of turning a machine's request away: the answer,
// what it counts as, and what the machine's timeline says of it.
// Server.refuse is the one place that answers one.
type refusal struct {
	status int    // the HTTP status
	result string // what the request counter counts it as; "" for the server's own trouble
	reason string // the answer's body
	retry  string // Retry-After, when the machine may come back
	// note is the error event the refusal puts on the machine's timeline,
	// in state; "" for none: a refusal anyone could provoke by naming a
	// machine stays off its timeline.
	note, state string
	// warn, when set, is logged as a warning, with why.
	warn, why string
}

func unauthorized(reason string) *refusal {
	return &refusal{status: http.StatusUnauthorized, result: ResultUnauthorized, reason: reason}
}

func badRequest(code int, reason string) *refusal {
	return &refusal{status: code, result: ResultBadRequest, reason: reason}
}

// throttled: past a budget; the machine may come back after retry seconds.
func throttled(retry, reason string) *refusal {
	return &refusal{status: http.StatusTooManyRequests, result: ResultThrottled, reason: reason, retry: retry}
}

// unavailable is the server's own trouble (no Plan yet, a store that
// failed): not the machine's, not counted.
func unavailable(reason string) *refusal {
	return &refusal{status: http.StatusServiceUnavailable, reason: reason}
}

// mismatch: the machine is not the node it claims, or its identifiers
// belong to several; on its timeline.
func mismatch(reason string) *refusal {
	return &refusal{status: http.StatusConflict, result: ResultMismatch, reason: "check-in refused: " + reason,
		note: "agent refused: " + reason, state: status.StateMismatch}
}

// conflict is an identity-conflict: a second claim to be a machine that
// is booting or provisioned (a spent token again, another TPM). It is an
// error on the machine's timeline, and a warning.
func conflict(code int, why, reason string) *refusal {
	return &refusal{status: code, result: ResultConflict, reason: reason,
		note: "identity-conflict: " + why, warn: "identity-conflict", why: why}
}

// refuse answers f, and puts it on the timeline of the machine ev is
// about when f says so.
func (s *Server) refuse(w http.ResponseWriter, ev status.Event, f *refusal) {
	s.note(ev, f)
	if f.retry != "" {
		w.Header().Set("Retry-After", f.retry)
	}
	s.count(f.result)
	http.Error(w, f.reason, f.status)
}

// note puts what f says of the machine ev is about on its timeline and in
// the log (an identity-conflict that does not refuse, too: see
// openSession).
func (s *Server) note(ev status.Event, f *refusal) {
	if f.note != "" {
		ev.Error, ev.State, ev.Message = true, f.state, f.note
		s.Store.Record(ev)
	}
	if f.warn != "" {
		s.logger().Warn(f.warn, "site", ev.Site, "node", ev.Node, "mac", ev.MAC, "ip", ev.IP, "why", f.why)
	}
}

// errSuperseded says a session credential is not the machine's current
// session's: a newer check-in replaced it.
var errSuperseded = errors.New("the session was replaced by a newer check-in for this machine")

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

// badCredential refuses what's request (check-in, events, qa, swarm) for
// its credential.
func badCredential(what string, err error) *refusal {
	if errors.Is(err, boot.ErrWrongKind) && what == "events" {
		return unauthorized("events: a boot token is good for the check-in only: events need the session credential the check-in returned")
	}
	return unauthorized(what + ": " + credentialError(err))
}
