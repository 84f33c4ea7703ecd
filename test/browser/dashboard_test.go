//go:build browser

package browser

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/test/fleet"
)

const (
	nodes = 1000
	sites = 4
)

// outDir is where the screenshots and the measured timings go, for a
// person to look at (BOOTOPS_BROWSER_OUT, default test/browser/out).
func outDir() string {
	if d := os.Getenv("BOOTOPS_BROWSER_OUT"); d != "" {
		return d
	}
	return "out"
}

// daemon is a real `bootops serve` on loopback with a generated fleet.
type daemon struct {
	url  string
	repo string // the folder it serves
	seq  uint64
	mu   sync.Mutex
	// sessions are the session credentials the nodes' check-ins returned.
	sessions map[int]string
}

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	work := t.TempDir()
	bin := filepath.Join(work, "bootops")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/bootops")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	repo := filepath.Join(work, "repo")
	if err := fleet.Generate(repo, sites, nodes); err != nil {
		t.Fatal(err)
	}
	// One node has a BMC whose credentials this daemon lacks (it is given
	// no --secrets-dir): its power shows as unreachable, with why.
	f, err := os.OpenFile(filepath.Join(repo, fleet.NodeFile(sites, withBMC)), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "bmc: {address: 127.0.0.1, port: 9, protocol: redfish, credentials: {secret: rack-bmc}}\n")
	f.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	state := filepath.Join(work, "state")
	cmd := exec.Command(bin, "serve", "--open-reads", "--source", repo, "--dhcp", "off", "--tftp-addr", "", "--http-addr", addr,
		"--state-dir", state, "--log-format", "text", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	d := &daemon{url: "http://" + addr, repo: repo, seq: uint64(time.Now().UnixMicro()), sessions: map[int]string{}}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(d.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("bootops serve not ready within 60 s")
		}
	}
	return d
}

func site(i int) string { return fmt.Sprintf("site-%03d", i%sites) }
func node(i int) string { return fmt.Sprintf("node-%05d", i) }

func (d *daemon) post(t *testing.T, path, token string, body, reply any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", d.url+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("POST %s: %s", path, resp.Status)
		return
	}
	if reply != nil {
		if err := json.NewDecoder(resp.Body).Decode(reply); err != nil {
			t.Errorf("POST %s: %v", path, err)
		}
	}
}

// checkIn is node i's agent saying hello, as bootops-agent does, with the
// boot token of the script its machine was served.
func (d *daemon) checkIn(t *testing.T, i int) { d.checkInWith(t, i, nil) }

