package swarm

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// allChunks are the chunks of m that are not zeros.
func allChunks(m *Manifest) []int {
	var all []int
	for i := range m.Chunks() {
		if !m.IsZero(i) {
			all = append(all, i)
		}
	}
	return all
}

// waitChecks waits for the scheduler's re-checks under way.
func waitChecks(s *Scheduler) { s.checks.Wait() }

// banned says the scheduler banned the member name (its next report's
// reply says so).
func (fl *fleet) banned(name string) bool {
	return fl.sched.Report(fl.im.Manifest, fl.member(name), Report{Instance: name}).Banned
}

// lease has member name ask for one transfer and returns it; it fails the
// test unless it comes from the member from.
func (fl *fleet) lease(name, from string) Assignment {
	fl.t.Helper()
	r := fl.sched.Report(fl.im.Manifest, fl.member(name), Report{Instance: name, Want: 1})
	if len(r.Assign) != 1 || r.Assign[0].From != from {
		fl.t.Fatalf("%s was assigned %+v, want one chunk from %q", name, r.Assign, from)
	}
	return r.Assign[0]
}

// clock is a time that moves only when told to.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// honest serves every chunk as it is, to bearers of the swarm's key.
func (fl *fleet) honest(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+fl.sched.Key(fl.im.Manifest.Source) {
		http.Error(w, "not a member", http.StatusUnauthorized)
		return
	}
	w.Write(fl.chunkBytes(r))
}

// A machine that reports chunks from an honest peer bad, or the peer
// gone, without having been sent to it for them is not believed: the peer
// is not banned, still counts as a holder, and the reports are counted
// as unfounded.
func TestSwarmReportWithoutLeaseIsIgnored(t *testing.T) {
	fl := newFleet(t, testImage(8))
	fl.fake("honest", fl.honest)
	m := fl.im.Manifest
	var lies []Transfer
	for _, i := range allChunks(m) {
		lies = append(lies, Transfer{Chunk: i, From: "honest", Why: WhyBad}, Transfer{Chunk: i, From: "honest", Why: WhyGone})
	}
	fl.sched.Report(m, fl.member("liar"), Report{Instance: "liar", Failed: lies})
	waitChecks(fl.sched)
	if fl.banned("honest") {
		t.Error("the honest peer is banned on reports of transfers nobody was sent to it for")
	}
	fl.lease("other", "honest")
	st := fl.sched.Stats()
	if st.Bad != 0 || st.Gone != 0 || st.Unfounded != int64(len(lies)) || st.Banned != 0 {
		t.Errorf("stats %+v: want %d unfounded reports, no bad or gone transfer, nobody banned", st, len(lies))
	}
}

// A machine sent to an honest peer for a chunk that reports it bad is not
// believed either: the server fetches that chunk from the peer itself,
// finds it right, and the peer stays in the swarm for everyone else.
func TestSwarmOneLiarCannotBanAnHonestPeer(t *testing.T) {
	fl := newFleet(t, testImage(8))
	requests := fl.fake("honest", fl.honest)
	a := fl.lease("liar", "honest")
	fl.sched.Report(fl.im.Manifest, fl.member("liar"), Report{Instance: "liar", Failed: []Transfer{{Chunk: a.Chunk, From: "honest", Why: WhyBad}}})
	waitChecks(fl.sched)
	if fl.banned("honest") {
		t.Fatal("one machine's word got an honest peer banned")
	}
	fl.lease("other", "honest")
	st := fl.sched.Stats()
	if requests() != 1 || st.Bad != 1 || st.Cleared != 1 || st.Banned != 0 {
		t.Errorf("the honest peer was asked %d times (want the server's one re-check); stats %+v", requests(), st)
	}
	// The liar's further word is worth no more.
	b := fl.lease("liar2", "honest")
	fl.sched.Report(fl.im.Manifest, fl.member("liar"), Report{Instance: "liar", Failed: []Transfer{{Chunk: b.Chunk, From: "honest", Why: WhyBad}}})
	waitChecks(fl.sched)
	if fl.banned("honest") {
		t.Error("a second report, of another's transfer, got the honest peer banned")
	}
}

