package http

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/swarm"
)

// Swarm is the server's part in machines fetching their image from each
// other: it prepares each image (Cache), schedules who fetches which
// chunk from where (Scheduler), and serves the chunks no machine holds.
type Swarm struct {
	Cache     *swarm.Cache
	Scheduler *swarm.Scheduler
	// Port is the port of a listener of the server's own for chunks (serve
	// --swarm-addr); 0: the site's HTTP port.
	Port int
}

// ServeChunk serves a chunk of a prepared image to a member of its swarm
// (GET /swarm/{source}/chunk/{i}).
func (sw *Swarm) ServeChunk(w http.ResponseWriter, r *http.Request) {
	if sw == nil {
		http.NotFound(w, r)
		return
	}
	im := sw.Cache.Lookup(r.PathValue("source"))
	if im == nil {
		http.Error(w, "no such image", http.StatusNotFound)
		return
	}
	im.ServeChunk(w, r, sw.Scheduler.Key(im.Manifest.Source))
}

// swarmImage checks a swarm request's session credential and finds the
// image-to-disk action of the machine's workflow the request is about:
// a machine joins the swarm of its own image only.
func (s *Server) swarmImage(w http.ResponseWriter, r *http.Request) (plan.Action, *plan.Site, string, bool) {
	if s.Swarm == nil {
		http.Error(w, "this server shares no images between machines", http.StatusNotFound)
		return plan.Action{}, nil, "", false
	}
	q := r.URL.Query()
	site, node, machine := q.Get("site"), q.Get("node"), q.Get("machine")
	subj := subject(node, machine)
	g, err := s.Secret.Verify(bearer(r), boot.KindSession, site, subj, s.now())
	if subj == "" || err != nil {
		s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "swarm: "+credentialError(err))
		return plan.Action{}, nil, "", false
	}
	key := site + "/" + subj
	if cur, ok := s.sessions().Session(key); !ok || cur.ID != g.ID {
		s.agentFail(w, http.StatusUnauthorized, AgentUnauthorized, "swarm: "+errSuperseded.Error())
		return plan.Action{}, nil, "", false
	}
	p := s.Plans.Current()
	if p == nil {
		http.Error(w, "no plan loaded yet", http.StatusServiceUnavailable)
		return plan.Action{}, nil, "", false
	}
	st := p.Site(site)
	var wf *plan.Workflow
	switch n := p.Node(site, node); {
	case st == nil || st.Peers == nil:
		http.Error(w, "site "+site+" does not share images between machines", http.StatusNotFound)
		return plan.Action{}, nil, "", false
	case n != nil:
		wf = &n.Artifacts.Workflow
	case node == "" && st.Unknown != nil:
		wf = &st.Unknown.Workflow
	}
	if wf != nil {
		for _, a := range wf.Actions {
			if a.Action == "image-to-disk" && a.SHA256 == r.PathValue("image") {
				return a, st, key, true
			}
		}
	}
	http.Error(w, "no image-to-disk action of this machine's workflow has sha256 "+r.PathValue("image"), http.StatusNotFound)
	return plan.Action{}, nil, "", false
}

// swarmManifest gives a machine its image's manifest, preparing the image
// first: 503 with Retry-After until it is ready.
func (s *Server) swarmManifest(w http.ResponseWriter, r *http.Request) {
	a, st, key, ok := s.swarmImage(w, r)
	if !ok {
		return
	}
	im, err := s.Swarm.Cache.Get(a.URL, a.SHA256, a.Compression)
	var prep *swarm.PreparingError
	switch {
	case errors.As(err, &prep):
		w.Header().Set("Retry-After", "2")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		s.logger().Warn("image for peers", "url", a.URL, "err", err)
		s.Events.Record(status.Event{Kind: status.KindFile, Site: st.Name, Message: fmt.Sprintf("image %s for peers: %v", a.URL, err), Error: true})
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	s.logger().Debug("swarm manifest", "machine", key, "image", a.SHA256)
	writeJSON(w, im.Manifest)
}

// swarmReport takes a machine's report to its image's swarm and answers
// with its next transfers.
func (s *Server) swarmReport(w http.ResponseWriter, r *http.Request) {
	a, st, key, ok := s.swarmImage(w, r)
	if !ok {
		return
	}
	im := s.Swarm.Cache.Lookup(a.SHA256)
	if im == nil {
		http.Error(w, "the image is not prepared: ask for its manifest first", http.StatusConflict)
		return
	}
	var rep swarm.Report
	if code, err := readJSON(w, r, maxSwarmBody, &rep); err != nil {
		http.Error(w, "swarm report: "+err.Error(), code)
		return
	}
	ip := clientIP(r)
	who := swarm.Member{Name: key, IP: ip, Server: chunkServer(st, ip, s.Swarm.Port), Peers: st.Peers.PerMachine}
	writeJSON(w, s.Swarm.Scheduler.Report(im.Manifest, who, rep))
}

// chunkServer is the URL of the server's image chunks for a machine at
// ip: the site's address in the machine's family, on the swarm's own port
// when it has one (0: the HTTP listener).
func chunkServer(st *plan.Site, ip string, port int) string {
	server := baseURL(st, ip)
	if port == 0 {
		return server
	}
	u, err := url.Parse(server)
	if err != nil {
		return server
	}
	u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(port))
	return u.String()
}
