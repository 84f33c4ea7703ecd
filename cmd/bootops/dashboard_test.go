package main

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// streamEvents reads server-sent events from the daemon's dashboard stream
// and hands each event's data to the returned channel.
func streamEvents(t *testing.T, d *daemon) <-chan string {
	t.Helper()
	resp, err := http.Get("http://" + d.addr + "/api/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %s", resp.Status)
	}
	out := make(chan string, 100)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				out <- data
			}
		}
		close(out)
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return out
}

func expectEvent(t *testing.T, events <-chan string, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case data, open := <-events:
			if !open {
				t.Fatalf("stream closed before %s", what)
			}
			if ok(data) {
				return
			}
		case <-deadline:
			t.Fatalf("no stream event with %s within 15 s", what)
		}
	}
}

func post(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The daemon serves the dashboard: the page, a stream that starts with the
// fleet and carries a node committed later, the action behind its token,
// and the streams as metrics.
func TestServeDashboard(t *testing.T) {
	repo := demoRepo(t)
	etc := t.TempDir()
	write(t, etc, "ui-token", "open-sesame\n")
	d := startDaemon(t, nil, "--source", repo, "--state-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--dhcp", "off", "--tftp-addr", "",
		"--ui-token-file", filepath.Join(etc, "ui-token"))

	if code, body := d.get("/"); code != 200 || !strings.Contains(body, "<title>bootops</title>") {
		t.Fatalf("GET /: %d %.200s", code, body)
	}
	events := streamEvents(t, d)
	expectEvent(t, events, "the demo nodes and the action offered", func(data string) bool {
		return strings.Contains(data, `"key":"lab/vm-serial"`) && strings.Contains(data, `"actions":true`)
	})

	// A node committed to the folder reaches the open stream.
	write(t, repo, "sites/lab/nodes/vm-new.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: vm-new\nidentity: {serial: SN-NEW-1}\nprofile: demo-disk\n")
	expectEvent(t, events, "the new node", func(data string) bool { return strings.Contains(data, `"key":"lab/vm-new"`) })

	sync := "http://" + d.addr + "/api/v1/sync"
	if code := post(t, sync, ""); code != http.StatusUnauthorized {
		t.Errorf("sync without a token: %d", code)
	}
	if code := post(t, sync, "wrong"); code != http.StatusForbidden {
		t.Errorf("sync with a wrong token: %d", code)
	}
	if code := post(t, sync, "open-sesame"); code != http.StatusAccepted {
		t.Errorf("sync with the token: %d", code)
	}
	_, metrics := d.get("/metrics")
	if got := metric(t, metrics, "bootops_dashboard_streams"); got != "1" {
		t.Errorf("bootops_dashboard_streams = %s, want 1", got)
	}
}

// The dashboard's action needs the operate role: a reader's token is
// refused (403); the operator token serve made in its state folder is
// taken.
func TestServeDashboardRoles(t *testing.T) {
	etc, state := t.TempDir(), t.TempDir()
	write(t, etc, "operators", "read reader-token-0123456789 alice\n")
	d := startDaemon(t, nil, "--source", demoRepo(t), "--state-dir", state, "--http-addr", "127.0.0.1:0", "--dhcp", "off", "--tftp-addr", "",
		"--operators-file", filepath.Join(etc, "operators"))
	events := streamEvents(t, d)
	expectEvent(t, events, "a snapshot that offers the action", func(data string) bool { return strings.Contains(data, `"actions":true`) })
	sync := "http://" + d.addr + "/api/v1/sync"
	if code := post(t, sync, "reader-token-0123456789"); code != http.StatusForbidden {
		t.Errorf("sync with a reader's token: %d, want 403", code)
	}
	operator, err := os.ReadFile(filepath.Join(state, "operator-token"))
	if err != nil {
		t.Fatal(err)
	}
	if code := post(t, sync, strings.TrimSpace(string(operator))); code != http.StatusAccepted {
		t.Errorf("sync with the state folder's operator token: %d, want 202", code)
	}
}
