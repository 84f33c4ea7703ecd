package compiler

import (
	"bytes"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// inMemory is a Sandbox without a process: the request and the answer go
// through the same bytes a child process would read and write.
type inMemory struct {
	t     *testing.T
	calls int
}

func (s *inMemory) Eval(req []byte) ([]byte, error) {
	s.calls++
	var out bytes.Buffer
	if err := newCompiler(s.t).EvalWorker(bytes.NewReader(req), &out); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Every golden case with CUE files compiles through a Sandbox to the
// same bytes, or the same positioned errors, as in-process.
func TestSandboxGolden(t *testing.T) {
	base := readTxtar(t, "testdata/_base.txtar")
	dirs, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range dirs {
		if !d.IsDir() || strings.HasPrefix(d.Name(), "_") || d.Name() == "fuzz" {
			continue
		}
		dir := filepath.Join("testdata", d.Name())
		fsys := goldenFS(t, base, dir)
		hasCUE := false
		for p := range fsys {
			hasCUE = hasCUE || path.Ext(p) == ".cue"
		}
		if !hasCUE {
			continue
		}
		n++
		t.Run(d.Name(), func(t *testing.T) {
			sb := &inMemory{t: t}
			c := newCompiler(t)
			c.Sandbox = sb
			got := compileText(t, c, fsys)
			want, err := os.ReadFile(filepath.Join(dir, "want.txt"))
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("through a sandbox (-want +got):\n%s", lineDiff(string(want), got))
			}
			// Unchanged CUE is not evaluated again.
			compileText(t, c, fsys)
			if sb.calls != 1 {
				t.Errorf("%d evaluations for two compilations of the same CUE", sb.calls)
			}
		})
	}
	if n < 4 {
		t.Errorf("only %d golden cases with CUE", n)
	}
}

// A Sandbox that cannot finish fails the compilation with its error (not
// an Errors), caches nothing, and the next compilation evaluates again.
func TestSandboxFailure(t *testing.T) {
	base := readTxtar(t, "testdata/_base.txtar")
	fsys := goldenFS(t, base, filepath.Join("testdata", "valid-cue-and-yaml"))
	limit := errors.New("took too long")
	c := newCompiler(t)
	c.Sandbox = failing{limit}
	if _, err := c.Compile(fsys); !errors.Is(err, limit) {
		t.Fatalf("compile: %v, want %v", err, limit)
	}
	c.Sandbox = &inMemory{t: t}
	if _, err := c.Compile(fsys); err != nil {
		t.Fatalf("compile after the failure: %v", err)
	}
}

type failing struct{ err error }

func (f failing) Eval([]byte) ([]byte, error) { return nil, f.err }
