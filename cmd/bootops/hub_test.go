package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/test/procstat"
	"github.com/bootops/bootops/trust"
)

func freeAddr(t *testing.T) string { return "127.0.0.1:" + procstat.FreePort() }

// The hub as an operator runs it: ca init, add-site, bootops hub, a site
// daemon with --hub; a machine booting at the site shows in the hub's
// status and logs; the site's registered nodes are listed.
func TestHubCommands(t *testing.T) {
	dir := t.TempDir()
	hubState, sites, seed := filepath.Join(dir, "hub"), filepath.Join(dir, "sites"), filepath.Join(dir, "lab.seed")
	if code, out, errs := bootops(t, nil, "ca", "init", "--host", "127.0.0.1", "--state-dir", hubState); code != 0 {
		t.Fatalf("ca init: %d %s %s", code, out, errs)
	}
	code, out, errs := bootops(t, nil, "hub", "add-site", "lab", "--sites-dir", sites, "-o", seed)
	if code != 0 || !strings.Contains(out, "site lab: seed in") {
		t.Fatalf("add-site: %d %s %s", code, out, errs)
	}
	if fi, err := os.Stat(seed); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("seed file: %v %v", fi, err)
	}
	if code, _, errs := bootops(t, nil, "hub", "add-site", "lab", "--sites-dir", sites, "-o", seed+"2"); code == 0 || !strings.Contains(errs, "registered already") {
		t.Errorf("add-site twice: %d %s", code, errs)
	}
	if code, _, errs := bootops(t, nil, "hub", "--sites-dir", sites, "--store", dir); code != 2 || !strings.Contains(errs, "TLS only") {
		t.Errorf("hub without TLS: %d %s", code, errs)
	}
	natsAddr, hubHTTP := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	hubDone := make(chan int, 1)
	var hubLog lockedBuffer
	go func() {
		e := &env{stdout: io.Discard, stderr: &hubLog, getenv: func(string) string { return "" }}
		hubDone <- run(ctx, e, []string{"hub", "--name", "hub-1", "--sites-dir", sites, "--store", filepath.Join(dir, "js"),
			"--tls-cert", filepath.Join(hubState, "tls/server.pem"), "--tls-key", filepath.Join(hubState, "tls/server-key.pem"),
			"--nats-addr", natsAddr, "--http-addr", hubHTTP})
	}()
	defer func() {
		cancel()
		select {
		case <-hubDone:
		case <-time.After(20 * time.Second):
			t.Error("the hub did not stop")
		}
	}()

	// A site daemon without --site cannot report: its credential is one site's.
	if code, _, errs := bootops(t, nil, "serve", "--source", demoRepo(t), "--hub", "nats://"+natsAddr, "--hub-seed", seed, "--hub-ca", filepath.Join(hubState, "tls/ca.pem")); code != 2 || !strings.Contains(errs, "--site S") {
		t.Errorf("serve --hub without --site: %d %s", code, errs)
	}
	d := startDaemon(t, nil, "--source", demoRepo(t), "--state-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--dhcp", "off", "--tftp-addr", "",
		"--site", "lab", "--hub", "nats://"+natsAddr, "--hub-seed", seed, "--hub-ca", filepath.Join(hubState, "tls/ca.pem"))
	if code, _ := d.get("/ipxe?serial=DEMO-0001"); code != 200 {
		t.Fatalf("script: %d", code)
	}
	hub := "http://" + hubHTTP
	var doc struct {
		Nodes []struct{ Key, State string }
		Sites []struct {
			Name      string
			LastHeard time.Time
			Plan      string
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, _ := bootops(t, nil, "status", "--server", hub, "-o", "json")
		doc.Nodes, doc.Sites = nil, nil
		json.Unmarshal([]byte(out), &doc)
		states := map[string]string{}
		for _, n := range doc.Nodes {
			states[n.Key] = n.State
		}
		if code == 0 && states["lab/vm-serial"] == "booting" && states["lab/vm-mac"] == "registered" && len(doc.Sites) == 1 && doc.Sites[0].Plan != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub's status: %s\nhub log:\n%s\nsite log:\n%s", out, hubLog.String(), d.stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A site added while the hub runs is let in.
	if code, out, errs := bootops(t, nil, "hub", "add-site", "east", "--sites-dir", sites, "-o", filepath.Join(dir, "east.seed")); code != 0 || !strings.Contains(out, "lets it in within") {
		t.Fatalf("add-site east: %d %s %s", code, out, errs)
	}
	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(hubLog.String(), `"added":["east"]`) {
		if time.Now().After(deadline) {
			t.Fatalf("the hub did not take in east:\n%s", hubLog.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, out, _ := bootops(t, nil, "logs", "lab/vm-serial", "--server", hub); code != 0 || !strings.Contains(out, "served the Micro-OS script") {
		t.Errorf("logs through the hub: %d\n%s", code, out)
	}
	if code, out, _ := bootops(t, nil, "status", "--server", hub); code != 0 || !strings.Contains(out, "vm-serial") || !strings.Contains(out, "vm-uuid") || !strings.Contains(out, "LAST HEARD") || !strings.Contains(out, " ago") {
		t.Errorf("status through the hub: %d\n%s", code, out)
	}
	// One site's document: its nodes only (none of a site it is not).
	for site, want := range map[string]int{"lab": len(doc.Nodes), "east": 0} {
		resp, err := http.Get(hub + "/api/v1/status?site=" + site)
		if err != nil {
			t.Fatal(err)
		}
		var one struct{ Nodes []struct{ Key string } }
		json.NewDecoder(resp.Body).Decode(&one)
		resp.Body.Close()
		if len(one.Nodes) != want {
			t.Errorf("GET /api/v1/status?site=%s: %d nodes, want %d", site, len(one.Nodes), want)
		}
	}
	resp, err := http.Get(hub + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "bootops_hub_sites 1") || !strings.Contains(string(b), "bootops_hub_applied_messages_total") {
		t.Errorf("hub metrics:\n%s", b)
	}
	// Read-only: no "fetch now" on the hub.
	resp, err = http.Post(hub+"/api/v1/sync", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Errorf("POST /api/v1/sync on the hub: %d", resp.StatusCode)
	}
}

// The hub's view shows every site: beyond loopback it needs a token, and
// with one it answers only requests that carry it (bootops status does,
// from $BOOTOPS_TOKEN). Its listeners are on loopback unless told.
func TestHubViewToken(t *testing.T) {
	dir := t.TempDir()
	hubState, sites := filepath.Join(dir, "hub"), filepath.Join(dir, "sites")
	if code, out, errs := bootops(t, nil, "ca", "init", "--host", "127.0.0.1", "--state-dir", hubState); code != 0 {
		t.Fatalf("ca init: %d %s %s", code, out, errs)
	}
	if code, _, errs := bootops(t, nil, "hub", "add-site", "lab", "--sites-dir", sites, "-o", filepath.Join(dir, "lab.seed")); code != 0 {
		t.Fatalf("add-site: %s", errs)
	}
	tlsFlags := []string{"--sites-dir", sites, "--store", filepath.Join(dir, "js"),
		"--tls-cert", filepath.Join(hubState, "tls/server.pem"), "--tls-key", filepath.Join(hubState, "tls/server-key.pem")}
	if code, _, errs := bootops(t, nil, append([]string{"hub", "--http-addr", ":0"}, tlsFlags...)...); code != 2 || !strings.Contains(errs, "--view-token-file") {
		t.Errorf("a view on every address without a token: %d %s", code, errs)
	}
	loose := filepath.Join(dir, "loose-token")
	os.WriteFile(loose, []byte("s3cret-view\n"), 0o644)
	if code, _, errs := bootops(t, nil, append([]string{"hub", "--view-token-file", loose}, tlsFlags...)...); code != 2 || !strings.Contains(errs, "chmod 600") {
		t.Errorf("a view token file others may read: %d %s", code, errs)
	}
	if code, _, errs := bootops(t, nil, append([]string{"hub", "--pprof-addr", ":0"}, tlsFlags...)...); code != 2 || !strings.Contains(errs, "--view-token-file") {
		t.Errorf("profiles on every address without a token: %d %s", code, errs)
	}
	// A cluster port is mutual TLS or nothing; its certificates come from
	// bootops ca route.
	if code, _, errs := bootops(t, nil, append([]string{"hub", "--cluster-addr", "127.0.0.1:0"}, tlsFlags...)...); code != 2 || !strings.Contains(errs, "--cluster-cert") {
		t.Errorf("a cluster port without TLS: %d %s", code, errs)
	}
	if code, out, errs := bootops(t, nil, "ca", "route", "h1", "--host", "h1.example.net,127.0.0.1", "--state-dir", hubState, "--out", dir); code != 0 || !strings.Contains(out, "h1's route certificate") {
		t.Fatalf("ca route: %d %s %s", code, out, errs)
	}
	if _, err := trust.RouteTLS(filepath.Join(dir, "h1.pem"), filepath.Join(dir, "h1-key.pem"), filepath.Join(hubState, "tls", trust.CAFile)); err != nil {
		t.Errorf("the route certificate ca route wrote: %v", err)
	}
	if code, _, errs := bootops(t, nil, "ca", "route", "h2", "--state-dir", hubState, "--out", dir); code != 2 || !strings.Contains(errs, "--host") {
		t.Errorf("ca route without --host: %d %s", code, errs)
	}
	if code, out, errs := bootops(t, nil, "hub", "--help"); !strings.Contains(out+errs, `"127.0.0.1:4222"`) || !strings.Contains(out+errs, `"127.0.0.1:8090"`) {
		t.Errorf("the listeners' defaults are not loopback: %d\n%s", code, errs)
	}
	token := filepath.Join(dir, "view-token")
	os.WriteFile(token, []byte("s3cret-view\n"), 0o600)
	natsAddr, hubHTTP := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	hubDone := make(chan int, 1)
	go func() {
		e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
		hubDone <- run(ctx, e, append([]string{"hub", "--nats-addr", natsAddr, "--http-addr", hubHTTP, "--view-token-file", token, "--site-max-machines", "5000"}, tlsFlags...))
	}()
	defer func() { cancel(); <-hubDone }()
	hub := "http://" + hubHTTP
	var code int
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(hub + "/api/v1/status"); err == nil {
			resp.Body.Close()
			code = resp.StatusCode
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != http.StatusUnauthorized {
		t.Errorf("the view without its token: %d", code)
	}
	for _, path := range []string{"/metrics", "/", "/api/v1/events?key=lab/x"} {
		if resp, err := http.Get(hub + path); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without the token: %v %v", path, resp.StatusCode, err)
		}
	}
	resp, err := http.Get(hub + "/?token=s3cret-view")
	if err != nil || resp.StatusCode != 200 || len(resp.Cookies()) != 1 {
		t.Fatalf("the dashboard with ?token=: %v %v", resp.StatusCode, err)
	}
	// The cookie proves the token without being it, and lets in.
	cookie := resp.Cookies()[0]
	if strings.Contains(cookie.Value, "s3cret-view") || !cookie.HttpOnly {
		t.Errorf("the view's cookie: %+v", cookie)
	}
	req, _ := http.NewRequest("GET", hub+"/api/v1/status", nil)
	req.AddCookie(cookie)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("the view with its cookie: %v %v", resp.StatusCode, err)
	}
	req.Header.Set("Cookie", viewCookie+"=s3cret-view")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the raw token as the cookie: %v %v", resp.StatusCode, err)
	}
	if code, out, errs := bootops(t, map[string]string{"BOOTOPS_TOKEN": "s3cret-view"}, "status", "--server", hub); code != 0 || !strings.Contains(out, "SITE") && !strings.Contains(out, "NODE") {
		t.Errorf("status with the token: %d %s %s", code, out, errs)
	}
}

// The sites folder fails closed: a key that cannot be read, or that is no
// key, lets its site out (the others stay); an empty folder, or one that
// cannot be read, lets nobody in.
func TestReadSitesFailsClosed(t *testing.T) {
	dir := t.TempDir()
	if code, _, errs := bootops(t, nil, "hub", "add-site", "north", "--sites-dir", dir, "-o", filepath.Join(t.TempDir(), "north.seed")); code != 0 {
		t.Fatal(errs)
	}
	os.Mkdir(filepath.Join(dir, "south.pub"), 0o700) // unreadable as a file
	os.WriteFile(filepath.Join(dir, "east.pub"), []byte("not a key\n"), 0o644)
	sites, errs := readSites(dir)
	if len(sites) != 1 || sites["north"] == "" || len(errs) != 2 {
		t.Errorf("sites %v, errors %v: want north alone and two errors", sites, errs)
	}
	empty := t.TempDir()
	if sites, errs := readSites(empty); len(sites) != 0 || len(errs) != 0 {
		t.Errorf("an empty folder: %v %v", sites, errs)
	}
	if sites, errs := readSites(filepath.Join(empty, "gone")); len(sites) != 0 || len(errs) != 1 {
		t.Errorf("a folder that is gone: %v %v", sites, errs)
	}
}
