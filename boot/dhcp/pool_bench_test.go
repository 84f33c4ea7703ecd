package dhcp

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkPoolLease: an unknown machine's DISCOVER and REQUEST from a
// pool (Offer, then Confirm, which writes the lease file), 1,000
// machines in turn in a pool of 4,096 addresses. Written to run on the
// commits before the authority issue too (BENCHMARKS.md's cost of proof).
func BenchmarkPoolLease(b *testing.B) {
	clk := newClock()
	p := &Pool{Path: b.TempDir() + "/leases.json", Now: clk.now}
	r := Range{First: netip.MustParseAddr("198.18.16.0"), Last: netip.MustParseAddr("198.18.31.255")}
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
