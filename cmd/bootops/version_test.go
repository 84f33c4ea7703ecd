package main

import (
	"runtime/debug"
	"testing"
)

// What the version line says for each way bootops is built.
func TestVersionLine(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		name, set string
		bi        *debug.BuildInfo
		want      string
	}{
		{"make build (-X main.version, no VCS stamp)", "v0.9.0-3-g0123abc", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"bootops v0.9.0-3-g0123abc (repository format bootops.dev/v1alpha1; go1.26.8)"},
		{"go install …@v0.9.0", "dev", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.9.0"}},
			"bootops v0.9.0 (repository format bootops.dev/v1alpha1; go1.26.8)"},
		{"go build in a checkout", "dev", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			"bootops dev (repository format bootops.dev/v1alpha1; commit 0123abcd 2026-11-01T10:00:00Z, modified; go1.26.8)"},
		{"no build info", "dev", nil, "bootops dev (repository format bootops.dev/v1alpha1)"},
	} {
		if got := versionLine(c.set, c.bi); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
