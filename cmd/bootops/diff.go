package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/reconciler"
)

// exitChanges is --detailed-exitcode's "there are changes".
const exitChanges = 2

// errChanges makes run exit 2.
var errChanges = errors.New("changes")

func diffCmd() *command {
	c := &command{
		name:    "diff",
		summary: "Show what a change to the repository does to each machine: two revisions compiled straight from Git and compared.",
		usage:   "[DIR] --base REF [--head REF] [--format text|markdown|json] [--artifacts] [--detailed-exitcode] [--server URL]",
		example: "  bootops diff --base origin/main                 # the working tree against main (from where it diverged)\n" +
			"  bootops diff --base v1.4 --head v1.5 --artifacts # two tags, with the rendered files' diffs\n" +
			"  bootops diff --base origin/main --format markdown > comment.md   # for a pull request\n" +
			"  bootops diff --base origin/main --detailed-exitcode; echo $?      # 0 no change, 1 error, 2 changes",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		base := fs.String("base", "", "the revision to compare against (branch, tag, SHA); a branch the head diverged from is compared at the merge base (required)")
		head := fs.String("head", "", "the revision to show (default: the working tree, uncommitted edits included)")
		format := fs.String("format", "text", "output: text, markdown or json")
		artifacts := fs.Bool("artifacts", false, "add unified diffs of the changed nodes' rendered iPXE script, cloud-init and workflow")
		detailed := fs.Bool("detailed-exitcode", false, "exit 0 when nothing changes, 2 when something does, 1 on error")
		server := serverFlag(fs, e, "")
		fs.Lookup("server").Usage = "a running daemon (`URL`, or HOST:PORT): mark the changed nodes already provisioned (they change only when reprovision is raised)"
		dir, err := parseDir(fs, e, args)
		if err != nil {
			return err
		}
		if *base == "" {
			return usagef("--base is required (the branch, tag or commit to compare against)")
		}
		switch *format {
		case "text", "markdown", "json":
		default:
			return usagef("--format %q: want text, markdown or json", *format)
		}
		cs, err := computeDiff(e, dir, *base, *head)
		if err != nil {
			return err
		}
		if *server != "" {
			if err := markProvisioned(ctx, *server, cs); err != nil {
				return err
			}
		}
		switch *format {
		case "json":
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			err = enc.Encode(cs)
		case "markdown":
			_, err = io.WriteString(e.stdout, diffMarkdown(cs, 60000))
		default:
			err = diffText(e.stdout, cs, colors(e.stdout), *artifacts)
		}
		if err != nil {
			return err
		}
		if *detailed && !cs.Empty() {
			return errChanges
		}
		return nil
	}
	return c
}

// computeDiff resolves the two revisions, compiles both and compares them.
func computeDiff(e *env, dir, baseRef, headRef string) (*reconciler.ChangeSet, error) {
	repo, err := reconciler.OpenLocal(dir)
	if err != nil {
		return nil, err
	}
	base, err := repo.Resolve(baseRef)
	if err != nil {
		return nil, err
	}
	var headRev reconciler.Revision
	if headRef == "" {
		if headRev, err = repo.Head(); err != nil {
			return nil, err
		}
	} else if headRev, err = repo.Resolve(headRef); err != nil {
		return nil, err
	}
	baseCommit, baseLabel := base.Commit, base.Short()
	if base.Branch {
		mb, err := repo.MergeBase(base, headRev)
		if err != nil {
			return nil, err
		}
		if mb.Hash != base.Commit.Hash {
			baseCommit, baseLabel = mb, mb.Hash.String()[:7]
		}
	}
	comp, err := compiler.New()
	if err != nil {
		return nil, err
	}
	baseFS, baseFiles, err := repo.FS(baseCommit)
	if err != nil {
		return nil, err
	}
	bp, err := comp.Compile(baseFS)
	if err != nil {
		return nil, revisionErrors(e, "base "+baseLabel, err)
	}
	var hp *plan.Plan
	headLabel := "working tree"
	if headRef == "" {
		// The working tree: the compiler's content cache makes unchanged
		// files free.
		hp, err = comp.Compile(os.DirFS(dir))
	} else {
		headLabel = headRev.Short()
		var headFS fs.FS
		var headFiles reconciler.Files
		headFS, headFiles, err = repo.FS(headRev.Commit)
		if err == nil {
			hp, err = comp.CompileChanged(headFS, headFiles.Changed(baseFiles))
		}
	}
	if err != nil {
		return nil, revisionErrors(e, "head "+headLabel, err)
	}
	cs := reconciler.Diff(bp, hp)
	cs.Base, cs.Head = baseLabel, headLabel
	foldEncryption(cs, bp, hp)
	return cs, nil
}

