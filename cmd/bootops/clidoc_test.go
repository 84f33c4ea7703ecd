package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/diff"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/cli.md from the commands' own help")

const cliDoc = "../../docs/cli.md"

// docs/cli.md is every command's own --help: generated, and checked here
// for drift (a flag added, a default or an example changed).
func TestCLIReference(t *testing.T) {
	var b strings.Builder
	b.WriteString("# Command reference\n\n" +
		"Every command's own `--help`, as this version prints it. Generated:\n" +
		"`go test ./cmd/bootops -run TestCLIReference -update-docs` rewrites this page, and\n" +
		"`make test` fails while it and the commands disagree.\n\n")
	_, out, _ := bootops(t, nil, "help")
	fmt.Fprintf(&b, "```\n%s```\n", out)
	for _, c := range commands() {
		code, out, errs := bootops(t, nil, c.name, "--help")
		if code != 0 || out == "" {
			t.Fatalf("bootops %s --help: %d %s", c.name, code, errs)
		}
		fmt.Fprintf(&b, "\n## bootops %s\n\n```\n%s```\n", c.name, out)
	}
	got := b.String()
	if *updateDocs {
		if err := os.WriteFile(cliDoc, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/bootops -run TestCLIReference -update-docs writes it)", err)
	}
	if string(want) != got {
		t.Errorf("docs/cli.md and the commands' help differ (go test ./cmd/bootops -run TestCLIReference -update-docs):\n%s",
			diff.Diff("docs/cli.md", want, "--help", []byte(got)))
	}
}
