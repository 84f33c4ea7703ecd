package lease

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var journalRange = Range{First: netip.MustParseAddr("198.18.0.10"), Last: netip.MustParseAddr("198.18.0.250")}

// leaseOne gives mac an address of journalRange the way a client does:
// DISCOVER, REQUEST.
func leaseOne(t *testing.T, p *Store, mac string, d time.Duration) netip.Addr {
	t.Helper()
	return leaseIn(t, p, journalRange, mac, d)
}

// leaseIn gives key an address of r: Offer, then Confirm.
func leaseIn(t *testing.T, s *Store, r Range, key string, d time.Duration) netip.Addr {
	t.Helper()
	a, err := s.Offer(key, r)
	if err == nil {
		a, err = s.Confirm(key, a, r, d)
	}
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return a
}

func fileLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// Renewals append a line each; the file is compacted when its lines
// outgrow the leases, so 5,000 renewals of 10 leases leave a small file, and
// a restart reads every lease's last expiry.
func TestJournalCompacts(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "leases.json")
	p := &Store{Path: path, Now: clk.now}
	addrs := map[string]netip.Addr{}
	for i := range 10 {
		mac := fmt.Sprintf("52:54:00:00:00:%02x", i)
		addrs[mac] = leaseOne(t, p, mac, time.Hour)
	}
	most := 0
	for i := range 5000 {
		clk.add(time.Second)
		mac := fmt.Sprintf("52:54:00:00:00:%02x", i%10)
		if _, err := p.Confirm(mac, netip.Addr{}, journalRange, time.Hour); err != nil {
			t.Fatal(err)
		}
		most = max(most, fileLines(t, path))
	}
	if limit := 2*10 + 1024 + 2; most > limit {
		t.Errorf("the journal grew to %d lines for 10 leases, want at most %d", most, limit)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 {
		t.Fatalf("%d leases after a restart, want 10", len(got))
	}
	for mac, a := range addrs {
		if got[mac].IP != a || !got[mac].Expires.After(clk.now().Add(59*time.Minute-10*time.Second)) {
			t.Errorf("%s: %+v, want %v renewed lately", mac, got[mac], a)
		}
	}
}

// A compaction prunes leases expired longer than Retain ago, and keeps the
// ones expired since (their machines get their addresses back).
func TestJournalPrunes(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "leases.json")
	p := &Store{Path: path, Now: clk.now, Retain: 24 * time.Hour}
	leaseOne(t, p, "52:54:00:00:00:01", time.Hour) // expires long ago by the end
	clk.add(30 * time.Hour)
	leaseOne(t, p, "52:54:00:00:00:02", time.Hour) // expired an hour ago by the end
	clk.add(2 * time.Hour)
	for range 1100 { // enough lines to compact
		leaseOne(t, p, "52:54:00:00:00:03", time.Hour)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["52:54:00:00:00:01"]; ok {
		t.Errorf("a lease expired 31 h ago is still in the file (Retain 24 h)")
	}
	if _, ok := got["52:54:00:00:00:02"]; !ok {
		t.Errorf("a lease expired an hour ago was pruned: %v", got)
	}
	if n := p.Leases(); n != 2 {
		t.Errorf("%d leases kept in memory, want 2", n)
	}
}

// The lease file of the days before the journal loads, and the first lease
// rewrites it as a journal holding its leases and the new one.
func TestJournalFromObjectFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.json")
	old := `{"52:54:00:aa:00:01": {"ip": "198.18.0.10", "expires": "2030-01-02T03:04:05Z"}}`
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	p := &Store{Path: path, Now: clk.now}
	leaseOne(t, p, "52:54:00:aa:00:02", time.Hour)
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), journalHeader+"\n") {
		t.Fatalf("not rewritten as a journal:\n%s", b)
	}
	got, err := Read(path)
	if err != nil || len(got) != 2 || got["52:54:00:aa:00:01"].IP != netip.MustParseAddr("198.18.0.10") {
		t.Fatalf("%v %v\n%s", got, err, b)
	}
}

// A last line cut short by a crash is ignored (its lease was never
// acknowledged); a bad line before it is an error naming the file and line.
func TestJournalDamage(t *testing.T) {
	dir := t.TempDir()
	good := `{"key":"52:54:00:aa:00:01","ip":"198.18.0.10","expires":"2030-01-02T03:04:05Z"}`
	torn := filepath.Join(dir, "torn.json")
	if err := os.WriteFile(torn, []byte(journalHeader+"\n"+good+"\n"+`{"key":"52:54:00:aa:00:02","ip":"198.`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Read(torn)
	if err != nil || len(got) != 1 {
		t.Errorf("torn last line: %v %v", got, err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(journalHeader+"\n"+`{"key":"x","ip":"nope"}`+"\n"+good+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(bad); err == nil || !strings.Contains(err.Error(), bad+":2") {
		t.Errorf("bad line 2: %v, want an error naming %s:2", err, bad)
	}
}

// The pool's lock is not held while the journal is written: an Offer goes
// through while a Confirm's write is stuck.
func TestJournalWritesOutsideTheLock(t *testing.T) {
	p := &Store{Path: filepath.Join(t.TempDir(), "leases.json")}
	a := leaseOne(t, p, "52:54:00:00:00:01", time.Hour)
	stuck, release := make(chan struct{}), make(chan struct{})
	p.journal.wmu.Lock()
	p.journal.pauseFor = func() { close(stuck); <-release }
	p.journal.wmu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := p.Confirm("52:54:00:00:00:01", a, journalRange, time.Hour)
		done <- err
	}()
	<-stuck
	offered := make(chan error, 1)
	go func() {
		_, err := p.Offer("52:54:00:00:00:02", journalRange)
		offered <- err
	}()
	select {
	case err := <-offered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("an Offer waited for another machine's journal write")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A lease the journal could not write is not acknowledged, and not lost:
// the client's retry writes it.
func TestJournalWriteFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	p := &Store{Path: filepath.Join(dir, "leases.json")}
	a, err := p.Offer("52:54:00:00:00:01", journalRange)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Confirm("52:54:00:00:00:01", a, journalRange, time.Hour); err == nil || !strings.Contains(err.Error(), "leases.json") {
		t.Fatalf("a lease whose write failed: %v, want an error naming the file", err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Confirm("52:54:00:00:00:01", a, journalRange, time.Hour); err != nil || got != a {
		t.Fatalf("the retry: %v %v", got, err)
	}
	recs, err := Read(p.Path)
	if err != nil || recs["52:54:00:00:00:01"].IP != a {
		t.Fatalf("after the retry the file holds %v (%v)", recs, err)
	}
}
