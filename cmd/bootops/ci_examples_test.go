package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCIExamples runs every bootops command in examples/ci against a real
// repository with a pull request's worth of change, and the pre-push hook
// itself with a bootops binary on PATH.
func TestCIExamples(t *testing.T) {
	pkg, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	examples := filepath.Join(pkg, "../../examples")
	repo := ciRepo(t, filepath.Join(examples, "warehouse"))
	// What CI would put in the recipes' variables: a pull request from the
	// branch feature into main.
	vars := map[string]string{
		"github.base_ref":                     "main",
		"CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
		"TARGET":                              "main",
		"base":                                "origin/main", // pre-push, with no upstream
	}
	type cmdLine struct{ file, line string }
	var cmds []cmdLine
	for _, f := range []string{"github-actions.yml", "gitlab-ci.yml", "pre-push"} {
		b, err := os.ReadFile(filepath.Join(examples, "ci", f))
		if err != nil {
			t.Fatal(err)
		}
		lines := bootopsCommands(string(b))
		seen := map[string]bool{}
		for _, l := range lines {
			cmds = append(cmds, cmdLine{f, l})
			seen[strings.Fields(l)[1]] = true
		}
		if !seen["validate"] || !seen["diff"] {
			t.Errorf("%s: found %q; want a bootops validate and a bootops diff", f, lines)
		}
	}

	t.Chdir(repo) // the recipes run in the repository, with DIR "."
	for _, c := range cmds {
		args, err := ciArgs(c.line, vars)
		if err == nil && args[0] != "bootops" {
			err = errors.New("not a bootops command")
		}
		if err != nil {
			t.Errorf("%s: %q: %v", c.file, c.line, err)
			continue
		}
		t.Logf("%s: %q", c.file, args)
		code, out, stderr := bootops(t, nil, args[1:]...)
		want := 0
		if slices.Contains(args, "--detailed-exitcode") {
			want = 2 // the feature branch changes a node
		}
		if code != want {
			t.Errorf("%s: %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", c.file, strings.Join(args, " "), code, want, out, stderr)
			continue
		}
		if args[1] == "diff" && !strings.Contains(out, "Plan:") {
			t.Errorf("%s: %s: no \"Plan:\" in\n%s", c.file, strings.Join(args, " "), out)
		}
		if slices.Contains(args, "markdown") && !strings.Contains(out, "### bootops diff `") {
			t.Errorf("%s: %s: not the markdown comment:\n%s", c.file, strings.Join(args, " "), out)
		}
	}

	// The hook itself, as git would run it.
	if testing.Short() {
		t.Skip("builds bootops")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build bootops with")
	}
	bin := t.TempDir()
	build := exec.Command(gobin, "build", "-buildvcs=false", "-o", filepath.Join(bin, "bootops"), "../../cmd/bootops")
	build.Dir = pkg
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	hook := filepath.Join(examples, "ci", "pre-push")
	if st, err := os.Stat(hook); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable: git would not run it (%v)", hook, err)
	}
	prePush := func() (int, string) {
		cmd := exec.Command("bash", hook, "origin", "file:///dev/null")
		cmd.Dir = repo
		cmd.Env = append(ciGitEnv(repo), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "NO_COLOR=1")
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatalf("pre-push: %v", err)
		}
		return 0, string(out)
	}
	code, out := prePush()
	t.Logf("pre-push:\n%s", out)
	if code != 0 || !strings.Contains(out, "Plan: 0 to add, 1 to change, 0 to remove, 0 to reprovision.") || !strings.Contains(out, "rack1-01  profile: microvisor → ubuntu-24-04") {
		t.Errorf("pre-push: exit %d, want 0 and the plan:\n%s", code, out)
	}
	// A repository that does not validate blocks the push.
	ciEdit(t, repo, "sites/warehouse/nodes/rack1-02.yaml", "identity:", "idenity:")
	if code, out := prePush(); code != 1 || !strings.Contains(out, "idenity: unknown field") {
		t.Errorf("pre-push with an invalid node: exit %d, want 1:\n%s", code, out)
	}
}