// checkInWith checks node i in with the hardware inventory inv, and
// returns the reply.
func (d *daemon) checkInWith(t *testing.T, i int, inv *plan.Inventory) plan.CheckInReply {
	serial := fmt.Sprintf("SN%08d", i)
	resp, err := http.Get(d.url + "/ipxe?site=" + site(i) + "&serial=" + serial)
	if err != nil {
		t.Error(err)
		return plan.CheckInReply{}
	}
	script, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, tok, _ := strings.Cut(string(script), "bootops.token=")
	tok, _, _ = strings.Cut(tok, " ")
	id := plan.Identity{Serial: serial, UUID: fmt.Sprintf("4c4c4544-0041-3110-8042-%012x", i),
		MACs: []string{fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", (i>>24)&0xff, (i>>16)&0xff, (i>>8)&0xff, i&0xff)}}
	var reply plan.CheckInReply
	d.post(t, plan.AgentCheckInPath, tok, plan.CheckIn{Site: site(i), Node: node(i), Identity: id, Arch: "x86_64", Agent: "browser-test", Inventory: inv}, &reply)
	d.mu.Lock()
	d.sessions[i] = reply.Session
	d.mu.Unlock()
	return reply
}

// report sends node i's agent events.
func (d *daemon) report(t *testing.T, i int, evs ...plan.AgentEvent) {
	d.mu.Lock()
	for k := range evs {
		d.seq++
		evs[k].Seq = d.seq
		evs[k].Time = time.Now()
	}
	sess := d.sessions[i]
	d.mu.Unlock()
	d.post(t, plan.AgentEventsPath, sess, plan.EventBatch{Site: site(i), Node: node(i), Events: evs}, nil)
}

const steps = 4

func progress(bytes int64) plan.AgentEvent {
	return plan.AgentEvent{Type: plan.AgentProgress, Action: "image-to-disk", Step: 2, Steps: steps, Bytes: bytes, Total: 64 << 20, Rate: 40e6}
}

// populate puts the fleet in a warehouse's mid-morning: some provisioned,
// many streaming their image, some just checked in, one failed, the rest
// not seen yet; and one machine nobody registered.
func (d *daemon) populate(t *testing.T) {
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				switch {
				case i == failed:
					d.checkIn(t, i)
					d.report(t, i,
						plan.AgentEvent{Type: plan.AgentStarted, Action: "wipe-disk", Step: 1, Steps: steps},
						plan.AgentEvent{Type: plan.AgentActionDone, Action: "wipe-disk", Step: 1, Steps: steps},
						plan.AgentEvent{Type: plan.AgentStarted, Action: "image-to-disk", Step: 2, Steps: steps},
						progress(12<<20),
						plan.AgentEvent{Type: plan.AgentLog, Action: "image-to-disk", Step: 2, Steps: steps, Message: "GET http://mirror.example.internal/images/edge-mutable.raw.gz: 200 OK"},
						plan.AgentEvent{Type: plan.AgentFailed, Action: "image-to-disk", Step: 2, Steps: steps, Message: failReason})
				case i%5 == 0: // provisioned
					d.checkIn(t, i)
					var evs []plan.AgentEvent
					for k, a := range []string{"wipe-disk", "image-to-disk", "cloud-init"} {
						evs = append(evs, plan.AgentEvent{Type: plan.AgentStarted, Action: a, Step: k + 1, Steps: steps}, plan.AgentEvent{Type: plan.AgentActionDone, Action: a, Step: k + 1, Steps: steps})
					}
					d.report(t, i, append(evs, plan.AgentEvent{Type: plan.AgentProvisioned, Generation: 0})...)
				case i%5 == 1 || i%5 == 2: // streaming the image
					d.checkIn(t, i)
					d.report(t, i, plan.AgentEvent{Type: plan.AgentActionDone, Action: "wipe-disk", Step: 1, Steps: steps},
						plan.AgentEvent{Type: plan.AgentStarted, Action: "image-to-disk", Step: 2, Steps: steps}, progress(int64(i%64)<<20))
				case i%5 == 3 && i%2 == 0: // just checked in
					d.checkIn(t, i)
				}
			}
		}()
	}
	for i := range nodes {
		work <- i
	}
	close(work)
	wg.Wait()
	// A machine nobody registered asks for its script.
	resp, err := http.Get(d.url + "/ipxe?mac=52:54:00:de:ad:01&serial=WH-UNREG-7&uuid=&arch=x86_64&platform=pcbios")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

const (
	withBMC    = 4 // registered, never seen
	failed     = 7
	failReason = "sha256 of the image is 9f2c…, want aba2c9d0…: the image on the mirror is not the one in Git"
)

