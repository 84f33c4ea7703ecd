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
	for src, want := range map[string]string{"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64", "fe80::1%eth0": "fe80::/64", "198.18.0.1": "", "::ffff:198.18.0.1": "", "relay 2001:db8::1": "", "link": ""} {
		if got, _ := Prefix64(src); got != want {
			t.Errorf("Prefix64(%q) = %q, want %q", src, got, want)
		}
	}
}
