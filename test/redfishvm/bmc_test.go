package redfishvm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// newBMC is a BMC in front of a FakeMachine, served on loopback for the
// test's life.
func newBMC(t *testing.T, cfg Config) (*BMC, *FakeMachine, *httptest.Server) {
	t.Helper()
	fake := &FakeMachine{}
	if cfg.Machine == nil {
		cfg.Machine = fake
	}
	if cfg.MediaDir == "" {
		cfg.MediaDir = t.TempDir()
	}
	b := New(cfg)
	srv, err := b.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return b, fake, srv
}

// call sends a request with HTTP Basic (root, calvin) and returns the
// status and the JSON body (nil when there is none).
func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	req.SetBasicAuth("root", "calvin")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func boot(t *testing.T, srv *httptest.Server) string {
	_, sys := call(t, srv, "GET", systemPath, "")
	b := sys["Boot"].(map[string]any)
	return fmt.Sprintf("%v %v %v %v", sys["PowerState"], b["BootSourceOverrideTarget"], b["BootSourceOverrideEnabled"], b["BootSourceOverrideMode"])
}

// A one-time Cd override is taken by the power-on and cleared; a
// Continuous one by every boot; each reset type gives the machine its
// order, and what is refused says why.
func TestBootOverrideAndReset(t *testing.T) {
	b, fake, srv := newBMC(t, Config{})
	if got := boot(t, srv); got != "Off None Disabled UEFI" {
		t.Fatalf("at first: %s", got)
	}
	steps := []struct {
		method, path, body string
		status             int
		after              string
	}{
		{"PATCH", systemPath, `{"Boot":{"BootSourceOverrideTarget":"Cd","BootSourceOverrideEnabled":"Once","BootSourceOverrideMode":"Legacy"}}`, 200, "Off Cd Once Legacy"},
		{"POST", resetPath, `{"ResetType":"ForceRestart"}`, 409, "Off Cd Once Legacy"},
		{"POST", resetPath, `{"ResetType":"On"}`, 204, "On Cd Disabled Legacy"},
		{"POST", resetPath, `{"ResetType":"ForceRestart"}`, 204, "On Cd Disabled Legacy"},
		{"PATCH", systemPath, `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Continuous"}}`, 200, "On Pxe Continuous Legacy"},
		{"POST", resetPath, `{"ResetType":"PowerCycle"}`, 204, "On Pxe Continuous Legacy"},
		{"POST", resetPath, `{"ResetType":"ForceRestart"}`, 204, "On Pxe Continuous Legacy"},
		{"PATCH", systemPath, `{"Boot":{"BootSourceOverrideTarget":"Usb"}}`, 400, "On Pxe Continuous Legacy"},
		{"PATCH", systemPath, `{"Boot":{"BootSourceOverrideEnabled":"Always"}}`, 400, "On Pxe Continuous Legacy"},
		{"PATCH", systemPath, `{"Boot":{"BootSourceOverrideTarget":"Hdd","BootSourceOverrideEnabled":"Disabled"}}`, 200, "On Hdd Disabled Legacy"},
		{"POST", resetPath, `{"ResetType":"GracefulShutdown"}`, 204, "Off Hdd Disabled Legacy"},
		{"POST", resetPath, `{"ResetType":"Nmi"}`, 400, "Off Hdd Disabled Legacy"},
		{"POST", resetPath, `{"ResetType":"PowerCycle"}`, 204, "On Hdd Disabled Legacy"},
		{"POST", resetPath, `{"ResetType":"ForceOff"}`, 204, "Off Hdd Disabled Legacy"},
	}
	for i, s := range steps {
		if status, body := call(t, srv, s.method, s.path, s.body); status != s.status {
			t.Fatalf("step %d, %s %s: status %d, want %d: %v", i, s.path, s.body, status, s.status, body)
		}
		if got := boot(t, srv); got != s.after {
			t.Fatalf("step %d, %s %s: the system is %q, want %q", i, s.path, s.body, got, s.after)
		}
	}
	want := []string{"on Cd", "reset", "off", "on Pxe", "reset Pxe", "shutdown", "on", "off"}
	if got := fake.Calls(); !slices.Equal(got, want) {
		t.Errorf("the machine was told %q, want %q", got, want)
	}
	log := strings.Join(b.Saw("POST "+resetPath), "\n")
	for _, line := range []string{
		"POST " + resetPath + " ForceRestart (boot Cd first) (The requested operation is not supported in the present power state: the system is off.) -> 409",
		"POST " + resetPath + " On (boot Cd first)",
		"POST " + resetPath + " PowerCycle (boot Pxe first)",
	} {
		if !strings.Contains(log, line+"\n") {
			t.Errorf("the log lacks %q:\n%s", line, log)
		}
	}
	if got := b.Saw("PATCH"); len(got) != 5 || got[0] != "PATCH "+systemPath+" BootSourceOverrideEnabled=Once BootSourceOverrideMode=Legacy BootSourceOverrideTarget=Cd" {
		t.Errorf("PATCHes logged: %q", got)
	}
}

