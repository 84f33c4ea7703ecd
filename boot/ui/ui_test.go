package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// fleet is a dashboard over an in-memory store: nodes are machines with a
// Node name, the rest are unknown.
func fleet(t *testing.T, opt func(*Server)) (*Server, *status.Memory, *httptest.Server) {
	t.Helper()
	mem := &status.Memory{PerMachine: 50}
	s := &Server{Interval: 5 * time.Millisecond, Events: mem.Events}
	s.Doc = func() bhttp.StatusDoc {
		doc := bhttp.StatusDoc{Source: map[string]any{"applied": map[string]string{"revision": "abc"}}, Plan: "p1", Machines: []status.Machine{}}
		for _, m := range mem.Machines() {
			if m.Node != "" {
				doc.Nodes = append(doc.Nodes, m)
			} else {
				doc.Machines = append(doc.Machines, m)
			}
		}
		return doc
	}
	if opt != nil {
		opt(s)
	}
	mem.Changed = s.Notify
	mux := http.NewServeMux()
	for p, h := range s.Routes() {
		mux.Handle(p, h)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	srv := httptest.NewServer(mux)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); cancel(); <-done })
	return s, mem, srv
}

// sse reads server-sent events from a stream.
type sse struct {
	r    *bufio.Reader
	body io.Closer
}

type event struct {
	name string
	data map[string]any
	raw  string
}

func open(t *testing.T, url string) *sse {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &sse{r: bufio.NewReaderSize(resp.Body, 1<<20), body: resp.Body}
}

// next returns the next named event (comments and retry lines skipped).
func (c *sse) next(t *testing.T) event {
	t.Helper()
	var ev event
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			ev.raw = line[len("data: "):]
			if err := json.Unmarshal([]byte(ev.raw), &ev.data); err != nil {
				t.Fatalf("data is not JSON: %v: %s", err, ev.raw)
			}
		case line == "" && ev.name != "":
			return ev
		}
	}
}

// until reads events until one named name satisfies ok, within 10 s.
func (c *sse) until(t *testing.T, name string, ok func(event) bool) event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ev := c.next(t); ev.name == name && ok(ev) {
			return ev
		}
	}
	t.Fatalf("no %s event as wanted within 10 s", name)
	return event{}
}

func machinesOf(ev event) map[string]map[string]any {
	out := map[string]map[string]any{}
	list, _ := ev.data["machines"].([]any)
	for _, m := range list {
		mm := m.(map[string]any)
		out[mm["key"].(string)] = mm
	}
	return out
}

func TestSnapshotThenOnlyWhatChanged(t *testing.T) {
	_, mem, srv := fleet(t, nil)
	mem.Record(status.Event{Kind: status.KindScript, Site: "s1", Node: "n1", State: status.StateBooting, Message: "script served"})
	mem.Record(status.Event{Kind: status.KindScript, Site: "s1", Node: "n2", State: status.StateBooting, Message: "script served"})
	mem.Record(status.Event{Kind: status.KindDHCP, MAC: "52:54:00:aa:bb:cc", Serial: "SN 9/x", Message: "unknown"})

	c := open(t, srv.URL+"/api/v1/stream")
	snap := c.next(t)
	if snap.name != "snapshot" {
		t.Fatalf("first event %q, want snapshot", snap.name)
	}
	got := machinesOf(snap)
	if len(got) != 3 || got["s1/n1"]["state"] != "booting" {
		t.Fatalf("snapshot machines: %v", got)
	}
	if y, _ := got["mac:52:54:00:aa:bb:cc"]["nodeYAML"].(string); !strings.Contains(y, "kind: Node") || !strings.Contains(y, "name: sn-9-x") || !strings.Contains(y, `mac: 52:54:00:aa:bb:cc`) {
		t.Fatalf("unknown machine's Node YAML: %q", y)
	}
	if _, ok := got["s1/n1"]["nodeYAML"]; ok {
		t.Fatal("a registered node got a Node YAML")
	}
	if snap.data["actions"] != false {
		t.Fatalf("actions = %v without a token", snap.data["actions"])
	}

	mem.Record(status.Event{Kind: status.KindAgent, Site: "s1", Node: "n2", State: status.StateProvisioning, Action: "image-to-disk", Step: 2, Steps: 4, Bytes: 5, Total: 10, Message: "writing"})
	up := c.until(t, "update", func(ev event) bool { return len(machinesOf(ev)) > 0 })
	changed := machinesOf(up)
	if len(changed) != 1 || changed["s1/n2"] == nil {
		t.Fatalf("update carries %v, want only s1/n2", changed)
	}
	last := changed["s1/n2"]["last"].(map[string]any)
	if changed["s1/n2"]["state"] != "provisioning" || last["step"] != 2.0 || last["bytes"] != 5.0 {
		t.Fatalf("s1/n2 in the update: %v", changed["s1/n2"])
	}
}

