package agentapi

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// qaStream serves qa-network's download (plan.QAStreamPath): bytes=N
// zeros, at most plan.MaxQAStream, to an agent with its current session
// credential (?site=…&node=…&machine=… name it, as for the swarm). Zeros
// cost the server nothing to make, and TCP's checksums already guard them:
// the action measures the network, not the data.
func (s *Server) qaStream(w http.ResponseWriter, r *http.Request) {
	tok, q := bearer(r), r.URL.Query()
	ref := s.precheck(tok, "qa", false, boot.KindSession)
	if ref == nil {
		ref = s.authorizeSession(tok, "qa", q)
	}
	if ref != nil {
		s.refuse(w, status.Event{}, ref)
		return
	}
	n, err := strconv.ParseInt(q.Get("bytes"), 10, 64)
	if err != nil || n <= 0 || n > plan.MaxQAStream {
		s.refuse(w, status.Event{}, badRequest(http.StatusBadRequest, "qa: bytes="+q.Get("bytes")+": want a count from 1 to "+strconv.Itoa(plan.MaxQAStream)))
		return
	}
	s.count(ResultOK)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		return
	}
	zeros := make([]byte, 256<<10)
	for n > 0 {
		k, err := w.Write(zeros[:min(n, int64(len(zeros)))])
		if err != nil {
			return // the agent went away
		}
		n -= int64(k)
	}
}

// authorizeSession checks the session credential of a request that names
// its machine in the query (site, and node or machine), as qa's and the
// swarm's do: signed for it, and its current session.
func (s *Server) authorizeSession(tok, what string, q url.Values) *refusal {
	key, g, ref := s.sessionGrant(tok, what, q.Get("site"), q.Get("node"), q.Get("machine"))
	if ref == nil {
		_, ref = s.currentSession(what, key, g)
	}
	return ref
}