// A peer that serves a bad chunk to one machine, and to the server when it
// checks, is banned on that evidence alone: no second machine needed.
func TestSwarmRecheckBansALyingPeer(t *testing.T) {
	fl := newFleet(t, testImage(8))
	requests := fl.fake("liar", func(w http.ResponseWriter, r *http.Request) {
		b := fl.chunkBytes(r)
		b[0] ^= 1
		w.Write(b)
	})
	a := fl.lease("victim", "liar")
	lie := Report{Instance: "victim", Failed: []Transfer{{Chunk: a.Chunk, From: "liar", Why: WhyBad}}}
	fl.sched.Report(fl.im.Manifest, fl.member("victim"), lie)
	// Sent again (its reply was lost): the lease just ended, still
	// founded.
	fl.sched.Report(fl.im.Manifest, fl.member("victim"), lie)
	waitChecks(fl.sched)
	if !fl.banned("liar") {
		t.Fatal("a peer whose chunk the server found bad is not banned")
	}
	if requests() != 1 {
		t.Errorf("the liar was asked %d times, want the server's one re-check", requests())
	}
	if st := fl.sched.Stats(); st.Banned != 1 || st.Bad != 2 || st.Unfounded != 0 {
		t.Errorf("stats %+v", st)
	}
	if a := fl.lease("other", ""); a.URL != fl.srv.URL {
		t.Errorf("after the ban, %+v", a)
	}
}

// A peer the server cannot check (busy, here always) is not banned on one
// machine's word; the server gives up after a few tries.
func TestSwarmRecheckInconclusive(t *testing.T) {
	fl := newFleet(t, testImage(8))
	clock := &clock{t: time.Now()}
	fl.sched.Now = clock.now
	requests := fl.fake("busy", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})
	a := fl.lease("victim", "busy")
	fl.sched.Report(fl.im.Manifest, fl.member("victim"), Report{Instance: "victim", Failed: []Transfer{{Chunk: a.Chunk, From: "busy", Why: WhyBad}}})
	for range 3 * checkTries {
		waitChecks(fl.sched)
		clock.add(checkRetry + time.Millisecond)
		fl.banned("busy") // a report: the next try is due
	}
	waitChecks(fl.sched)
	if fl.banned("busy") {
		t.Error("a peer the server could not check is banned")
	}
	if n := requests(); n != checkTries {
		t.Errorf("the server tried %d times, want %d", n, checkTries)
	}
}

// The swarm's key is compared in constant time: no == or != between it
// and anything but a constant in the chunk handler's check (key != "" says
// nothing of it; ConstantTimeCompare(…) == 1 is the constant-time one).
func TestKeyComparedInConstantTime(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "peer.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	mentionsKey := func(n ast.Node) bool {
		found := false
		ast.Inspect(n, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && id.Name == "key" {
				found = true
			}
			return !found
		})
		return found
	}
	constant := func(e ast.Expr) bool {
		_, ok := e.(*ast.BasicLit)
		return ok
	}
	checked := 0
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "CheckChunkRequest" && fn.Name.Name != "authorized" {
			continue
		}
		checked++
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			b, ok := n.(*ast.BinaryExpr)
			if ok && (b.Op == token.EQL || b.Op == token.NEQ) && (mentionsKey(b.X) || mentionsKey(b.Y)) && !constant(b.X) && !constant(b.Y) {
				t.Errorf("%s compares the key with %s", fn.Name.Name, b.Op)
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("CheckChunkRequest not found in peer.go")
	}
}

// A chunk request is served to the bearer of the swarm's key only.
func TestCheckChunkRequestKey(t *testing.T) {
	m := &Manifest{Source: "img", Size: 10, ChunkSize: 10}
	for name, c := range map[string]struct {
		key, auth string
		ok        bool
	}{
		"the key":              {"k3y", "Bearer k3y", true},
		"another key":          {"k3y", "Bearer k3z", false},
		"a prefix of the key":  {"k3y", "Bearer k3", false},
		"the key and more":     {"k3y", "Bearer k3yy", false},
		"no scheme":            {"k3y", "k3y", false},
		"another scheme":       {"k3y", "Basic k3y", false},
		"no header":            {"k3y", "", false},
		"no key yet":           {"", "Bearer ", false},
		"no key, a credential": {"", "Bearer x", false},
	} {
		mux := http.NewServeMux()
		ok := false
		mux.HandleFunc("GET /swarm/{source}/chunk/{i}", func(w http.ResponseWriter, r *http.Request) {
			_, ok = CheckChunkRequest(w, r, m, c.key)
		})
		req := httptest.NewRequest("GET", ChunkPath("img", 0), nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if ok != c.ok || !ok && rec.Code != http.StatusUnauthorized {
			t.Errorf("%s: ok %v (%d), want %v", name, ok, rec.Code, c.ok)
		}
	}
}
