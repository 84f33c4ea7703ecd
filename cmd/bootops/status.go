package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
)

func statusCmd() *command {
	c := &command{
		name:    "status",
		summary: "Show the served revision and where every node stands, from a running daemon.",
		usage:   "[--server URL] [-o table|json]",
		example: "  bootops status --server http://127.0.0.1:8080\n  bootops status -o json | jq '.nodes[] | select(.state==\"mismatch\")'",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		server := fs.String("server", "http://127.0.0.1:8080", "the daemon's HTTP address")
		format := fs.String("o", "table", "output: table or json")
		if err := parseNone(fs, e, args); err != nil {
			return err
		}
		if *format != "table" && *format != "json" {
			return usagef("-o %q: want table or json", *format)
		}
		req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(*server, "/")+"/api/v1/status", nil)
		if err != nil {
			return usagef("--server %q: %v", *server, err)
		}
		client := &http.Client{Timeout: 10 * time.Second}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("no answer from %s: %w (is `bootops serve` running there?)", *server, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", *server, resp.Status)
		}
		if *format == "json" {
			_, err := e.stdout.Write(body)
			return err
		}
		var doc bhttp.StatusDoc
		if err := json.Unmarshal(body, &doc); err != nil {
			return fmt.Errorf("%s: not a status document: %w", *server, err)
		}
		printStatus(e.stdout, doc)
		return nil
	}
	return c
}

func printStatus(w io.Writer, doc bhttp.StatusDoc) {
	src := doc.Source
	fmt.Fprintf(w, "revision: %s (applied %s)\n", or(src.Applied.Revision, "none"), src.Applied.At.Format(time.RFC3339))
	if src.Attempted.Error != "" {
		fmt.Fprintf(w, "newest attempt %s refused: %s\n", src.Attempted.At.Format(time.RFC3339), firstLine(src.Attempted.Error))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSITE\tSTATE\tSEEN\tLAST MESSAGE")
	for _, n := range doc.Nodes {
		seen := "-"
		if !n.Last.Time.IsZero() {
			seen = n.Last.Time.Format("15:04:05")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Node, n.Site, n.State, seen, firstLine(n.Last.Message))
	}
	tw.Flush()
	if len(doc.Machines) > 0 {
		fmt.Fprintf(w, "\nunknown machines:\n")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MAC\tUUID\tSERIAL\tSTATE\tLAST MESSAGE")
		for _, m := range doc.Machines {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", or(m.MAC, "-"), or(m.UUID, "-"), or(m.Serial, "-"), m.State, firstLine(m.Last.Message))
		}
		tw.Flush()
	}
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 100 {
		s = s[:97] + "..."
	}
	return s
}
