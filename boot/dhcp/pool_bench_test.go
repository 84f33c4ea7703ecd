package dhcp

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/lease"
)

// BenchmarkPoolLease: an unknown machine's DISCOVER and REQUEST from a
// pool (Offer, then Confirm, which writes the lease file), 1,000
// machines in turn in a pool of 4,096 addresses. Written to run on the
// commits before the authority issue too (BENCHMARKS.md's cost of proof).
func BenchmarkPoolLease(b *testing.B) {
	clk := newClock()
	p := &Pool{Path: b.TempDir() + "/leases.json", Now: clk.now}
	r := lease.Range{First: netip.MustParseAddr("198.18.16.0"), Last: netip.MustParseAddr("198.18.31.255")}
	i := 0
	for b.Loop() {
		mac := fmt.Sprintf("52:54:00:00:%02x:%02x", i%1000>>8, i%1000&0xff)
		i++
		a, err := p.Offer(mac, r)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Confirm(mac, a, r, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPoolRenew: a renewal (Confirm of a held lease) in a pool
// holding 4,096 leases: what a REQUEST costs the pool once it is busy.
// Written to run on the commits before the lease journal too.
func BenchmarkPoolRenew(b *testing.B) {
	clk := newClock()
	p := &Pool{Path: b.TempDir() + "/leases.json", Now: clk.now}
	r := lease.Range{First: netip.MustParseAddr("198.18.16.0"), Last: netip.MustParseAddr("198.18.31.255")}
	macs := make([]string, 4096)
	for i := range macs {
		macs[i] = fmt.Sprintf("52:54:00:00:%02x:%02x", i>>8, i&0xff)
		a, err := p.Offer(macs[i], r)
		if err == nil {
			_, err = p.Confirm(macs[i], a, r, time.Hour)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	for b.Loop() {
		if _, err := p.Confirm(macs[i%len(macs)], netip.Addr{}, r, time.Hour); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
