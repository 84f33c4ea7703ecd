package dhcp

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"
)

// An IPv6 lease (what the DHCPv6 server keeps in a Pool) names its MAC to
// the HTTP server like an IPv4 one, whichever form the address comes in.
func TestMACOfIPv6Lease(t *testing.T) {
	pool := &Pool{Path: filepath.Join(t.TempDir(), "leases6.json")}
	r := Range{First: netip.MustParseAddr("2001:db8::100"), Last: netip.MustParseAddr("2001:db8::1ff")}
	a, err := pool.Offer("52:54:00:00:00:66", r)
	if err == nil {
		a, err = pool.Confirm("52:54:00:00:00:66", a, r, time.Hour)
	}
	if err != nil || !a.Is6() {
		t.Fatalf("lease %s: %v", a, err)
	}
	v4 := &Pool{Path: filepath.Join(t.TempDir(), "leases.json")}
	ps := &Pools{}
	ps.Add(v4)
	ps.Add(pool)
	for ip, want := range map[string]string{
		a.String():                  "52:54:00:00:00:66",
		a.StringExpanded():          "52:54:00:00:00:66",
		a.WithZone("eth0").String(): "52:54:00:00:00:66",
		"2001:db8::1fe":             "",
		"198.18.0.12":               "",
		"[" + a.String() + "]":      "", // not an address
	} {
		if got := ps.MACOf(ip); got != want {
			t.Errorf("MACOf(%q) = %q, want %q", ip, got, want)
		}
	}
}
