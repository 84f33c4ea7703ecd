package microos

import (
	"crypto/ed25519"
	"fmt"
	"strings"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// SiteOverlays are the signed site overlays of one Plan: for each site, a
// cpio of the overlay document (the agent's server URL, the site CA for a
// TLS site, the site's env) and its signature. The daemon builds them once,
// when it swaps the Plan in, and serves the bytes until the next one.
type SiteOverlays struct {
	sites map[string][]byte
	err   error // why there are none
}

// BuildOverlays signs the overlay of every site of p with key; ca is the
// PEM site CA a TLS site's overlay carries. A nil key gives none, and
// says how to make one.
func BuildOverlays(p *plan.Plan, key ed25519.PrivateKey, ca string) *SiteOverlays {
	if key == nil {
		return &SiteOverlays{err: fmt.Errorf("no overlay key: run 'bootops ca init' (it writes <state-dir>/tls/overlay.key) or give --overlay-key")}
	}
	o := &SiteOverlays{sites: map[string][]byte{}}
	for _, st := range p.Sites {
		doc := trust.Overlay{Site: st.Name, Server: st.AgentURL(), Env: st.Env}
		if st.TLS() {
			doc.CA = ca
		}
		b, sig, err := trust.SignOverlay(key, doc)
		if err != nil {
			return &SiteOverlays{err: fmt.Errorf("site %s's overlay: %w", st.Name, err)}
		}
		o.sites[st.Name] = Overlay(map[string][]byte{
			strings.TrimPrefix(trust.OverlayPath, "/"):    b,
			strings.TrimPrefix(trust.OverlaySigPath, "/"): sig,
		})
	}
	return o
}

// Get returns site's overlay.
func (o *SiteOverlays) Get(site string) ([]byte, error) {
	if o.err != nil {
		return nil, o.err
	}
	b, ok := o.sites[site]
	if !ok {
		return nil, fmt.Errorf("no site %q", site)
	}
	return b, nil
}
