package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/media"
	"github.com/bootops/bootops/plan"
)

// mediaFiles builds the boot media the HTTP server hands out (the UKI of
// the firmware's HTTPS boot URL, the ISO a BMC inserts as virtual media,
// the USB image) from the Plan being served, the Micro-OS's files and the
// site CA: once for each set of inputs, into <state-dir>/media, one build
// at a time (each takes seconds of CPU; a flood of requests waits, it
// does not build in parallel).
type mediaFiles struct {
	dir       string
	ca        string
	artifacts *bhttp.Artifacts
	plans     interface{ Current() *plan.Plan }

	mu sync.Mutex
}

// keepMedia bounds the media kept: past it, the oldest go.
const keepMedia = 32

var mediaBuild = map[string]func(media.Spec, string) error{"boot.efi": media.UKI, "media.iso": media.ISO, "media.img": media.USB}

// get is the file of the medium kind of site (or its node), built first
// when the inputs changed since.
func (m *mediaFiles) get(ctx context.Context, site, node, kind string) (string, error) {
	build := mediaBuild[kind]
	p := m.plans.Current()
	switch {
	case build == nil:
		return "", fmt.Errorf("no medium %q: %w", kind, fs.ErrNotExist)
	case p == nil:
		return "", errors.New("no plan loaded yet")
	}
	sp := media.Spec{Site: p.Site(site), CA: m.ca, Epoch: media.DefaultEpoch}
	if sp.Site == nil {
		return "", fmt.Errorf("no site %q is served here: %w", site, fs.ErrNotExist)
	}
	if node != "" {
		if sp.Node = p.Node(site, node); sp.Node == nil {
			return "", fmt.Errorf("no node %q on site %s: %w", node, site, fs.ErrNotExist)
		}
	}
	if sp.MicroOS = media.MicroOSFor(p, sp.Site, sp.Node); sp.MicroOS == nil {
		return "", fmt.Errorf("site %s boots no Micro-OS: %w", site, fs.ErrNotExist)
	}
	if m.ca == "" {
		return "", errors.New("this daemon has no site CA (tls/ca.pem in its state folder: bootops ca init): boot media pin it")
	}
	out := filepath.Join(m.dir, mediaKey(sp, kind)+"-"+kind)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	var err error
	if sp.Kernel, err = m.artifacts.File(ctx, sp.MicroOS.Kernel); err != nil {
		return "", fmt.Errorf("Micro-OS %s's kernel: %w", sp.MicroOS.Name, err)
	}
	if sp.Initrd, err = m.artifacts.File(ctx, sp.MicroOS.Initrd); err != nil {
		return "", fmt.Errorf("Micro-OS %s's initrd: %w", sp.MicroOS.Name, err)
	}
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return "", err
	}
	tmp := out + ".tmp"
	if err := build(sp, tmp); err != nil {
		os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	m.prune()
	return out, nil
}

// mediaKey names a medium by everything it is made of: the site's network
// and remote URL, the node, the Micro-OS, the CA.
func mediaKey(sp media.Spec, kind string) string {
	var node string
	if sp.Node != nil {
		node = sp.Node.Hash
	}
	server, _ := media.Server(sp.Site)
	h := sha256.Sum256([]byte(plan.Hash([]string{kind, sp.Site.Name, server, node, sp.MicroOS.Hash, sp.CA})))
	return hex.EncodeToString(h[:12])
}

// prune removes the oldest media past keepMedia.
func (m *mediaFiles) prune() {
	ents, err := os.ReadDir(m.dir)
	if err != nil || len(ents) <= keepMedia {
		return
	}
	type aged struct {
		name string
		mod  int64
	}
	var all []aged
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			all = append(all, aged{e.Name(), info.ModTime().UnixNano()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod < all[j].mod })
	for _, a := range all[:len(all)-keepMedia] {
		os.Remove(filepath.Join(m.dir, a.name))
	}
}
