package reconciler

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the reconciler's Prometheus series. A nil *Metrics records
// nothing.
type Metrics struct {
	duration  *prometheus.HistogramVec
	failures  *prometheus.CounterVec
	checks    *prometheus.CounterVec
	revisionG *prometheus.GaugeVec
	staleG    prometheus.Gauge
	nodes     prometheus.Gauge
	webhooks  *prometheus.CounterVec

	mu   sync.Mutex
	last string
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bootops_reconcile_duration_seconds",
			Help:    "Time to compile a revision and swap it in, by result (applied, unchanged, refused).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bootops_reconcile_failures_total",
			Help: "Revisions refused (compile errors, signatures, empty plans) and source reads that failed, by stage.",
		}, []string{"stage"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bootops_source_checks_total",
			Help: "Looks at the source (list the remote ref, fetch), by result.",
		}, []string{"result"}),
		revisionG: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bootops_source_revision_info",
			Help: "The revision served: 1 for the current one.",
		}, []string{"revision"}),
		staleG: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bootops_source_stale",
			Help: "1 when the revision served may not be the newest (the newest was refused or the source is unreachable).",
		}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bootops_plan_nodes",
			Help: "Registered nodes in the Plan served.",
		}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bootops_webhook_requests_total",
			Help: "Requests to POST /hooks/git, by result (accepted, ignored, unauthorized, bad_request, unavailable).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.duration, m.failures, m.checks, m.revisionG, m.staleG, m.nodes, m.webhooks)
	for _, r := range []string{HookAccepted, HookIgnored, HookUnauthorized, HookBadRequest, HookUnavailable} {
		m.webhooks.WithLabelValues(r)
	}
	for _, s := range []string{"compile", "fetch"} {
		m.failures.WithLabelValues(s)
	}
	return m
}

func (m *Metrics) reconciled(a Attempt, d time.Duration) {
	if m == nil {
		return
	}
	m.duration.WithLabelValues(a.Result).Observe(d.Seconds())
	if a.Result == ResultRefused {
		m.failures.WithLabelValues("compile").Inc()
	} else {
		m.nodes.Set(float64(a.Nodes))
	}
}

func (m *Metrics) revision(rev string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last != "" && m.last != rev {
		m.revisionG.DeleteLabelValues(m.last)
	}
	m.revisionG.WithLabelValues(rev).Set(1)
	m.last = rev
}

func (m *Metrics) checked(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.checks.WithLabelValues("error").Inc()
		m.failures.WithLabelValues("fetch").Inc()
		return
	}
	m.checks.WithLabelValues("ok").Inc()
}

func (m *Metrics) stale(b bool) {
	if m == nil {
		return
	}
	if b {
		m.staleG.Set(1)
	} else {
		m.staleG.Set(0)
	}
}

// Webhook counts one request to POST /hooks/git by its result.
func (m *Metrics) Webhook(result string) {
	if m == nil {
		return
	}
	m.webhooks.WithLabelValues(result).Inc()
}
