package http

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
)

// Media credentials: how a node booting a medium over the Internet proves
// who it is when it has no TPM registered in Git. An operator (role
// operate) asks for one for a node; it is bound to the node and its
// reprovision generation, good for one check-in, and expires. The medium
// itself never holds one: it is written beside the medium's files.

// DefaultMediaTTL and MaxMediaTTL bound a media credential's life.
const (
	DefaultMediaTTL = 72 * time.Hour
	MaxMediaTTL     = 30 * 24 * time.Hour
)

// MediaCredentialRequest is the body of POST /api/v1/media-credentials.
type MediaCredentialRequest struct {
	Site string `json:"site"`
	Node string `json:"node"`
	// TTL is how long it is good for (a Go duration; default 72h, at most
	// 720h).
	TTL string `json:"ttl,omitempty"`
}

// MediaCredential is its answer: the credential and what it is for.
type MediaCredential struct {
	Site       string    `json:"site"`
	Node       string    `json:"node"`
	Generation int       `json:"generation"`
	Credential string    `json:"credential"`
	Expires    time.Time `json:"expires"`
}

// mediaCredential is POST /api/v1/media-credentials (role operate).
func (s *Server) mediaCredential(w http.ResponseWriter, r *http.Request) {
	var req MediaCredentialRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		http.Error(w, "media credential: "+err.Error(), http.StatusBadRequest)
		return
	}
	ttl := DefaultMediaTTL
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 || d > MaxMediaTTL {
			http.Error(w, fmt.Sprintf("media credential: ttl %q: want a duration from 1s to %s", req.TTL, MaxMediaTTL), http.StatusBadRequest)
			return
		}
		ttl = d
	}
	p := s.Plans.Current()
	if p == nil {
		http.Error(w, "no plan loaded yet", http.StatusServiceUnavailable)
		return
	}
	n := p.Node(req.Site, req.Node)
	if n == nil {
		http.Error(w, fmt.Sprintf("media credential: no node %q on site %q", req.Node, req.Site), http.StatusNotFound)
		return
	}
	g := boot.Grant{Kind: boot.KindMedia, Site: n.Site, Subject: boot.Subject(n.Name, ""), Generation: n.Reprovision,
		ID: boot.NewID(), Expires: s.now().Add(ttl).Truncate(time.Second)}
	out := MediaCredential{Site: n.Site, Node: n.Name, Generation: g.Generation, Credential: s.Secret.Mint(g), Expires: g.Expires.UTC()}
	s.Events.Record(status.Event{Kind: status.KindAgent, Site: n.Site, Node: n.Name, IP: clientIP(r),
		Message: fmt.Sprintf("media credential %s issued for generation %d, good for one check-in until %s", g.ID, g.Generation, out.Expires.Format(time.RFC3339))})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(out)
}
