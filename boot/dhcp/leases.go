package dhcp

import (
	"net/netip"
	"time"

	"github.com/bootops/bootops/boot/lease"
)

// Leaser hands unknown machines an address from the site's pool
// (reservation mode on an isolated LAN). A DISCOVER only gets an Offer,
// held briefly and never written down; the REQUEST that follows makes it a
// lease with Confirm. A flood of DISCOVERs therefore cannot use up the pool.
type Leaser interface {
	// Offer picks an address for mac and holds it for a little while.
	Offer(mac string, r lease.Range) (netip.Addr, error)
	// Confirm leases want (when valid; otherwise what mac was offered or
	// leased) to mac for d.
	Confirm(mac string, want netip.Addr, r lease.Range, d time.Duration) (netip.Addr, error)
}

// Pool is where a site's DHCPv4 leases are kept: the lease store both
// families share (boot/lease), which walks an IPv4 range from its first
// address.
type Pool = lease.Store

var _ Leaser = (*Pool)(nil)