// TestDashboard loads the dashboard of a running daemon with 1,000 nodes in
// headless Chromium: the fleet shows, a node's progress reaches the page
// live, filtering works, a failed node's page shows its log and follows
// it, an unknown machine is offered with its Node. It saves screenshots
// and the measured timings under outDir().
func TestDashboard(t *testing.T) {
	d := startDaemon(t)
	d.populate(t)
	c := startChrome(t)
	var timings strings.Builder

	// First paint of the whole fleet, three times, each beside the
	// reference: the same 1,000 rows as a static HTML table with no
	// script, from a server on loopback (the floor of painting them).
	static := staticFleet(t, d)
	for round := 1; round <= 3; round++ {
		c.navigate(t, "about:blank")
		c.navigate(t, d.url+"/")
		c.waitJS(t, "the fleet painted", `window.bootops && window.bootops.complete !== undefined`, 30*time.Second)
		var paint struct {
			Painted, Complete, FCP, Snapshot float64
			Rows, Sites                      int
		}
		c.eval(t, `({painted: bootops.painted, complete: bootops.complete, snapshot: bootops.snapshotAt,
			fcp: (performance.getEntriesByName("first-contentful-paint")[0] || {}).startTime || 0,
			rows: document.querySelectorAll("#rows .row").length,
			sites: document.querySelectorAll("#sites .site").length})`, &paint)
		if paint.Rows != nodes || paint.Sites != sites {
			t.Fatalf("the page shows %d rows in %d sites, want %d in %d", paint.Rows, paint.Sites, nodes, sites)
		}
		c.navigate(t, "about:blank")
		c.navigate(t, static)
		c.waitJS(t, "the static table loaded", `document.readyState === "complete" && performance.getEntriesByName("first-contentful-paint").length > 0`, 30*time.Second)
		var ref float64
		c.eval(t, `performance.getEntriesByName("first-contentful-paint")[0].startTime`, &ref)
		fmt.Fprintf(&timings, "round %d: dashboard of %d nodes: page's first paint %.0f ms after navigation start, snapshot received %.0f ms, counts and first screen of rows painted %.0f ms, all %d rows painted %.0f ms; static table of the same rows (reference): first paint %.0f ms\n",
			round, nodes, paint.FCP, paint.Snapshot, paint.Painted, nodes, paint.Complete, ref)
	}
	c.navigate(t, d.url+"/")
	c.waitJS(t, "the fleet painted", `window.bootops && window.bootops.complete !== undefined`, 30*time.Second)

	// Counts by state, per site, add up; the failed node is shown failed.
	var counts map[string]int
	c.eval(t, `(() => { const o = {}; for (const c of document.querySelectorAll("#sites .chip")) { const [s, n] = c.textContent.split(" "); o[s] = (o[s] || 0) + +n; } return o; })()`, &counts)
	total := 0
	for _, n := range counts {
		total += n
	}
	if total != nodes || counts["failed"] != 1 || counts["provisioned"] != nodes/5 {
		t.Fatalf("state counts %v", counts)
	}
	var failedRow string
	c.eval(t, fmt.Sprintf(`document.querySelector('#rows .row[data-key="%s/%s"]').innerText`, site(failed), node(failed)), &failedRow)
	if !strings.Contains(failedRow, "failed") || !strings.Contains(failedRow, "2/4 image-to-disk") {
		t.Fatalf("failed node's row: %q", failedRow)
	}
	// The unknown machine, with the Node to commit.
	var unknown string
	c.eval(t, `document.querySelector("#unknown").hidden ? "" : document.querySelector("#unknown-list").innerText`, &unknown)
	if !strings.Contains(unknown, "kind: Node") || !strings.Contains(unknown, `serial: WH-UNREG-7`) || !strings.Contains(unknown, "name: wh-unreg-7") {
		t.Fatalf("unknown machines section: %q", unknown)
	}
	c.screenshot(t, filepath.Join(outDir(), "dashboard.png"), false)

	// The node with a BMC: its power in its row and on its page.
	bmcKey := site(withBMC) + "/" + node(withBMC)
	c.waitJS(t, "the power of "+bmcKey, fmt.Sprintf(`document.querySelector('#rows .row[data-key="%s"]').innerText.includes("⏻ unreachable")`, bmcKey), 20*time.Second)
	var tip string
	c.eval(t, fmt.Sprintf(`document.querySelector('#rows .row[data-key="%s"] .power').title`, bmcKey), &tip)
	if !strings.Contains(tip, `secret "rack-bmc": the daemon has no --secrets-dir`) {
		t.Errorf("the power's reason: %q", tip)
	}

	// Live: a streaming node's progress reaches its row.
	var lat []float64
	live := 1 // i%5 == 1: streaming
	for k := range 10 {
		mb := int64(20 + k)
		start := time.Now()
		d.report(t, live, progress(mb<<20))
		want := fmt.Sprintf("%d.0 MiB / 64.0 MiB", mb)
		key := site(live) + "/" + node(live)
		c.waitJS(t, "the progress of "+key+" on the page", fmt.Sprintf(`document.querySelector('#rows .row[data-key="%s"]').innerText.includes(%q)`, key, want), 10*time.Second)
		var at float64
		c.eval(t, fmt.Sprintf(`bootops.changedAt[%q]`, key), &at)
		lat = append(lat, at-float64(start.UnixMilli()))
	}
	// A node fetching its image with its peers: where the bytes came from,
	// in its row and on its page.
	from := progress(31 << 20)
	from.FromServer, from.FromPeers = 5<<20, 26<<20
	d.report(t, live, from)
	liveKey := site(live) + "/" + node(live)
	c.waitJS(t, "the image's sources of "+liveKey, fmt.Sprintf(`document.querySelector('#rows .row[data-key="%s"] .from').textContent === "image: 5 MB from the server, 26 MB from peers"`, liveKey), 10*time.Second)
	slices.Sort(lat)
	fmt.Fprintf(&timings, "live update, event posted → row updated: median %.0f ms, max %.0f ms (10 updates)\n", lat[len(lat)/2], lat[len(lat)-1])

	// Filtering by state leaves the failed node alone.
	c.eval(t, `(() => { const s = document.querySelector("#state-filter"); s.value = "failed"; s.dispatchEvent(new Event("change")); })()`, nil)
	c.waitJS(t, "one row left by the filter", `[...document.querySelectorAll("#rows .row")].filter(r => !r.hidden).length === 1`, 5*time.Second)
	var shown string
	c.eval(t, `document.querySelector("#shown").textContent`, &shown)
	if shown != fmt.Sprintf("1 of %d nodes", nodes) {
		t.Fatalf("filter says %q", shown)
	}
	// Sorting by progress puts a provisioned node first when descending.
	c.eval(t, `(() => { const s = document.querySelector("#state-filter"); s.value = ""; s.dispatchEvent(new Event("change")); const th = document.querySelector('#nodes .head [data-sort="progress"]'); th.click(); th.click(); })()`, nil)
	c.waitJS(t, "sorted by progress, descending", `document.querySelector("#rows .row:not([hidden]) .state").textContent === "provisioned"`, 5*time.Second)

	// The failed node's page: its whole timeline, with the reason.
	key := site(failed) + "/" + node(failed)
	c.navigate(t, d.url+"/#node/"+key)
	c.waitJS(t, "the failed node's timeline", fmt.Sprintf(`document.querySelector("#timeline").innerText.includes(%q)`, failReason), 15*time.Second)
	var tl string
	c.eval(t, `document.querySelector("#timeline tbody").innerText`, &tl)
	for _, want := range []string{"checked in", "started 1/4 wipe-disk", "GET http://mirror.example.internal/images/edge-mutable.raw.gz: 200 OK", "2/4 image-to-disk failed"} {
		if !strings.Contains(tl, want) {
			t.Errorf("timeline lacks %q:\n%s", want, tl)
		}
	}
	// It follows: a new line appears without a reload.
	d.report(t, failed, plan.AgentEvent{Type: plan.AgentLog, Message: "operator: mirror re-synced, reprovision requested"})
	c.waitJS(t, "a new timeline line", `document.querySelector("#timeline").innerText.includes("mirror re-synced")`, 10*time.Second)
	// Its progress is still the step it failed at, though its newest
	// event is a log line that names none.
	var prog string
	c.eval(t, `document.querySelector("#node-progress").innerText`, &prog)
	if !strings.Contains(prog, "2/4 image-to-disk") {
		t.Errorf("the failed node's progress: %q", prog)
	}
	c.screenshot(t, filepath.Join(outDir(), "node.png"), false)

	// Expectations: Git says a node needs 64 GiB, its machine has 1: it is
	// held before any workflow, the reason in its row and on its page.
	const held = 9 // registered, never seen
	f, err := os.OpenFile(filepath.Join(d.repo, fleet.NodeFile(sites, held)), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "expect: {memory: \">=64Gi\"}\n")
	f.Close()
	small := &plan.Inventory{CPU: plan.CPUInfo{Threads: 2}, Memory: plan.MemoryInfo{Total: 1 << 30}}
	var reply plan.CheckInReply
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if reply = d.checkInWith(t, held, small); reply.Hold != "" || time.Now().After(deadline) {
			break
		}
	}
	if reply.Workflow != nil || !strings.Contains(reply.Hold, "memory: expected >=64Gi, found 1Gi") {
		t.Fatalf("the check-in of a machine short of memory: %+v", reply)
	}
	heldKey := site(held) + "/" + node(held)
	c.navigate(t, d.url+"/")
	c.waitJS(t, heldKey+" held in its row", fmt.Sprintf(`(() => { const r = document.querySelector('#rows .row[data-key="%s"]'); return !!r && r.innerText.includes("held") && r.innerText.includes("memory: expected >=64Gi, found 1Gi"); })()`, heldKey), 30*time.Second)
	c.navigate(t, d.url+"/#node/"+heldKey)
	c.waitJS(t, heldKey+"'s page says why", `document.querySelector("#node-summary").innerText.includes("memory: expected >=64Gi, found 1Gi")`, 15*time.Second)
	c.screenshot(t, filepath.Join(outDir(), "held.png"), false)

	// A broken edit is refused: the page says so, with the error's
	// position, and keeps showing the fleet served.
	c.navigate(t, d.url+"/")
	c.waitJS(t, "the fleet again", `window.bootops && window.bootops.complete !== undefined`, 30*time.Second)

	// Drift: a provisioned node is in sync; a new image in Git puts it
	// out of date, in its row.
	syncKey := site(0) + "/" + node(0) // i%5 == 0: provisioned
	syncJS := func(want string) string {
		return fmt.Sprintf(`(document.querySelector('#rows .row[data-key="%s"] .sync') || {}).textContent === %q`, syncKey, want)
	}
	c.waitJS(t, syncKey+" in sync", syncJS("in sync"), 30*time.Second)
	profiles, _ := filepath.Glob(filepath.Join(d.repo, "profiles", "*.yaml"))
	for _, f := range profiles {
		b, _ := os.ReadFile(f)
		os.WriteFile(f, regexp.MustCompile(`sha256: [0-9a-f]{64}`).ReplaceAll(b, []byte("sha256: "+strings.Repeat("5e", 32))), 0o644)
	}
	c.waitJS(t, syncKey+" out of date", syncJS("out of date"), 30*time.Second)
	var why string
	c.eval(t, fmt.Sprintf(`document.querySelector('#rows .row[data-key="%s"] .sync').title`, syncKey), &why)
	if !strings.HasPrefix(why, "out of date: image ") || !strings.Contains(why, "→5e5e5e5e…") {
		t.Errorf("the sync's detail: %q", why)
	}
	c.screenshot(t, filepath.Join(outDir(), "drift.png"), false)

	broken := filepath.Join(d.repo, fleet.NodeFile(sites, 3))
	body, err := os.ReadFile(broken)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, append(body, "profle: edge-mutable\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	c.waitJS(t, "the refused revision's banner", `!document.querySelector("#refused").hidden`, 20*time.Second)
	var banner string
	c.eval(t, `document.querySelector("#refused").innerText`, &banner)
	if want := fleet.NodeFile(sites, 3) + ":12:1: profle: unknown field (did you mean \"profile\"?)"; !strings.Contains(banner, "was refused (1 error)") || strings.Count(banner, want) != 1 {
		t.Errorf("the refused banner: %q", banner)
	}
	var rowsLeft int
	c.eval(t, `document.querySelectorAll("#rows .row").length`, &rowsLeft)
	if rowsLeft != nodes {
		var dbg any
		c.eval(t, `({href: location.href, fleetHidden: document.querySelector("#fleet").hidden, machines: machines.size, rows: rows.size, order: order.length, snaps: bootops.snapshots, updates: bootops.updates, shown: document.querySelector("#shown").textContent})`, &dbg)
		t.Errorf("after a refused edit the page shows %d nodes, want the %d served: %v", rowsLeft, nodes, dbg)
	}
	c.screenshot(t, filepath.Join(outDir(), "refused.png"), false)

	// A site of more than one daemon: the header's cluster line, with the
	// revision the members serve, and in red when they differ (the
	// members' document as a cluster's stream carries it).
	var line struct {
		Text, Class string
	}
	setCluster := func(serving string) {
		c.eval(t, `(() => { cluster = {member: "b", leader: "c", size: 3, quorum: true, roles: {"dhcp.lab": "c"},
			members: [{name: "a", offline: true}, {name: "c", current: true}], serving: `+serving+`}; renderCluster();
			const el = document.querySelector("#cluster"); return {text: el.textContent, class: el.className}; })()`, &line)
	}
	one, two := strings.Repeat("1", 40), strings.Repeat("2", 40)
	setCluster(fmt.Sprintf(`{b: %q, c: %q}`, one, one))
	if line.Text != "cluster: member b of 3 · leader c · with a majority · dhcp.lab: c · a offline · c current · serving 111111111111" || line.Class != "cluster" {
		t.Errorf("the cluster's line, one revision: %+v", line)
	}
	setCluster(fmt.Sprintf(`{b: %q, c: %q}`, one, two))
	if !strings.HasSuffix(line.Text, " · NOT THE SAME REVISION: b 111111111111, c 222222222222") || line.Class != "cluster bad" {
		t.Errorf("the cluster's line, two revisions: %+v", line)
	}

	t.Log("\n" + timings.String())
	if err := os.WriteFile(filepath.Join(outDir(), "timings.txt"), []byte(timings.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// staticFleet serves the fleet as GET /api/v1/status has it, as one static
// HTML table without script, and returns its URL.
func staticFleet(t *testing.T, d *daemon) string {
	t.Helper()
	resp, err := http.Get(d.url + "/api/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Nodes []struct {
			Node, Site, State string
			Last              struct{ Message string }
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil || len(doc.Nodes) != nodes {
		t.Fatalf("status: %d nodes, %v", len(doc.Nodes), err)
	}
	var b strings.Builder
	b.WriteString("<!doctype html><html><head><meta charset=utf-8><title>static</title></head><body><table><tr><th>Node<th>Site<th>State<th>Last message\n")
	for _, n := range doc.Nodes {
		fmt.Fprintf(&b, "<tr><td>%s<td>%s<td>%s<td>%s\n", html.EscapeString(n.Node), html.EscapeString(n.Site), html.EscapeString(n.State), html.EscapeString(n.Last.Message))
	}
	b.WriteString("</table></body></html>\n")
	page := b.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}
