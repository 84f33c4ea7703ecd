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
	resp, err := http.Get(hub + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "bootops_hub_sites 1") {
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
