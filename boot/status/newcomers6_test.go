package status

import (
	"fmt"
	"testing"
	"time"
)

// An IPv6 source owns its /64: new addresses in it spend the /64's
// budget (LinkShare times an address's), which they cannot escape by
// changing address; another /64, and IPv4 addresses, have their own.
func TestNewcomersKeyIPv6ByTheSlash64(t *testing.T) {
	now := time.Unix(1e9, 0)
	n := &Newcomers{Burst: 2, Every: time.Hour, Now: func() time.Time { return now }}
	allowed := 0
	for i := range 3 * LinkShare {
		if n.Allow(fmt.Sprintf("2001:db8:0:1::%x", i+1)) {
			allowed++
		}
	}
	if allowed != 2*LinkShare {
		t.Errorf("%d newcomers from %d addresses of one /64, want its budget %d", allowed, 3*LinkShare, 2*LinkShare)
	}
	if n.Allow("2001:db8:0:1:ffff::1") || n.Allow("fe80::1%eth0") && n.Allow("2001:db8:0:1::1") {
		t.Error("the /64 spent its budget, and an address of it was allowed")
	}
	if !n.Allow("2001:db8:0:2::1") || !n.Allow("198.18.0.1") || !n.Allow("198.18.0.1") || n.Allow("::ffff:198.18.0.1") {
		t.Error("another /64 or an IPv4 address (2 each, IPv4-mapped the same) did not have its own budget")
	}
	// Fair: one address spends only its own share; the rest of its /64
	// keeps what it leaves.
	n = &Newcomers{Burst: 2, Every: time.Hour, Now: func() time.Time { return now }}
	flood := 0
	for range 1000 {
		if n.Allow("2001:db8:0:3::bad") {
			flood++
		}
	}
	if flood != 2 {
		t.Errorf("one address of a /64 introduced %d newcomers, want its own 2", flood)
	}
	for i := range LinkShare - 1 {
		if src := fmt.Sprintf("2001:db8:0:3::%x", i+1); !n.Allow(src) {
			t.Fatalf("%s was refused after another address of its /64 flooded", src)
		}
	}
}
