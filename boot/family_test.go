package boot

import (
	"testing"

	"github.com/bootops/bootops/plan"
)

func TestForFamily(t *testing.T) {
	dual := &plan.Site{Name: "lab", Network: plan.Network{ServerAddress: "127.0.0.1", HTTPPort: 8080, IPv6: &plan.NetworkV6{ServerAddress: "::1"}}}
	only6 := &plan.Site{Name: "v6", Network: plan.Network{HTTPPort: 8080, IPv6: &plan.NetworkV6{ServerAddress: "2001:db8::1"}}}
	only4 := &plan.Site{Name: "v4", Network: plan.Network{ServerAddress: "198.18.0.1", HTTPPort: 8080}}
	for _, c := range []struct {
		site     *plan.Site
		ip, want string
	}{
		{dual, "127.0.0.1", "http://127.0.0.1:8080"},
		{dual, "::ffff:127.0.0.1", "http://127.0.0.1:8080"}, // IPv4 on a dual-stack socket
		{dual, "::1", "http://[::1]:8080"},
		{dual, "fe80::1%eth0", "http://[::1]:8080"},
		{dual, "", "http://127.0.0.1:8080"},
		{only6, "2001:db8::5", "http://[2001:db8::1]:8080"},
		{only4, "2001:db8::5", "http://198.18.0.1:8080"}, // no IPv6 to name: as rendered
	} {
		if got := BaseURL(c.site, c.ip); got != c.want {
			t.Errorf("site %s, machine %q: %s, want %s", c.site.Name, c.ip, got, c.want)
		}
	}
}

// Machine keys: IPv6 addresses in canonical form only; nothing that is
// not a key the script server hands out.
func TestValidMachineKey(t *testing.T) {
	for k, want := range map[string]bool{
		"ip:::1": true, "ip:2001:db8::5": true, "ip:2001:DB8::5": false, "ip:198.18.0.1": true,
		"mac:52:54:00:00:00:01": true, "mac:52-54-00-00-00-01": false, "serial:SN1": true, "serial:to-be-filled-by-o.e.m.": false,
		"uuid:01020304-0506-0708-090a-0b0c0d0e0f10": true, "node:a": false, "mac:52:54:00:00:00:01\nserial:x": false, "": false,
	} {
		if got := ValidMachineKey(k); got != want {
			t.Errorf("ValidMachineKey(%q) = %v, want %v", k, got, want)
		}
	}
}
