package agentapi

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

// swarmChunk serves the swarm's chunks through Swarm as it is now (the
// daemon sets it once its cache is ready).
func (s *Server) swarmChunk(w http.ResponseWriter, r *http.Request) { s.Swarm.ServeChunk(w, r) }

// swarmImage checks a swarm request's session credential and finds the
// image-to-disk action of the machine's workflow the request is about:
// a machine joins the swarm of its own image only. It answers the
// request itself when it cannot (false).
func (s *Server) swarmImage(w http.ResponseWriter, r *http.Request) (plan.Action, *plan.Site, string, bool) {
	if s.Swarm == nil {
		http.Error(w, "this server shares no images between machines", http.StatusNotFound)
		return plan.Action{}, nil, "", false
	}
	q := r.URL.Query()
	if ref := s.authorizeSession(bearer(r), "swarm", q); ref != nil {
		s.refuse(w, status.Event{}, ref)
		return plan.Action{}, nil, "", false
	}
	site, node := q.Get("site"), q.Get("node")
	key := site + "/" + boot.Subject(node, q.Get("machine"))
	p := s.Plans.Current()
	if p == nil {
		http.Error(w, "no plan loaded yet", http.StatusServiceUnavailable)
		return plan.Action{}, nil, "", false
	}
	st := p.Site(site)
	if st == nil || st.Peers == nil {
		http.Error(w, "site "+site+" does not share images between machines", http.StatusNotFound)
		return plan.Action{}, nil, "", false
	}
	if a, ok := imageAction(p, st, node, r.PathValue("image")); ok {
		return a, st, key, true
	}
	http.Error(w, "no image-to-disk action of this machine's workflow has sha256 "+r.PathValue("image"), http.StatusNotFound)
	return plan.Action{}, nil, "", false
}

// imageAction is the image-to-disk action of sha256 image in the workflow
// of node (an unknown machine's: its site's, node "").
func imageAction(p *plan.Plan, st *plan.Site, node, image string) (plan.Action, bool) {
	var wf *plan.Workflow
	switch n := p.Node(st.Name, node); {
	case n != nil:
		wf = &n.Artifacts.Workflow
	case node == "" && st.Unknown != nil:
		wf = &st.Unknown.Workflow
	default:
		return plan.Action{}, false
	}
	for _, a := range wf.Actions {
		if a.Action == "image-to-disk" && a.SHA256 == image {
			return a, true
		}
	}
	return plan.Action{}, false
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
		s.Store.Record(status.Event{Kind: status.KindFile, Site: st.Name, Message: fmt.Sprintf("image %s for peers: %v", a.URL, err), Error: true})
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
	server := boot.BaseURL(st, ip)
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
