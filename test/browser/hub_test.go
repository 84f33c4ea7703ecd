//go:build browser

package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/hub"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/trust"
)

// The hub's dashboard: every site's machines, and a site whose link is
// down says since when it was last heard.
func TestHubDashboard(t *testing.T) {
	work := t.TempDir()
	bin := filepath.Join(work, "bootops")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/bootops").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	state, sitesDir := filepath.Join(work, "hubstate"), filepath.Join(work, "sites")
	if out, err := exec.Command(bin, "ca", "init", "--host", "127.0.0.1", "--state-dir", state).CombinedOutput(); err != nil {
		t.Fatalf("ca init: %v\n%s", err, out)
	}
	seeds := map[string][]byte{}
	for _, s := range []string{"north", "south"} {
		seed := filepath.Join(work, s+".seed")
		if out, err := exec.Command(bin, "hub", "add-site", s, "--sites-dir", sitesDir, "-o", seed).CombinedOutput(); err != nil {
			t.Fatalf("add-site: %v\n%s", err, out)
		}
		b, _ := os.ReadFile(seed)
		seeds[s] = []byte(strings.TrimSpace(string(b)))
	}
	addrs := testutil.FreePorts(t, 2)
	natsAddr, httpAddr := addrs[0], addrs[1]
	h := exec.Command(bin, "hub", "--name", "hub-1", "--sites-dir", sitesDir, "--store", filepath.Join(work, "js"),
		"--tls-cert", filepath.Join(state, "tls/server.pem"), "--tls-key", filepath.Join(state, "tls/server-key.pem"),
		"--nats-addr", natsAddr, "--http-addr", httpAddr)
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Process.Kill(); h.Wait() })
	ca, _ := os.ReadFile(filepath.Join(state, "tls/ca.pem"))
	pool, err := trust.PoolFromPEM(string(ca))
	if err != nil {
		t.Fatal(err)
	}
	stops := map[string]func(){}
	for i, s := range []string{"north", "south"} {
		st, err := status.Open(filepath.Join(work, s+".db"), status.Options{Outbox: true})
		if err != nil {
			t.Fatal(err)
		}
		for n := range 3 {
			st.RecordSync(status.Event{Kind: status.KindScript, Site: s, Node: fmt.Sprintf("n%d", n), MAC: fmt.Sprintf("52:54:00:00:%02x:%02x", i, n), State: status.StateBooting, Message: "served the Micro-OS script"})
		}
		ctx, cancel := context.WithCancel(context.Background())
		f := &hub.Forwarder{Site: s, URLs: []string{"nats://" + natsAddr}, Seed: seeds[s], RootCAs: pool, Outbox: st, HelloEvery: 2 * time.Second,
			Hello: func() hub.Hello { return hub.Hello{Plan: "plan-" + s, Nodes: []string{"n0", "n1", "n2", "n3"}} }}
		done := make(chan struct{})
		go func() { defer close(done); f.Run(ctx) }()
		stops[s] = func() { cancel(); <-done }
		t.Cleanup(func() { stops[s](); st.Close() })
	}
	c := startChrome(t)
	c.navigate(t, "http://"+httpAddr+"/")
	c.waitJS(t, "both sites' machines", `document.querySelectorAll("#rows .row").length === 8`, 30*time.Second)
	var rev string
	c.eval(t, `document.querySelector("#revision").textContent`, &rev)
	if !strings.Contains(rev, "hub hub-1 · 2 sites") {
		t.Errorf("the hub's heading: %q", rev)
	}
	// south's link goes down: after 30 s of silence its row says so.
	stops["south"]()
	stops["south"] = func() {}
	c.waitJS(t, "south's last heard", `[...document.querySelectorAll("#sites .site h3")].some(h => h.textContent.startsWith("south") && h.textContent.includes("last heard"))`, 60*time.Second)
	var heads []string
	c.eval(t, `[...document.querySelectorAll("#sites .site h3")].map(h => h.textContent)`, &heads)
	for _, h := range heads {
		if strings.HasPrefix(h, "north") && strings.Contains(h, "last heard") {
			t.Errorf("north, still connected: %q", h)
		}
	}
	t.Logf("site rows: %q", heads)
	c.screenshot(t, filepath.Join(outDir(), "hub.png"), false)
}