// A machine that fails its order: 500, the override kept for the next
// boot.
func TestResetMachineFails(t *testing.T) {
	_, fake, srv := newBMC(t, Config{})
	call(t, srv, "PATCH", systemPath, `{"Boot":{"BootSourceOverrideTarget":"Cd","BootSourceOverrideEnabled":"Once"}}`)
	fake.SetFail(errors.New("qemu would not start"))
	status, body := call(t, srv, "POST", resetPath, `{"ResetType":"On"}`)
	if status != 500 || !strings.Contains(fmt.Sprint(body), "qemu would not start") {
		t.Errorf("a failed power-on: %d %v", status, body)
	}
	if got := boot(t, srv); got != "Off Cd Once UEFI" {
		t.Errorf("after a failed power-on: %s", got)
	}
}

// imageServer serves an image of size bytes at /cd.iso (and 404
// elsewhere; /slow hangs until the client gives up).
func imageServer(t *testing.T, size int) (*httptest.Server, []byte) {
	image := bytes.Repeat([]byte("ISO9660!"), size/8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cd.iso":
			w.Write(image)
		case "/slow":
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, image
}

func cdState(t *testing.T, srv *httptest.Server) string {
	_, cd := call(t, srv, "GET", cdPath, "")
	return fmt.Sprintf("%v %v %v", cd["Inserted"], cd["Image"], cd["ConnectedVia"])
}

// InsertMedia downloads the image and gives the machine the file;
// EjectMedia takes it out and deletes it; a PATCH does either.
func TestVirtualMedia(t *testing.T) {
	images, image := imageServer(t, 64<<10)
	b, fake, srv := newBMC(t, Config{})
	url := images.URL + "/cd.iso"
	if got := cdState(t, srv); got != "false <nil> NotConnected" {
		t.Fatalf("at first: %s", got)
	}
	if status, body := call(t, srv, "POST", insertPath, `{"Image":"`+url+`","Inserted":true,"WriteProtected":true}`); status != 204 {
		t.Fatalf("insert: %d %v", status, body)
	}
	file := fake.Media()
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, image) {
		t.Fatalf("the machine's CD %s holds %d bytes (%v), want the %d served", file, len(got), err, len(image))
	}
	if got := cdState(t, srv); got != "true "+url+" URI" {
		t.Errorf("inserted: %s", got)
	}
	if status, _ := call(t, srv, "POST", insertPath, `{"Image":"`+url+`"}`); status != 409 {
		t.Errorf("a second insert: %d, want 409", status)
	}
	if status, _ := call(t, srv, "POST", ejectPath, `{}`); status != 204 {
		t.Errorf("eject: %d", status)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) || fake.Media() != "" || cdState(t, srv) != "false <nil> NotConnected" {
		t.Errorf("after eject: file %v, machine %q, CD %s", err, fake.Media(), cdState(t, srv))
	}
	if status, _ := call(t, srv, "PATCH", cdPath, `{"Image":"`+url+`","Inserted":true}`); status != 204 || cdState(t, srv) != "true "+url+" URI" {
		t.Errorf("PATCH insert: %d, %s", status, cdState(t, srv))
	}
	if status, _ := call(t, srv, "PATCH", cdPath, `{"Image":null,"Inserted":false}`); status != 204 || fake.Media() != "" {
		t.Errorf("PATCH eject: %d, machine %q", status, fake.Media())
	}
	if got := fake.Calls(); len(got) != 4 || got[0] != "insert "+file || got[1] != "eject" || !strings.HasPrefix(got[2], "insert ") || got[3] != "eject" {
		t.Errorf("the machine was told %q", got)
	}
	if got := b.Saw("POST " + insertPath); len(got) != 2 || got[0] != "POST "+insertPath+" "+url || !strings.HasSuffix(got[1], "-> 409") {
		t.Errorf("inserts logged: %q", got)
	}
}

