package main

import (
	"context"
	"fmt"
	"runtime/debug"

	"cuelang.org/go/cue/cuecontext"

	"github.com/bootops/bootops/schema"
)

func schemaCmd() *command {
	c := &command{
		name:    "schema",
		summary: "Print the CUE schema of the repository format, or a JSON Schema for editors.",
		usage:   "[--jsonschema]",
		example: "  bootops schema --jsonschema > bootops.schema.json\n" +
			"  # then, first line of a YAML file, for yaml-language-server:\n" +
			"  # yaml-language-server: $schema=./bootops.schema.json",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		js := fs.Bool("jsonschema", false, "print a JSON Schema (draft-07) instead of CUE")
		if err := parseNone(fs, e, args); err != nil {
			return err
		}
		if !*js {
			_, err := e.stdout.Write(schema.Source())
			return err
		}
		v, err := schema.Compile(cuecontext.New())
		if err != nil {
			return err
		}
		b, err := schema.JSONSchema(v)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s\n", b)
		return nil
	}
	return c
}

// version is set at build time with -ldflags "-X main.version=…" (make
// build sets it from git describe: the Makefile builds with
// -buildvcs=false, so the build info has no revision).
var version = "dev"

func versionCmd() *command {
	c := &command{name: "version", summary: "Print the version (also: bootops --version).", usage: "", example: "  bootops version\n  bootops --version"}
	c.run = func(ctx context.Context, e *env, args []string) error {
		if err := parseNone(c.flags(e), e, args); err != nil {
			return err
		}
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprintln(e.stdout, versionLine(version, bi))
		return nil
	}
	return c
}

// versionLine says which bootops this is: the version set at build time,
// else the module's (go install …@v1.2.3), then the commit and its time
// when the build recorded them.
func versionLine(set string, bi *debug.BuildInfo) string {
	v := set
	var rev, at, modified string
	if bi != nil {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = ", modified"
				}
			}
		}
	}
	line := fmt.Sprintf("bootops %s (repository format %s", v, "bootops.dev/v1alpha1")
	if rev != "" {
		line += fmt.Sprintf("; commit %s %s%s", rev, at, modified)
	}
	if bi != nil && bi.GoVersion != "" {
		line += "; " + bi.GoVersion
	}
	return line + ")"
}
