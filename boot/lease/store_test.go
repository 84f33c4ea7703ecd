package lease

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// clock is a settable time.
type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock               { return &clock{time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func testPool(t *testing.T) (*Store, *clock) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return &Store{Path: filepath.Join(t.TempDir(), "leases6.json"), Now: c.now}, c
}

func rng(first, last string, taken ...string) Range {
	r := Range{First: netip.MustParseAddr(first), Last: netip.MustParseAddr(last)}
	r.Taken = func(a netip.Addr) bool {
		for _, x := range taken {
			if a == netip.MustParseAddr(x) {
				return true
			}
		}
		return false
	}
	return r
}

func TestPoolDistinctAndStable(t *testing.T) {
	p, _ := testPool(t)
	r := rng("2001:db8::1:0", "2001:db8::1:ffff")
	seen := map[netip.Addr]string{}
	for i := range 2000 {
		key := fmt.Sprintf("52:54:00:00:%02x:%02x", i>>8, i&0xff)
		a, err := p.Offer(key, r)
		if err != nil {
			t.Fatal(err)
		}
		if k, dup := seen[a]; dup {
			t.Fatalf("%v offered to %s and %s", a, k, key)
		}
		seen[a] = key
		if again, _ := p.Offer(key, r); again != a {
			t.Fatalf("%s: offered %v, then %v", key, a, again)
		}
	}
}

func TestPoolExhaustionStealAndReclaim(t *testing.T) {
	p, c := testPool(t)
	r := rng("2001:db8::10", "2001:db8::13", "2001:db8::11") // three free
	lease := func(key string) (netip.Addr, error) {
		a, err := p.Offer(key, r)
		if err != nil {
			return a, err
		}
		return p.Confirm(key, a, r, time.Hour)
	}
	got := map[netip.Addr]bool{}
	for _, k := range []string{"a", "b", "c"} {
		a, err := lease(k)
		if err != nil || a == netip.MustParseAddr("2001:db8::11") || got[a] {
			t.Fatalf("%s: %v %v (have %v)", k, a, err, got)
		}
		got[a] = true
	}
	if _, err := p.Offer("d", r); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("fourth machine: %v, want ErrPoolFull", err)
	}
	// An address asked for by name is refused while leased.
	for a := range got {
		if _, err := p.Confirm("d", a, r, time.Hour); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Confirm of a's address for d: %v", err)
		}
		break
	}
	// b releases: d gets b's address; b coming back finds the pool full.
	bAddr := netip.Addr{}
	for a := range got {
		if p.MACOf(a.String()) == "b" {
			bAddr = a
		}
	}
	if err := p.Release("b", bAddr); err != nil {
		t.Fatal(err)
	}
	if err := p.Release("b", netip.MustParseAddr("2001:db8::99")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("release of an address not b's: %v", err)
	}
	if a, err := lease("d"); err != nil || a != bAddr {
		t.Fatalf("d after b's release: %v %v, want %v", a, err, bAddr)
	}
	// Offers: with the pool full of leases that expired, a newcomer takes
	// the one that expired first; a pending offer is taken over only when
	// nothing else is left.
	c.t = c.t.Add(2 * time.Hour)
	e, err := p.Offer("e", r)
	if err != nil || e == netip.MustParseAddr("2001:db8::11") {
		t.Fatalf("e: %v %v", e, err)
	}
	c.t = c.t.Add(time.Second)
	f, err := p.Offer("f", r)
	if err != nil || f == e {
		t.Fatalf("f: %v %v (e has %v)", f, err, e)
	}
	c.t = c.t.Add(time.Second)
	g, _ := p.Offer("g", r)
	c.t = c.t.Add(time.Second)
	h, err := p.Offer("h", r)
	if err != nil || h != e {
		t.Fatalf("h: %v %v: want e's offer %v, the oldest", h, err, e)
	}
	if g == e || g == f {
		t.Fatalf("g took a pending offer %v while an expired lease was free", g)
	}
}

