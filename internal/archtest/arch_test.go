package archtest

import (
	"fmt"
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/bootops/bootops/"

// imports maps each package of the module (its path inside the module) to
// the packages of the module its non-test files import, for the build
// tags given.
func imports(t *testing.T, tags ...string) map[string][]string {
	t.Helper()
	ctx := build.Default
	ctx.BuildTags = tags
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	graph := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		p, err := ctx.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files for these tags
		}
		rel, _ := filepath.Rel(root, path)
		var ours []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				ours = append(ours, strings.TrimPrefix(imp, module))
			}
		}
		graph[filepath.ToSlash(rel)] = ours
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return graph
}

// under says whether pkg is dir or below it.
func under(pkg, dir string) bool {
	return pkg == dir || strings.HasPrefix(pkg, dir+"/")
}

// rule: packages under from must not import packages under any of never
// (or, with only, must import nothing of ours but those).
type rule struct {
	from  string
	never []string
	only  []string
	why   string
}

// The arrows of docs/architecture.md. A change that needs another arrow
// changes that page and this list together.
var rules = []rule{
	{from: "plan", only: []string{"tpm"}, why: "the Plan is data and pure functions; the check-in's TPM fields are tpm's wire types"},
	{from: "tpm", only: []string{}, why: "a leaf: TPM proofs and their checks"},
	{from: "trust", only: []string{}, why: "a leaf: the site CA and signatures"},
	{from: "swarm", only: []string{}, why: "the one protocol agent and server share"},
	{from: "schema", only: []string{}, why: "the embedded CUE schema"},
	{from: "rollout", only: []string{"plan"}, why: "a pure planner: the daemon stores its state and acts"},
	{from: "power", only: []string{"plan"}, why: "BMCs and the power policy"},
	{from: "boot", never: []string{"compiler", "reconciler", "microos", "media", "daemon", "hub", "interop", "rollout", "power", "agent", "cmd"},
		why: "the boot plane reads the live Plan through an interface and serves bytes"},
	{from: "agent", never: []string{"boot", "compiler", "reconciler", "daemon", "hub", "microos", "cmd"},
		why: "the Micro-OS side talks to the server only over the wire"},
	{from: "compiler", never: []string{"boot", "reconciler", "daemon", "hub", "agent", "microos", "cmd"},
		why: "the compiler is offline: files in, Plan out"},
	{from: "reconciler", never: []string{"boot", "daemon", "hub", "agent", "cmd"}, why: "Git in, Plan out"},
	{from: "hub", never: []string{"daemon", "compiler", "reconciler", "agent", "cmd"}, why: "the hub reads sites' events"},
	{from: "sitecluster", only: []string{"boot/status", "plan", "tpm", "internal/natslog"}, why: "a site's replicated facts: the status types in, nothing of the daemon's"},
	{from: "interop", never: []string{"boot", "daemon", "hub", "agent", "cmd"}, why: "other systems' formats, offline"},
	{from: "microos", never: []string{"boot", "daemon", "compiler", "cmd"}, why: "builds bytes the boot plane serves"},
	{from: "media", only: []string{"plan", "microos", "trust", "tpm"}, why: "boot media from a Plan and a Micro-OS: bytes the boot plane serves"},
}

// reporter is what check tells of a wrong arrow: a *testing.T, or a
// recorder in the test of the check itself.
type reporter interface {
	Errorf(format string, args ...any)
}

func check(t reporter, graph map[string][]string) {
	for pkg, deps := range graph {
		for _, dep := range deps {
			if under(dep, "daemon") && !under(pkg, "cmd") && !under(pkg, "daemon") && !under(pkg, "test") {
				t.Errorf("%s imports %s: only cmd/ builds a daemon", pkg, dep)
			}
			if under(dep, "cmd") && !under(pkg, "cmd") {
				t.Errorf("%s imports %s: nothing imports a command", pkg, dep)
			}
			if under(dep, "internal/testutil") || under(dep, "boot/internal/boottest") {
				t.Errorf("%s imports %s outside its tests: it is for tests only", pkg, dep)
			}
			for _, r := range rules {
				if !under(pkg, r.from) {
					continue
				}
				if r.only != nil && !under(dep, r.from) && !slices.ContainsFunc(r.only, func(o string) bool { return under(dep, o) }) {
					t.Errorf("%s imports %s: %s imports only %v (%s)", pkg, dep, r.from, r.only, r.why)
				}
				for _, n := range r.never {
					if under(dep, n) {
						t.Errorf("%s imports %s: %s never imports %s/ (%s)", pkg, dep, r.from, n, r.why)
					}
				}
			}
		}
	}
}

func TestArrows(t *testing.T) {
	graph := imports(t)
	for _, want := range []string{"plan", "boot/dhcp", "daemon", "cmd/bootops"} {
		if _, ok := graph[want]; !ok {
			t.Fatalf("package %s not found: the walk is wrong (%d packages)", want, len(graph))
		}
	}
	check(t, graph)
	// The files behind build tags keep the same arrows.
	check(t, imports(t, "e2e", "browser", "image", "package", "swtpm", "ipmi"))
}

type recorder struct{ errs []string }

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// The check itself catches a wrong arrow, and passes a right one.
func TestArrowsCatch(t *testing.T) {
	for _, g := range []map[string][]string{
		{"plan": {"compiler"}}, {"boot/dhcp": {"compiler"}}, {"hub": {"daemon"}}, {"agent": {"boot/http"}},
		{"rollout": {"power"}}, {"boot/http": {"internal/testutil"}}, {"boot/agentapi": {"boot/internal/boottest"}}, {"compiler": {"cmd/bootops"}},
	} {
		rec := &recorder{}
		check(rec, g)
		if len(rec.errs) == 0 {
			t.Errorf("%v: not caught", g)
		}
	}
	rec := &recorder{}
	check(rec, map[string][]string{"boot/dhcp": {"plan", "boot/status"}, "cmd/bootops": {"daemon"}, "rollout": {"plan"}})
	if len(rec.errs) > 0 {
		t.Errorf("right arrows refused: %v", rec.errs)
	}
}
