package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootops/bootops/boot/status"
)

func logsCmd() *command {
	c := &command{
		name:    "logs",
		summary: "Show one node's timeline — DHCP, TFTP, scripts, the agent's actions and output — from a running daemon.",
		usage:   "NODE|SITE/NODE|mac:… [--server URL] [-f] [-o text|json]",
		example: "  bootops logs rack1-12\n  bootops logs lab/vm-serial -f         # follow: new events as they come\n  bootops logs mac:52:54:00:12:34:56     # an unknown machine",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		server := serverFlag(fs, e, defaultServer)
		follow := fs.Bool("f", false, "follow: keep printing new events until interrupted")
		format := fs.String("o", "text", "output: text or json (the events as GET /api/v1/events gives them)")
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usagef("want one node (NODE, SITE/NODE or a machine key such as mac:…)")
		}
		if *format != "text" && *format != "json" {
			return usagef("-o %q: want text or json", *format)
		}
		base := strings.TrimSuffix(*server, "/")
		key, err := machineKey(ctx, base, pos[0])
		if err != nil {
			return err
		}
		// Events come oldest first and are only appended (the oldest may
		// be trimmed): what is new is what follows the last one printed.
		var last *status.Event
		for {
			var evs []status.Event
			if err := getJSON(ctx, base+"/api/v1/events?key="+url.QueryEscape(key), &evs); err != nil {
				return fmt.Errorf("no answer from %s: %w", *server, err)
			}
			if *format == "json" {
				return json.NewEncoder(e.stdout).Encode(evs)
			}
			from := 0
			if last != nil {
				from = len(evs)
				for i := len(evs) - 1; i >= 0; i-- {
					if evs[i].Time.Equal(last.Time) && evs[i].Message == last.Message && evs[i].Seq == last.Seq {
						from = i + 1
						break
					}
				}
			}
			for i := from; i < len(evs); i++ {
				printEvent(e.stdout, evs[i])
				last = &evs[i]
			}
			if !*follow {
				if len(evs) == 0 {
					fmt.Fprintf(e.stderr, "no events for %s yet\n", key)
				}
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
	return c
}

func printEvent(w io.Writer, ev status.Event) {
	mark := " "
	if ev.Error {
		mark = "!"
	}
	state := ""
	if ev.State != "" {
		state = " [" + ev.State + "]"
	}
	// Printable again: the daemon stores it so, but this may be another's
	// (an older daemon, a hub) and nothing a machine sent may drive the
	// operator's terminal.
	fmt.Fprintf(w, "%s %s %-6s%s %s\n", ev.Time.Local().Format("2006-01-02 15:04:05.000"), mark, status.Printable(ev.Kind), status.Printable(state), status.Printable(ev.Message))
}

// machineKey turns what the user typed into a status key: SITE/NODE and
// mac:/uuid:/serial: keys as they are, a bare node name looked up.
func machineKey(ctx context.Context, base, arg string) (string, error) {
	if strings.Contains(arg, "/") || strings.Contains(arg, ":") {
		return arg, nil
	}
	var doc statusDoc
	if _, err := fetchStatus(ctx, base+"/api/v1/status", &doc); err != nil {
		return "", noAnswer(base, err)
	}
	var keys []string
	for _, n := range doc.Nodes {
		if n.Node == arg {
			keys = append(keys, n.Site+"/"+n.Node)
		}
	}
	switch len(keys) {
	case 1:
		return keys[0], nil
	case 0:
		return "", fmt.Errorf("no node %q is served by %s", arg, base)
	}
	return "", usagef("node %q is in several sites: name one of %s", arg, strings.Join(keys, ", "))
}

func getJSON(ctx context.Context, url string, v any) error {
	body, err := get(ctx, url)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

func enrollCmd() *command {
	c := &command{
		name:    "enroll",
		summary: "Write the Node object that registers an unknown machine the daemon has seen.",
		usage:   "MACHINE -o DIR [--server URL] [--name N]",
		example: "  bootops enroll mac:52:54:00:12:34:56 -o sites/lab/nodes   # a key from `bootops status --unknown`\n" +
			"  git add sites/lab/nodes && git commit -m 'enroll 52:54:00:12:34:56'",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		server := serverFlag(fs, e, defaultServer)
		out := fs.String("o", "", "folder to write <name>.yaml into (required)")
		name := fs.String("name", "", "the node's name (default: from its serial, else its MAC)")
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 || *out == "" {
			return usagef("want one machine (a key from `bootops status --unknown`, or its MAC, UUID, serial or TPM EK hash) and -o DIR")
		}
		var doc statusDoc
		if _, err := fetchStatus(ctx, strings.TrimSuffix(*server, "/")+"/api/v1/status", &doc); err != nil {
			return noAnswer(*server, err)
		}
		want := strings.ToLower(pos[0])
		var found []status.Machine
		for _, m := range doc.Machines {
			for _, v := range []string{m.Key, m.MAC, m.UUID, strings.ToLower(m.Serial), strings.ToLower(m.EK)} {
				if v != "" && strings.ToLower(v) == want {
					found = append(found, m)
					break
				}
			}
		}
		switch len(found) {
		case 0:
			return fmt.Errorf("no unknown machine %q (see `bootops status --unknown`)", pos[0])
		case 1:
		default:
			return fmt.Errorf("%q names %d machines: use a key from `bootops status --unknown`", pos[0], len(found))
		}
		m := found[0]
		n := status.SuggestName(m)
		if *name != "" {
			n = *name
		}
		if status.SuggestName(status.Machine{Serial: n}) != n {
			return usagef("--name %q: a node name is a DNS label (a-z, 0-9, '-', at most 63)", n)
		}
		body, err := status.NodeYAML(m, n)
		if err != nil {
			return err
		}
		body += "\n"
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		path := filepath.Join(*out, n+".yaml")
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("write %s: %w (pick another --name)", path, err)
		}
		if _, err := io.WriteString(f, body); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote %s: commit it, and the machine is node %s on its next boot\n", path, n)
		return nil
	}
	return c
}
