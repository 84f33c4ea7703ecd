package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// consoleBlock is a ```console block of a page: commands, each with what
// it prints.
type consoleBlock struct {
	page string
	line int
	cmds []consoleCmd
}

type consoleCmd struct {
	line int
	cmd  string
	want []string
}

var heredocStart = regexp.MustCompile(`<<-?'?([A-Za-z_]+)'?\s*$`)

// consoleBlocks finds the ```console blocks of a Markdown page: "$ " starts
// a command; the lines after it, up to the next command or the block's end,
// are its output.
// A command's here-document (cat > f <<'EOF' … EOF) is part of it.
func consoleBlocks(page, text string) []consoleBlock {
	var out []consoleBlock
	var cur *consoleBlock
	heredoc := "" // the terminator of the here-document being read
	for i, l := range strings.Split(text, "\n") {
		switch {
		case heredoc != "":
			c := &cur.cmds[len(cur.cmds)-1]
			c.cmd += "\n" + l
			if l == heredoc {
				heredoc = ""
			}
		case cur != nil && strings.HasPrefix(l, "$ "):
			cur.cmds = append(cur.cmds, consoleCmd{line: i + 1, cmd: strings.TrimPrefix(l, "$ ")})
			if m := heredocStart.FindStringSubmatch(l); m != nil {
				heredoc = m[1]
			}
		case cur == nil && strings.TrimSpace(l) == "```console":
			cur = &consoleBlock{page: page, line: i + 1}
		case cur != nil && strings.TrimSpace(l) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil && len(cur.cmds) > 0:
			c := &cur.cmds[len(cur.cmds)-1]
			c.want = append(c.want, l)
		}
	}
	return out
}

// matches reports whether got is want, line by line, where a want line
// "..." stands for any lines (none included) and "..." within a line for
// any text on it (a hash, a time).
func matches(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "..." {
		for i := 0; i <= len(got); i++ {
			if matches(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && lineMatches(strings.TrimRight(want[0], " "), strings.TrimRight(got[0], " ")) && matches(want[1:], got[1:])
}

func lineMatches(want, got string) bool {
	parts := strings.Split(want, "...")
	if !strings.HasPrefix(got, parts[0]) {
		return false
	}
	got = got[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(got, p)
		}
		j := strings.Index(got, p)
		if j < 0 {
			return false
		}
		got = got[j+len(p):]
	}
	return got == ""
}

// Docs that cannot rot: every ```console block of README.md and docs/
// runs here, in a folder laid out as this repository's root (bin/bootops,
// examples/, a Git repository of them), and what each command prints
// (stdout and stderr) must be what the page shows. A page's blocks run in
// one shell, top to bottom, as when a reader pastes them: a cd, a
// variable or a daemon started with & carries over to the commands after
// it; what the page started is gone when it ends. "127.0.0.1:8080" is a
// free port of the test's, for a daemon a page starts.
func TestDocsConsoleBlocks(t *testing.T) {
	testutil.Slow(t)
	pages, _ := filepath.Glob("../../docs/*.md")
	pages = append(pages, "../../README.md")
	n := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		blocks := consoleBlocks(filepath.Base(page), string(b))
		if len(blocks) == 0 {
			continue
		}
		n += len(blocks)
		var cmds []consoleCmd
		for _, blk := range blocks {
			cmds = append(cmds, blk.cmds...)
		}
		outs := runSession(t, docsDir(t), cmds)
		for i, c := range cmds {
			got := strings.Split(strings.TrimRight(outs[i], "\n"), "\n")
			if strings.TrimRight(outs[i], "\n") == "" {
				got = nil
			}
			want := c.want
			for len(want) > 0 && strings.TrimSpace(want[len(want)-1]) == "" {
				want = want[:len(want)-1]
			}
			if !matches(want, got) {
				t.Errorf("%s:%d: $ %s\nthe page shows:\n%s\nit printed:\n%s", filepath.Base(page), c.line, c.cmd, strings.Join(want, "\n"), strings.TrimRight(outs[i], "\n"))
			}
		}
	}
	if n == 0 {
		t.Fatal("no ```console block in README.md or docs/")
	}
}

// docsDir is a folder laid out as this repository's root for a docs
// block: bin/bootops, the examples, a Git repository of them (one commit).
func docsDir(t *testing.T) string {
	t.Helper()
	dir := walkthroughDir(t)
	for _, ex := range []string{"reservation", "cue-fleet"} {
		if err := os.CopyFS(filepath.Join(dir, "examples", ex), os.DirFS("../../examples/"+ex)); err != nil {
			t.Fatal(err)
		}
	}
	git := exec.Command("bash", "-c", "git init -q -b main && git add -A && git -c user.name=ops -c user.email=ops@example.invalid commit -qm examples")
	git.Dir = dir
	git.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1")
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git: %v\n%s", err, out)
	}
	return dir
}

