package daemon

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bootops/bootops/boot"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/power"
)

// newPower is the power manager: it watches the BMCs of the live Plan's
// nodes and applies the sites' power policy; it alone reads the BMC
// credentials.
func newPower(cfg PowerConfig, stateDir string, log *slog.Logger, plans *boot.Live, events *status.Durable, reg *prometheus.Registry) (*power.Manager, error) {
	secrets := &power.Secrets{Dir: cfg.SecretsDir}
	allow, err := power.ParseAllowList(cfg.BMCAllow)
	if err != nil {
		return nil, fmt.Errorf("--bmc-allow: %w", err)
	}
	if cfg.SecretsDir != "" {
		if fi, err := os.Stat(cfg.SecretsDir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("--secrets-dir %s: not a folder", cfg.SecretsDir)
		}
	}
	if cfg.AgeIdentity != "" {
		ids, err := power.LoadIdentities(cfg.AgeIdentity)
		if err != nil {
			return nil, fmt.Errorf("--age-identity: %w", err)
		}
		secrets.Identities = ids
	}
	pm := &power.Manager{
		Plan: plans.Current,
		Node: func(site, node string) (bool, int, bool) {
			g, ok := events.Provisioned(site, node)
			state := events.State(site + "/" + node)
			return state == status.StateMicroOS || state == status.StateProvisioning || state == status.StateCommissioning, g, ok
		},
		Retired: func(site, node string) bool { m, ok := events.Machine(site + "/" + node); return ok && m.Retired() },
		Record: func(site, node, msg string, isErr bool, generation int) {
			events.Record(status.Event{Kind: status.KindPower, Site: site, Node: node, Message: msg, Error: isErr, Generation: generation})
		},
		Secrets:     secrets,
		Allow:       allow,
		InsecureTLS: cfg.InsecureTLS,
		Timeout:     cfg.Timeout,
		Interval:    cfg.Interval,
		StateFile:   power.StatePath(stateDir),
		Log:         log,
		MediaURL:    func(site, node string) string { return mediaURL(plans.Current(), site, node) },
	}
	for _, state := range []string{power.On, power.Off, power.Unknown, power.Unreachable} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "bootops_power_nodes",
			Help:        "Nodes with a BMC, by the power state their BMC last gave (unreachable: it did not answer, refused the credentials, or they are missing).",
			ConstLabels: prometheus.Labels{"state": state},
		}, func() float64 { return float64(pm.Counts()[state]) }))
	}
	return pm, nil
}

// routePower serves the power API (its actions need the operator's
// token) and shows each node's power state in the status API.
func routePower(srv *bhttp.Server, pm *power.Manager) {
	operate := func(r *http.Request) bool { return srv.Authorize(r, bhttp.RoleOperate) }
	for pattern, h := range pm.Routes(operate) {
		// A power action waits for the BMC (several calls of up to
		// --bmc-timeout each): past the listeners' deadlines. Reading
		// what the BMC last said needs the read role.
		if strings.HasPrefix(pattern, "GET ") {
			h = srv.Needs(bhttp.RoleRead, h)
		}
		srv.Routes[pattern] = bhttp.Streaming(h)
	}
	srv.View.Power = func(key string) (string, string) {
		st, ok := pm.Status(key)
		if !ok {
			return "", ""
		}
		return st.Power, st.Error
	}
}

// mediaURL is where a node's BMC fetches the node's boot medium: this
// server's plain HTTP address on the site's network (a BMC is on the
// site's management network, and the medium holds nothing secret).
func mediaURL(p *plan.Plan, site, node string) string {
	if p == nil || p.Site(site) == nil {
		return ""
	}
	s := p.Site(site)
	return "http://" + plan.HostPort(s.Network.ServerAddress, s.Network.HTTPPort) + "/media/" + url.PathEscape(site) + "/nodes/" + url.PathEscape(node) + "/media.iso"
}
