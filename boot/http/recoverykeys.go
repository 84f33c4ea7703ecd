package http

import (
	"fmt"
	"net/http"

	"github.com/bootops/bootops/boot/status"
)

// Recovery keys: the escrows of a node's encrypted installs (the agent
// posts each as ciphertext, armored age to the profile's recipients; see
// boot/agentapi). GET /api/v1/recovery-keys/{site}/{node} (role operate)
// serves them as the store keeps them, ciphertext only: an operator
// decrypts one with an identity of the recipients (bootops recovery-key).
// No plaintext ever reaches the server.

// RecoveryKeys is the answer of GET /api/v1/recovery-keys/{site}/{node}:
// the node's kept escrows, newest first (at most status.KeptEscrows);
// none (an empty list) when the node was never installed encrypted.
type RecoveryKeys struct {
	Site    string          `json:"site"`
	Node    string          `json:"node"`
	Escrows []status.Escrow `json:"escrows"`
}

// EscrowLookup finds a node's escrows; known is false when there is no
// such node.
type EscrowLookup func(site, node string) (escrows []status.Escrow, known bool)

// RecoveryKeysHandler is GET /api/v1/recovery-keys/{site}/{node} over a
// lookup (a hub serves its view with it too): 404 for no such node, the
// escrows (maybe none) else. It is never cached.
func RecoveryKeysHandler(lookup EscrowLookup) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		site, node := r.PathValue("site"), r.PathValue("node")
		es, known := lookup(site, node)
		if !known {
			http.Error(w, fmt.Sprintf("recovery keys: no node %q on site %q", status.Printable(node), status.Printable(site)), http.StatusNotFound)
			return
		}
		if es == nil {
			es = []status.Escrow{}
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, RecoveryKeys{Site: site, Node: node, Escrows: es})
	})
}

// recoveryKeys is the site daemon's GET /api/v1/recovery-keys/{site}/{node}
// (role operate): a node of the Plan served, or one the store still keeps
// (a node that left Git keeps its record for a grace period, and its disk
// its key). A read that finds escrows goes on the node's timeline.
func (s *Server) recoveryKeys(w http.ResponseWriter, r *http.Request) {
	RecoveryKeysHandler(func(site, node string) ([]status.Escrow, bool) {
		var m status.Machine
		held := false
		if s.View.Status != nil {
			m, held = s.View.Status.Machine(site + "/" + node)
		}
		p := s.Plans.Current()
		if !held && (p == nil || p.Node(site, node) == nil) {
			return nil, false
		}
		es := m.Escrows()
		if len(es) > 0 {
			s.Events.Record(status.Event{Kind: status.KindAgent, Site: site, Node: node, IP: clientIP(r),
				Message: fmt.Sprintf("recovery key escrows read by an operator (%d kept; ciphertext only)", len(es))})
		}
		return es, true
	}).ServeHTTP(w, r)
}