// runSession runs commands in one bash, in dir, and returns what each
// printed (stdout and stderr, in order): a marker line after each command
// splits the output.
func runSession(t *testing.T, dir string, cmds []consoleCmd) []string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const marker = "--- bootops docs test: end of command ---"
	var script strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&script, "%s\nprintf '\\n%s\\n'\n", strings.ReplaceAll(c.cmd, "127.0.0.1:8080", addr), marker)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"), "HOME="+dir, "TMPDIR="+dir, "NO_COLOR=1",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=ops", "GIT_AUTHOR_EMAIL=ops@example.invalid", "GIT_COMMITTER_NAME=ops", "GIT_COMMITTER_EMAIL=ops@example.invalid")
	// A daemon the block started with & is in bash's process group: the
	// group goes when the block ends, whatever happened.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var buf lockedBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	// The port back as the page has it.
	outs := strings.Split(strings.ReplaceAll(buf.String(), addr, "127.0.0.1:8080"), "\n"+marker+"\n")
	for len(outs) < len(cmds) {
		outs = append(outs, "") // the shell ended early: the rest printed nothing
	}
	return outs
}

// The matcher itself: "..." takes any lines, nothing else is loose.
func TestConsoleMatch(t *testing.T) {
	for _, c := range []struct {
		want, got string
		ok        bool
	}{
		{"a\nb", "a\nb", true},
		{"a\nb", "a\nc", false},
		{"a\n...\nd", "a\nb\nc\nd", true},
		{"a\n...\nd", "a\nd", true},
		{"a\n...", "a", true},
		{"a", "a\nb", false},
		{"...\nz", "a\nb", false},
		{"plan ...)", "plan 7dcd7c7f0c8a)", true},
		{"plan ...)", "plan 7dcd)x", false},
		{"a...b...c", "a1b2c", true},
		{"a...b...c", "a1c2b", false},
		{"ab", "abc", false},
	} {
		if got := matches(strings.Split(c.want, "\n"), strings.Split(c.got, "\n")); got != c.ok {
			t.Errorf("%q ~ %q: %v", c.want, c.got, got)
		}
	}
	blocks := consoleBlocks("x.md", "text\n```console\n$ echo hi\nhi\n$ true\n```\n```sh\n$ not this\n```\n")
	if len(blocks) != 1 || len(blocks[0].cmds) != 2 || blocks[0].cmds[0].want[0] != "hi" || len(blocks[0].cmds[1].want) != 0 {
		t.Errorf("blocks: %+v", blocks)
	}
	blocks = consoleBlocks("x.md", "```console\n$ cat > f <<'EOF'\n$ not a command\nEOF\n$ wc -l < f\n1\n```\n")
	if len(blocks) != 1 || len(blocks[0].cmds) != 2 || blocks[0].cmds[0].cmd != "cat > f <<'EOF'\n$ not a command\nEOF" || len(blocks[0].cmds[0].want) != 0 ||
		blocks[0].cmds[1].cmd != "wc -l < f" || blocks[0].cmds[1].want[0] != "1" {
		t.Errorf("a here-document: %+v", blocks)
	}
}
