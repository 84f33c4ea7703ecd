package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/bootops/bootops/boot"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	bootopsd "github.com/bootops/bootops/daemon"
	"github.com/bootops/bootops/hub"
	"github.com/bootops/bootops/reconciler"
)

func serveCmd() *command {
	c := &command{
		name:    "serve",
		summary: "Run the boot plane: follow a Git repository (or a folder), compile every revision and serve the last good one over HTTP, DHCP and TFTP.",
		usage:   "--source GIT-URL|DIR [--ref R] [--interval 30s] [--site S[,S…]] [--http-addr A] [--https-addr A] [--dhcp proxy|reservation|off] [--interface IF] [--state-dir D] [--webhook-secret-file F] [--verify-commits KEYRING] [--config FILE]",
		example: "  bootops serve --source examples/warehouse --state-dir /tmp/bootops --http-addr 127.0.0.1:8080 --dhcp off --tftp-addr \"\" &\n" +
			"  # (a first run from a fresh checkout, as any user: HTTP on a high port, no DHCP, no TFTP)\n" +
			"  curl 'http://127.0.0.1:8080/ipxe?serial=SN-A0001'                # the script machine SN-A0001 boots\n" +
			"  BOOTOPS_TOKEN_FILE=/tmp/bootops/operator-token bootops status    # reads need an operator's token\n" +
			"  # the dashboard: http://127.0.0.1:8080/ (asks once for a token: --operators-file's, or the state folder's)\n" +
			"  # Root (or CAP_NET_BIND_SERVICE) is for ports below 1024: DHCP's 67 and 4011, TFTP's 69, HTTP's 80;\n" +
			"  # and for the default --state-dir /var/lib/bootops. sites/ (make demo's) needs make microos first.\n\n" +
			"  # Follow a branch; a push webhook makes it look at once, else it polls:\n" +
			"  bootops serve --source https://git.example.com/ops/fleet.git --ref main --site store-0042 \\\n" +
			"      --git-password-file /etc/bootops/token --webhook-secret-file /etc/bootops/hook-secret \\\n" +
			"      --verify-commits /etc/bootops/keys.asc --state-dir /var/lib/bootops\n" +
			"  # Settings may also come from BOOTOPS_<FLAG> variables and a --config YAML file\n" +
			"  # (flag: value per line); SIGHUP re-reads it; SIGTERM drains transfers, then exits.",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		cfg, err := c.serveConfig(e, args)
		if err != nil {
			return err
		}
		return serve(ctx, e, cfg, func() (serveConfig, error) { return c.serveConfig(e, args) })
	}
	return c
}

// serve runs the daemon with cfg; reload reads the settings again on
// SIGHUP.
func serve(ctx context.Context, e *env, cfg serveConfig, reload func() (serveConfig, error)) error {
	level := new(slog.LevelVar)
	opts := &slog.HandlerOptions{Level: level}
	var handler slog.Handler = slog.NewJSONHandler(e.stderr, opts)
	if cfg.logFormat == "text" {
		handler = slog.NewTextHandler(e.stderr, opts)
	}
	log := slog.New(handler)
	worker, err := workerArgv()
	if err != nil {
		return err
	}
	d := cfg.daemonConfig(worker)
	d.Log, d.Level, d.Stderr = log, level, e.stderr
	d.Reload = func() (bootopsd.Config, error) {
		next, err := reload()
		return next.daemonConfig(worker), err
	}
	if cfg.hubURLs != "" {
		d.Hub.Forwarder = func(plans *boot.Live, rec *reconciler.Reconciler, events *status.Durable, rollouts func() []bhttp.RolloutStatus, cluster func() *bhttp.ClusterStatus) (*hub.Forwarder, error) {
			return hubForwarder(cfg, log, plans, rec, events, rollouts, cluster)
		}
	}
	err = bootopsd.Run(ctx, d)
	if ce := (*bootopsd.ConfigError)(nil); errors.As(err, &ce) {
		return usageError{ce.Error()}
	}
	return err
}

// daemonConfig is the daemon's Config of the settings; worker is the command
// that compiles a revision's CUE.
func (cfg serveConfig) daemonConfig(worker []string) bootopsd.Config {
	level, _ := parseLevel(cfg.logLevel)
	l := cfg.limits
	return bootopsd.Config{
		LogLevel: level, StateDir: cfg.stateDir, DrainTimeout: cfg.drainTimeout,
		Source: bootopsd.SourceConfig{
			Source: cfg.source, Ref: cfg.ref, Interval: cfg.interval, Sites: cfg.sites(), AllowEmpty: cfg.allowEmpty,
			GitUser: cfg.gitUser, GitPasswordFile: cfg.gitPasswordFile, GitSSHKey: cfg.gitSSHKey, GitKnownHosts: cfg.gitKnownHosts, GitCAFile: cfg.gitCAFile,
			VerifyCommits: cfg.verifyCommits, WebhookSecretFile: cfg.webhookSecretFile,
			CompileTimeout: cfg.compileTimeout, CompileMemory: int64(cfg.compileMemory), Worker: worker,
		},
		Status: bootopsd.StatusConfig{UnknownMax: l.unknownMax, UnknownMB: l.unknownMB, NodeGrace: l.nodeGrace, NodeBurst: l.nodeBurst, NodeEvery: l.nodeEvery},
		HTTP: bootopsd.HTTPConfig{
			Addr: cfg.httpAddr, HTTPSAddr: cfg.httpsAddr, TLSCert: cfg.tlsCert, TLSKey: cfg.tlsKey, OverlayKey: cfg.overlayKey,
			ArtifactMode: cfg.artifactMode, PprofAddr: cfg.pprofAddr,
			MaxConns: l.maxConns, PerSource: l.perSource, NewBurst: l.newBurst, NewEvery: l.newEvery,
		},
		DHCP: bootopsd.DHCPConfig{Mode: cfg.dhcp, Interface: cfg.iface},
		TFTP: bootopsd.TFTPConfig{Addr: cfg.tftpAddr, IPXEDir: cfg.ipxeDir, Shim: cfg.shim, GRUB: cfg.grub, ShimARM64: cfg.shimARM64, GRUBARM64: cfg.grubARM64},
		Power: bootopsd.PowerConfig{SecretsDir: cfg.secretsDir, AgeIdentity: cfg.ageIdentity, BMCAllow: cfg.bmcAllow,
			InsecureTLS: cfg.bmcInsecureTLS, Interval: cfg.powerInterval, Timeout: cfg.bmcTimeout},
		Swarm:     bootopsd.SwarmConfig{Addr: cfg.swarmAddr, Streams: cfg.swarmStreams},
		Dashboard: bootopsd.DashboardConfig{TokenFile: cfg.uiTokenFile, OperatorsFile: cfg.operatorsFile, OpenReads: cfg.openReads},
		Cluster: bootopsd.ClusterConfig{Name: cfg.peerName, Listen: cfg.peerListen, Peers: splitList(cfg.peers),
			CertFile: cfg.peerCert, KeyFile: cfg.peerKey, CAFile: cfg.peerCA},
	}
}

// servePprof serves Go's profiles on addr (serve and hub --pprof-addr).
func servePprof(ctx context.Context, g *errgroup.Group, addr string, guard *bhttp.Guard, wrap func(http.Handler) http.Handler) error {
	return bootopsd.ServePprof(ctx, g, addr, guard, wrap)
}