// foldEncryption says a profile's change of encryption on one line
// ("encryption: off → LUKS2 partition 1, TPM PCRs 7, 2 recovery
// recipients") instead of field by field, recipients in full.
func foldEncryption(cs *reconciler.ChangeSet, bp, hp *plan.Plan) {
	for i := range cs.Objects {
		o := &cs.Objects[i]
		if o.Object != "profile" || o.Kind != reconciler.Changed {
			continue
		}
		var kept []reconciler.FieldChange
		for _, f := range o.Fields {
			if f.Field != "encryption" && !strings.HasPrefix(f.Field, "encryption.") {
				kept = append(kept, f)
			}
		}
		if len(kept) == len(o.Fields) {
			continue
		}
		b, h := bp.Profile(o.Name).Encryption, hp.Profile(o.Name).Encryption
		f := reconciler.FieldChange{Field: "encryption", Old: describeEncryption(b), New: describeEncryption(h)}
		if f.Old == f.New {
			// Only who holds the recovery key changed.
			f = reconciler.FieldChange{Field: "encryption.recipients", Old: shortRecipients(b.Recipients), New: shortRecipients(h.Recipients)}
		}
		o.Fields = append(kept, f)
		slices.SortStableFunc(o.Fields, func(x, y reconciler.FieldChange) int { return strings.Compare(x.Field, y.Field) })
	}
}

// revisionErrors prints compile errors prefixed by the revision.
func revisionErrors(e *env, rev string, err error) error {
	var list compiler.Errors
	if errors.As(err, &list) {
		for _, x := range list {
			fmt.Fprintf(e.stderr, "%s: %s\n", rev, x)
		}
		fmt.Fprintf(e.stderr, "%s does not compile: %s\n", rev, countErrors(len(list)))
		return errSilent
	}
	return fmt.Errorf("%s: %w", rev, err)
}

// markProvisioned asks a daemon which changed nodes are provisioned.
func markProvisioned(ctx context.Context, server string, cs *reconciler.ChangeSet) error {
	var doc statusDoc
	if _, err := fetchStatus(ctx, strings.TrimSuffix(server, "/")+"/api/v1/status", &doc); err != nil {
		return fmt.Errorf("--server %s: %w", server, err)
	}
	prov := map[string]bool{}
	for _, n := range doc.Nodes {
		if status.Installed(n.State) {
			prov[n.Site+"/"+n.Node] = true
		}
	}
	for i := range cs.Nodes {
		n := &cs.Nodes[i]
		n.Provisioned = prov[n.Site+"/"+n.Name] && n.Kind == reconciler.Changed
	}
	for i := range cs.Installs {
		in := &cs.Installs[i]
		in.Installed = prov[in.Site+"/"+in.Node]
	}
	cs.Live = true
	return nil
}

// count is "1 node", "2 nodes" (or the plural given).
func count(n int, one string, many ...string) string {
	if n == 1 {
		return "1 " + one
	}
	if len(many) > 0 {
		return fmt.Sprintf("%d %s", n, many[0])
	}
	return fmt.Sprintf("%d %ss", n, one)
}