// An image that cannot be had: each refusal says why, nothing is
// inserted and no file is left.
func TestVirtualMediaRefused(t *testing.T) {
	images, _ := imageServer(t, 64<<10)
	dir := t.TempDir()
	_, fake, srv := newBMC(t, Config{MediaDir: dir, MaxImage: 32 << 10, DownloadTimeout: 2 * time.Second})
	onlyElsewhere := netip.MustParseAddr("198.18.0.9")
	_, _, strict := newBMC(t, Config{AllowDownload: func(a netip.Addr) bool { return a == onlyElsewhere }})
	for _, c := range []struct {
		srv  *httptest.Server
		body string
		want string
	}{
		{srv, `{"Image":"` + images.URL + `/cd.iso"}`, "more than the 32768 bytes this BMC takes"},
		{srv, `{"Image":"` + images.URL + `/missing.iso"}`, "404 Not Found"},
		{srv, `{"Image":"ftp://127.0.0.1/cd.iso"}`, "is not an http or https URL"},
		{srv, `{"Image":"` + images.URL + `/slow"}`, "context deadline exceeded"},
		{srv, `{"Image":"` + images.URL + `/cd.iso","WriteProtected":false}`, "always write-protected"},
		{strict, `{"Image":"` + images.URL + `/cd.iso"}`, "only from loopback or the tests' networks, not 127.0.0.1"},
	} {
		status, body := call(t, c.srv, "POST", insertPath, c.body)
		if status != 400 || !strings.Contains(fmt.Sprint(body), c.want) {
			t.Errorf("insert %s: %d %v, want 400 saying %q", c.body, status, body, c.want)
		}
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("the machine was told %q", calls)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("files left: %q", left)
	}
}

// Without credentials, or with wrong ones, only the service root
// answers; a session logs in and out; Basic works on every request.
func TestAuth(t *testing.T) {
	b, _, srv := newBMC(t, Config{})
	get := func(path string, set func(*http.Request)) int {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		set(req)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	none := func(*http.Request) {}
	if s := get(rootPath+"/", none); s != 200 {
		t.Errorf("service root without credentials: %d", s)
	}
	if s := get(systemPath, none); s != 401 {
		t.Errorf("system without credentials: %d", s)
	}
	if s := get(systemPath, func(r *http.Request) { r.SetBasicAuth("root", "wrong") }); s != 401 {
		t.Errorf("system with a wrong password: %d", s)
	}
	resp, err := srv.Client().Post(srv.URL+sessionsPath, "application/json", strings.NewReader(`{"UserName":"root","Password":"calvin"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	token, where := resp.Header.Get("X-Auth-Token"), resp.Header.Get("Location")
	if resp.StatusCode != 201 || token == "" || where != sessionsPath+"/1" {
		t.Fatalf("login: %d token %q at %q", resp.StatusCode, token, where)
	}
	withToken := func(r *http.Request) { r.Header.Set("X-Auth-Token", token) }
	if s := get(managerPath, withToken); s != 200 {
		t.Errorf("manager with the session: %d", s)
	}
	req, _ := http.NewRequest("DELETE", srv.URL+where, nil)
	withToken(req)
	if resp, err := srv.Client().Do(req); err != nil || resp.StatusCode != 204 {
		t.Fatalf("logout: %v %v", resp, err)
	}
	if s := get(managerPath, withToken); s != 401 {
		t.Errorf("manager after the logout: %d", s)
	}
	if n := b.Logins(); n != 2 {
		t.Errorf("%d logins counted, want 2 (the wrong Basic one, the session)", n)
	}
}
