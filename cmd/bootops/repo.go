package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
)

// compileDir compiles the repository at dir. Errors are printed one per line
// to stderr, with a count, and errSilent is returned.
func compileDir(e *env, dir string) (*plan.Plan, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("open repository: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("open repository: %s is not a directory", dir)
	}
	c, err := compiler.New()
	if err != nil {
		return nil, err
	}
	// os.DirFS: the compiler refuses symlinks that leave the repository
	// before it reads them.
	p, err := c.Compile(os.DirFS(dir))
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
		return nil, errSilent
	}
	return p, err
}
