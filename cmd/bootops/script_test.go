package main

import (
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestScripts runs the CLI sessions in testdata/script/*.txtar: each is a
// command line as an operator types it (bootops is this test binary, on
// PATH), its exit status and what it prints. $REPO is this checkout's
// root, for the examples; a script copies what it changes into $WORK.
func TestScripts(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("REPO", root)
			// The compile worker serve starts is this binary again, as
			// /proc/self/exe: it must run main too.
			env.Setenv("BOOTOPS_TEST_AS_MAIN", "1")
			env.Setenv("HOME", env.WorkDir)
			for _, k := range []string{"BOOTOPS_SERVER", "BOOTOPS_TOKEN", "BOOTOPS_TOKEN_FILE", "BOOTOPS_CA", "BOOTOPS_CERT", "BOOTOPS_KEY"} {
				env.Setenv(k, "")
			}
			return nil
		},
	})
}
