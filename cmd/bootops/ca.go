package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/bootops/bootops/trust"
)

func caCmd() *command {
	c := &command{
		name:    "ca",
		summary: "Make the site's CA, the boot server's TLS certificate and the overlay signing key.",
		usage:   "init --host ADDR[,NAME…] [--state-dir DIR] [--force]",
		example: "  bootops ca init --host 198.18.0.1 --state-dir /var/lib/bootops\n" +
			"  # writes /var/lib/bootops/tls/: ca.pem, server.pem and overlay.pub (give these out),\n" +
			"  # ca-key.pem, server-key.pem and overlay.key (mode 0600, never served, never in Git);\n" +
			"  # bootops serve --https-addr :8443 then uses server.pem, and\n" +
			"  # bootops microos build --ca /var/lib/bootops/tls/ca.pem pins the CA in the Micro-OS",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		hosts := fs.String("host", "", "comma-separated IP addresses and DNS names the agents reach the boot server by (the site's serverAddress)")
		stateDir := fs.String("state-dir", "/var/lib/bootops", "bootops serve's state folder: the files go to its tls/ folder")
		force := fs.Bool("force", false, "replace an existing CA (every Micro-OS built with the old one must be rebuilt)")
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		switch {
		case len(pos) == 0:
			return usagef("missing subcommand: want 'bootops ca init'")
		case pos[0] != "init" || len(pos) > 1:
			return usagef("unknown subcommand %q: want 'init'", strings.Join(pos, " "))
		case *hosts == "":
			return usagef("--host is required: the address the nodes reach the boot server by (the site's network.serverAddress)")
		}
		dir := filepath.Join(*stateDir, "tls")
		if err := trust.InitCA(dir, trust.CAOptions{Hosts: strings.Split(*hosts, ","), Force: *force}); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote %s: %s, %s, %s (public) and %s, %s, %s (private, 0600)\n", dir,
			trust.CAFile, trust.ServerFile, trust.OverlayPubFile, trust.CAKeyFile, trust.ServerKeyFile, trust.OverlayKeyFile)
		return nil
	}
	return c
}
