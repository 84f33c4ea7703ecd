package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/boot/ui"
)

// routeDashboard serves the dashboard at /: the fleet as the status API
// has it, pushed as it changes (a new revision too: the reconciler's Done
// pokes it). sync looks at the source now.
func routeDashboard(dash *ui.Server, srv *bhttp.Server, events *status.Durable, sync func(string), reg prometheus.Registerer) {
	dash.Doc = func() bhttp.StatusDoc {
		doc := srv.StatusDoc(true)
		doc.StripInventory(true)
		return doc
	}
	dash.Events = events.Events
	dash.Sync = sync
	dash.Plan = srv.Plans.Current // each node's profile and its encryption
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bootops_dashboard_streams",
		Help: "Dashboard event streams open (browsers watching the fleet).",
	}, func() float64 { open, _ := dash.Stats(); return float64(open) }), prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "bootops_dashboard_streams_dropped_total",
		Help: "Dashboard streams dropped because the browser did not read them.",
	}, func() float64 { _, dropped := dash.Stats(); return float64(dropped) }))
	for pattern, h := range dash.Routes() {
		if pattern == "GET /api/v1/stream" {
			h = bhttp.Streaming(srv.Needs(bhttp.RoleRead, h)) // a browser watches for hours
		}
		srv.Routes[pattern] = h
	}
}
