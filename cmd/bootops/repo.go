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
		noun := "errors"
		if len(list) == 1 {
			noun = "error"
		}
		fmt.Fprintf(e.stderr, "%d %s in %s\n", len(list), noun, dir)
		return errSilent
	}
	return err
}
