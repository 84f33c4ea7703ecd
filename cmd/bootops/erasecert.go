package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

func eraseCertCmd() *command {
	c := &command{
		name:    "erase-cert",
		summary: "Get a retired node's signed erase certificate from the daemon, or check one offline against the server's public record key (records.pub in its state folder).",
		usage:   "get NODE|SITE/NODE [--site S] [-o FILE] [--server URL] | verify FILE --key records.pub",
		example: "  bootops erase-cert get lab/rack1-12 -o rack1-12.erase.json\n" +
			"  bootops erase-cert verify rack1-12.erase.json --key /var/lib/bootops/records.pub\n" +
			"  # valid: each disk's model, serial, size, method, NIST class, start, end and verification;\n" +
			"  # a certificate changed after it was signed, or signed by another key, is refused (exit 1)",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		sub, rest := "", args
		if len(args) > 0 && (args[0] == "get" || args[0] == "verify") {
			sub, rest = args[0], args[1:]
		}
		fs := c.flags(e)
		server := serverFlag(fs, e, defaultServer)
		site := fs.String("site", "", "get: the node's site, when NODE does not name it")
		out := fs.String("o", "", "get: write the certificate to this `file` (default: standard output)")
		key := fs.String("key", "", "verify: the server's public record key `file` (records.pub, base64 ed25519)")
		pos, err := parse(fs, e, rest)
		if err != nil {
			return err
		}
		if sub == "" {
			return usagef("want get or verify")
		}
		if len(pos) != 1 {
			return usagef("%s: want one argument", sub)
		}
		if sub == "verify" {
			return verifyEraseCert(e, pos[0], *key)
		}
		name := pos[0]
		if *site != "" {
			name = *site + "/" + name
		}
		var doc statusDoc
		if _, err := fetchStatus(ctx, *server+"/api/v1/status", &doc); err != nil {
			return noAnswer(*server, err)
		}
		for _, m := range doc.Nodes {
			if m.Key != name && m.Node != name {
				continue
			}
			if m.EraseCertificate == "" {
				return fmt.Errorf("%s/%s has no erase certificate (state %s): Git does not retire it, or its erase is not done", m.Site, m.Node, m.State)
			}
			if *out == "" {
				_, err := io.WriteString(e.stdout, m.EraseCertificate+"\n")
				return err
			}
			return os.WriteFile(*out, []byte(m.EraseCertificate+"\n"), 0o644)
		}
		return fmt.Errorf("no node %s on %s", name, *server)
	}
	return c
}

// verifyEraseCert checks file against the public key in keyFile and prints
// what it certifies.
func verifyEraseCert(e *env, file, keyFile string) error {
	if keyFile == "" {
		return usagef("verify: --key records.pub, the server's public record key")
	}
	pub, err := trust.ReadPublicKeyFile(keyFile)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	doc, err := trust.VerifyRecord(b, trust.KindEraseCertificate, pub)
	if err != nil {
		return fmt.Errorf("%s: not a valid erase certificate: %w", file, err)
	}
	var c plan.EraseCertificate
	if err := json.Unmarshal(doc, &c); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	w := e.stdout
	fmt.Fprintf(w, "valid: erase certificate of node %s/%s (serial %q, uuid %q, MACs %s), signed by key %s\n",
		c.Site, c.Node, c.Machine.Serial, c.Machine.UUID, strings.Join(c.Machine.MACs, ","), trust.KeyID(pub))
	fmt.Fprintf(w, "retired %s at Git revision %s; asked: erase %s", c.Retired.Format(time.RFC3339), or(c.Revision, "?"), c.Erase)
	if len(c.Keep) > 0 {
		fmt.Fprintf(w, ", keep %s", strings.Join(c.Keep, ", "))
	}
	fmt.Fprintln(w)
	failed := 0
	for _, d := range c.Disks {
		verdict := "verified"
		if !d.Verified || d.Error != "" {
			verdict, failed = "NOT ERASED", failed+1
		}
		fmt.Fprintf(w, "  %s %s, model %q, serial %s, %d bytes: %s, NIST %s, %s → %s; %s: %s\n", verdict, d.Disk.Name, d.Disk.Model, d.Disk.Serial, d.Disk.Size,
			d.Method, or(d.Class, "none"), d.Start.Format(time.RFC3339), d.End.Format(time.RFC3339), d.Verification, or(d.Error, "ok"))
		if d.Note != "" {
			fmt.Fprintf(w, "    note: %s\n", d.Note)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%s: signed, but %d of its %d disks were not erased", file, failed, len(c.Disks))
	}
	return nil
}
