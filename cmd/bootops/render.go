package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
)

func renderCmd() *command {
	c := &command{
		name:    "render",
		summary: "Print what one node will boot: its iPXE script, cloud-init or workflow.",
		usage:   "[DIR] --node NODE [--site SITE] [--what ipxe|cloud-init|user-data|meta-data|network-config|workflow]",
		example: "  bootops render examples/warehouse --node rack1-01 --what cloud-init",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		node := fs.String("node", "", "node name (required)")
		site := fs.String("site", "", "site of the node, when several sites have a node of that name")
		what := fs.String("what", "ipxe", "artifact: ipxe, grub (the shim chain's config), cloud-init (all three files), user-data, meta-data, network-config, workflow")
		dir, err := parseDir(fs, e, args)
		if err != nil {
			return err
		}
		if *node == "" {
			return usagef("--node is required")
		}
		switch *what {
		case "ipxe", "grub", "cloud-init", "user-data", "meta-data", "network-config", "workflow":
		default:
			return usagef("--what %q: want ipxe, cloud-init, user-data, meta-data, network-config or workflow%s", *what,
				compiler.DidYouMean(*what, []string{"ipxe", "grub", "cloud-init", "user-data", "meta-data", "network-config", "workflow"}))
		}
		p, err := compileDir(e, dir)
		if err != nil {
			return err
		}
		n, err := findNode(p, *site, *node)
		if err != nil {
			return err
		}
		a := n.Artifacts
		switch *what {
		case "ipxe":
			fmt.Fprint(e.stdout, a.IPXE)
		case "grub":
			if a.GRUB == "" {
				return fmt.Errorf("node %s boots no GRUB config: its Micro-OS's chain is not shim", n.Name)
			}
			fmt.Fprint(e.stdout, a.GRUB)
		case "user-data":
			fmt.Fprint(e.stdout, a.UserData)
		case "meta-data":
			fmt.Fprint(e.stdout, a.MetaData)
		case "network-config":
			fmt.Fprint(e.stdout, a.NetworkConfig)
		case "cloud-init":
			fmt.Fprintf(e.stdout, "# ---- user-data\n%s# ---- meta-data\n%s# ---- network-config\n%s", a.UserData, a.MetaData, a.NetworkConfig)
		case "workflow":
			b, _ := json.MarshalIndent(a.Workflow, "", "  ")
			fmt.Fprintf(e.stdout, "%s\n", b)
		}
		return nil
	}
	return c
}

func findNode(p *plan.Plan, site, name string) (*plan.Node, error) {
	if site != "" {
		if p.Site(site) == nil {
			var names []string
			for _, s := range p.Sites {
				names = append(names, s.Name)
			}
			return nil, fmt.Errorf("no site %q%s", site, compiler.DidYouMean(site, names))
		}
		if n := p.Node(site, name); n != nil {
			return n, nil
		}
		var names []string
		for _, n := range p.Site(site).Nodes {
			names = append(names, n.Name)
		}
		return nil, fmt.Errorf("no node %q in site %s%s", name, site, compiler.DidYouMean(name, names))
	}
	found := p.FindNode(name)
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		var names []string
		for _, s := range p.Sites {
			for _, n := range s.Nodes {
				names = append(names, n.Name)
			}
		}
		return nil, fmt.Errorf("no node %q%s", name, compiler.DidYouMean(name, names))
	}
	var sites []string
	for _, n := range found {
		sites = append(sites, n.Site)
	}
	return nil, usagef("node %q is in several sites (%s): add --site", name, strings.Join(sites, ", "))
}
