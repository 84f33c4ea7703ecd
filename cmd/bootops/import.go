package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/interop"
	"github.com/bootops/bootops/plan"
)

func importCmd() *command {
	c := &command{
		name:    "import",
		summary: "Convert Edge Infrastructure Manager data: a bulk-import CSV into Nodes, OS profiles into Profiles.",
		usage:   "csv FILE --site SITE [-o DIR] [--repo DIR]\n  bootops import eim-profile FILE... [-o DIR] [--base-url URL]",
		example: "  bootops import csv bulk-import.csv --site warehouse-1   # writes sites/warehouse-1/nodes/*.yaml\n" +
			"  bootops import eim-profile os-profiles/*.yaml -o profiles\n" +
			"  # exit 0: imported · 1: invalid rows, nothing written · 2: usage",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			_, err := parse(c.flags(e), e, args)
			if err != nil {
				return err
			}
			return usagef("want a format: csv or eim-profile")
		}
		switch args[0] {
		case "csv":
			return importCSV(c, e, args[1:])
		case "eim-profile":
			return importEIMProfiles(c, e, args[1:])
		}
		return usagef("unknown format %q: want csv or eim-profile", args[0])
	}
	return c
}

func importCSV(c *command, e *env, args []string) error {
	fs := c.flags(e)
	site := fs.String("site", "", "the site the nodes are imported into (required)")
	repo := fs.String("repo", ".", "the repository: rows are checked against its nodes and profiles")
	out := fs.String("o", "", "folder to write <name>.yaml into (default REPO/sites/SITE/nodes)")
	pos, err := parse(fs, e, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *site == "" {
		return usagef("want one CSV file and --site SITE")
	}
	file := pos[0]
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()

	im := &interop.CSVImport{File: file, Site: *site}
	p := existingPlan(e, *repo)
	if p != nil {
		im.Existing, im.Repo = p, os.DirFS(*repo)
	}
	if *out == "" {
		if *out, err = nodesDir(*repo, *site, p); err != nil {
			return err
		}
	}
	w := newNodeWriter(*out, file)
	sum, err := im.Import(f, w.add)
	for _, col := range sum.Columns {
		if k := sum.Ignored[col]; k > 0 {
			fmt.Fprintf(e.stderr, "%s: column %s has no equivalent in bootops: ignored for %d rows\n", file, col, k)
		}
	}
	var list interop.ImportErrors
	if errors.As(err, &list) || len(w.clash) > 0 {
		list = append(list, w.clash...)
		for _, x := range list {
			fmt.Fprintln(e.stderr, x)
		}
		fmt.Fprintf(e.stderr, "%s in %s: nothing written\n", countErrors(len(list)), file)
		return errSilent
	}
	if err != nil {
		return err
	}
	if err := w.write(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "imported %d nodes into %s (%d unchanged)\n", sum.Rows, *out, sum.Unchanged+w.unchanged)
	return nil
}

// nodesDir is where a site's imported nodes go in the repository at repo
// (p its Plan, nil when it does not compile): a folder that is none (the
// wrong working directory) would get a sites/ tree of its own.
func nodesDir(repo, site string, p *plan.Plan) (string, error) {
	sites := 0
	if p != nil {
		sites = len(p.Sites)
	}
	if !isRepository(repo, sites) {
		return "", fmt.Errorf("%s: no repository here: it has no sites/ folder (give --repo the repository's root, where sites/ and profiles/ are, or -o the folder to write the nodes to)", repo)
	}
	return filepath.Join(repo, "sites", site, "nodes"), nil
}

// nodeWriter keeps the imported nodes in memory (a few hundred bytes
// each) and writes them only once every row is valid. The folder is
// listed once, so a new file costs one create and one write; only a name
// that exists is read, to tell "unchanged" from a clash. A run cut short
// leaves some files written: running it again writes the rest (identical
// files count as unchanged).
type nodeWriter struct {
	dir, file string
	existing  map[string]bool
	todo      []pendingNode
	clash     interop.ImportErrors
	unchanged int
}

type pendingNode struct {
	name string
	data []byte
}

func newNodeWriter(dir, file string) *nodeWriter {
	w := &nodeWriter{dir: dir, file: file, existing: map[string]bool{}}
	if entries, err := os.ReadDir(dir); err == nil {
		for _, de := range entries {
			w.existing[de.Name()] = true
		}
	}
	return w
}

// add takes one imported node: new, unchanged, or a clash with a file of
// other content.
func (w *nodeWriter) add(n interop.ImportedNode) error {
	if n.Unchanged {
		return nil
	}
	name := n.Name + ".yaml"
	if w.existing[name] {
		target := filepath.Join(w.dir, name)
		if old, err := os.ReadFile(target); err == nil && bytes.Equal(old, n.Data) {
			w.unchanged++
			return nil
		}
		w.clash = append(w.clash, &interop.RowError{File: w.file, Line: n.Line,
			Msg: fmt.Sprintf("%s exists with other content (edit or remove it there)", target)})
		return nil
	}
	w.todo = append(w.todo, pendingNode{name, n.Data})
	return nil
}

// write creates the new nodes' files.
func (w *nodeWriter) write() error {
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return err
	}
	for _, p := range w.todo {
		if err := createFile(filepath.Join(w.dir, p.name), p.data); err != nil {
			return err
		}
	}
	return nil
}

// existingPlan compiles the repository at dir for the import's checks; a
// repository that is missing or does not compile is reported and skipped.
func existingPlan(e *env, dir string) *plan.Plan {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil
	}
	c, err := compiler.New()
	if err != nil {
		return nil
	}
	p, err := c.Compile(os.DirFS(dir))
	if err != nil {
		n := 1
		var list compiler.Errors
		if errors.As(err, &list) {
			n = len(list)
		}
		fmt.Fprintf(e.stderr, "warning: repository %s does not compile (%d errors, see `bootops validate %s`): rows not checked against its nodes and profiles\n", dir, n, dir)
		return nil
	}
	return p
}

func importEIMProfiles(c *command, e *env, args []string) error {
	fs := c.flags(e)
	out := fs.String("o", "profiles", "folder to write <name>.yaml into")
	base := fs.String("base-url", "https://files-rs.edgeorchestration.intel.com", "what a relative osImageUrl is resolved against (EIM's release service)")
	pos, err := parse(fs, e, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("want one or more EIM OS profile files")
	}
	var errs []error
	var got []*interop.ImportedProfile
	from := map[string]string{}
	for _, file := range pos {
		data, err := os.ReadFile(file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p, err := interop.ImportEIMProfile(data, file, *base)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(p.Ignored) > 0 {
			fmt.Fprintf(e.stderr, "%s: no equivalent for: %s\n", file, strings.Join(p.Ignored, ", "))
		}
		if prev, ok := from[p.Name]; ok {
			errs = append(errs, fmt.Errorf("%s: profile %s also imported from %s", file, p.Name, prev))
			continue
		}
		from[p.Name] = file
		got = append(got, p)
	}
	if len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintln(e.stderr, err)
		}
		fmt.Fprintf(e.stderr, "nothing written\n")
		return errSilent
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, p := range got {
		if err := writeFileAtomic(filepath.Join(*out, p.Name+".yaml"), p.Data); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stdout, "imported %d profiles into %s\n", len(got), *out)
	return nil
}
