package daemon

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConnsDefault(t *testing.T) {
	if n := (HTTPConfig{}).Conns(); n < 64 {
		t.Errorf("--max-conns by default: %d", n)
	}
	if n := (HTTPConfig{MaxConns: 10}).Conns(); n != 10 {
		t.Errorf("--max-conns 10: %d", n)
	}
}

// A full table of unknown machines says so at most every 10 s, with how
// many sightings went since it last did.
func TestEvictionNotice(t *testing.T) {
	var b strings.Builder
	n := &evictionNotice{log: slog.New(slog.NewTextHandler(&b, nil)), limit: 1000}
	for range 5 {
		n.evicted(10)
	}
	if got := strings.Count(b.String(), "is full"); got != 1 || !strings.Contains(b.String(), "dropped=10") {
		t.Errorf("notices: %q", b.String())
	}
	n.last.Store(time.Now().Add(-11 * time.Second).UnixNano())
	n.evicted(1)
	if got := strings.Count(b.String(), "is full"); got != 2 || !strings.Contains(b.String(), "dropped=41") {
		t.Errorf("the second notice does not count what went since the first: %q", b.String())
	}
}

// SIGHUP applies the interval, keyring, secrets and log level; the other
// settings are named as needing a restart, by their flags.
func TestRestartNeeded(t *testing.T) {
	a := Config{StateDir: "/s", Source: SourceConfig{Source: "x", Sites: []string{"a"}, Interval: time.Second}, HTTP: HTTPConfig{Addr: ":8080"}}
	b := a
	b.Source.Interval, b.LogLevel, b.Dashboard.TokenFile = time.Minute, slog.LevelDebug, "t"
	if got := restartNeeded(a, b); len(got) != 0 {
		t.Errorf("reloadable changes: restart for %v", got)
	}
	b.Source.Sites, b.HTTP.Addr, b.TFTP.GRUB = []string{"a", "b"}, ":9090", "g"
	got := restartNeeded(a, b)
	slices.Sort(got)
	if want := []string{"grub", "http-addr", "site"}; !slices.Equal(got, want) {
		t.Errorf("restart for %v, want %v", got, want)
	}
}
