package dhcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// Leaser hands unknown machines an address from the site's pool
// (reservation mode on an isolated LAN).
type Leaser interface {
	Lease(mac string, pool [2]netip.Addr, taken func(netip.Addr) bool) (netip.Addr, error)
}

// Pool is a Leaser whose leases survive restarts: each MAC keeps its
// address, recorded in a JSON file written atomically on every new lease.
// Leases never expire: a provisioning LAN sees the same machines again.
type Pool struct {
	Path string

	mu     sync.Mutex
	loaded bool
	leases map[string]netip.Addr
}

var _ Leaser = (*Pool)(nil)

// ErrPoolFull says every address of the pool is taken.
var ErrPoolFull = errors.New("dhcp: pool exhausted")

// Lease returns mac's address, taking the lowest free one of pool (not
// taken, not leased to another MAC) the first time.
func (p *Pool) Lease(mac string, pool [2]netip.Addr, taken func(netip.Addr) bool) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.load(); err != nil {
		return netip.Addr{}, err
	}
	if a, ok := p.leases[mac]; ok && !a.Less(pool[0]) && !pool[1].Less(a) && !taken(a) {
		return a, nil
	}
	used := map[netip.Addr]bool{}
	for _, a := range p.leases {
		used[a] = true
	}
	for a := pool[0]; a.IsValid() && !pool[1].Less(a); a = a.Next() {
		if used[a] || taken(a) {
			continue
		}
		p.leases[mac] = a
		if err := p.save(); err != nil {
			delete(p.leases, mac)
			return netip.Addr{}, err
		}
		return a, nil
	}
	return netip.Addr{}, ErrPoolFull
}

func (p *Pool) load() error {
	if p.loaded {
		return nil
	}
	p.leases = map[string]netip.Addr{}
	b, err := os.ReadFile(p.Path)
	if errors.Is(err, fs.ErrNotExist) {
		p.loaded = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("dhcp: leases: %w", err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("dhcp: leases %s: %w", p.Path, err)
	}
	for mac, s := range m {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("dhcp: leases %s: %s: %w", p.Path, mac, err)
		}
		p.leases[mac] = a
	}
	p.loaded = true
	return nil
}

func (p *Pool) save() error {
	m := make(map[string]string, len(p.leases))
	macs := make([]string, 0, len(p.leases))
	for mac, a := range p.leases {
		m[mac] = a.String()
		macs = append(macs, mac)
	}
	sort.Strings(macs)
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p.Path), 0o755); err != nil {
		return err
	}
	tmp := p.Path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p.Path)
}
