package http

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/agentapi"
	"github.com/bootops/bootops/boot/internal/boottest"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// The fixtures both HTTP packages test with.
var (
	testPlan    = boottest.Plan
	inventoryOf = boottest.Inventory
)

// testSecret signs the tests' credentials.
var testSecret = boot.Secret(strings.Repeat("k", 32))

// tokenIn is the boot token a served script carries ("" if none).
func tokenIn(script string) string {
	_, rest, ok := strings.Cut(script, "bootops.token=")
	if !ok {
		return ""
	}
	tok, _, _ := strings.Cut(rest, " ")
	tok, _, _ = strings.Cut(tok, "\n")
	return tok
}

func newServer(t testing.TB, p *plan.Plan) (*Server, *status.Memory, string) {
	t.Helper()
	repo := t.TempDir()
	os.MkdirAll(filepath.Join(repo, "microos"), 0o755)
	os.WriteFile(filepath.Join(repo, "microos/vmlinuz"), []byte("0123456789abcdef"), 0o644)
	root, err := os.OpenRoot(repo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	live := &boot.Live{}
	live.Swap(p)
	mem := &status.Memory{}
	provisioned := func(site, node string) (int, bool) {
		if node == "b" {
			return 1, true // provisioned at generation 1; the node is at 2
		}
		return 0, false
	}
	s := &Server{Plans: live, Events: mem, View: View{Status: mem}, Secret: testSecret,
		Files:    Files{Artifacts: &Artifacts{Repo: root, CacheDir: t.TempDir()}},
		Machines: Machines{Provisioned: provisioned},
		Agent:    &agentapi.Server{Plans: live, Secret: testSecret, Store: memStore{mem, &status.MemorySessions{}}, Provisioned: provisioned},
	}
	return s, mem, repo
}

// memStore is the status store in memory, with the agents' sessions.
type memStore struct {
	*status.Memory
	*status.MemorySessions
}

func (m memStore) RecordSync(evs ...status.Event) error {
	for _, e := range evs {
		m.Record(e)
	}
	return nil
}

func get(t testing.TB, h http.Handler, target string, hdr ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest("GET", target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t testing.TB, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestScripts(t *testing.T) {
	s, mem, _ := newServer(t, testPlan("", ""))
	h := s.Handler()
	for name, c := range map[string]struct {
		query, want, state, key string
		// The boot token's subject and generation ("" when the script
		// carries none).
		subject string
		gen     int
	}{
		"serial match":         {"serial=ser-a&mac=52:54:00:99:99:99&site=lab", "bootops.node=a bootops.token=", status.StateBooting, "lab/a", "a", 0},
		"mac, reprovision due": {"mac=52-54-00-00-00-0B", "bootops.node=b bootops.token=", status.StateBooting, "lab/b", "b", 2},
		"mismatch":             {"mac=52:54:00:00:00:0b&serial=SER-A", "REFUSED", status.StateMismatch, "lab/a", "", 0},
		"unknown provision":    {"serial=NEW1&site=lab", " bootops.machine=serial:NEW1", status.StateBooting, "serial:NEW1", "unknown-serial:NEW1", 0},
		"unknown ignored":      {"mac=52:54:00:12:34:56&site=quiet", "site quiet ignores unknown machines\nexit 1", "", "mac:52:54:00:12:34:56", "", 0},
		"junk identity":        {"serial=To%20Be%20Filled&uuid=00000000-0000-0000-0000-000000000000&mac=zz&site=lab", " bootops.machine=ip:192.0.2.1\n", status.StateBooting, "ip:192.0.2.1", "unknown-ip:192.0.2.1", 0},
		// A serial iPXE would read as commands, and no MAC: keyed by the
		// address, never by an empty key.
		"smuggled serial":  {"serial=%0A%23!ipxe%0Ashell&site=lab", " bootops.machine=ip:192.0.2.1\n", status.StateBooting, "ip:192.0.2.1", "unknown-ip:192.0.2.1", 0},
		"expanding serial": {"serial=x${net0/ip}&site=lab", " bootops.machine=ip:192.0.2.1\n", status.StateBooting, "ip:192.0.2.1", "unknown-ip:192.0.2.1", 0},
	} {
		t.Run(name, func(t *testing.T) {
			r := get(t, h, "/ipxe?"+c.query)
			got := body(t, r)
			if !strings.HasPrefix(got, "#!ipxe\n") || !strings.Contains(got, c.want) || strings.Contains(got, plan.TokenPlaceholder) {
				t.Errorf("script:\n%s\nwant it to contain %q", got, c.want)
			}
			if strings.Contains(got, "bootops.machine= ") || strings.Contains(got, "bootops.machine=\n") {
				t.Errorf("an empty machine key:\n%s", got)
			}
			tok := tokenIn(got)
			if (tok != "") != (c.subject != "") {
				t.Fatalf("token %q in:\n%s", tok, got)
			}
			if c.subject != "" {
				g, err := testSecret.Verify(tok, boot.KindBoot, "lab", c.subject, time.Now())
				if err != nil || g.Generation != c.gen {
					t.Errorf("token %q for %s: %+v %v", tok, c.subject, g, err)
				}
			}
			ev := mem.Events(c.key)
			if len(ev) == 0 || ev[len(ev)-1].State != c.state || ev[len(ev)-1].Kind != status.KindScript {
				t.Errorf("events of %s: %+v, want last state %q", c.key, ev, c.state)
			}
		})
	}
}

func TestProvisionedBootsLocally(t *testing.T) {
	p := testPlan("", "")
	p.Sites[0].Nodes[1].Reprovision = 1 // provisioned at 1, still at 1
	s, _, _ := newServer(t, p)
	got := body(t, get(t, s.Handler(), "/ipxe?mac=52:54:00:00:00:0b"))
	if got != "#!ipxe\necho bootops: node b is provisioned (generation 1): booting from its disk\nset bootops-disk 1\niseq ${platform} efi && exit 1 ||\nexit\n" {
		t.Errorf("script: %q", got)
	}
}

func TestEntryScript(t *testing.T) {
	s, _, _ := newServer(t, testPlan("", ""))
	req := httptest.NewRequest("GET", "/boot.ipxe?site=lab", nil)
	req.Host = "198.18.0.1:8080"
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	want := "chain http://198.18.0.1:8080/ipxe?mac=${netX/mac}&uuid=${uuid}&serial=${serial:uristring}&arch=${buildarch}&platform=${platform}&site=lab || goto failed\n"
	if got := rec.Body.String(); !strings.HasPrefix(got, "#!ipxe\n") || !strings.Contains(got, want) {
		t.Errorf("entry script:\n%s", got)
	}
	// A local-disk script's error on UEFI is handed on to the firmware,
	// not taken for a dead server.
	if got := rec.Body.String(); !strings.Contains(got, ":failed\nisset ${bootops-disk} && exit 1 ||\necho bootops: the boot server did not answer") {
		t.Errorf("entry script does not hand a local boot back:\n%s", got)
	}
}

func TestArtifacts(t *testing.T) {
	initrd := []byte(strings.Repeat("initrd-bytes ", 1000))
	sum := sha256.Sum256(initrd)
	hits := 0
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		w.Write(initrd)
	}))
	defer origin.Close()
	s, _, _ := newServer(t, testPlan(origin.URL+"/initrd", hex.EncodeToString(sum[:])))
	h := s.Handler()

	r := get(t, h, "/artifacts/microos/default/kernel", "Range", "bytes=4-7")
	if r.StatusCode != http.StatusPartialContent || body(t, r) != "4567" {
		t.Errorf("kernel range: %d", r.StatusCode)
	}
	for range 3 {
		r = get(t, h, "/artifacts/microos/default/initrd")
		if got := body(t, r); r.StatusCode != 200 || got != string(initrd) || r.Header.Get("ETag") != `"`+hex.EncodeToString(sum[:])+`"` {
			t.Fatalf("initrd: %d %d bytes %q", r.StatusCode, len(got), r.Header.Get("ETag"))
		}
	}
	if hits != 1 {
		t.Errorf("origin fetched %d times, want once (cache)", hits)
	}
	r = get(t, h, "/artifacts/microos/default/initrd", "If-None-Match", `"`+hex.EncodeToString(sum[:])+`"`)
	if r.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: %d", r.StatusCode)
	}
	for _, bad := range []string{"/artifacts/microos/default/passwd", "/artifacts/microos/nope/kernel", "/artifacts/microos/../../etc/kernel", "/artifacts/microos/%2e%2e/kernel"} {
		if r := get(t, h, bad); r.StatusCode != http.StatusNotFound && r.StatusCode != http.StatusTemporaryRedirect {
			t.Errorf("%s: %d", bad, r.StatusCode)
		}
	}

	// A URL whose bytes do not match the sha256 is never served.
	s2, mem, _ := newServer(t, testPlan(origin.URL+"/initrd", strings.Repeat("ab", 32)))
	r = get(t, s2.Handler(), "/artifacts/microos/default/initrd")
	if r.StatusCode != http.StatusBadGateway || !strings.Contains(body(t, r), "not served") {
		t.Errorf("bad sha256: %d", r.StatusCode)
	}
	if m := mem.Machines(); len(m) != 1 || !m[0].Last.Error {
		t.Errorf("no error event: %+v", m)
	}
	if ents, _ := os.ReadDir(s2.Files.Artifacts.CacheDir); len(ents) != 0 {
		t.Errorf("cache kept %d files after a bad download", len(ents))
	}

	// Redirect mode sends machines to the URL itself.
	s2.Files.Artifacts.Redirect = true
	r = get(t, s2.Handler(), "/artifacts/microos/default/initrd")
	if r.StatusCode != http.StatusFound || r.Header.Get("Location") != origin.URL+"/initrd" {
		t.Errorf("redirect: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
}

func TestStatusAPI(t *testing.T) {
	s, _, _ := newServer(t, testPlan("", ""))
	h := s.Handler()
	get(t, h, "/ipxe?serial=SER-A")
	get(t, h, "/ipxe?serial=STRANGER&site=lab")
	var doc StatusDoc
	if err := json.Unmarshal([]byte(body(t, get(t, h, "/api/v1/status"))), &doc); err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, n := range doc.Nodes {
		states[n.Key] = n.State
	}
	if doc.Plan != "h1" || states["lab/a"] != status.StateBooting || states["lab/b"] != status.StateRegistered || len(doc.Machines) != 1 || doc.Machines[0].Serial != "STRANGER" {
		t.Errorf("status: %+v", doc)
	}
	var ev []status.Event
	json.Unmarshal([]byte(body(t, get(t, h, "/api/v1/events?site=lab&node=a"))), &ev)
	if len(ev) != 1 || ev[0].Node != "a" {
		t.Errorf("events: %+v", ev)
	}
}

func FuzzParseIdentity(f *testing.F) {
	f.Add("mac=52:54:00:00:00:01&uuid=01020304-0506-0708-090a-0b0c0d0e0f10&serial=SN1&arch=x86_64&platform=pcbios&site=lab")
	f.Add("serial=%00%ff&mac=&uuid=zz&site=../../x")
	f.Fuzz(func(t *testing.T, q string) {
		v, err := url.ParseQuery(q)
		if err != nil {
			return
		}
		id := parseIdentity(v)
		for _, s := range []string{id.Site, id.Arch, id.Platform, id.Machine.Serial} {
			if strings.ContainsAny(s, " \n\r\t") || s != id.Machine.Serial && strings.ContainsAny(s, "$/.") || len(s) > 64 {
				t.Fatalf("unclean value %q from %q", s, q)
			}
		}
		if id.Machine.MAC != "" && plan.NormalizeMAC(id.Machine.MAC) != id.Machine.MAC {
			t.Fatalf("mac %q not normalised", id.Machine.MAC)
		}
	})
}

// 10,000 different identities from one client: every request answered,
// the status store stays within its bound.
func TestManyIdentitiesFromOneClient(t *testing.T) {
	testutil.Slow(t)
	s, mem, _ := newServer(t, testPlan("", ""))
	mem.MaxUnknown = 1000
	h := s.Handler()
	for i := range 10000 {
		r := get(t, h, fmt.Sprintf("/ipxe?serial=FLOOD%05d&mac=52:54:%02x:%02x:00:01&uuid=junk%d&site=lab", i, i>>8, i&0xff, i))
		if r.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, r.StatusCode)
		}
	}
	if n := len(mem.Machines()); n > 1000 {
		t.Errorf("%d machines kept, bound 1000", n)
	}
}
