package http

import (
	"net/http"
	"strconv"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/plan"
)

// qaStream serves qa-network's download (plan.QAStreamPath): bytes=N
// zeros, at most plan.MaxQAStream, to an agent with its current session
// credential (?site=…&node=…&machine=… name it, as for the swarm). Zeros
// cost the server nothing to make, and TCP's checksums already guard them:
// the action measures the network, not the data.
func (s *Server) qaStream(w http.ResponseWriter, r *http.Request) {
	if !s.precheck(w, r, "qa", false, boot.KindSession) {
		return
	}
	q := r.URL.Query()
	site, node, machine := q.Get("site"), q.Get("node"), q.Get("machine")
	subj := subject(node, machine)
	g, err := s.Secret.Verify(bearer(r), boot.KindSession, site, subj, s.now())
	if subj == "" || err != nil {
		s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "qa: "+credentialError(err))
		return
	}
	if cur, ok := s.sessions().Session(site + "/" + subj); !ok || cur.ID != g.ID {
		s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "qa: "+errSuperseded.Error())
		return
	}
	n, err := strconv.ParseInt(q.Get("bytes"), 10, 64)
	if err != nil || n <= 0 || n > plan.MaxQAStream {
		s.agentFail(w, http.StatusBadRequest, AgentBadRequest, "qa: bytes="+q.Get("bytes")+": want a count from 1 to "+strconv.Itoa(plan.MaxQAStream))
		return
	}
	s.count(AgentOK)
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
