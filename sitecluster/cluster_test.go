package sitecluster

import (
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/trust"
)

// peerTLS is member name's cluster TLS, of a site CA in dir (made at the
// first call); route is the URI kind: a hub's route certificate instead.
func peerTLS(t *testing.T, dir, name string, route bool) *tls.Config {
	t.Helper()
	caDir := filepath.Join(dir, "site-ca")
	if _, err := os.Stat(filepath.Join(caDir, trust.CAFile)); err != nil {
		if err := trust.InitCA(caDir, trust.CAOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
			t.Fatal(err)
		}
	}
	issue, load := trust.IssuePeer, trust.PeerTLS
	if route {
		issue, load = trust.IssueRoute, trust.RouteTLS
	}
	cert, key, err := issue(caDir, name, []string{"127.0.0.1"}, 1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := filepath.Join(caDir, name+".pem"), filepath.Join(caDir, name+"-key.pem")
	os.WriteFile(cf, cert, 0o644)
	os.WriteFile(kf, key, 0o600)
	c, err := load(cf, kf, filepath.Join(caDir, trust.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cluster starts n members on loopback, at once (each waits for the
// majority), and returns them with their configurations.
func cluster(t *testing.T, n int) ([]*Member, []Config) {
	t.Helper()
	dir := t.TempDir()
	addrs := testutil.FreePorts(t, n)
	cfgs := make([]Config, n)
	for i := range cfgs {
		name := string(rune('a' + i))
		var peers []string
		for j, a := range addrs {
			if j != i {
				peers = append(peers, a)
			}
		}
		cfgs[i] = Config{Name: name, Listen: addrs[i], Peers: peers, TLS: peerTLS(t, dir, name, false), StoreDir: filepath.Join(dir, name), Ready: 90 * time.Second}
	}
	ms := make([]*Member, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() { ms[i], errs[i] = Start(context.Background(), cfgs[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %s: %v", cfgs[i].Name, err)
		}
	}
	t.Cleanup(func() {
		for _, m := range ms {
			if m != nil {
				m.Close()
			}
		}
	})
	return ms, cfgs
}

// Three members: a boot token is spent once, whichever members the
// machine reaches, even when they race; a session written on one is read
// on the others; the credential secret is one; with one member down the
// two others go on; with two down the last refuses to spend a token (no
// majority) instead of answering alone, and takes writes again once one
// comes back, which catches up with what it missed.
func TestThreeMembers(t *testing.T) {
	testutil.Slow(t)
	ms, cfgs := cluster(t, 3)
	expires := time.Now().Add(time.Hour)

	// 20 tokens, each spent by all three at once: one wins each.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		for _, m := range ms {
			wg.Go(func() {
				fresh, err := m.UseToken("tok-"+string(rune('A'+i)), expires)
				if err != nil {
					t.Errorf("UseToken: %v", err)
				}
				if fresh {
					wins.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if wins.Load() != 20 {
		t.Fatalf("20 tokens spent by three members at once: %d spends went on", wins.Load())
	}

	s := status.Session{ID: "s1", Generation: 3, Steps: 4, Done: 2, Started: time.Now().UTC().Round(time.Second)}
	if err := ms[0].PutSession("lab/n1", s); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[1:] {
		if got, ok := m.Session("lab/n1"); !ok || got.ID != "s1" || got.Done != 2 || !got.Started.Equal(s.Started) {
			t.Errorf("%s reads %+v %v", m.cfg.Name, got, ok)
		}
	}
	if _, ok := ms[1].Session("mac:52:54:00:00:00:99"); ok {
		t.Error("a session that was never put")
	}
	if err := ms[1].PutInstalled("lab/n1", Installed{Generation: 3, Install: "d1"}); err != nil {
		t.Fatal(err)
	}
	if in, ok, err := ms[2].Installed("lab/n1"); !ok || err != nil || in.Generation != 3 || in.Install != "d1" {
		t.Errorf("installed, read on another member: %+v %v %v", in, ok, err)
	}
	if _, ok, err := ms[0].Installed("lab/n2"); ok || err != nil {
		t.Errorf("a node never installed: %v %v", ok, err)
	}
	first, err := ms[2].Secret(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:2] {
		if got, err := m.Secret([]byte(strings.Repeat("x", 32))); err != nil || string(got) != string(first) {
			t.Errorf("%s's secret differs: %v", m.cfg.Name, err)
		}
	}
	if st := ms[0].Status(); st.Size != 3 || st.Leader == "" || len(st.Members) != 2 || !st.Quorum {
		t.Errorf("status: %+v", st)
	}

	// One down: the two others go on.
	ms[0].Close()
	ms[0] = nil
	if !testutil.Poll(30*time.Second, 200*time.Millisecond, func() bool {
		fresh, err := ms[1].UseToken("after-one", expires)
		return err == nil && fresh
	}) {
		t.Fatal("two members of three do not take a spent token")
	}
	if fresh, err := ms[2].UseToken("after-one", expires); err != nil || fresh {
		t.Errorf("the other of the two spends it again: %v %v", fresh, err)
	}

	// Two down: the last one refuses, within its timeout.
	ms[1].Close()
	ms[1] = nil
	began := time.Now()
	var lastErr error
	if !testutil.Poll(30*time.Second, 200*time.Millisecond, func() bool {
		_, lastErr = ms[2].UseToken("alone-"+time.Now().String(), expires)
		return lastErr != nil
	}) {
		t.Fatal("one member of three alone still spends tokens")
	}
	t.Logf("alone: refused after %s: %v", time.Since(began).Round(time.Millisecond), lastErr)
	if st := ms[2].Status(); st.Quorum {
		t.Errorf("alone, it says it has a quorum: %+v", st)
	}

	// One comes back: a majority again; it has what it missed.
	back, err := Start(context.Background(), cfgs[1])
	if err != nil {
		t.Fatal(err)
	}
	ms[1] = back
	if !testutil.Poll(60*time.Second, 500*time.Millisecond, func() bool {
		fresh, err := ms[2].UseToken("again", expires)
		return err == nil && fresh
	}) {
		t.Fatal("two members again do not take writes")
	}
	if !testutil.Poll(30*time.Second, 200*time.Millisecond, func() bool {
		fresh, err := back.UseToken("after-one", expires)
		return err == nil && !fresh
	}) {
		t.Error("the member that came back does not know the token spent while it was down")
	}
}

// A member without the site's TLS is refused at Start. Of three members
// whose third holds a hub's route certificate of the same CA instead of a
// peer certificate, the two make a majority and take writes; the third
// never joins: not ready, and never a member the others hear. (Buckets
// of two copies: three need three members to be made.)
func TestMembersNeedPeerCertificates(t *testing.T) {
	testutil.Slow(t)
	if _, err := Start(context.Background(), Config{Name: "x", Listen: "127.0.0.1:1", StoreDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "bootops ca peer") {
		t.Errorf("no TLS: %v", err)
	}
	dir := t.TempDir()
	addrs := testutil.FreePorts(t, 3)
	ms := make([]*Member, 3)
	errs := make([]error, 3)
	logs := make([]testutil.SyncBuffer, 3)
	var wg sync.WaitGroup
	for i, name := range []string{"a", "b", "intruder"} {
		var peers []string
		for j, a := range addrs {
			if j != i {
				peers = append(peers, a)
			}
		}
		ready := 90 * time.Second // a loaded machine's margin
		if name == "intruder" {
			ready = 20 * time.Second // it never is
		}
		cfg := Config{Name: name, Listen: addrs[i], Peers: peers, TLS: peerTLS(t, dir, name, name == "intruder"), StoreDir: filepath.Join(dir, name), Ready: ready, Replicas: 2,
			Log: slog.New(slog.NewTextHandler(&logs[i], nil))}
		wg.Go(func() { ms[i], errs[i] = Start(context.Background(), cfg) })
	}
	wg.Wait()
	for _, m := range ms {
		if m != nil {
			defer m.Close()
		}
	}
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("the two members with peer certificates: %v", errs[:2])
	}
	if fresh, err := ms[0].UseToken("t", time.Now().Add(time.Hour)); !fresh || err != nil {
		t.Errorf("the two do not take writes: %v %v", fresh, err)
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "not ready") {
		t.Errorf("a hub's route certificate joined a site: %v", errs[2])
	}
	// Refused for its certificate, by the members it dialled.
	if got := logs[0].String() + logs[1].String(); !strings.Contains(got, "is no site daemon's peer certificate (urn:bootops:site-peer)") {
		t.Errorf("the members' logs do not say why the intruder was refused:\n%s", testutil.Tail(got, 20))
	}
	for _, p := range ms[0].Status().Members {
		if p.Name == "intruder" && !p.Offline {
			t.Errorf("the intruder is heard: %+v", p)
		}
	}
}

// Three members campaign for one role: never two holders at once (each
// member asked every 20 ms), one within a few seconds; the holder killed,
// another takes it within 10 s (printed); a holder that stops gives it
// back at once.
func TestRoleOneHolder(t *testing.T) {
	testutil.Slow(t)
	ms, _ := cluster(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	roles := make([]*Role, 3)
	for i, m := range ms {
		roles[i] = m.Campaign(ctx, "dhcp.lab", nil)
	}
	holders := func() (n, who int) {
		who = -1
		for i, r := range roles {
			if r != nil && r.Active() {
				n, who = n+1, i
			}
		}
		return n, who
	}
	watch := func(d time.Duration) (who int, took time.Duration) {
		start := time.Now()
		who, took = -1, -1
		for time.Since(start) < d {
			n, w := holders()
			if n > 1 {
				t.Fatalf("%d holders at once", n)
			}
			if n == 1 && took < 0 {
				who, took = w, time.Since(start)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return who, took
	}
	who, took := watch(5 * time.Second)
	if who < 0 {
		t.Fatal("no holder in 5 s")
	}
	if h := ms[who].Holder("dhcp.lab"); h != ms[who].cfg.Name {
		t.Errorf("the bucket says %q holds it, the member %q", h, ms[who].cfg.Name)
	}
	t.Logf("first holder %s after %s", ms[who].cfg.Name, took.Round(time.Millisecond))

	// Killed: no release; another takes it once its value expires.
	ms[who].Close()
	ms[who], roles[who] = nil, nil
	next, took := watch(12 * time.Second)
	if next < 0 || took > 10*time.Second {
		t.Fatalf("after the holder's death: holder %d after %s", next, took)
	}
	t.Logf("timing: the holder killed → %s holds the role after %s", ms[next].cfg.Name, took.Round(time.Millisecond))
}

// The site's log: each member's entries reach the others in the log's
// order, a member never gets its own back, and following again from the
// place a batch covered gives nothing twice. A rollout's state written
// on one member is read on another.
func TestSiteLog(t *testing.T) {
	testutil.Slow(t)
	ms, _ := cluster(t, 3)
	for _, w := range []struct {
		m    int
		data string
	}{{0, "a1"}, {1, "b1"}, {0, "a2"}} {
		if err := ms[w.m].Append(LogEvents, []byte(w.data)); err != nil {
			t.Fatal(err)
		}
	}
	follow := func(m *Member, from uint64, want int) ([]string, uint64) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var got []string
		place := from
		m.Follow(ctx, from, func(es []Entry, upTo uint64) error {
			for _, e := range es {
				if e.Kind != LogEvents {
					t.Errorf("entry %d: kind %q", e.Seq, e.Kind)
				}
				got = append(got, e.Member+":"+string(e.Data))
			}
			place = upTo
			if len(got) >= want && upTo >= 3 {
				cancel()
			}
			return nil
		})
		return got, place
	}
	got, place := follow(ms[2], 0, 3)
	if strings.Join(got, " ") != "a:a1 b:b1 a:a2" || place != 3 {
		t.Fatalf("member c follows: %q up to %d, want a:a1 b:b1 a:a2 up to 3", got, place)
	}
	if got, _ := follow(ms[0], 0, 1); strings.Join(got, " ") != "b:b1" {
		t.Fatalf("member a follows: %q, want only b's entry", got)
	}
	ms[1].Append(LogLeases, []byte("b2"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var again []Entry
	ms[2].Follow(ctx, place, func(es []Entry, upTo uint64) error {
		again = append(again, es...)
		cancel()
		return nil
	})
	if len(again) != 1 || string(again[0].Data) != "b2" || again[0].Kind != LogLeases || again[0].Seq != 4 {
		t.Fatalf("following again from %d: %+v, want b's lease entry 4 only", place, again)
	}

	r, err := ms[0].Rollouts()
	if err != nil || len(r) != 0 {
		t.Fatalf("no rollout yet: %q, %v", r, err)
	}
	if err := ms[0].PutRollout("lab/web", []byte(`{"wave":2}`)); err != nil {
		t.Fatal(err)
	}
	got2, err := ms[1].Rollouts()
	if err != nil || string(got2["lab/web"]) != `{"wave":2}` || len(got2) != 1 {
		t.Fatalf("rollouts on another member: %q, %v", got2, err)
	}
}
