package compiler

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

// The schema's #IPv6 pattern must accept exactly the addresses netip
// parses, written without a zone or a dotted IPv4 part: the Go checks of
// network.ipv6 then never meet text they cannot read.
func TestIPv6PatternAgreesWithNetip(t *testing.T) {
	c := newCompiler(t)
	r := c.vd.defs["IPv6"]
	if r == nil || r.pattern == nil {
		t.Fatal("the schema has no #IPv6 pattern")
	}
	rng := rand.New(rand.NewPCG(6, 6))
	var in []string
	for range 5000 {
		var b [16]byte
		for i := range b {
			// Mostly zeros, so that '::' runs of every length appear.
			if rng.IntN(3) == 0 {
				b[i] = byte(rng.IntN(256))
			}
		}
		a := netip.AddrFrom16(b)
		if a.Is4In6() {
			continue // netip writes these with a dotted part
		}
		in = append(in, a.String(), strings.ToUpper(a.StringExpanded()), a.StringExpanded())
	}
	for _, s := range in {
		if !r.pattern.MatchString(s) {
			t.Errorf("the pattern refuses %q, which netip reads", s)
		}
	}
	for _, s := range []string{
		"", ":", ":::", "1:2:3:4:5:6:7", "1:2:3:4:5:6:7:8:9", "1::2::3", "12345::1",
		"2001:db8:::1", "g::1", "::ffff:198.18.0.1", "fe80::1%eth0", "198.18.0.1",
		"[2001:db8::1]", "2001:db8::1/64", " 2001:db8::1", "1:2:3:4:5:6:7:8::", "::1:2:3:4:5:6:7:8",
	} {
		if r.pattern.MatchString(s) {
			t.Errorf("the pattern accepts %q", s)
		}
	}
	for _, s := range []string{"::", "::1", "1::", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "1:2:3:4:5:6::8"} {
		if _, err := netip.ParseAddr(s); err != nil || !r.pattern.MatchString(s) {
			t.Errorf("%q: netip says %v, the pattern %v", s, err, r.pattern.MatchString(s))
		}
	}
	p := c.vd.defs["IPv6Prefix"]
	for s, want := range map[string]bool{"2001:db8::/64": true, "::/0": true, "2001:db8::/128": true, "2001:db8::/129": false, "2001:db8::/064": false, "2001:db8::": false} {
		if p.pattern.MatchString(s) != want {
			t.Errorf("#IPv6Prefix on %q: want %v", s, want)
		}
	}
}

var ipv6Field = regexp.MustCompile(`(?m)^\s*ipv6:`)

// The IPv6 examples of docs/repository.md validate: every YAML block there
// with an ipv6 field, compiled together over the golden cases' base.
func TestRepositoryDocIPv6Examples(t *testing.T) {
	page, err := os.ReadFile("../docs/repository.md")
	if err != nil {
		t.Fatal(err)
	}
	base := readTxtar(t, "testdata/_base.txtar")
	fsys := fstest.MapFS{}
	for _, f := range base.files {
		fsys[f.Path] = &fstest.MapFile{Data: f.Data}
		if f.Path == "profiles/base.yaml" { // the docs' sites name microvisor
			fsys["profiles/microvisor.yaml"] = &fstest.MapFile{Data: []byte(strings.Replace(string(f.Data), "name: base", "name: microvisor", 1))}
		}
	}
	n := 0
	for _, blk := range strings.Split(string(page), "```yaml\n")[1:] {
		blk, _, _ = strings.Cut(blk, "```")
		if !ipv6Field.MatchString(blk) {
			continue
		}
		n++
		fsys[fmt.Sprintf("docs/%d.yaml", n)] = &fstest.MapFile{Data: []byte(blk)}
	}
	if n != 3 {
		t.Fatalf("found %d YAML blocks with ipv6 in docs/repository.md, want 3 (an IPv6-only site, a dual-stack one, a node)", n)
	}
	p, err := newCompiler(t).Compile(fsys)
	if err != nil {
		t.Fatalf("the docs' IPv6 examples do not validate:\n%v", err)
	}
	only, dual := p.Site("lab6"), p.Site("hall2")
	if only == nil || dual == nil || only.Network.ServerAddress != "" || only.Network.IPv6 == nil || dual.Network.ServerAddress == "" || dual.Network.IPv6 == nil {
		t.Fatalf("the docs' sites are not IPv6-only and dual-stack: %+v %+v", only, dual)
	}
	if r, ok := p.ReservationV6("hall2", "52:54:00:00:02:07"); !ok || r.IPv6 != "fd00:b007:2::27" || r.IP != "198.18.0.27" {
		t.Errorf("hall2-07's reservation: %+v %v", r, ok)
	}
}
