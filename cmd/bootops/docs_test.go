package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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

// consoleBlocks finds the ```console blocks of a Markdown page: "$ " starts
// a command; the lines after it, up to the next command or the block's end,
// are its output.
func consoleBlocks(page, text string) []consoleBlock {
	var out []consoleBlock
	var cur *consoleBlock
	for i, l := range strings.Split(text, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(l) == "```console":
			cur = &consoleBlock{page: page, line: i + 1}
		case cur != nil && strings.TrimSpace(l) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil && strings.HasPrefix(l, "$ "):
			cur.cmds = append(cur.cmds, consoleCmd{line: i + 1, cmd: strings.TrimPrefix(l, "$ ")})
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
// runs here, each in a folder laid out as this repository's root
// (bin/bootops, examples/), its commands one after another, and what each
// prints (stdout and stderr) must be what the page shows.
func TestDocsConsoleBlocks(t *testing.T) {
	pages, _ := filepath.Glob("../../docs/*.md")
	pages = append(pages, "../../README.md")
	n := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, blk := range consoleBlocks(filepath.Base(page), string(b)) {
			n++
			dir := walkthroughDir(t)
			if err := os.CopyFS(filepath.Join(dir, "examples/reservation"), os.DirFS("../../examples/reservation")); err != nil {
				t.Fatal(err)
			}
			for _, c := range blk.cmds {
				cmd := exec.Command("bash", "-c", c.cmd)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"), "HOME="+dir, "NO_COLOR=1")
				out, _ := cmd.CombinedOutput()
				got := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
				if len(out) == 0 {
					got = nil
				}
				want := c.want
				for len(want) > 0 && strings.TrimSpace(want[len(want)-1]) == "" {
					want = want[:len(want)-1]
				}
				if !matches(want, got) {
					t.Errorf("%s:%d: $ %s\nthe page shows:\n%s\nit printed:\n%s", blk.page, c.line, c.cmd, strings.Join(want, "\n"), strings.TrimRight(string(out), "\n"))
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no ```console block in README.md or docs/")
	}
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
}
