package hub

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// gate lets the sites in: each by its nkey (the server's nonce signed
// with the site's seed), with the permissions of its own subjects, and at
// most SiteConns connections of one key at once — one site cannot take
// the hub's file descriptors from the others (nats-server has connection
// limits per account only, and only with JWT accounts). The hub's own key
// has every permission and no bound.
type gate struct {
	self  string
	limit int
	log   *slog.Logger

	mu    sync.Mutex
	srv   *server.Server      // set once running
	users map[string]*siteKey // by public key
}

// siteKey is one site's key at the gate, and its connections now.
type siteKey struct {
	site   string
	perms  *server.Permissions
	conns  []uint64 // client IDs, some perhaps closed since
	warned time.Time
}

var _ server.Authentication = (*gate)(nil)

// set makes the sites' keys those of sites (name → public key) and
// returns the connections of keys no longer among them, to be closed.
func (g *gate) set(sites map[string]string) ([]uint64, error) {
	next := map[string]*siteKey{}
	for site, pub := range sites {
		if !ValidSite(site) {
			return nil, fmt.Errorf("hub: site name %q: lowercase letters, digits and '-'", site)
		}
		if !nkeys.IsValidPublicUserKey(pub) {
			return nil, fmt.Errorf("hub: site %s: %q is not an nkey user public key", site, pub)
		}
		next[pub] = &siteKey{site: site, perms: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{SubjectPrefix + site}},
			Subscribe: &server.SubjectPermission{Allow: []string{Inbox(site) + ".>"}},
		}}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var gone []uint64
	for pub, k := range g.users {
		if n := next[pub]; n != nil && n.site == k.site {
			n.conns = k.conns
		} else {
			gone = append(gone, k.conns...)
		}
	}
	g.users = next
	return gone, nil
}

// Check is the server's question for each client connecting.
func (g *gate) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o == nil || o.Nkey == "" || !verify(o.Nkey, o.Sig, c.GetNonce()) {
		return false
	}
	if o.Nkey == g.self {
		c.RegisterUser(&server.User{Username: o.Nkey})
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.users[o.Nkey]
	if k == nil {
		return false
	}
	live := k.conns[:0]
	for _, id := range k.conns {
		if g.srv != nil && g.srv.GetClient(id) != nil {
			live = append(live, id)
		}
	}
	k.conns = live
	if len(live) >= g.limit {
		if now := time.Now(); now.Sub(k.warned) >= warnEvery {
			k.warned = now
			g.log.Warn("hub: a site's connection refused: it holds as many as it may", "site", k.site, "connections", len(live), "from", c.RemoteAddress())
		}
		return false
	}
	k.conns = append(k.conns, c.GetID())
	c.RegisterUser(&server.User{Username: o.Nkey, Permissions: k.perms})
	return true
}

// verify says whether sig (base64, as clients send it) is pub's signature
// of nonce.
func verify(pub, sig string, nonce []byte) bool {
	if len(nonce) == 0 {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		if b, err = base64.StdEncoding.DecodeString(sig); err != nil {
			return false
		}
	}
	kp, err := nkeys.FromPublicKey(pub)
	return err == nil && kp.Verify(nonce, b) == nil
}
