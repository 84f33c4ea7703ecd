//go:build browser

package browser

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// chrome is a headless Debian Chromium driven over the DevTools protocol:
// just the calls these tests make (navigate, evaluate, screenshot).
type chrome struct {
	cmd *exec.Cmd
	ws  *websocket.Conn
	id  int
}

// startChrome starts Chromium with a fresh profile, no network of its own
// (no background requests, no component updates) and a page to drive.
func startChrome(t *testing.T) *chrome {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (Debian package chromium; make test installs it)")
	}
	profile := t.TempDir()
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run", "--disable-extensions",
		"--disable-default-apps", "--user-data-dir="+profile, "--remote-debugging-port=0",
		"--remote-allow-origins=http://127.0.0.1", "--window-size=1440,960", "about:blank")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &chrome{cmd: cmd}
	t.Cleanup(c.close)
	// "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/…"
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, after, ok := strings.Cut(sc.Text(), "DevTools listening on "); ok {
				found <- after
			}
		}
		close(found)
	}()
	var browserURL string
	select {
	case browserURL = <-found:
	case <-time.After(30 * time.Second):
		t.Fatal("chromium did not open its DevTools port within 30 s")
	}
	if browserURL == "" {
		t.Fatal("chromium exited before opening its DevTools port")
	}
	hostport := strings.Split(strings.TrimPrefix(browserURL, "ws://"), "/")[0]
	var targets []struct{ Type, WebSocketDebuggerURL string }
	for deadline := time.Now().Add(10 * time.Second); len(targets) == 0 || targets[0].Type != "page"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no page target: %+v", targets)
		}
		resp, err := http.Get("http://" + hostport + "/json/list")
		if err != nil {
			continue
		}
		var all []struct{ Type, WebSocketDebuggerURL string }
		json.NewDecoder(resp.Body).Decode(&all)
		resp.Body.Close()
		targets = targets[:0]
		for _, tg := range all {
			if tg.Type == "page" {
				targets = append(targets, tg)
			}
		}
	}
	ws, err := websocket.Dial(targets[0].WebSocketDebuggerURL, "", "http://127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ws.MaxPayloadBytes = 64 << 20
	c.ws = ws
	return c
}

func (c *chrome) close() {
	if c.ws != nil {
		c.ws.Close()
	}
	c.cmd.Process.Kill()
	c.cmd.Wait()
}

// call sends one DevTools command and waits for its answer (events that
// arrive meanwhile are skipped).
func (c *chrome) call(method string, params any, out any) error {
	c.id++
	id := c.id
	if err := websocket.JSON.Send(c.ws, map[string]any{"id": id, "method": method, "params": params}); err != nil {
		return err
	}
	c.ws.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := websocket.JSON.Receive(c.ws, &msg); err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
		if msg.ID != id {
			continue
		}
		if msg.Error != nil {
			return fmt.Errorf("%s: %s", method, msg.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(msg.Result, out)
		}
		return nil
	}
}

// eval runs a JavaScript expression in the page (a promise is awaited)
// and decodes its value into out.
func (c *chrome) eval(t *testing.T, expr string, out any) {
	t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := c.call("Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}, &r); err != nil {
		t.Fatal(err)
	}
	if r.ExceptionDetails != nil {
		t.Fatalf("%s: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(r.Result.Value) > 0 {
		if err := json.Unmarshal(r.Result.Value, out); err != nil {
			t.Fatalf("%s: %v (%s)", expr, err, r.Result.Value)
		}
	}
}

// waitJS waits until the expression is true in the page, up to timeout.
func (c *chrome) waitJS(t *testing.T, what, expr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		c.eval(t, "!!("+expr+")", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			c.eval(t, "document.body.innerText.slice(0, 2000)", &body)
			t.Fatalf("timed out after %s waiting for %s; the page says:\n%s", timeout, what, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *chrome) navigate(t *testing.T, url string) {
	t.Helper()
	if err := c.call("Page.navigate", map[string]any{"url": url}, nil); err != nil {
		t.Fatal(err)
	}
}

// screenshot saves the page as a PNG.
func (c *chrome) screenshot(t *testing.T, path string, fullPage bool) {
	t.Helper()
	var r struct {
		Data string `json:"data"`
	}
	if err := c.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": fullPage}, &r); err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(b))
}