// installLine says how many nodes' install the change moves, and with
// --server how many installed machines it puts out of date; "" when none.
func installLine(cs *reconciler.ChangeSet) string {
	if len(cs.Installs) == 0 {
		return ""
	}
	var what []string
	for _, in := range cs.Installs {
		for _, x := range in.Changes {
			x, _, _ = strings.Cut(x, " ")
			if !slices.Contains(what, x) {
				what = append(what, x)
			}
		}
	}
	line := fmt.Sprintf("Installs: %s would install another %s", count(len(cs.Installs), "node"), strings.Join(what, ", "))
	if cs.Live {
		n, what := cs.OutOfDate()
		line += fmt.Sprintf("; %s out of date", count(n, "installed machine goes", "installed machines go"))
		if n > 0 {
			line += " (" + strings.Join(what, ", ") + ")"
		}
	}
	return line + "."
}

func summaryLine(cs *reconciler.ChangeSet) string {
	s := cs.Summary
	line := fmt.Sprintf("Plan: %d to add, %d to change, %d to remove, %d to reprovision", s.Add, s.Change, s.Remove, s.Reprovision)
	if s.Reprovision > 0 {
		line += " (disks will be wiped)"
	}
	return line + "."
}

type palette struct{ add, change, remove, repro, reset string }

func colors(w io.Writer) palette {
	if f, ok := w.(*os.File); ok && os.Getenv("NO_COLOR") == "" {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return palette{"\033[32m", "\033[33m", "\033[31m", "\033[35m", "\033[0m"}
		}
	}
	return palette{}
}

// marker is the sign of a change: + - ~ and -/+ for a reinstall.
func marker(kind string) string {
	switch kind {
	case reconciler.Added:
		return "+"
	case reconciler.Removed:
		return "-"
	case reconciler.Reprovision:
		return "-/+"
	}
	return "~"
}

func (p palette) of(kind string) string {
	switch kind {
	case reconciler.Added:
		return p.add
	case reconciler.Removed:
		return p.remove
	case reconciler.Reprovision:
		return p.repro
	}
	return p.change
}

// lines renders the change set as lines grouped by site, objects first.
func diffLines(cs *reconciler.ChangeSet, p palette) []string {
	var out []string
	for _, o := range cs.Objects {
		line := fmt.Sprintf("%s%s %s %s%s", p.of(o.Kind), marker(o.Kind), o.Object, o.Name, p.reset)
		if len(o.Fields) > 0 {
			line += "  " + joinFields(o.Fields)
		}
		out = append(out, line)
		if len(o.Reaches) > 0 {
			shown := o.Reaches[:min(len(o.Reaches), 10)]
			more := ""
			if len(o.Reaches) > len(shown) {
				more = fmt.Sprintf(" and %d more", len(o.Reaches)-len(shown))
			}
			out = append(out, fmt.Sprintf("    reaches %d nodes: %s%s", len(o.Reaches), strings.Join(shown, ", "), more))
		}
	}
	bySite := map[string][]reconciler.NodeChange{}
	var sites []string
	for _, n := range cs.Nodes {
		if _, ok := bySite[n.Site]; !ok {
			sites = append(sites, n.Site)
		}
		bySite[n.Site] = append(bySite[n.Site], n)
	}
	sort.Strings(sites)
	for _, s := range sites {
		out = append(out, "site "+s+":")
		for _, n := range bySite[s] {
			line := fmt.Sprintf("  %s%-3s %s%s", p.of(n.Kind), marker(n.Kind), n.Name, p.reset)
			var parts []string
			if len(n.Fields) > 0 {
				parts = append(parts, joinFields(n.Fields))
			}
			if len(n.Artifacts) > 0 && n.Kind != reconciler.Added {
				parts = append(parts, "renders "+strings.Join(n.Artifacts, ", ")+" differently")
			}
			if n.Kind == reconciler.Reprovision {
				parts = append(parts, "its disk will be wiped and reinstalled")
			}
			if n.Provisioned {
				parts = append(parts, "provisioned: changes only when reprovision is raised")
			}
			if len(parts) > 0 {
				line += "  " + strings.Join(parts, "; ")
			}
			out = append(out, line)
		}
	}
	return out
}

