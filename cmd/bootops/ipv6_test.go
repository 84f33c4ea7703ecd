package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ipv6Warehouse is the warehouse example with IPv6 beside its IPv4 (or
// instead of it, v4 false), in DHCPv6 reservation mode, and rack1-03
// reserved 2001:db8:1::13.
func ipv6Warehouse(t *testing.T, v4 bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fleet")
	if err := os.CopyFS(dir, os.DirFS("../../examples/warehouse")); err != nil {
		t.Fatal(err)
	}
	v6 := "  ipv6: {serverAddress: \"2001:db8:1::1\", prefix: \"2001:db8:1::/64\", dhcp: reservation, pool: {start: \"2001:db8:1::1000\", end: \"2001:db8:1::1fff\"}}\n"
	if v4 {
		edit(t, dir, "sites/warehouse/site.yaml", "  dhcp: proxy\n", "  dhcp: proxy\n"+v6)
	} else {
		edit(t, dir, "sites/warehouse/site.yaml", "  serverAddress: 198.18.0.1\n  dhcp: proxy\n", v6)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "sites/warehouse/nodes/rack1-03.yaml"))
	write(t, dir, "sites/warehouse/nodes/rack1-03.yaml", string(b)+"ipv6: 2001:db8:1::13\n")
	return dir
}

// explain says which address a machine gets in each family, and where
// the boot server is in it.
func TestExplainIPv6(t *testing.T) {
	for _, c := range []struct {
		v4   bool
		args []string
		want []string
		not  string
	}{
		{true, []string{"--mac", "52:54:00:00:01:03"}, []string{
			"match: node rack1-03 (site warehouse)",
			"  ipv4: an address from the site's DHCP server (DHCP proxy: bootops adds the boot options); boot server http://198.18.0.1:8080\n",
			"  ipv6: 2001:db8:1::13 (DHCPv6 reservation); boot server http://[2001:db8:1::1]:8080\n",
		}, ""},
		{true, []string{"--serial", "NEW-MACHINE"}, []string{
			"unknown: installs site warehouse's default profile microvisor\n",
			"  ipv6: an address from the pool 2001:db8:1::1000-2001:db8:1::1fff (DHCPv6 reservation mode); boot server http://[2001:db8:1::1]:8080\n",
		}, ""},
		{false, []string{"--mac", "52:54:00:00:01:03"}, []string{
			"  ipv6: 2001:db8:1::13 (DHCPv6 reservation); boot server http://[2001:db8:1::1]:8080\n",
		}, "ipv4"},
	} {
		code, out, stderr := bootops(t, nil, append([]string{"explain", ipv6Warehouse(t, c.v4)}, c.args...)...)
		for _, w := range c.want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("explain %v (ipv4 %v): exit %d, stderr %q, output:\n%s\nwant it to contain %q", c.args, c.v4, code, stderr, out, w)
			}
		}
		if c.not != "" && strings.Contains(out, c.not) {
			t.Errorf("explain %v on an IPv6-only site mentions %s:\n%s", c.args, c.not, out)
		}
	}
}

// An IPv6-only site's scripts reach the boot server at its IPv6 address,
// in brackets.
func TestRenderIPv6Only(t *testing.T) {
	code, out, stderr := bootops(t, nil, "render", ipv6Warehouse(t, false), "--node", "rack1-03")
	want := "kernel http://[2001:db8:1::1]:8080/artifacts/microos/default/kernel "
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "bootops.server=http://[2001:db8:1::1]:8080 ") {
		t.Errorf("render: exit %d, stderr %q, output:\n%s\nwant it to contain %q", code, stderr, out, want)
	}
}