func TestPoolRestart(t *testing.T) {
	p, c := testPool(t)
	r := rng("2001:db8::100", "2001:db8::1ff")
	a, _ := p.Offer("52:54:00:00:00:01", r)
	if _, err := p.Confirm("52:54:00:00:00:01", a, r, time.Hour); err != nil {
		t.Fatal(err)
	}
	o, _ := p.Offer("52:54:00:00:00:02", r) // offers are not kept
	p2 := &Store{Path: p.Path, Now: c.now}
	if got := p2.MACOf(a.String()); got != "52:54:00:00:00:01" {
		t.Fatalf("after restart %v is leased to %q", a, got)
	}
	if got, _ := p2.Offer("52:54:00:00:00:01", r); got != a {
		t.Fatalf("after restart: %v, want %v", got, a)
	}
	if _, err := p2.Confirm("52:54:00:00:00:03", a, r, time.Hour); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after restart another machine leased %v: %v", a, err)
	}
	if got := p2.MACOf(o.String()); got != "" {
		t.Fatalf("an offer was written down: %v → %q", o, got)
	}
	// Past the lease the address is nobody's for MACOf, still the
	// machine's for Offer.
	c.t = c.t.Add(2 * time.Hour)
	if got := p2.MACOf(a.String()); got != "" {
		t.Fatalf("expired lease still names %q", got)
	}
	if got, _ := p2.Offer("52:54:00:00:00:01", r); got != a {
		t.Fatalf("expired lease: %v, want %v again", got, a)
	}
}

func TestPoolBadFile(t *testing.T) {
	dir := t.TempDir()
	r := rng("2001:db8::100", "2001:db8::1ff")
	for name, body := range map[string]string{
		"not json": "{",
		"bad ip":   `{"a": {"ip": "nope", "expires": "2026-01-01T00:00:00Z"}}`,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := (&Store{Path: path}).Offer("x", r)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming %s", name, err, path)
		}
	}
}

