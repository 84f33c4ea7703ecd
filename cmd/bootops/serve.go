package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"golang.org/x/sync/errgroup"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/dhcp"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/boot/tftp"
	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/reconciler"
)

// serveConfig is what `bootops serve` runs with.
type serveConfig struct {
	source, site, httpAddr, dhcp, iface, ipxeDir, stateDir, tftpAddr, artifactMode, logFormat string
}

func serveCmd() *command {
	c := &command{
		name:    "serve",
		summary: "Run the boot plane: compile the repository and serve it over HTTP (and DHCP, TFTP).",
		usage:   "--source DIR [--site S] [--http-addr A] [--dhcp proxy|reservation|off] [--interface IF] [--state-dir D]",
		example: "  bootops serve --source sites --state-dir /tmp/bootops --http-addr 127.0.0.1:8080 --dhcp off --tftp-addr \"\"\n" +
			"  # (runs as any user: HTTP only; DHCP and TFTP need root for ports 67 and 69)\n" +
			"  curl 'http://127.0.0.1:8080/ipxe?serial=DEMO-0001'",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		var cfg serveConfig
		fs.StringVar(&cfg.source, "source", "", "repository folder to serve (required)")
		fs.StringVar(&cfg.site, "site", "", "site whose network this daemon serves (default: the repository's only site)")
		fs.StringVar(&cfg.httpAddr, "http-addr", ":8080", "HTTP listen address")
		fs.StringVar(&cfg.dhcp, "dhcp", "", "DHCP mode: proxy, reservation or off (default: the site's network.dhcp)")
		fs.StringVar(&cfg.iface, "interface", "", "network interface of the provisioning LAN (default: the site's network.interface)")
		fs.StringVar(&cfg.ipxeDir, "ipxe-dir", "/usr/lib/ipxe", "folder with the iPXE binaries served over TFTP")
		fs.StringVar(&cfg.tftpAddr, "tftp-addr", ":69", "TFTP listen address (\"\" for none)")
		fs.StringVar(&cfg.stateDir, "state-dir", "/var/lib/bootops", "folder for the node-token secret and the artifact cache")
		fs.StringVar(&cfg.artifactMode, "artifact-mode", "serve", "Micro-OS files from a URL: serve (fetch, verify, cache) or redirect (send machines to the URL)")
		fs.StringVar(&cfg.logFormat, "log-format", "json", "log format: json or text")
		if err := parseNone(fs, e, args); err != nil {
			return err
		}
		if cfg.source == "" {
			return usagef("--source is required")
		}
		if cfg.artifactMode != "serve" && cfg.artifactMode != "redirect" {
			return usagef("--artifact-mode %q: want serve or redirect", cfg.artifactMode)
		}
		return serve(ctx, e, cfg)
	}
	return c
}

func serve(ctx context.Context, e *env, cfg serveConfig) error {
	var handler slog.Handler = slog.NewJSONHandler(e.stderr, nil)
	if cfg.logFormat == "text" {
		handler = slog.NewTextHandler(e.stderr, nil)
	}
	log := slog.New(handler)

	comp, err := compiler.New()
	if err != nil {
		return err
	}
	live := &boot.Live{}
	src := &reconciler.Dir{Path: cfg.source, Compiler: comp, Live: live, Log: log}
	p, err := src.Load()
	if err != nil {
		var list compiler.Errors
		if errors.As(err, &list) {
			for _, l := range list {
				fmt.Fprintln(e.stderr, l)
			}
		}
		return fmt.Errorf("%s does not compile: nothing to serve", cfg.source)
	}
	site, err := pickSite(p, cfg.site)
	if err != nil {
		return usageError{err.Error()}
	}
	if cfg.dhcp == "" {
		cfg.dhcp = site.Network.DHCP
	}
	switch cfg.dhcp {
	case plan.DHCPProxy, plan.DHCPReservation, plan.DHCPOff:
	default:
		return usagef("--dhcp %q: want proxy, reservation or off", cfg.dhcp)
	}
	secret, err := boot.LoadSecret(cfg.stateDir)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(cfg.source)
	if err != nil {
		return err
	}
	defer root.Close()

	events := &status.Memory{}
	httpSrv := &bhttp.Server{
		Plans: live, Events: events, Status: events, Tokens: secret, Source: sourceStatus{src}, Log: log,
		Artifacts: &bhttp.Artifacts{Repo: root, CacheDir: filepath.Join(cfg.stateDir, "cache"), Redirect: cfg.artifactMode == "redirect"},
	}
	iface := cfg.iface
	if iface == "" {
		iface = site.Network.Interface
	}
	serverIP, err := netip.ParseAddr(site.Network.ServerAddress)
	if err != nil {
		return err
	}
	var binaries tftp.Files
	if cfg.tftpAddr != "" || cfg.dhcp != plan.DHCPOff {
		if binaries, err = tftp.Load(cfg.ipxeDir); err != nil {
			return err
		}
		httpSrv.Binaries = binaries
	}
	ln, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return httpSrv.Serve(ctx, ln) })
	// Edits to the folder are compiled and, when they compile, served.
	g.Go(func() error { return src.Run(ctx) })
	tftpAddr := ""
	if cfg.tftpAddr != "" {
		conn, err := net.ListenPacket("udp4", cfg.tftpAddr)
		if err != nil {
			return fmt.Errorf("tftp: %w", err)
		}
		tftpAddr = conn.LocalAddr().String()
		ts := &tftp.Server{Files: binaries, Events: events, Log: log}
		g.Go(func() error { return ts.Serve(ctx, conn) })
	}
	if cfg.dhcp != plan.DHCPOff {
		ds := &dhcp.Server{Plans: live, Site: site.Name, Interface: iface, Events: events, Log: log,
			Config: dhcp.Config{ServerIP: serverIP, HTTPPort: site.Network.HTTPPort, Mode: cfg.dhcp,
				Leases: &dhcp.Pool{Path: filepath.Join(cfg.stateDir, "leases-"+site.Name+".json")}}}
		g.Go(func() error { return ds.Serve(ctx) })
	}
	log.Info("serving", "site", site.Name, "plan", p.Hash, "http", ln.Addr().String(), "tftp", tftpAddr, "dhcp", cfg.dhcp, "interface", iface)
	return g.Wait()
}

func pickSite(p *plan.Plan, name string) (*plan.Site, error) {
	if name != "" {
		if s := p.Site(name); s != nil {
			return s, nil
		}
		return nil, fmt.Errorf("--site %q: no such site in the repository", name)
	}
	if len(p.Sites) == 1 {
		return p.Sites[0], nil
	}
	return nil, errors.New("the repository has several sites: pick one with --site")
}

// sourceStatus shows the reconciler's revisions in the status API.
type sourceStatus struct{ d *reconciler.Dir }

func (s sourceStatus) Status() bhttp.SourceStatus {
	st := s.d.Status()
	conv := func(a reconciler.Attempt) bhttp.Revision {
		r := bhttp.Revision{Revision: a.Revision, At: a.At}
		if a.Error != nil {
			r.Error = a.Error.Error()
		}
		return r
	}
	return bhttp.SourceStatus{Applied: conv(st.Applied), Attempted: conv(st.Attempted)}
}
