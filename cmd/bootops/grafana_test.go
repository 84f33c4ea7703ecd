package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bootops/bootops/reconciler"
)

// descNames is a prometheus.Registerer that keeps the names of what is
// registered on it, series or not.
type descNames map[string]bool

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r descNames) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r[m[1]] = true
		}
	}
	return nil
}

func (r descNames) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Register(c)
	}
}

func (r descNames) Unregister(prometheus.Collector) bool { return false }

// daemonMetrics returns every metric family a running `bootops serve`
// exposes on /metrics, by name, with its type, plus every family the
// reconciler registers (some have no series until they happen, e.g. git
// source checks).
func daemonMetrics(t *testing.T) map[string]string {
	t.Helper()
	d := startDaemon(t, nil, "--source", demoRepo(t), "--state-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--dhcp", "off", "--tftp-addr", "")
	// The rollout controller's gauges have series after its first round,
	// once the first Plan is in.
	var code int
	var body string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body = d.get("/metrics")
		if code != 200 || strings.Contains(body, "bootops_nodes_out_of_date") || time.Now().After(deadline) {
			break
		}
	}
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	types := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	names := descNames{}
	reconciler.NewMetrics(names)
	for n := range names {
		if types[n] == "" {
			types[n] = "registered"
		}
	}
	return types
}

// TestGrafanaDashboard checks examples/grafana/bootops.json: a Grafana
// dashboard whose queries use the Prometheus data source variable and only
// metrics the daemon has.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("../../examples/grafana/bootops.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID           string `json:"uid"`
		Title         string `json:"title"`
		SchemaVersion int    `json:"schemaVersion"`
		Templating    struct {
			List []struct{ Name, Type, Query any }
		}
		Panels []grafanaPanel `json:"panels"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&dash); err != nil {
		t.Fatalf("bootops.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" || dash.SchemaVersion < 30 || len(dash.Panels) == 0 {
		t.Errorf("not a dashboard model: uid %q, title %q, schemaVersion %d, %d panels", dash.UID, dash.Title, dash.SchemaVersion, len(dash.Panels))
	}
	hasDS := false
	for _, v := range dash.Templating.List {
		if v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Errorf("no datasource variable DS_PROMETHEUS of type prometheus")
	}

	known := daemonMetrics(t)
	// A histogram's or summary's series carry suffixes.
	series := map[string]bool{}
	for name, typ := range known {
		series[name] = true
		if typ == "histogram" || typ == "summary" || typ == "registered" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				series[name+s] = true
			}
		}
	}
	used := map[string]bool{}
	ids := map[int]bool{}
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource.UID != "${DS_PROMETHEUS}" {
				t.Errorf("panel %q: data source %q, want ${DS_PROMETHEUS}", p.Title, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no query", p.Title)
			}
			for _, q := range p.Targets {
				if q.Datasource.UID != "${DS_PROMETHEUS}" {
					t.Errorf("panel %q, query %s: data source %q", p.Title, q.RefID, q.Datasource.UID)
				}
				if strings.Count(q.Expr, "(") != strings.Count(q.Expr, ")") || strings.Count(q.Expr, "{") != strings.Count(q.Expr, "}") {
					t.Errorf("panel %q: unbalanced %s", p.Title, q.Expr)
				}
				for _, m := range metricName.FindAllString(q.Expr, -1) {
					used[m] = true
					if !series[m] {
						t.Errorf("panel %q: %s is not a metric the daemon exports (query %s)", p.Title, m, q.Expr)
					}
				}
			}
		}
	}
	walk(dash.Panels)
	// Every bootops metric has a panel; a new one should get one too.
	for name := range known {
		if strings.HasPrefix(name, "bootops_") && !used[name] && !used[name+"_bucket"] && !used[name+"_count"] {
			t.Logf("no panel shows %s yet", name)
		}
	}
	if len(used) < 12 {
		t.Errorf("only %d metrics on the dashboard", len(used))
	}
}

// metricName finds metric names of the daemon's namespaces in a query.
var metricName = regexp.MustCompile(`\b(bootops|go|process)_[a-zA-Z0-9_]+\b`)

type grafanaPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr       string `json:"expr"`
		RefID      string `json:"refId"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}