func TestBurstIsCoalesced(t *testing.T) {
	s, mem, srv := fleet(t, func(s *Server) { s.Interval = 300 * time.Millisecond })
	mem.Record(status.Event{Site: "s", Node: "n", Message: "first"})
	c := open(t, srv.URL+"/api/v1/stream")
	c.next(t) // snapshot
	for i := range 500 {
		mem.Record(status.Event{Site: "s", Node: "n", Kind: status.KindAgent, Bytes: int64(i), Message: fmt.Sprint("progress ", i)})
	}
	updates := 0
	c.until(t, "update", func(ev event) bool {
		updates++
		m := machinesOf(ev)["s/n"]
		return m != nil && m["last"].(map[string]any)["message"] == "progress 499"
	})
	// 500 events in a few ms reach the page as a handful of messages.
	if updates > 20 {
		t.Fatalf("500 events became %d updates", updates)
	}
	if open, _ := s.Stats(); open != 1 {
		t.Fatalf("open streams %d", open)
	}
}

func TestNodeTimelineFollows(t *testing.T) {
	_, mem, srv := fleet(t, nil)
	for i := range 3 {
		mem.Record(status.Event{Site: "s", Node: "n", Kind: status.KindAgent, Message: fmt.Sprint("line ", i)})
	}
	mem.Record(status.Event{Site: "s", Node: "other", Message: "elsewhere"})
	c := open(t, srv.URL+"/api/v1/stream?key=s/n")
	if ev := c.next(t); ev.name != "snapshot" {
		t.Fatalf("first %q", ev.name)
	}
	tl := c.next(t)
	if tl.name != "timeline" || tl.data["reset"] != true || len(tl.data["events"].([]any)) != 3 {
		t.Fatalf("first timeline: %s %s", tl.name, tl.raw)
	}
	mem.Record(status.Event{Site: "s", Node: "other", Message: "not mine"})
	mem.Record(status.Event{Site: "s", Node: "n", Kind: status.KindAgent, State: status.StateFailed, Error: true, Message: "image-to-disk: sha256 mismatch"})
	tl = c.until(t, "timeline", func(event) bool { return true })
	evs := tl.data["events"].([]any)
	if tl.data["reset"] == true || len(evs) != 1 || evs[0].(map[string]any)["message"] != "image-to-disk: sha256 mismatch" {
		t.Fatalf("next timeline: %s", tl.raw)
	}
	if strings.Contains(tl.raw, "not mine") {
		t.Fatal("another machine's event in the timeline")
	}
}

func TestTimelineResetsWhenTrimmed(t *testing.T) {
	s, mem, srv := fleet(t, nil) // 50 events kept per machine
	for i := range 50 {
		mem.Record(status.Event{Site: "s", Node: "n", Message: fmt.Sprint("old ", i)})
	}
	c := open(t, srv.URL+"/api/v1/stream?key=s/n")
	c.next(t)
	c.next(t) // timeline, all 50
	// 60 more before the next push (the store tells the hub at the end,
	// as one commit would): the last one sent is trimmed away.
	mem.Changed = nil
	for i := range 60 {
		mem.Record(status.Event{Site: "s", Node: "n", Message: fmt.Sprint("new ", i)})
	}
	mem.Changed = s.Notify
	s.Notify()
	tl := c.until(t, "timeline", func(ev event) bool {
		evs := ev.data["events"].([]any)
		return len(evs) > 0 && evs[len(evs)-1].(map[string]any)["message"] == "new 59"
	})
	if tl.data["reset"] != true || len(tl.data["events"].([]any)) != 50 {
		t.Fatalf("want a reset to the 50 kept events: %s", tl.raw[:200])
	}
}