func joinFields(f []reconciler.FieldChange) string {
	var s []string
	for _, x := range f {
		s = append(s, x.String())
	}
	return strings.Join(s, ", ")
}

func diffText(w io.Writer, cs *reconciler.ChangeSet, p palette, artifacts bool) error {
	fmt.Fprintf(w, "bootops diff %s..%s\n", cs.Base, cs.Head)
	if cs.Empty() {
		fmt.Fprintln(w, "No changes: every machine gets what it gets now.")
		return nil
	}
	fmt.Fprintln(w, summaryLine(cs))
	if l := installLine(cs); l != "" {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	for _, l := range diffLines(cs, p) {
		fmt.Fprintln(w, l)
	}
	if !artifacts {
		return nil
	}
	// A site, profile or Micro-OS change renders every node it reaches
	// alike: its first node's files show it once.
	for _, o := range cs.Objects {
		b, h := o.Example()
		if b == nil || h == nil {
			continue
		}
		fmt.Fprintf(w, "\n%s %s: the rendered files of %s/%s, the first of the %d nodes it reaches\n", o.Object, o.Name, h.Site, h.Name, len(o.Reaches))
		artifactDiffs(w, cs, b, h)
	}
	for _, n := range cs.Nodes {
		b, h := n.Nodes()
		if b == nil || h == nil {
			continue
		}
		artifactDiffs(w, cs, b, h)
	}
	return nil
}

// artifactDiffs writes the unified diffs of one node's rendered files.
func artifactDiffs(w io.Writer, cs *reconciler.ChangeSet, b, h *plan.Node) {
	for _, a := range reconciler.ArtifactsOf(h) {
		d := reconciler.UnifiedDiff(cs.Base+"/"+h.Site+"/"+h.Name+"/"+a, cs.Head+"/"+h.Site+"/"+h.Name+"/"+a, reconciler.ArtifactText(b, a), reconciler.ArtifactText(h, a), 3)
		if d != "" {
			fmt.Fprintln(w)
			io.WriteString(w, d)
		}
	}
}

// diffMarkdown is a pull-request comment: the summary, a table, the
// changes per site in collapsed sections, capped at max characters.
func diffMarkdown(cs *reconciler.ChangeSet, max int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### bootops diff `%s`..`%s`\n\n", cs.Base, cs.Head)
	if cs.Empty() {
		b.WriteString("No changes: every machine gets what it gets now.\n")
		return b.String()
	}
	s := cs.Summary
	fmt.Fprintf(&b, "**%s**\n\n", summaryLine(cs))
	if l := installLine(cs); l != "" {
		fmt.Fprintf(&b, "%s\n\n", l)
	}
	fmt.Fprintf(&b, "| to add | to change | to remove | to reprovision |\n| ---: | ---: | ---: | ---: |\n| %d | %d | %d | %d |\n\n", s.Add, s.Change, s.Remove, s.Reprovision)
	lines := diffLines(cs, palette{})
	// diff fences color + and - lines; ! marks a change.
	for i, l := range lines {
		t := strings.TrimLeft(l, " ")
		mark, rest, _ := strings.Cut(t, " ")
		switch mark {
		case "~", "-/+":
			lines[i] = "! " + strings.TrimLeft(rest, " ")
		case "+", "-":
			lines[i] = mark + " " + strings.TrimLeft(rest, " ")
		default:
			lines[i] = "  " + t
		}
	}
	b.WriteString("<details><summary>changes by site</summary>\n\n```diff\n")
	for i, l := range lines {
		if b.Len()+len(l)+200 > max {
			fmt.Fprintf(&b, "… and %d more lines (run `bootops diff` locally for all of them)\n", len(lines)-i)
			break
		}
		b.WriteString(l + "\n")
	}
	b.WriteString("```\n\n</details>\n")
	return b.String()
}
