package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The Helm chart's ConfigMap, as rendered for each of its tests' value
// sets (deploy/helm keeps them in testdata and fails when they drift),
// is a settings file serve's own loader takes.
func TestHelmChartConfig(t *testing.T) {
	files, _ := filepath.Glob("../../deploy/helm/testdata/serve-config/*.yaml")
	if len(files) == 0 {
		t.Fatal("no rendered settings in deploy/helm/testdata/serve-config")
	}
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	for _, f := range files {
		cfg, err := serveCmd().serveConfig(e, []string{"--config", f})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if cfg.stateDir != "/var/lib/bootops" || cfg.source == "" || cfg.configFile != f {
			t.Errorf("%s: state-dir %q, source %q", f, cfg.stateDir, cfg.source)
		}
	}
}

// The chart's schema lets through exactly serve's settings, less the ones
// the chart sets itself: a flag added to serve must be added there too.
func TestHelmChartSchemaNamesServeFlags(t *testing.T) {
	data, err := os.ReadFile("../../deploy/helm/bootops/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Serve struct {
				Properties struct {
					Config struct {
						Properties map[string]json.RawMessage `json:"properties"`
					} `json:"config"`
				} `json:"properties"`
			} `json:"serve"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	var inSchema []string
	for k := range schema.Properties.Serve.Properties.Config.Properties {
		inSchema = append(inSchema, k)
	}
	chartOwned := []string{"config", "state-dir", "http-addr", "https-addr", "tftp-addr", "verify-commits",
		"git-password-file", "git-ssh-key", "git-known-hosts", "webhook-secret-file", "ui-token-file", "secrets-dir"}
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	fs := serveCmd().flags(e)
	var cfg serveConfig
	cfg.gitFlags(fs)
	cfg.bootFlags(fs)
	cfg.powerFlags(fs)
	cfg.runFlags(fs)
	var flags []string
	fs.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(chartOwned, f.Name) {
			flags = append(flags, f.Name)
		}
	})
	slices.Sort(inSchema)
	slices.Sort(flags)
	if !slices.Equal(inSchema, flags) {
		t.Errorf("serve.config in values.schema.json:\n  %v\nserve's flags but the chart's own:\n  %v", inSchema, flags)
	}
}
