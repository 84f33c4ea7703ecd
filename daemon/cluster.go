package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bootops/bootops/boot"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/sitecluster"
	"github.com/bootops/bootops/trust"
)

// openCluster makes the daemon a member of its site's cluster when the
// settings name one: it joins the others (a majority of them must run),
// and takes the site's credential secret, so a machine's token or session
// from any member is good on every one.
func (d *daemon) openCluster(ctx context.Context) error {
	c := d.cfg.Cluster
	if c.Listen == "" {
		return nil
	}
	tlsDir := filepath.Join(d.cfg.StateDir, "tls")
	def := func(f, name string) string {
		if f != "" {
			return f
		}
		return filepath.Join(tlsDir, name)
	}
	tlsCfg, err := trust.PeerTLS(def(c.CertFile, "peer.pem"), def(c.KeyFile, "peer-key.pem"), def(c.CAFile, trust.CAFile))
	if err != nil {
		return configErr(fmt.Errorf("the site's cluster: its peer certificate (bootops ca peer NAME --host ADDR, then --peer-cert/--peer-key): %w", err))
	}
	name := c.Name
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return configErr(fmt.Errorf("the site's cluster: --peer-name: %w", err))
		}
	}
	d.log.Info("cluster: joining the site's other daemons", "member", name, "listen", c.Listen, "peers", c.Peers)
	m, err := sitecluster.Start(ctx, sitecluster.Config{Name: name, Listen: c.Listen, Peers: c.Peers, TLS: tlsCfg,
		StoreDir: filepath.Join(d.cfg.StateDir, "cluster"), Log: d.log})
	if err != nil {
		return err
	}
	secret, err := m.Secret(d.secret)
	if err != nil {
		m.Close()
		return err
	}
	d.member, d.secret = m, boot.Secret(secret)
	d.siteLog = newSiteLog(m, d.events, d.leases, d.cfg.StateDir, d.log)
	d.leases.replicate = d.siteLog.replicate
	d.events.SetMirror(d.siteLog.add)
	if err := migrateInstalls(d.events, m); err != nil {
		return err
	}
	if err := migrateRollouts(d.events, m); err != nil {
		return err
	}
	st := m.Status()
	d.log.Info("cluster: a member", "member", name, "leader", st.Leader, "size", st.Size)
	return nil
}

// migrateInstalls puts what this member's own store says each node
// installed into the cluster, where the cluster knows of no later
// install: a site's one daemon that becomes a member brings its nodes'
// installs with it, so no member installs them again.
func migrateInstalls(events *status.Durable, m *sitecluster.Member) error {
	for _, mc := range events.Machines() {
		if mc.Node == "" {
			continue
		}
		gen, ok := events.Provisioned(mc.Site, mc.Node)
		if !ok {
			continue
		}
		key := mc.Site + "/" + mc.Node
		if in, known, err := m.Installed(key); err != nil {
			return err
		} else if known && in.Generation >= gen {
			continue
		}
		in := sitecluster.Installed{Generation: gen}
		if mc.Installed != nil {
			in.Install = mc.Installed.Digest
		}
		if err := m.PutInstalled(key, in); err != nil {
			return err
		}
	}
	return nil
}

