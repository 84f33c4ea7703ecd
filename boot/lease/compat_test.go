package lease

import (
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The lease files of a daemon of before the one store load after an
// upgrade, for each family. testdata/dhcp-722becd.json and
// dhcp6-722becd.json were written at commit 722becd by the DHCPv4 pool
// (boot/dhcp.Pool) and the DHCPv6 pool (boot/dhcp6.Pool): leases,
// renewals, a Release, expired leases reclaimed by other machines (lines
// without an address). What a store then makes of them (who holds what,
// what each machine is offered) is what those pools made of them, recorded
// from them at that commit.
func TestLeaseFilesOfBefore(t *testing.T) {
	rec := func(ip, exp string) Record {
		e, _ := time.Parse(time.RFC3339, exp)
		return Record{netip.MustParseAddr(ip), e}
	}
	type step struct{ key, offered string }
	for _, c := range []struct {
		file   string
		r      Range
		want   map[string]Record
		holder map[string]string // address → MACOf at 04:10
		offers []step            // in turn, at 04:10
	}{{
		file: "dhcp-722becd.json",
		r:    rng("198.18.0.10", "198.18.0.12"),
		want: map[string]Record{
			"52:54:00:aa:00:01": rec("198.18.0.10", "2030-01-02T04:09:05Z"),
			"52:54:00:aa:00:03": rec("198.18.0.12", "2030-01-02T04:04:05Z"),
			"52:54:00:aa:00:04": rec("198.18.0.11", "2030-01-02T04:19:05Z"),
		},
		holder: map[string]string{"198.18.0.10": "", "198.18.0.11": "52:54:00:aa:00:04", "198.18.0.12": ""},
		offers: []step{
			{"52:54:00:aa:00:01", "198.18.0.10"},
			{"52:54:00:aa:00:02", "198.18.0.12"},
			{"52:54:00:aa:00:03", "198.18.0.10"},
			{"52:54:00:aa:00:04", "198.18.0.11"},
			{"52:54:00:aa:00:09", "198.18.0.10"},
		},
	}, {
		file: "dhcp6-722becd.json",
		r:    rng("2001:db8::10", "2001:db8::12"),
		want: map[string]Record{
			"52:54:00:bb:00:01": rec("2001:db8::12", "2030-01-02T04:19:05Z"),
			"52:54:00:bb:00:04": rec("2001:db8::11", "2030-01-02T04:40:05Z"),
			"52:54:00:bb:00:05": rec("2001:db8::10", "2030-01-02T04:40:05Z"),
		},
		holder: map[string]string{"2001:db8::10": "52:54:00:bb:00:05", "2001:db8::11": "52:54:00:bb:00:04", "2001:db8::12": "52:54:00:bb:00:01"},
		offers: []step{
			{"52:54:00:bb:00:01", "2001:db8::12"},
			{"duid:0004a1b2c3d4e5f60718293a4b5c6d7e8f90", "pool exhausted"},
			{"52:54:00:bb:00:03", "pool exhausted"},
			{"52:54:00:bb:00:04", "2001:db8::11"},
			{"52:54:00:bb:00:05", "2001:db8::10"},
		},
	}} {
		t.Run(c.file, func(t *testing.T) {
			got, err := Read(filepath.Join("testdata", c.file))
			if err != nil || !maps.Equal(got, c.want) {
				t.Fatalf("Read: %v %v, want %v", got, err, c.want)
			}
			b, err := os.ReadFile(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "leases.json")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			clk := &clock{time.Date(2030, 1, 2, 4, 10, 0, 0, time.UTC)}
			s := &Store{Path: path, Now: clk.now}
			for ip, want := range c.holder {
				if got := s.MACOf(ip); got != want {
					t.Errorf("MACOf(%s) = %q, want %q", ip, got, want)
				}
			}
			for _, st := range c.offers {
				a, err := s.Offer(st.key, c.r)
				got := a.String()
				if err == ErrPoolFull {
					got = "pool exhausted"
				} else if err != nil {
					got = err.Error()
				}
				if got != st.offered {
					t.Errorf("Offer(%s) = %s, want %s", st.key, got, st.offered)
				}
			}
			// A renewal of a live lease appends to the old file.
			for key, r := range c.want {
				if !clk.now().Before(r.Expires) {
					continue
				}
				if a, err := s.Confirm(key, netip.Addr{}, c.r, time.Hour); err != nil || a != r.IP {
					t.Errorf("renewal of %s: %v %v, want %v", key, a, err, r.IP)
				}
			}
			if after, err := Read(path); err != nil || len(after) != len(c.want) {
				t.Errorf("after renewals: %v %v", after, err)
			}
		})
	}
}
