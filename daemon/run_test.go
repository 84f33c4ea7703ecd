package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// lockedBuffer is a log the daemon writes while the test reads it.
type lockedBuffer struct{ testutil.SyncBuffer }

// field is the value of key in the first JSON log line of msg.
func (l *lockedBuffer) field(msg, key string) string {
	for _, line := range strings.Split(l.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			s, _ := m[key].(string)
			return s
		}
	}
	return ""
}

func demoConfig(t testing.TB, log io.Writer) Config {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "sites")
	if err := os.CopyFS(repo, os.DirFS("../sites")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"microos/vmlinuz", "microos/initrd.img"} {
		if err := os.WriteFile(filepath.Join(repo, f), []byte("bytes"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Config{
		Log: slog.New(slog.NewJSONHandler(log, nil)), Stderr: log, StateDir: t.TempDir(), DrainTimeout: time.Second,
		Source: SourceConfig{Source: repo, Interval: time.Minute, CompileTimeout: time.Minute, CompileMemory: 1 << 30},
		Status: StatusConfig{UnknownMax: 100, UnknownMB: 1, NodeGrace: time.Hour, NodeBurst: 10, NodeEvery: time.Second},
		HTTP:   HTTPConfig{Addr: "127.0.0.1:0", ArtifactMode: "serve", PerSource: 64, NewBurst: 20, NewEvery: time.Second},
		DHCP:   DHCPConfig{Mode: "off"},
		Power:  PowerConfig{Interval: time.Hour, Timeout: time.Second},
		Swarm:  SwarmConfig{Streams: 4},
	}
}

// Run serves a folder over HTTP on loopback, its metrics too, and
// returns nil when its context ends.
func TestRunServesFolder(t *testing.T) {
	var log lockedBuffer
	cfg := demoConfig(t, &log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	// Each ask reads the whole log, which grows as the daemon starts: a
	// wide margin.
	var addr string
	testutil.Poll(10*time.Second, 10*time.Millisecond, func() bool {
		addr = log.field("started", "http")
		return addr != "" && log.field("serving", "site") != ""
	})
	if addr == "" {
		cancel()
		t.Fatalf("not started: %v\n%s", <-done, log.String())
	}
	for path, want := range map[string]string{
		"/ipxe?serial=DEMO-0001": "#!ipxe",
		"/metrics":               "bootops_http_conns_open",
	} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, want %q in\n%s", path, resp.StatusCode, want, body)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// A keyring that is no keyring is the settings' fault: a ConfigError.
func TestRunBadKeyring(t *testing.T) {
	cfg := demoConfig(t, io.Discard)
	cfg.Source.VerifyCommits = filepath.Join(t.TempDir(), "keys.asc")
	if err := os.WriteFile(cfg.Source.VerifyCommits, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ce *ConfigError
	if err := Run(context.Background(), cfg); !errors.As(err, &ce) || !strings.Contains(err.Error(), "--verify-commits") {
		t.Errorf("Run: %v, want a ConfigError about --verify-commits", err)
	}
}
