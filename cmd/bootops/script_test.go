package main

import (
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

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
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"freeport": freeport,
			"waitfor":  waitfor,
		},
	})
}

// freeport NAME sets $NAME to a loopback address no one listens on, for
// a daemon the script starts.
func freeport(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: freeport NAME")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	ts.Setenv(args[0], ln.Addr().String())
	ln.Close()
}

// waitfor URL waits until URL answers 200 (a daemon the script started
// in the background is up), for at most a minute: wide, on a loaded
// machine; it fails the script when the time is up.
func waitfor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitfor URL")
	}
	client := &http.Client{Timeout: 5 * time.Second}
	var last string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := client.Get(args[0])
		if err != nil {
			last = err.Error()
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		last = resp.Status
	}
	ts.Fatalf("%s did not answer 200 within a minute: %s", args[0], last)
}
