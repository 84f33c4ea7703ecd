package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
)

// compileDir compiles the repository at dir. Errors are printed one per line
// to stderr, with a count, and errSilent is returned.
func compileDir(e *env, dir string) (*plan.Plan, error) {
	var p *plan.Plan
	err := withRepo(e, dir, func(c *compiler.Compiler, fsys fs.FS) (err error) {
		p, err = c.Compile(fsys)
		return err
	})
	return p, err
}

// checkDir validates the repository at dir without rendering it.
func checkDir(e *env, dir string) (compiler.Stats, error) {
	var st compiler.Stats
	err := withRepo(e, dir, func(c *compiler.Compiler, fsys fs.FS) (err error) {
		st, err = c.Check(fsys)
		return err
	})
	return st, err
}

func withRepo(e *env, dir string, f func(*compiler.Compiler, fs.FS) error) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("open repository: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("open repository: %s is not a directory", dir)
	}
	c, err := compiler.New()
	if err != nil {
		return err
	}
	// os.DirFS: the compiler refuses symlinks that leave the repository
	// before it reads them.
	err = f(c, os.DirFS(dir))
	var list compiler.Errors
	if errors.As(err, &list) {
		for _, e2 := range list {
			fmt.Fprintln(e.stderr, e2)
		}
		fmt.Fprintf(e.stderr, "%s in %s\n", countErrors(len(list)), dir)
		return errSilent
	}
	return err
}

// countErrors is "1 error", "2 errors".
func countErrors(n int) string { return count(n, "error") }

// writeFileAtomic replaces name with data, never leaving half a file.
func writeFileAtomic(name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// createFile writes a new file; one that appeared meanwhile is an error,
// never overwritten.
func createFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(path)
	}
	return werr
}
