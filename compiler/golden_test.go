package compiler

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

var update = flag.Bool("update", false, "rewrite the want.txt files of the golden tests")

// Each folder under testdata/ is a case: repo.txtar holds the repository
// (laid over testdata/_base.txtar unless its comment says "nobase"), and
// want.txt what compiling it gives: every positioned error, or every file
// `bootops compile -o` writes.
func TestGolden(t *testing.T) {
	base := readTxtar(t, "testdata/_base.txtar")
	dirs, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	c := newCompiler(t)
	n := 0
	for _, d := range dirs {
		// fuzz/ holds the fuzzers' regression inputs, not a case.
		if !d.IsDir() || strings.HasPrefix(d.Name(), "_") || d.Name() == "fuzz" {
			continue
		}
		n++
		t.Run(d.Name(), func(t *testing.T) {
			dir := filepath.Join("testdata", d.Name())
			fsys := goldenFS(t, base, dir)
			got := compileText(t, c, fsys)
			// Check must find exactly what Compile finds.
			_, cerr := newCompiler(t).Check(fsys)
			if strings.HasPrefix(got, "ok\n") != (cerr == nil) || cerr != nil && "errors:\n"+cerr.Error()+"\n" != got {
				t.Errorf("Check disagrees with Compile: %v", cerr)
			}
			wantPath := filepath.Join(dir, "want.txt")
			if *update {
				if err := os.WriteFile(wantPath, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(wantPath)
			if err != nil {
				t.Fatalf("%v (run go test ./compiler -run TestGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("compile %s: got (-want +got):\n%s", dir, lineDiff(string(want), got))
			}
		})
	}
	if n < 30 {
		t.Errorf("only %d golden cases", n)
	}
}

func newCompiler(t testing.TB) *Compiler {
	t.Helper()
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// compileText compiles fsys and returns its errors, one per line, or every
// output file as a txtar archive.
func compileText(t *testing.T, c *Compiler, fsys fs.FS) string {
	t.Helper()
	p, err := c.Compile(fsys)
	if err != nil {
		var list Errors
		if !errors.As(err, &list) {
			t.Fatalf("compile: not an Errors: %v", err)
		}
		return "errors:\n" + list.Error() + "\n"
	}
	files, err := Files(p)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("ok\n")
	for _, f := range files {
		b.WriteString("-- " + f.Path + " --\n")
		b.Write(f.Data)
		if len(f.Data) > 0 && !bytes.HasSuffix(f.Data, []byte("\n")) {
			b.WriteString("\n")
		}
	}
	return b.String()
}

type txtar struct {
	comment string
	files   []File
}

// goldenFS is a golden case's repository laid over _base.txtar, as
// TestGolden builds it.
func goldenFS(t *testing.T, base txtar, dir string) fstest.MapFS {
	t.Helper()
	repo := readTxtar(t, filepath.Join(dir, "repo.txtar"))
	fsys := fstest.MapFS{}
	if !strings.Contains(repo.comment, "nobase") {
		for _, f := range base.files {
			fsys[f.Path] = &fstest.MapFile{Data: f.Data}
		}
	}
	for _, f := range repo.files {
		fsys[f.Path] = &fstest.MapFile{Data: f.Data}
	}
	return fsys
}

// readTxtar reads a txtar archive: a comment, then files each introduced by
// a line "-- name --".
func readTxtar(t testing.TB, name string) txtar {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return parseTxtar(data)
}

func parseTxtar(data []byte) txtar {
	var a txtar
	var cur *File
	var comment strings.Builder
	for _, line := range strings.SplitAfter(string(data), "\n") {
		trimmed := strings.TrimRight(line, "\n")
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) > 6 {
			a.files = append(a.files, File{Path: strings.TrimSpace(trimmed[3 : len(trimmed)-3])})
			cur = &a.files[len(a.files)-1]
			continue
		}
		if cur == nil {
			comment.WriteString(line)
		} else {
			cur.Data = append(cur.Data, line...)
		}
	}
	a.comment = comment.String()
	return a
}

// lineDiff shows the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	inWant, inGot := map[string]int{}, map[string]int{}
	for _, l := range wl {
		inWant[l]++
	}
	for _, l := range gl {
		inGot[l]++
	}
	var b strings.Builder
	for _, l := range wl {
		if inGot[l] == 0 {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range gl {
		if inWant[l] == 0 {
			b.WriteString("+ " + l + "\n")
		}
	}
	if b.Len() == 0 {
		return "(same lines, different order or count)\n"
	}
	return b.String()
}
