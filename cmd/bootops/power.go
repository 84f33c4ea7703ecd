package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/bootops/bootops/power"
)

func powerCmd() *command {
	c := &command{
		name:    "power",
		summary: "Ask a node's BMC its power state, or power it on, off or cycle it, through the daemon (which holds the BMC credentials).",
		usage:   "NODE|SITE/NODE on|off|cycle|status [--server URL] [--token-file F] [--timeout D]",
		example: "  bootops power rack1-12 status   # as last polled; with the token (--token-file or BOOTOPS_TOKEN), asked now\n" +
			"  bootops power lab/vm-ipmi cycle --token-file /etc/bootops/ui-token   # a cycle of a machine that is off powers it on\n" +
			"  # on, off and cycle need the daemon's operator token (serve --ui-token-file); also BOOTOPS_TOKEN",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		d := addPowerFlags(fs, e, "give up on the daemon after this long (it answers within its --bmc-timeout)")
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		if len(pos) != 2 {
			return usagef("want a node and an action: on, off, cycle or status")
		}
		action := pos[1]
		switch action {
		case "on", "off", "cycle", "status":
		default:
			return usagef("unknown action %q: want on, off, cycle or status", action)
		}
		method, token, body := http.MethodGet, "", map[string]any(nil)
		if action != "status" {
			if token, err = d.token(e); err != nil {
				return err
			}
			method, body = http.MethodPost, map[string]any{"action": action}
		} else if *d.tokenFile != "" || e.getenv("BOOTOPS_TOKEN") != "" {
			// With the token the daemon asks the BMC now; without it, it
			// answers from its last poll.
			if token, err = d.token(e); err != nil {
				return err
			}
		}
		st, key, err := d.call(ctx, method, "/api/v1/power/", pos[0], token, body)
		if err != nil {
			return err
		}
		if st.Error != "" {
			fmt.Fprintf(e.stdout, "%s: %s (%s)\n", key, st.Power, st.Error)
			return nil
		}
		fmt.Fprintf(e.stdout, "%s: %s\n", key, st.Power)
		return nil
	}
	return c
}

func bootDeviceCmd() *command {
	c := &command{
		name:    "boot-device",
		summary: "Set a node's next boot device through its BMC (via the daemon): the network (pxe) or its disk.",
		usage:   "NODE|SITE/NODE pxe|disk [--once] [--server URL] [--token-file F]",
		example: "  bootops boot-device rack1-12 pxe --once --token-file /etc/bootops/ui-token\n" +
			"  bootops power rack1-12 cycle --token-file /etc/bootops/ui-token   # then it network-boots, once",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		d := addPowerFlags(fs, e, "give up on the daemon after this long")
		once := fs.Bool("once", false, "for the next boot only (else until changed)")
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		if len(pos) != 2 || (pos[1] != "pxe" && pos[1] != "disk") {
			return usagef("want a node and a boot device: pxe or disk")
		}
		token, err := d.token(e)
		if err != nil {
			return err
		}
		_, key, err := d.call(ctx, http.MethodPost, "/api/v1/boot-device/", pos[0], token, map[string]any{"device": pos[1], "once": *once})
		if err != nil {
			return err
		}
		how := "until changed"
		if *once {
			how = "for the next boot"
		}
		fmt.Fprintf(e.stdout, "%s: boots from %s %s\n", key, pos[1], how)
		return nil
	}
	return c
}

// powerFlags are how power and boot-device reach the daemon.
type powerFlags struct {
	server, tokenFile *string
	timeout           *time.Duration
}

func addPowerFlags(fs *flag.FlagSet, e *env, timeoutHelp string) powerFlags {
	return powerFlags{
		server:    serverFlag(fs, e, defaultServer),
		tokenFile: fs.String("token-file", "", "file holding an operator token with the operate role; default $BOOTOPS_TOKEN, $BOOTOPS_TOKEN_FILE, then "+defaultTokenFile),
		timeout:   fs.Duration("timeout", time.Minute, timeoutHelp),
	}
}

// token is the daemon's operator token, from --token-file or
// $BOOTOPS_TOKEN.
func (d powerFlags) token(e *env) (string, error) {
	if *d.tokenFile == "" {
		if t := strings.TrimSpace(e.getenv("BOOTOPS_TOKEN")); t != "" {
			return t, nil
		}
		if t := readToken(e.getenv); t != "" {
			return t, nil
		}
		if e.getenv("BOOTOPS_CERT") != "" {
			return "", nil // an operator's certificate instead
		}
		return "", usagef("on, off, cycle and boot-device need an operator token with the operate role: --token-file F (serve's --operators-file or --ui-token-file, or %s) or BOOTOPS_TOKEN, or over HTTPS an operator's certificate (BOOTOPS_CERT, BOOTOPS_KEY)", defaultTokenFile)
	}
	return readSecret(*d.tokenFile, "--token-file")
}

// call resolves node to its key and calls the daemon's api path for it,
// all within --timeout.
func (d powerFlags) call(ctx context.Context, method, api, node, token string, body any) (power.Status, string, error) {
	ctx, cancel := context.WithTimeout(ctx, *d.timeout)
	defer cancel()
	base := strings.TrimSuffix(*d.server, "/")
	key, err := machineKey(ctx, base, node)
	if err != nil {
		return power.Status{}, "", err
	}
	var st power.Status
	err = callPower(ctx, method, base+api+key, token, body, &st)
	return st, key, err
}

// callPower calls the daemon's power API; an error carries the daemon's
// message (the BMC's, when it failed there).
func callPower(ctx context.Context, method, url, token string, body any, out *power.Status) error {
	resp, b, err := callDaemon(ctx, method, url, token, body)
	if err != nil {
		return err
	}
	var msg struct {
		power.Status
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &msg) != nil {
		msg.Message = strings.TrimSpace(string(b))
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s (%s)", or(msg.Message, resp.Status), resp.Status)
	}
	*out = msg.Status
	return nil
}

// callDaemon sends body (nil: none) as JSON to the daemon's url with the
// operator's token, and returns the answer and its body (at most 256
// KiB: a node's recovery key escrows are up to twice plan.MaxEscrow); an
// error says whether the daemon answered at all.
func callDaemon(ctx context.Context, method, url, token string, body any) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client, err := apiClient(envOf(ctx), 0)
	if err != nil {
		return nil, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("the daemon did not answer in time: %w", err)
		}
		return nil, nil, fmt.Errorf("no answer from the daemon: %w (is `bootops serve` running there?)", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	return resp, b, nil
}