func TestSlowAndManyClients(t *testing.T) {
	s, mem, srv := fleet(t, func(s *Server) { s.WriteTimeout = 2 * time.Second; s.MaxClients = 60 })
	// A big fleet with long messages: every update is large.
	long := strings.Repeat("x", 500)
	record := func(round int) {
		for i := range 200 {
			mem.Record(status.Event{Site: "s", Node: fmt.Sprint("n", i), Message: fmt.Sprint(round, long)})
		}
	}
	record(0)

	// One client that asks for the stream and never reads it, with a
	// small receive window so the server's writes block soon.
	d := net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
		c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return nil
	}}
	stalled, err := d.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "GET /api/v1/stream HTTP/1.1\r\nHost: x\r\n\r\n")
	testutil.WaitFor(t, "the stalled stream to open", 15*time.Second, func() bool { n, _ := s.Stats(); return n == 1 })

	// 50 browsers that read.
	var wg sync.WaitGroup
	final := make(chan int, 50)
	for range 50 {
		c := open(t, srv.URL+"/api/v1/stream")
		c.next(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				line, err := c.r.ReadString('\n')
				if err != nil {
					final <- 0
					return
				}
				if strings.Contains(line, `"message":"last`) {
					final <- 1
					return
				}
			}
		}()
	}
	// Rounds until the stalled client's socket and queue are full (40 do
	// it at full speed; under the race detector pushes coalesce, and more
	// rounds are needed to send as many bytes), at most 400.
	for round := 1; round <= 400; round++ {
		record(round)
		time.Sleep(20 * time.Millisecond)
		if n, _ := s.Stats(); n == 50 && round >= 40 {
			break
		}
	}
	testutil.WaitFor(t, "the stalled stream to be dropped", 15*time.Second, func() bool { n, _ := s.Stats(); return n == 50 })
	if _, dropped := s.Stats(); dropped != 1 {
		t.Fatalf("dropped streams counted: %d, want 1", dropped)
	}
	mem.Record(status.Event{Site: "s", Node: "n7", Message: "last"})
	wg.Wait()
	close(final)
	got := 0
	for v := range final {
		got += v
	}
	if got != 50 {
		t.Fatalf("%d of 50 reading clients saw the last update", got)
	}
	// The daemon is unaffected.
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestTooManyStreams(t *testing.T) {
	_, _, srv := fleet(t, func(s *Server) { s.MaxClients = 2 })
	open(t, srv.URL+"/api/v1/stream")
	open(t, srv.URL+"/api/v1/stream")
	resp, err := http.Get(srv.URL + "/api/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third stream: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
}

func TestSyncNeedsToken(t *testing.T) {
	calls := 0
	token := ""
	_, _, srv := fleet(t, func(s *Server) {
		s.Sync = func(string) { calls++ }
		s.Token = func() string { return token }
	})
	post := func(auth string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/api/v1/sync", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("Bearer anything"); code != http.StatusForbidden {
		t.Fatalf("read-only dashboard: %d, want 403", code)
	}
	token = "s3cret"
	if code := post(""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	if code := post("Bearer wrong"); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", code)
	}
	if calls != 0 {
		t.Fatal("synced without the token")
	}
	if code := post("Bearer s3cret"); code != http.StatusAccepted || calls != 1 {
		t.Fatalf("right token: %d, %d calls", code, calls)
	}
	c := open(t, srv.URL+"/api/v1/stream")
	if snap := c.next(t); snap.data["actions"] != true {
		t.Fatal("the snapshot does not offer the action with a token set")
	}
}

func TestPageAndFiles(t *testing.T) {
	_, _, srv := fleet(t, nil)
	for path, want := range map[string]string{
		"/":           "<title>bootops</title>",
		"/ui/app.js":  "new EventSource(",
		"/ui/app.css": ".bar",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %s, body lacks %q", path, resp.Status, want)
		}
	}
	for _, path := range []string{"/ui/../hub.go", "/ui/%2e%2e/hub.go", "/nothing"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && strings.Contains(string(b), "package ui") {
			t.Errorf("GET %s served the source", path)
		}
	}
	// Nothing on the page comes from elsewhere: it works on a LAN with no way out.
	for _, f := range []string{"assets/index.html", "assets/app.js", "assets/app.css"} {
		b, _ := assets.ReadFile(f)
		for _, bad := range []string{"http://", "https://", "//cdn"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s refers to %q", f, bad)
			}
		}
	}
}

// BenchmarkUpdate is one push with a watcher open: 10,000 machines, 100 of
// them changed since the last push (the daemon's 10 pushes a second while
// a fleet reports).
func BenchmarkUpdate(b *testing.B) {
	mem := &status.Memory{}
	s := &Server{}
	s.Doc = func() bhttp.StatusDoc { return bhttp.StatusDoc{Plan: "p", Nodes: mem.Machines()} }
	for i := range 10000 {
		mem.Record(status.Event{Site: "s", Node: fmt.Sprintf("n%05d", i), Kind: status.KindAgent, State: status.StateProvisioning, Step: 2, Steps: 4, Message: "progress"})
	}
	s.init()
	s.clients[&client{ch: make(chan *message, 1<<20), gone: make(chan struct{})}] = struct{}{}
	s.update()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for j := range 100 {
			mem.Record(status.Event{Site: "s", Node: fmt.Sprintf("n%05d", (i*100+j)%10000), Kind: status.KindAgent, Bytes: int64(i), Message: "progress"})
		}
		s.update()
	}
}