// ciRepo is a clone of the warehouse example on the branch feature, which
// moves one node from microvisor to ubuntu-24-04; origin/main is the
// example as it was.
func ciRepo(t *testing.T, warehouse string) string {
	t.Helper()
	root := t.TempDir()
	repo := filepath.Join(root, "fleet")
	if err := os.CopyFS(repo, os.DirFS(warehouse)); err != nil {
		t.Fatal(err)
	}
	ciGit(t, repo, "init", "-q", "-b", "main")
	ciGit(t, repo, "add", "-A")
	ciGit(t, repo, "commit", "-q", "-m", "warehouse")
	bare := filepath.Join(root, "origin.git")
	ciGit(t, root, "clone", "-q", "--bare", repo, bare)
	ciGit(t, repo, "remote", "add", "origin", bare)
	ciGit(t, repo, "fetch", "-q", "origin")
	ciGit(t, repo, "checkout", "-q", "-b", "feature")
	ciEdit(t, repo, "sites/warehouse/nodes/rack1-01.yaml", "profile: microvisor", "profile: ubuntu-24-04")
	ciGit(t, repo, "commit", "-q", "-am", "rack1-01 runs Ubuntu")
	return repo
}

// ciGitEnv is the environment for git in dir: no user or system
// configuration, a fixed identity.
func ciGitEnv(dir string) []string {
	return append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
}

func ciGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = ciGitEnv(dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func ciEdit(t *testing.T, dir, name, from, to string) {
	t.Helper()
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), from) {
		t.Fatalf("%s has no %q", name, from)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), from, to, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// bootopsCommand finds `bootops validate` and `bootops diff` where a shell
// command starts: at the start of a line or after !, ( or a blank, and not
// inside quotes.
var bootopsCommand = regexp.MustCompile(`(^|[\s!(])bootops (validate|diff)\b`)

// bootopsCommands is every bootops validate or diff command in a recipe
// (YAML or shell), from "bootops" to the end of the command: continuation
// lines joined, YAML "- " and "run:"/"script:" prefixes and comments
// dropped.
func bootopsCommands(text string) []string {
	text = strings.ReplaceAll(text, "\\\n", " ")
	var cmds []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		line = strings.TrimPrefix(line, "- ")
		for _, p := range []string{"run:", "script:"} {
			line = strings.TrimSpace(strings.TrimPrefix(line, p))
		}
		for _, m := range bootopsCommand.FindAllStringSubmatchIndex(line, -1) {
			start := m[3] // after the character before "bootops"
			if quoted, comment := shellState(line[:start]); quoted || comment {
				continue
			}
			cmds = append(cmds, strings.TrimSpace(line[start:commandEnd(line, start)]))
		}
	}
	return cmds
}

// shellState says whether the end of s is inside quotes or a comment.
func shellState(s string) (quoted, comment bool) {
	var q rune
	prev := ' '
	for _, r := range s {
		switch {
		case q != 0:
			if r == q {
				q = 0
			}
		case r == '\'' || r == '"':
			q = r
		case r == '#' && (prev == ' ' || prev == '\t'):
			return false, true
		}
		prev = r
	}
	return q != 0, false
}

// commandEnd is where the command starting at start ends: the first
// unquoted redirection, pipe, list operator or closing parenthesis.
func commandEnd(line string, start int) int {
	var q byte
	for i := start; i < len(line); i++ {
		c := line[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case strings.IndexByte("<>|;&)#", c) >= 0:
			return i
		}
	}
	return len(line)
}

// ciVar is a variable: GitHub's ${{ expr }}, the shell's $NAME and ${NAME}.
var ciVar = regexp.MustCompile(`\$\{\{\s*([^}]*?)\s*\}\}|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// ciArgs splits a command line into words as a shell would (quotes, no
// globbing) with the variables replaced by their values in vars.
func ciArgs(line string, vars map[string]string) ([]string, error) {
	var unknown []string
	line = ciVar.ReplaceAllStringFunc(line, func(v string) string {
		m := ciVar.FindStringSubmatch(v)
		name := m[1] + m[2] + m[3]
		if val, ok := vars[name]; ok {
			return val
		}
		unknown = append(unknown, v)
		return v
	})
	if unknown != nil {
		return nil, fmt.Errorf("no value for %s", strings.Join(unknown, ", "))
	}
	var args []string
	var cur strings.Builder
	inWord := false
	var q rune
	for _, r := range line {
		switch {
		case q != 0 && r == q:
			q = 0
		case q != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			q, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				args = append(args, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if q != 0 {
		return nil, errors.New("unterminated quote")
	}
	if inWord {
		args = append(args, cur.String())
	}
	return args, nil
}
