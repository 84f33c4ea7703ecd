package agentapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
)

// What each route reads of a body at most: a check-in's identity, disks,
// inventory and TPM proof (a server's firmware event log runs to tens of
// KiB, base64 in JSON), a batch of events (at most plan.MaxEventBatch,
// each message within plan.MaxEventMessage), an installed OS's report, a
// swarm report.
const (
	maxCheckInBody = 512 << 10
	maxEventsBody  = 512 << 10
	maxReportBody  = 16 << 10
	maxSwarmBody   = 64 << 10
)

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

// precheck refuses a credential that is missing, malformed, of none of
// kinds or expired, before a body is read. optional lets a request
// without one through (a check-in over TLS).
func (s *Server) precheck(tok, what string, optional bool, kinds ...string) *refusal {
	if tok == "" && optional {
		return nil
	}
	if err := boot.Peek(tok, s.now(), kinds...); err != nil {
		return badCredential(what, err)
	}
	return nil
}

// sessionGrant checks a session credential for the machine a request
// names (site, and node or machine key); it returns the machine's key and
// the credential's grant.
func (s *Server) sessionGrant(tok, what, site, node, machine string) (string, boot.Grant, *refusal) {
	subj := boot.Subject(node, machine)
	g, err := s.Secret.Verify(tok, boot.KindSession, site, subj, s.now())
	if subj == "" || err != nil {
		return "", g, badCredential(what, err)
	}
	return site + "/" + subj, g, nil
}

// currentSession is the machine's session when g is its credential (the
// caller holds the machine's lock when it must not change under it).
func (s *Server) currentSession(what, key string, g boot.Grant) (status.Session, *refusal) {
	cur, ok := s.Store.Session(key)
	if !ok || cur.ID != g.ID {
		return cur, unauthorized(what + ": " + errSuperseded.Error())
	}
	return cur, nil
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

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	return host
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
