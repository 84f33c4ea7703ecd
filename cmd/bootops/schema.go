package main

import (
	"context"
	"fmt"

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

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func versionCmd() *command {
	c := &command{name: "version", summary: "Print the version.", usage: "", example: "  bootops version"}
	c.run = func(ctx context.Context, e *env, args []string) error {
		if err := parseNone(c.flags(e), e, args); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "bootops %s (repository format %s)\n", version, "bootops.dev/v1alpha1")
		return nil
	}
	return c
}
