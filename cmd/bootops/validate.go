package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
)

func validateCmd() *command {
	c := &command{
		name:    "validate",
		summary: "Check a repository: every error at once, as file:line:col: field: message.",
		usage:   "[DIR]",
		example: "  bootops validate examples/warehouse\n  # exit 0: valid · 1: invalid · 2: usage",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		quiet := fs.Bool("q", false, "print nothing when the repository is valid")
		timeout := fs.Duration("timeout", 0, "give up on a repository that takes longer to check (0: no limit; serve has --compile-timeout)")
		dir, err := parseDir(fs, e, args)
		if err != nil {
			return err
		}
		var st compiler.Stats
		err = inTime(*timeout, func() (err error) {
			st, err = checkDir(e, dir)
			return err
		})
		if err != nil {
			return err
		}
		// A folder that is no repository is not a valid one with nothing
		// in it: a CI job pointed at the wrong path must fail.
		if !isRepository(dir, st.Sites) {
			return fmt.Errorf("%s: no repository here: it has no sites/ folder (give validate the repository's root, where sites/ and profiles/ are)", dir)
		}
		if !*quiet {
			fmt.Fprintf(e.stdout, "%s: valid: %d sites, %d nodes, %d profiles, %d micro-os\n",
				dir, st.Sites, st.Nodes, st.Profiles, st.MicroOS)
		}
		return nil
	}
	return c
}

// isRepository says whether dir, where the compiler found sites sites,
// is a repository: it has a sites/ folder (empty, it is a repository
// with nothing in it yet), or defines a site elsewhere (CUE). validate
// and import csv ask it.
func isRepository(dir string, sites int) bool {
	st, err := os.Stat(filepath.Join(dir, "sites"))
	return sites > 0 || (err == nil && st.IsDir())
}

func compileCmd() *command {
	c := &command{
		name:    "compile",
		summary: "Validate a repository and write its Plan and every rendered artifact (byte-for-byte reproducible).",
		usage:   "[DIR] -o OUT",
		example: "  bootops compile examples/warehouse -o out\n  cat out/sites/warehouse/nodes/rack1-01/boot.ipxe",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		out := fs.String("o", "", "output directory (replaced whole; must be empty or an earlier output)")
		timeout := fs.Duration("timeout", 0, "give up on a repository that takes longer to compile (0: no limit; serve has --compile-timeout)")
		dir, err := parseDir(fs, e, args)
		if err != nil {
			return err
		}
		if *out == "" {
			return usagef("-o OUT is required")
		}
		var p *plan.Plan
		err = inTime(*timeout, func() (err error) {
			p, err = compileDir(e, dir)
			return err
		})
		if err != nil {
			return err
		}
		if err := compiler.WriteDir(p, *out); err != nil {
			return err
		}
		nodes := 0
		for _, s := range p.Sites {
			nodes += len(s.Nodes)
		}
		fmt.Fprintf(e.stdout, "wrote %s: %d sites, %d nodes (plan %s)\n", *out, len(p.Sites), nodes, p.Hash[:12])
		return nil
	}
	return c
}
