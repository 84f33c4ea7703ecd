package dhcp6

import (
	"fmt"
	"testing"

	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/plan"
)

// BenchmarkSolicit is the cost of answering a UEFI PXE client's Solicit
// in reservation mode, 1,000 clients taking turns (each offered an
// address of the pool), from the packet's bytes to the reply's.
func BenchmarkSolicit(b *testing.B) {
	p := testPlan(plan.PolicyProvision)
	site := p.Site("lab")
	cfg := testConfig(b, plan.DHCPReservation)
	cfg.PoolLast = cfg.PoolFirst.Next()
	for range 2000 {
		cfg.PoolLast = cfg.PoolLast.Next()
	}
	pkts := make([][]byte, 1000)
	for i := range pkts {
		pkts[i] = solicit(b, fmt.Sprintf("52:54:01:00:%02x:%02x", i>>8, i&0xff), pxe(iana.EFI_X86_64)...).ToBytes()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		a := Handle(p, site, cfg, pkts[i%len(pkts)], opaquePeer)
		if a.Reply == nil {
			b.Fatal(a.Why)
		}
		_ = a.Reply.ToBytes()
	}
}
