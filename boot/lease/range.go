package lease

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"net/netip"
)

// Range is a site's pool: its first and last address, and which of them
// must not be handed out (the server's, reserved ones). Both ends are of
// one family; the family decides the order Offer walks it in (walk).
type Range struct {
	First, Last netip.Addr
	Taken       func(netip.Addr) bool
}

// Has says a is one of r's addresses and not taken.
func (r Range) Has(a netip.Addr) bool {
	return a.IsValid() && !a.Less(r.First) && !r.Last.Less(a) && (r.Taken == nil || !r.Taken(a))
}

// probes is how many addresses from a key's hash Offer tries in an IPv6
// range too large to walk whole; IPv6 ranges up to scanAll addresses are
// walked whole.
const (
	probes  = 256
	scanAll = 1 << 16
)

// walk is the order Offer looks for a free address in: from offset start,
// n addresses, wrapping at size (0: an empty or mixed-family range).
//
// The family decides. An IPv4 range holds a few thousand addresses and
// operators read leases by address: it is walked whole from its first
// address, so a machine gets the lowest free one. An IPv6 range may hold
// 2^64: it is walked from the key's hash, a bounded run of probes when it is
// large, so an offer costs the same with 10 or 100,000 machines and a
// machine tends to get the same address from an empty pool.
func (r Range) walk(key string) (start, n, size uint64) {
	size = r.size()
	if size == 0 || r.First.Is4() {
		return 0, size, size
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	n = probes
	if size <= scanAll || size < n {
		n = size
	}
	return h.Sum64() % size, n, size
}

// size is how many addresses r has (capped at MaxUint64); 0 for an empty
// or mixed-family range.
func (r Range) size() uint64 {
	if !r.First.IsValid() || !r.Last.IsValid() || r.First.Is4() != r.Last.Is4() || r.Last.Less(r.First) {
		return 0
	}
	f, l := r.First.As16(), r.Last.As16()
	fh, fl := binary.BigEndian.Uint64(f[:8]), binary.BigEndian.Uint64(f[8:])
	lh, ll := binary.BigEndian.Uint64(l[:8]), binary.BigEndian.Uint64(l[8:])
	if lh != fh || ll-fl == math.MaxUint64 {
		return math.MaxUint64
	}
	return ll - fl + 1
}

// addOffset is a + n, carrying into the upper half.
func addOffset(a netip.Addr, n uint64) netip.Addr {
	b := a.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	lo2 := lo + n
	if lo2 < lo {
		hi++
	}
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo2)
	out := netip.AddrFrom16(b)
	if a.Is4() {
		return out.Unmap()
	}
	return out
}
