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
		usage:   "init --host ADDR[,NAME…] [--state-dir DIR] [--force] | operator NAME --role read|operate [--days N] [--out DIR] [--state-dir DIR] | route NAME --host ADDR[,NAME…] [--days N] [--out DIR] [--state-dir DIR] | peer NAME --host ADDR[,NAME…] [--days N] [--out DIR] [--state-dir DIR]",
		example: "  bootops ca init --host 198.18.0.1 --state-dir /var/lib/bootops\n" +
			"  # writes /var/lib/bootops/tls/: ca.pem, server.pem and overlay.pub (give these out),\n" +
			"  # ca-key.pem, server-key.pem and overlay.key (mode 0600, never served, never in Git);\n" +
			"  # bootops serve --https-addr :8443 then uses server.pem, and\n" +
			"  # bootops microos build --ca /var/lib/bootops/tls/ca.pem pins the CA in the Micro-OS\n" +
			"  bootops ca operator alice --role operate --days 30 --out .\n" +
			"  # writes ./alice.pem and ./alice-key.pem (0600), a client certificate of the site CA; then\n" +
			"  BOOTOPS_CERT=alice.pem BOOTOPS_KEY=alice-key.pem BOOTOPS_CA=/var/lib/bootops/tls/ca.pem \\\n" +
			"    bootops status --server https://198.18.0.1:8443\n" +
			"  # revoke it early with a line 'revoked SERIAL alice' in serve's --operators-file\n" +
			"  bootops ca route h1 --host h1.example.net --state-dir /var/lib/bootops-hub --out .\n" +
			"  # a hub server's cluster certificate (./h1.pem, ./h1-key.pem): bootops hub --cluster-cert h1.pem\n" +
			"  #   --cluster-key h1-key.pem --cluster-ca /var/lib/bootops-hub/tls/ca.pem; one per server, one CA\n" +
			"  bootops ca peer boot-a --host 198.18.0.11 --out .\n" +
			"  # a site daemon's cluster certificate (a site of two or three servers, docs/cluster.md):\n" +
			"  #   bootops serve --peer-listen 198.18.0.11:7422 --peers 198.18.0.12:7422,198.18.0.13:7422 \\\n" +
			"  #     --peer-name boot-a --peer-cert boot-a.pem --peer-key boot-a-key.pem",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		hosts := fs.String("host", "", "init: comma-separated IP addresses and DNS names the agents reach the boot server by (the site's serverAddress); route: those the other hub servers reach this one by; peer: those the site's other daemons reach this one by")
		stateDir := fs.String("state-dir", "/var/lib/bootops", "bootops serve's state folder: the CA is in its tls/ folder")
		force := fs.Bool("force", false, "init: replace an existing CA (every Micro-OS built with the old one must be rebuilt)")
		role := fs.String("role", "", "operator: read (status, timelines, inventory) or operate (also power, boot device, fetch now)")
		days := fs.Int("days", 0, "operator, route, peer: how many days the certificate is valid (default 90 for an operator, 825 for a route or a peer)")
		out := fs.String("out", ".", "operator, route, peer: the folder for NAME.pem and NAME-key.pem")
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		dir := filepath.Join(*stateDir, "tls")
		switch {
		case len(pos) == 0:
			return usagef("missing subcommand: want 'bootops ca init', 'bootops ca operator NAME', 'bootops ca route NAME' or 'bootops ca peer NAME'")
		case pos[0] == "operator":
			if len(pos) != 2 {
				return usagef("want 'bootops ca operator NAME --role read|operate'")
			}
			if *role == "" {
				return usagef("--role is required: read or operate")
			}
			return writeIssued(e, pos[1], *out, "operator "+pos[1]+", role "+*role, func() ([]byte, []byte, error) {
				return trust.IssueOperator(dir, pos[1], *role, orInt(*days, 90), time.Now())
			})
		case pos[0] == "route":
			if len(pos) != 2 {
				return usagef("want 'bootops ca route NAME --host ADDR'")
			}
			if *hosts == "" {
				return usagef("--host is required: the addresses or names the other hub servers' --routes reach this one by")
			}
			return writeIssued(e, pos[1], *out, "hub server "+pos[1]+"'s route certificate", func() ([]byte, []byte, error) {
				return trust.IssueRoute(dir, pos[1], strings.Split(*hosts, ","), orInt(*days, 825), time.Now())
			})
		case pos[0] == "peer":
			if len(pos) != 2 {
				return usagef("want 'bootops ca peer NAME --host ADDR'")
			}
			if *hosts == "" {
				return usagef("--host is required: the addresses or names the site's other daemons' --peers reach this one by")
			}
			return writeIssued(e, pos[1], *out, "site daemon "+pos[1]+"'s peer certificate", func() ([]byte, []byte, error) {
				return trust.IssuePeer(dir, pos[1], strings.Split(*hosts, ","), orInt(*days, 825), time.Now())
			})
		case pos[0] != "init" || len(pos) > 1:
			return usagef("unknown subcommand %q: want 'init', 'operator NAME', 'route NAME' or 'peer NAME'", strings.Join(pos, " "))
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

// writeIssued writes what issue makes, NAME.pem and NAME-key.pem (0600)
// in out, refusing to replace either, and says what it wrote.
func writeIssued(e *env, name, out, what string, issue func() (cert, key []byte, err error)) error {
	cert, key, err := issue()
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
	fmt.Fprintf(e.stdout, "wrote %s and %s (0600): %s, serial %s, valid until %s\n",
		certFile, keyFile, what, c.SerialNumber.Text(16), c.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// orInt is n, or def when n is 0.
func orInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}
