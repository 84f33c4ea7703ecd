package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootops/bootops/trust"
)

func caCmd() *command {
	c := &command{
		name:    "ca",
		summary: "Make the site's CA, the boot server's TLS certificate and the overlay signing key; issue operators' client certificates.",
		usage:   "init --host ADDR[,NAME…] [--state-dir DIR] [--force] | operator NAME --role read|operate [--days N] [--out DIR] [--state-dir DIR]",
		example: "  bootops ca init --host 198.18.0.1 --state-dir /var/lib/bootops\n" +
			"  # writes /var/lib/bootops/tls/: ca.pem, server.pem and overlay.pub (give these out),\n" +
			"  # ca-key.pem, server-key.pem and overlay.key (mode 0600, never served, never in Git);\n" +
			"  # bootops serve --https-addr :8443 then uses server.pem, and\n" +
			"  # bootops microos build --ca /var/lib/bootops/tls/ca.pem pins the CA in the Micro-OS\n" +
			"  bootops ca operator alice --role operate --days 30 --out .\n" +
			"  # writes ./alice.pem and ./alice-key.pem (0600), a client certificate of the site CA; then\n" +
			"  BOOTOPS_CERT=alice.pem BOOTOPS_KEY=alice-key.pem BOOTOPS_CA=/var/lib/bootops/tls/ca.pem \\\n" +
			"    bootops status --server https://198.18.0.1:8443\n" +
			"  # revoke it early with a line 'revoked SERIAL alice' in serve's --operators-file",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		hosts := fs.String("host", "", "init: comma-separated IP addresses and DNS names the agents reach the boot server by (the site's serverAddress)")
		stateDir := fs.String("state-dir", "/var/lib/bootops", "bootops serve's state folder: the CA is in its tls/ folder")
		force := fs.Bool("force", false, "init: replace an existing CA (every Micro-OS built with the old one must be rebuilt)")
		role := fs.String("role", "", "operator: read (status, timelines, inventory) or operate (also power, boot device, fetch now)")
		days := fs.Int("days", 90, "operator: how many days the certificate is valid")
		out := fs.String("out", ".", "operator: the folder for NAME.pem and NAME-key.pem")
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		dir := filepath.Join(*stateDir, "tls")
		switch {
		case len(pos) == 0:
			return usagef("missing subcommand: want 'bootops ca init' or 'bootops ca operator NAME'")
		case pos[0] == "operator":
			if len(pos) != 2 {
				return usagef("want 'bootops ca operator NAME --role read|operate'")
			}
			if *role == "" {
				return usagef("--role is required: read or operate")
			}
			return issueOperator(e, dir, pos[1], *role, *days, *out)
		case pos[0] != "init" || len(pos) > 1:
			return usagef("unknown subcommand %q: want 'init' or 'operator NAME'", strings.Join(pos, " "))
		case *hosts == "":
			return usagef("--host is required: the address the nodes reach the boot server by (the site's network.serverAddress)")
		}
		if err := trust.InitCA(dir, trust.CAOptions{Hosts: strings.Split(*hosts, ","), Force: *force}); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote %s: %s, %s, %s (public) and %s, %s, %s (private, 0600)\n", dir,
			trust.CAFile, trust.ServerFile, trust.OverlayPubFile, trust.CAKeyFile, trust.ServerKeyFile, trust.OverlayKeyFile)
		return nil
	}
	return c
}

// issueOperator writes an operator's certificate and key, refusing to
// replace either.
func issueOperator(e *env, caDir, name, role string, days int, out string) error {
	cert, key, err := trust.IssueOperator(caDir, name, role, days, time.Now())
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(out, name+".pem"), filepath.Join(out, name+"-key.pem")
	for _, f := range []string{certFile, keyFile} {
		if _, err := os.Stat(f); err == nil {
			return fmt.Errorf("%s already exists: remove it, or give another --out", f)
		}
	}
	if err := trust.WriteFile(keyFile, key, 0o600); err != nil {
		return err
	}
	if err := trust.WriteFile(certFile, cert, 0o644); err != nil {
		return err
	}
	blk, _ := pem.Decode(cert)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s and %s (0600): operator %s, role %s, serial %s, valid until %s\n",
		certFile, keyFile, name, role, c.SerialNumber.Text(16), c.NotAfter.UTC().Format(time.RFC3339))
	return nil
}