// A file where two keys lease one address (no store of today writes one;
// the DHCPv4 pool of before the one store read such files) loads: the
// lease that ends last keeps the address, the smaller key on a tie, and
// the other key is forgotten, so no address is ever leased twice.
func TestDuplicateLeaseLoads(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		body, winner string
	}{
		"later wins": {`{"a": {"ip": "2001:db8::100", "expires": "2030-01-02T05:00:00Z"}, "b": {"ip": "2001:db8::100", "expires": "2030-01-02T04:00:00Z"}}`, "a"},
		"tie":        {`{"b": {"ip": "198.18.0.10", "expires": "2030-01-02T05:00:00Z"}, "a": {"ip": "198.18.0.10", "expires": "2030-01-02T05:00:00Z"}}`, "a"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		if err := os.WriteFile(path, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		clk := newClock()
		s := &Store{Path: path, Now: clk.now}
		recs, _ := Read(path)
		ip := recs[c.winner].IP
		if got := s.MACOf(ip.String()); got != c.winner {
			t.Errorf("%s: %v is leased to %q, want %q", name, ip, got, c.winner)
		}
		if n := s.Leases(); n != 1 {
			t.Errorf("%s: %d leases kept, want 1", name, n)
		}
	}
}

func TestRangeArithmetic(t *testing.T) {
	for _, c := range []struct {
		first, last string
		size        uint64
	}{
		{"2001:db8::1", "2001:db8::1", 1},
		{"2001:db8::", "2001:db8::ffff", 65536},
		{"2001:db8::", "2001:db8::ffff:ffff:ffff:ffff", math.MaxUint64},
		{"2001:db8::", "2001:db8:0:1::", math.MaxUint64},
		{"2001:db8::2", "2001:db8::1", 0},
		{"198.18.0.10", "198.18.0.19", 10},
		{"198.18.0.10", "2001:db8::1", 0},
	} {
		if got := rng(c.first, c.last).size(); got != c.size {
			t.Errorf("%s-%s: size %d, want %d", c.first, c.last, got, c.size)
		}
	}
	if got := addOffset(netip.MustParseAddr("2001:db8::ffff:ffff:ffff:ffff"), 2); got != netip.MustParseAddr("2001:db8:0:1::1") {
		t.Errorf("carry: %v", got)
	}
	if got := addOffset(netip.MustParseAddr("198.18.0.250"), 10); got != netip.MustParseAddr("198.18.1.4") {
		t.Errorf("IPv4: %v", got)
	}
}

// A Request is leased only what its client was offered (after its own
// Solicit) or leased: made-up DUIDs naming pool addresses get nothing,
// 4,096 of them leave the pool as it was, and a client's lease renews
// after a restart.
func TestPoolLeasesOnlyWhatItOffered(t *testing.T) {
	p, _ := testPool(t)
	r := rng("2001:db8::1:0", "2001:db8::1:fff")
	for i := range 4096 {
		want := addOffset(r.First, uint64(i))
		if _, err := p.Confirm(fmt.Sprintf("duid:made-up-%d", i), want, r, time.Hour); !errors.Is(err, ErrNotOffered) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("a Request of %v without a Solicit: %v", want, err)
		}
	}
	if len(p.leases) != 0 {
		t.Fatalf("%d leases after Requests without Solicits", len(p.leases))
	}
	a, err := p.Offer("duid:real", r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Confirm("duid:other", a, r, time.Hour); !errors.Is(err, ErrNotOffered) {
		t.Errorf("another client's Request of the offered address: %v", err)
	}
	if got, err := p.Confirm("duid:real", a, r, time.Hour); err != nil || got != a {
		t.Fatalf("the offered client's Request: %v %v", got, err)
	}
	again := &Store{Path: p.Path, Now: p.Now}
	if got, err := again.Confirm("duid:real", a, r, time.Hour); err != nil || got != a {
		t.Errorf("a Renew after a restart: %v %v", got, err)
	}
}

// An IPv4 range is walked from its first address: machines get the lowest
// free address, then the lease that expired first, then the oldest offer
// (the order the DHCPv4 pool of before the one store gave, kept).
func TestIPv4LowestFirst(t *testing.T) {
	clk := newClock()
	s := &Store{Path: filepath.Join(t.TempDir(), "leases.json"), Now: clk.now}
	r := rng("198.18.0.10", "198.18.0.13", "198.18.0.11")
	lease := func(key string, d time.Duration) netip.Addr { return leaseIn(t, s, r, key, d) }
	// Keys whose hashes start elsewhere: an IPv6-style walk fails this.
	got := []netip.Addr{lease("52:54:00:aa:00:02", 2*time.Hour), lease("52:54:00:aa:00:04", time.Hour), lease("52:54:00:aa:00:03", 3*time.Hour)}
	want := []netip.Addr{netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.12"), netip.MustParseAddr("198.18.0.13")}
	if !slices.Equal(got, want) {
		t.Fatalf("leased %v, want %v (lowest first, .11 taken)", got, want)
	}
	clk.add(4 * time.Hour) // all expired: .12 first, then .10, then .13
	for _, step := range []struct{ key, want string }{{"d", "198.18.0.12"}, {"e", "198.18.0.10"}, {"f", "198.18.0.13"}} {
		clk.add(time.Second)
		if a, err := s.Offer(step.key, r); err != nil || a != netip.MustParseAddr(step.want) {
			t.Errorf("%s: %v %v, want %s", step.key, a, err, step.want)
		}
	}
	clk.add(time.Second)
	if a, err := s.Offer("g", r); err != nil || a != netip.MustParseAddr("198.18.0.12") {
		t.Errorf("g, pool full of offers: %v %v, want d's, the oldest (198.18.0.12)", a, err)
	}
}

// An offer holds for OfferHold, whenever the sweep runs: past it a
// REQUEST naming the address is refused (the client must DISCOVER
// again) and the address is anyone's.
func TestOfferHoldIsExact(t *testing.T) {
	clk := newClock()
	s := &Store{Path: filepath.Join(t.TempDir(), "leases6.json"), Now: clk.now}
	r := rng("2001:db8::10", "2001:db8::10")
	a, err := s.Offer("a", r)
	if err != nil {
		t.Fatal(err)
	}
	clk.add(DefaultOfferHold - time.Second)
	if _, err := s.Offer("b", r); err != nil { // takes a's offer over: one address
		t.Fatal(err)
	}
	clk.add(DefaultOfferHold + time.Second) // b's offer is up; no sweep since
	if _, err := s.Confirm("b", a, r, time.Hour); !errors.Is(err, ErrNotOffered) {
		t.Errorf("a REQUEST after its offer's time: %v, want ErrNotOffered", err)
	}
	if got, err := s.Confirm("b", netip.Addr{}, r, time.Hour); !errors.Is(err, ErrNothingOffered) {
		t.Errorf("a REQUEST without an address after its offer's time: %v %v, want ErrNothingOffered", got, err)
	}
	if got, err := s.Offer("c", r); err != nil || got != a {
		t.Errorf("another client after the offer's time: %v %v, want %v", got, err, a)
	}
}

// An IPv6 lease names its key to the HTTP server like an IPv4 one,
// whichever form the address comes in, through Stores.
func TestMACOfIPv6Lease(t *testing.T) {
	s := &Store{Path: filepath.Join(t.TempDir(), "leases6.json")}
	r := Range{First: netip.MustParseAddr("2001:db8::100"), Last: netip.MustParseAddr("2001:db8::1ff")}
	a := leaseIn(t, s, r, "52:54:00:00:00:66", time.Hour)
	if !a.Is6() {
		t.Fatalf("leased %s", a)
	}
	v4 := &Store{Path: filepath.Join(t.TempDir(), "leases.json")}
	ss := &Stores{}
	ss.Add(v4)
	ss.Add(s)
	for ip, want := range map[string]string{
		a.String():                  "52:54:00:00:00:66",
		a.StringExpanded():          "52:54:00:00:00:66",
		a.WithZone("eth0").String(): "52:54:00:00:00:66",
		"2001:db8::1fe":             "",
		"198.18.0.12":               "",
		"[" + a.String() + "]":      "", // not an address
	} {
		if got := ss.MACOf(ip); got != want {
			t.Errorf("MACOf(%q) = %q, want %q", ip, got, want)
		}
	}
}

// Two servers of one pool (members of a site's cluster): every lease the
// one answering writes is the other's before the client is answered, so
// the other, taking over, never gives the address to another machine;
// a failed copy fails the lease; a release is copied too.
func TestReplicatedLeases(t *testing.T) {
	a, c := testPool(t)
	b := &Store{Path: filepath.Join(t.TempDir(), "leases6.json"), Now: c.now}
	a.Replicate = b.Apply
	r := rng("2001:db8::100", "2001:db8::1ff")
	ip, _ := a.Offer("52:54:00:00:00:01", r)
	if _, err := a.Confirm("52:54:00:00:00:01", ip, r, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := b.Leased("52:54:00:00:00:01"); got.IP != ip || !got.Expires.Equal(c.t.Add(time.Hour)) {
		t.Fatalf("the other server has %+v, want %v for an hour", got, ip)
	}
	if o, _ := b.Offer("52:54:00:00:00:02", r); o == ip {
		t.Fatalf("the other server offers %v, leased to 52:54:00:00:00:01, to another machine", ip)
	}
	if _, err := b.Confirm("52:54:00:00:00:03", ip, r, time.Hour); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the other server leased %v to another machine: %v", ip, err)
	}
	// Restarted, the other server still has it (its own journal).
	b2 := &Store{Path: b.Path, Now: c.now}
	if got := b2.MACOf(ip.String()); got != "52:54:00:00:00:01" {
		t.Fatalf("the other server, restarted: %v leased to %q", ip, got)
	}
	if err := a.Release("52:54:00:00:00:01", ip); err != nil {
		t.Fatal(err)
	}
	if got := b.Leased("52:54:00:00:00:01"); got.IP != ip || got.Expires.After(c.t) {
		t.Fatalf("after the release the other server has %+v, want it ended", got)
	}
	a.Replicate = func(string, Record) error { return errors.New("no majority") }
	ip2, _ := a.Offer("52:54:00:00:00:04", r)
	if _, err := a.Confirm("52:54:00:00:00:04", ip2, r, time.Hour); err == nil {
		t.Fatal("a lease the cluster did not take was answered")
	}
	// Another key's lease of an address, applied, takes it.
	if err := b.Apply("52:54:00:00:00:05", Record{IP: ip, Expires: c.t.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := b.MACOf(ip.String()); got != "52:54:00:00:00:05" {
		t.Fatalf("applied: %v leased to %q", ip, got)
	}
	if got := b.Leased("52:54:00:00:00:01"); got.IP.IsValid() {
		t.Fatalf("the address's former holder still has %+v", got)
	}
	if err := b.Apply("52:54:00:00:00:05", Record{}); err != nil || b.MACOf(ip.String()) != "" {
		t.Fatalf("a lease applied away: %v, %q", err, b.MACOf(ip.String()))
	}
}