// migrateRollouts puts this member's own rollout groups into the
// cluster where it has none of that name: a site's one daemon that
// becomes a member goes on with its rollouts where they were.
func migrateRollouts(events *status.Durable, m *sitecluster.Member) error {
	mine, err := events.Rollouts()
	if err != nil {
		return err
	}
	theirs, err := m.Rollouts()
	if err != nil {
		return err
	}
	for k, b := range mine {
		if _, ok := theirs[k]; !ok {
			if err := m.PutRollout(k, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// clustered is the status store of a member of a site's cluster: what a
// wipe depends on is the cluster's — spent boot tokens, sessions, which
// generation each node installed, the rollouts' state — written by a
// majority before the answer that depends on it; its timelines are its
// own store's, which the site's log keeps the same on every member.
type clustered struct {
	*status.Durable
	m   *sitecluster.Member
	sl  *siteLog
	log *slog.Logger
}

// clustered is the daemon's status store as a member of its site's cluster.
func (d *daemon) clustered() clustered {
	return clustered{Durable: d.events, m: d.member, sl: d.siteLog, log: d.log}
}

// powerCycles is the fact that keeps what the power policy cycled each
// node for.
const powerCycles = "power-cycles"

// LoadCycles is what the power policy cycled each node for, as the
// cluster has it.
func (c clustered) LoadCycles() (map[string]int, error) {
	b, err := c.m.Fact(powerCycles)
	if err != nil || b == nil {
		return nil, err
	}
	var out map[string]int
	return out, json.Unmarshal(b, &out)
}

// SaveCycles records it, on a majority.
func (c clustered) SaveCycles(cycles map[string]int) error {
	b, err := json.Marshal(cycles)
	if err != nil {
		return err
	}
	return c.m.PutFact(powerCycles, b)
}

// PutRollout stores a rollout group's state in the cluster.
func (c clustered) PutRollout(group string, state []byte) error { return c.m.PutRollout(group, state) }

// Rollouts is every rollout group's state, as the cluster has it.
func (c clustered) Rollouts() (map[string][]byte, error) { return c.m.Rollouts() }

// UseToken spends a boot token in the cluster: once, whichever member.
func (c clustered) UseToken(id string, expires time.Time) (bool, error) {
	return c.m.UseToken(id, expires)
}

// Session is the machine's current session, as the cluster has it.
func (c clustered) Session(key string) (status.Session, bool) { return c.m.Session(key) }

// PutSession keeps the machine's session in the cluster.
func (c clustered) PutSession(key string, s status.Session) error { return c.m.PutSession(key, s) }

// RecordSync stores events here, in the site's log, then — for a node
// that reports itself provisioned — its install in the cluster, all before
// the agent is answered: a failure there fails the batch, which the agent
// sends again.
func (c clustered) RecordSync(evs ...status.Event) error {
	now := time.Now().UTC()
	for i := range evs {
		if evs[i].Time.IsZero() {
			evs[i].Time = now // the same time in every member's copy
		}
	}
	// This member's disk and the others' at once: both before the answer.
	logged := make(chan error, 1)
	go func() {
		if len(evs) == 0 {
			logged <- nil
			return
		}
		logged <- c.sl.appendEvents(evs)
	}()
	if err := errors.Join(c.Durable.RecordSync(evs...), <-logged); err != nil {
		return err
	}
	for _, e := range evs {
		if e.State != status.StateProvisioned || e.Node == "" {
			continue
		}
		in := sitecluster.Installed{Generation: e.Generation}
		if e.Install != nil {
			in.Install = e.Install.Digest
		}
		if err := c.m.PutInstalled(e.Site+"/"+e.Node, in); err != nil {
			return err
		}
	}
	return nil
}

// Provisioned is the generation a node installed, as the cluster knows it
// (whichever member saw it), else as this member does.
func (c clustered) Provisioned(site, node string) (int, bool) {
	in, ok, err := c.m.Installed(site + "/" + node)
	if err != nil {
		// Debug: a member cut off asks at every script; the quorum metric
		// and bootops status say it once.
		c.log.Debug("cluster: what a node installed, not read: this member's record only", "node", site+"/"+node, "err", err)
	}
	if err == nil && ok {
		if g, mine := c.Durable.Provisioned(site, node); mine && g > in.Generation {
			return g, true
		}
		return in.Generation, true
	}
	return c.Durable.Provisioned(site, node)
}

// clusterStatus is the cluster as this member sees it, with the holder
// of each site's DHCP roles, for the status document.
func (d *daemon) clusterStatus() *bhttp.ClusterStatus {
	st := d.member.Status()
	out := &bhttp.ClusterStatus{Member: st.Member, Leader: st.Leader, Size: st.Size, Quorum: st.Quorum, Members: []bhttp.ClusterMember{}, Roles: map[string]string{},
		Serving: d.member.Serving()}
	for _, p := range st.Members {
		out.Members = append(out.Members, bhttp.ClusterMember{Name: p.Name, Current: p.Current, Offline: p.Offline, ActiveMS: p.Active.Milliseconds(), Lag: p.Lag})
	}
	if p := d.overlays.live.Current(); p != nil {
		for _, site := range p.Sites {
			for _, role := range []string{"dhcp." + site.Name, "dhcp." + site.Name + ".6"} {
				if h := d.member.Holder(role); h != "" {
					out.Roles[role] = h
				}
			}
		}
	}
	return out
}

// clusterMetrics are the cluster's gauges: the members this one hears,
// whether it is with a majority, and each other member's lag.
func (d *daemon) clusterMetrics() {
	d.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bootops_cluster_quorum",
		Help: "1 while this daemon and the members it hears are a majority of the site's cluster (it may answer check-ins), else 0.",
	}, func() float64 {
		if d.member.Status().Quorum {
			return 1
		}
		return 0
	}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bootops_cluster_members_heard",
		Help: "Members of the site's cluster this daemon hears, itself included.",
	}, func() float64 {
		n := 1
		for _, p := range d.member.Status().Members {
			if !p.Offline {
				n++
			}
		}
		return float64(n)
	}), prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "bootops_cluster_events_uncopied_total",
		Help: "Boot-plane events (DHCP, TFTP, scripts) this member kept but could not copy to the others (a full queue, or no majority): they are on its own timelines only.",
	}, func() float64 { return float64(d.siteLog.uncopied.Load()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bootops_cluster_lag_max",
		Help: "The most operations any other member of the site's cluster is behind (replication lag).",
	}, func() float64 {
		var lag uint64
		for _, p := range d.member.Status().Members {
			lag = max(lag, p.Lag)
		}
		return float64(lag)
	}))
}
