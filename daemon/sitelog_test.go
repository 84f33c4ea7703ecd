package daemon

import (
	"encoding/json"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/lease"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/sitecluster"
)

// What another member copied to the site's log lands in this member's
// store and pools, and the place applied is kept; an agent's event
// applied twice (a crash before the place was kept) is stored once; an
// entry that is no JSON is passed over, not stopping the rest.
func TestSiteLogApplies(t *testing.T) {
	dir := t.TempDir()
	store, err := status.Open(filepath.Join(dir, "status.db"), status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	pools := &leasePools{dir: dir, macs: &lease.Stores{}}
	l := newSiteLog(nil, store, pools, dir, slog.New(slog.DiscardHandler))
	exp := time.Now().Add(time.Hour).UTC().Round(time.Second)
	evs, _ := json.Marshal([]status.Event{
		{Kind: status.KindScript, Site: "lab", Node: "n1", Message: "served the Micro-OS script"},
		{Kind: status.KindAgent, Site: "lab", Node: "n1", Seq: 4, State: status.StateProvisioned, Generation: 2, Message: "provisioned"},
	})
	ls, _ := json.Marshal(leaseEntry{Pool: "leases-lab.json", Key: "52:54:00:00:00:01", IP: "198.18.0.50", Expires: &exp})
	// A lease naming a file that is no pool (the status store, a path out
	// of the state folder) is passed over: no such file is written.
	evil, _ := json.Marshal(leaseEntry{Pool: "status.db", Key: "52:54:00:00:00:02", IP: "198.18.0.51", Expires: &exp})
	out, _ := json.Marshal(leaseEntry{Pool: "../leases-lab.json", Key: "52:54:00:00:00:03", IP: "198.18.0.52", Expires: &exp})
	entries := []sitecluster.Entry{
		{Seq: 5, Kind: sitecluster.LogLeases, Member: "m2", Data: evil},
		{Seq: 6, Kind: sitecluster.LogLeases, Member: "m2", Data: out},
		{Seq: 7, Kind: sitecluster.LogEvents, Member: "m2", Data: evs},
		{Seq: 8, Kind: sitecluster.LogEvents, Member: "m2", Data: []byte("{not json")},
		{Seq: 9, Kind: sitecluster.LogLeases, Member: "m2", Data: ls},
	}
	for range 2 {
		if err := l.apply(entries, 9); err != nil {
			t.Fatal(err)
		}
	}
	if gen, ok := store.Provisioned("lab", "n1"); !ok || gen != 2 {
		t.Errorf("n1 provisioned: %d %v, want generation 2", gen, ok)
	}
	var agent int
	for _, e := range store.Events("lab/n1") {
		if e.Seq == 4 {
			agent++
		}
	}
	if agent != 1 {
		t.Errorf("the agent's event stored %d times, want once", agent)
	}
	if got := pools.get("leases-lab.json").Leased("52:54:00:00:00:01"); got.IP != netip.MustParseAddr("198.18.0.50") || !got.Expires.Equal(exp) {
		t.Errorf("the lease applied: %+v", got)
	}
	if got := pools.macs.MACOf("198.18.0.50"); got != "52:54:00:00:00:01" {
		t.Errorf("MACOf the applied lease: %q", got)
	}
	if got := pools.macs.MACOf("198.18.0.51") + pools.macs.MACOf("198.18.0.52"); got != "" {
		t.Errorf("a lease for no pool file was applied: %q", got)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "leases-lab.json")); err == nil {
		t.Error("a lease wrote a pool file out of the state folder")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cluster-log.applied")); strings.TrimSpace(string(b)) != "9" {
		t.Errorf("the place kept: %q, want 9", b)
	}
}
