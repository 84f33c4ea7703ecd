package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	boothttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/media"
	"github.com/bootops/bootops/plan"
)

// mediaCmd makes boot media for machines no boot server answers on their
// LAN, and adds a media credential to a USB image.
func mediaCmd() *command {
	c := &command{
		name:    "media",
		summary: "Make boot media for edge nodes that reach the server over the Internet: a hybrid ISO, a USB image, a UKI for the firmware's HTTPS boot URL.",
		usage: "iso|usb|uki [DIR] --site SITE [--node NODE] --ca FILE -o OUT [--cache DIR] [--epoch SECONDS]\n" +
			"       credential NODE|SITE/NODE [--ttl D] [--into USB-IMAGE] [--server URL] [--token-file F]",
		example: "  bootops media usb sites --site store-17 --ca /var/lib/bootops/tls/ca.pem -o store-17.img\n" +
			"  # the site's generic stick: any machine boots it, checks in over TLS and is found by what it\n" +
			"  # reports; a machine that proves no more than its serial is held (see docs/edge.md)\n\n" +
			"  bootops media iso sites --site store-17 --node kiosk-3 --ca ca.pem -o kiosk-3.iso\n" +
			"  # one node's medium: its static network from Git (no DHCP on its link) comes up first\n\n" +
			"  bootops media credential store-17/kiosk-3 --ttl 72h --into kiosk-3.img --token-file ops.token\n" +
			"  # asks the server for a single-use media credential and writes it beside the image's files",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			// --help (or a flag before the subcommand): the usage.
			if _, err := parse(c.flags(e), e, args); err != nil {
				return err
			}
			return usagef("want iso, usb, uki or credential")
		}
		switch args[0] {
		case "iso", "usb", "uki":
			return buildMedium(ctx, c, e, args[0], args[1:])
		case "credential":
			return mediaCredential(ctx, c, e, args[1:])
		}
		return usagef("unknown media command %q: want iso, usb, uki or credential", args[0])
	}
	return c
}

// buildMedium writes one medium of kind for a site or a node.
func buildMedium(ctx context.Context, c *command, e *env, kind string, args []string) error {
	fs := c.flags(e)
	site := fs.String("site", "", "the site whose server the medium reaches (required)")
	node := fs.String("node", "", "the node the medium is for (its static network); default: the site's generic medium")
	caFile := fs.String("ca", "", "the site CA's certificate (PEM) the agent pins: the daemon's tls/ca.pem (required)")
	out := fs.String("o", "", "the file to write (required)")
	cache := fs.String("cache", "", "where Micro-OS files fetched from URLs are kept (default: the user cache folder)")
	epoch := fs.String("epoch", "", "every file's date, in seconds since 1970 (default: $SOURCE_DATE_EPOCH, else 2000-01-01, as the daemon builds them)")
	dir, err := parseDir(fs, e, args)
	if err != nil {
		return err
	}
	if *site == "" || *caFile == "" || *out == "" {
		return usagef("media %s needs --site, --ca and -o", kind)
	}
	ca, err := os.ReadFile(*caFile)
	if err != nil {
		return fmt.Errorf("--ca: %w", err)
	}
	p, err := compileDir(e, dir)
	if err != nil {
		return err
	}
	sp, err := mediumSpec(ctx, p, dir, *site, *node, *cache)
	if err != nil {
		return err
	}
	sp.CA = string(ca)
	if sp.Epoch, err = mediumEpoch(e, *epoch); err != nil {
		return err
	}
	build := map[string]func(media.Spec, string) error{"iso": media.ISO, "usb": media.USB, "uki": media.UKI}[kind]
	fmt.Fprintf(e.stderr, "building the %s for %s …\n", kind, what(sp))
	if err := build(sp, *out); err != nil {
		return err
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	server, _ := media.Server(sp.Site)
	fmt.Fprintf(e.stdout, "wrote %s (%.1f MiB): the %s of %s, Micro-OS %s, server %s\n", *out, float64(st.Size())/(1<<20), kind, what(sp), sp.MicroOS.Name, server)
	return nil
}

func what(sp media.Spec) string {
	if sp.Node != nil {
		return "node " + sp.Node.Name + " of site " + sp.Site.Name
	}
	return "site " + sp.Site.Name
}

// mediumSpec finds the site, the node and the Micro-OS it boots (the
// node's profile's, else the site's default profile's, else the one named
// default), and has the Micro-OS's files on this machine.
func mediumSpec(ctx context.Context, p *plan.Plan, dir, siteName, nodeName, cache string) (media.Spec, error) {
	sp := media.Spec{Site: p.Site(siteName)}
	if sp.Site == nil {
		return sp, usagef("no site %q in the repository%s", siteName, siteNames(p))
	}
	if nodeName != "" {
		if sp.Node = p.Node(siteName, nodeName); sp.Node == nil {
			return sp, usagef("no node %q on site %s", nodeName, siteName)
		}
	}
	if sp.MicroOS = media.MicroOSFor(p, sp.Site, sp.Node); sp.MicroOS == nil {
		return sp, fmt.Errorf("site %s boots no Micro-OS: define a MicroOS named default, or give the site a defaultProfile", siteName)
	}
	name := sp.MicroOS.Name
	if cache == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return sp, fmt.Errorf("--cache: %w", err)
		}
		cache = filepath.Join(d, "bootops", "artifacts")
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return sp, err
	}
	defer root.Close()
	a := &boothttp.Artifacts{Repo: root, CacheDir: cache}
	if sp.Kernel, err = a.File(ctx, sp.MicroOS.Kernel); err != nil {
		return sp, fmt.Errorf("Micro-OS %s's kernel: %w", name, err)
	}
	if sp.Initrd, err = a.File(ctx, sp.MicroOS.Initrd); err != nil {
		return sp, fmt.Errorf("Micro-OS %s's initrd: %w", name, err)
	}
	return sp, nil
}

