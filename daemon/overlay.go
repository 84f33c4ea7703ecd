package daemon

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/microos"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// loadTrust reads the overlay key and the site CA the overlays carry:
// from the flags, else from <state-dir>/tls when there (none: no overlays).
func loadTrust(stateDir, overlayKey string) (ed25519.PrivateKey, string, error) {
	dir := filepath.Join(stateDir, "tls")
	path := overlayKey
	if path == "" {
		if _, err := os.Stat(filepath.Join(dir, trust.OverlayKeyFile)); err == nil {
			path = filepath.Join(dir, trust.OverlayKeyFile)
		}
	}
	var key ed25519.PrivateKey
	if path != "" {
		k, err := trust.ReadOverlayKey(path)
		if err != nil {
			return nil, "", fmt.Errorf("overlay key: %w", err)
		}
		key = k
	}
	ca, _ := os.ReadFile(filepath.Join(dir, trust.CAFile))
	return key, string(ca), nil
}

// overlaySwap swaps Plans in for the boot plane, with their site overlays
// built and signed first: the HTTP and TFTP servers serve their bytes, as
// they serve every other artifact, and never sign at request time.
type overlaySwap struct {
	live *boot.Live
	key  ed25519.PrivateKey
	ca   string
	cur  atomic.Pointer[microos.SiteOverlays]
}

func (o *overlaySwap) Swap(p *plan.Plan) {
	o.cur.Store(microos.BuildOverlays(p, o.key, o.ca))
	o.live.Swap(p)
}

func (o *overlaySwap) overlay(site string) ([]byte, error) {
	cur := o.cur.Load()
	if cur == nil {
		return nil, errors.New("no plan loaded yet")
	}
	return cur.Get(site)
}