// A node's profile and its encryption come from the live Plan: an
// encrypted profile's node says "encrypted (LUKS2, TPM PCRs …)", another
// only its profile, a machine that is no node neither; a new Plan that
// turns encryption on reaches the page though no machine changed.
func TestProfileAndEncryption(t *testing.T) {
	enc := &plan.Encryption{Partition: 2, PCRs: []int{7}, Recipients: []string{"age1x"}, Unlock: "clevis"}
	planWith := func(e *plan.Encryption) *plan.Plan {
		return &plan.Plan{
			Hash: fmt.Sprint(e != nil),
			Sites: []*plan.Site{{Name: "s1", Nodes: []*plan.Node{
				{Name: "n1", Site: "s1", Profile: "secure"},
				{Name: "n2", Site: "s1", Profile: "plain"},
			}}},
			Profiles: []*plan.Profile{{Name: "secure", Encryption: e}, {Name: "plain"}},
		}
	}
	var live atomic.Pointer[plan.Plan]
	live.Store(planWith(enc))
	s, mem, srv := fleet(t, func(s *Server) { s.Plan = live.Load })
	mem.Record(status.Event{Kind: status.KindScript, Site: "s1", Node: "n1", State: status.StateBooting})
	mem.Record(status.Event{Kind: status.KindScript, Site: "s1", Node: "n2", State: status.StateBooting})
	mem.Record(status.Event{Kind: status.KindDHCP, MAC: "52:54:00:aa:bb:cc", Message: "unknown"})

	c := open(t, srv.URL+"/api/v1/stream")
	got := machinesOf(c.next(t))
	git := func(m map[string]any) map[string]any { g, _ := m["git"].(map[string]any); return g }
	if g := git(got["s1/n1"]); g["profile"] != "secure" || g["encryption"] != "encrypted (LUKS2, TPM PCRs 7)" {
		t.Errorf("the encrypted node's git: %v", g)
	}
	if g := git(got["s1/n2"]); g["profile"] != "plain" || g["encryption"] != nil {
		t.Errorf("the plain node's git: %v", g)
	}
	if g, ok := got["mac:52:54:00:aa:bb:cc"]["git"]; ok {
		t.Errorf("a machine that is no node has git %v", g)
	}

	enc2 := *enc
	enc2.PCRs = []int{4, 7}
	live.Store(planWith(&enc2))
	s.Notify()
	up := c.until(t, "update", func(ev event) bool { return len(machinesOf(ev)) > 0 })
	changed := machinesOf(up)
	if len(changed) != 1 || git(changed["s1/n1"])["encryption"] != "encrypted (LUKS2, TPM PCRs 4+7)" {
		t.Errorf("after the new Plan the update carries %v, want only s1/n1 sealed to 4+7", changed)
	}
}

// A site of more than one daemon: the snapshot carries the cluster as the
// daemon sees it, an update only when it changed (a member going offline).
func TestClusterOnTheStream(t *testing.T) {
	var mu sync.Mutex
	cl := &bhttp.ClusterStatus{Member: "b", Leader: "c", Size: 3, Quorum: true, Members: []bhttp.ClusterMember{{Name: "a", Current: true}, {Name: "c", Current: true}}}
	s, mem, srv := fleet(t, nil)
	inner := s.Doc
	s.Doc = func() bhttp.StatusDoc {
		d := inner()
		mu.Lock()
		c := *cl
		mu.Unlock()
		d.Cluster = &c
		return d
	}
	s.Notify()
	time.Sleep(50 * time.Millisecond)
	c := open(t, srv.URL+"/api/v1/stream")
	snap := c.next(t)
	got, _ := snap.data["cluster"].(map[string]any)
	if snap.name != "snapshot" || got["member"] != "b" || got["leader"] != "c" || got["quorum"] != true {
		t.Fatalf("snapshot's cluster: %v", snap.data["cluster"])
	}
	mu.Lock()
	cl = &bhttp.ClusterStatus{Member: "b", Leader: "c", Size: 3, Quorum: true, Members: []bhttp.ClusterMember{{Name: "a", Offline: true}, {Name: "c", Current: true}}}
	mu.Unlock()
	mem.Record(status.Event{Kind: status.KindDHCP, MAC: "52:54:00:aa:bb:01", Message: "a nudge"})
	up := c.until(t, "update", func(ev event) bool { _, ok := ev.data["cluster"]; return ok })
	ms, _ := up.data["cluster"].(map[string]any)["members"].([]any)
	if len(ms) != 2 || ms[0].(map[string]any)["offline"] != true {
		t.Errorf("update's cluster: %v", up.data["cluster"])
	}
}