func siteNames(p *plan.Plan) string {
	var names []string
	for _, s := range p.Sites {
		names = append(names, s.Name)
	}
	return fmt.Sprintf(" (sites: %v)", names)
}

// mediumEpoch is the medium's date: --epoch, $SOURCE_DATE_EPOCH, else
// media.DefaultEpoch, as the daemon builds them: the same inputs give the
// same bytes here and there.
func mediumEpoch(e *env, flagValue string) (time.Time, error) {
	for _, v := range []string{flagValue, e.getenv("SOURCE_DATE_EPOCH")} {
		if v == "" {
			continue
		}
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s < 315532800 { // FAT dates start in 1980
			return time.Time{}, usagef("epoch %q: want seconds since 1970, from 1980 on", v)
		}
		return time.Unix(s, 0).UTC(), nil
	}
	return media.DefaultEpoch, nil
}

// mediaCredential asks the server for a node's media credential, prints
// it, and with --into writes it into a USB image's EFI partition, where
// the medium's GRUB finds it.
func mediaCredential(ctx context.Context, c *command, e *env, args []string) error {
	fs := c.flags(e)
	d := addPowerFlags(fs, e, "give up on the daemon after this long")
	ttl := fs.Duration("ttl", boothttp.DefaultMediaTTL, "how long the credential is good for (it is spent by the first check-in)")
	into := fs.String("into", "", "a USB image made by `bootops media usb` to write the credential into (bootops/credential.cfg)")
	pos, err := parse(fs, e, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one node: NODE or SITE/NODE")
	}
	token, err := d.token(e)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *d.timeout)
	defer cancel()
	base := strings.TrimSuffix(*d.server, "/")
	key, err := machineKey(ctx, base, pos[0])
	if err != nil {
		return err
	}
	site, node, _ := strings.Cut(key, "/")
	var mc boothttp.MediaCredential
	body := boothttp.MediaCredentialRequest{Site: site, Node: node, TTL: ttl.String()}
	if err := callJSON(ctx, http.MethodPost, base+"/api/v1/media-credentials", token, body, &mc); err != nil {
		return err
	}
	if *into == "" {
		fmt.Fprintln(e.stdout, mc.Credential)
		fmt.Fprintf(e.stderr, "media credential for node %s of site %s (generation %d), good for one check-in until %s\n", mc.Node, mc.Site, mc.Generation, mc.Expires.Format(time.RFC3339))
		return nil
	}
	if err := media.AddCredential(*into, mc.Node, mc.Credential); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote node %s's media credential into %s (good for one check-in until %s)\n", mc.Node, *into, mc.Expires.Format(time.RFC3339))
	return nil
}

// callJSON sends body as JSON and decodes the answer into out; an error
// carries the daemon's message.
func callJSON(ctx context.Context, method, url, token string, body, out any) error {
	resp, b, err := callDaemon(ctx, method, url, token, body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.Unmarshal(b, out)
}
