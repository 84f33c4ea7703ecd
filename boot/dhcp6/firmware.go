package dhcp6

import (
	"slices"
	"sync"
	"time"
)

// Firmware remembers which machines' firmware booted over IPv6 lately (by
// MAC), so that on a dual-stack site iPXE goes on in the family its
// firmware came in on. iPXE on a dual-stack link whose RA says M asks
// DHCPv4 and DHCPv6 at once and boots the DHCPv6 URL when it has both:
// without this, a machine that PXE-booted over IPv4 would fetch its script,
// kernel and agent over IPv6. A machine whose firmware booted over IPv4 (or
// whose iPXE is its firmware: a NIC ROM, a USB stick) gets no DHCPv6 boot
// URL and boots the DHCPv4 one.
//
// It holds at most Max machines for TTL each; past Max the oldest are
// forgotten (a flood of made-up MACs can only make a real machine's iPXE
// boot over IPv4, which a dual-stack site serves too).
type Firmware struct {
	TTL time.Duration // 0: 10 minutes
	Max int           // 0: 4096

	mu   sync.Mutex
	seen map[string]time.Time
	now  func() time.Time // tests
}

// Booted records that mac's firmware was given a boot file over DHCPv6.
func (f *Firmware) Booted(mac string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock()
	if f.seen == nil {
		f.seen = map[string]time.Time{}
	}
	if _, ok := f.seen[mac]; !ok && len(f.seen) >= f.max() {
		f.forget(now)
	}
	f.seen[mac] = now
}

// BootedV6 says mac's firmware was given a boot file over DHCPv6 within
// TTL.
func (f *Firmware) BootedV6(mac string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.seen[mac]
	return ok && f.clock().Sub(t) < f.ttl()
}

// forget drops the expired entries and, while more than three quarters
// of Max are left, the oldest: one pass and one sort make room for a
// quarter of Max newcomers, so a flood of made-up MACs costs no scan per
// packet.
func (f *Firmware) forget(now time.Time) {
	type entry struct {
		mac string
		at  time.Time
	}
	live := make([]entry, 0, len(f.seen))
	for mac, t := range f.seen {
		if now.Sub(t) >= f.ttl() {
			delete(f.seen, mac)
			continue
		}
		live = append(live, entry{mac, t})
	}
	keep := f.max() * 3 / 4
	if len(live) <= keep {
		return
	}
	slices.SortFunc(live, func(a, b entry) int { return a.at.Compare(b.at) })
	for _, e := range live[:len(live)-keep] {
		delete(f.seen, e.mac)
	}
}

func (f *Firmware) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

func (f *Firmware) ttl() time.Duration {
	if f.TTL > 0 {
		return f.TTL
	}
	return 10 * time.Minute
}

func (f *Firmware) max() int {
	if f.Max > 0 {
		return f.Max
	}
	return 4096
}
