// Command apidiff prints the breaking changes of the HTTP API between
// the api/openapi.json of a base revision and a document (make
// api-diff), and exits 1 when there is one:
//
//	apidiff -base origin/main api/openapi.json
//	apidiff old.json new.json
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/bootops/bootops/api/diff"
)

func main() {
	base := flag.String("base", "", "a Git revision: compare with its api/openapi.json (else give two files)")
	flag.Parse()
	code, err := run(*base, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "apidiff:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func run(rev string, args []string) (int, error) {
	var old, cur []byte
	var err error
	switch {
	case rev != "" && len(args) == 1:
		out, gitErr := exec.Command("git", "show", rev+":api/openapi.json").CombinedOutput()
		if gitErr != nil {
			if strings.Contains(string(out), "does not exist") || strings.Contains(string(out), "exists on disk, but not in") {
				fmt.Printf("apidiff: %s has no api/openapi.json: nothing to compare\n", rev)
				return 0, nil
			}
			return 0, fmt.Errorf("git show %s:api/openapi.json: %s", rev, strings.TrimSpace(string(out)))
		}
		old, rev = out, rev+":api/openapi.json"
		cur, err = os.ReadFile(args[0])
	case rev == "" && len(args) == 2:
		rev = args[0]
		if old, err = os.ReadFile(args[0]); err == nil {
			cur, err = os.ReadFile(args[1])
		}
	default:
		return 0, fmt.Errorf("usage: apidiff -base REV new.json, or apidiff old.json new.json")
	}
	if err != nil {
		return 0, err
	}
	b, err := load(rev, old)
	if err != nil {
		return 0, err
	}
	h, err := load(args[len(args)-1], cur)
	if err != nil {
		return 0, err
	}
	changes := diff.Breaking(b, h)
	if len(changes) == 0 {
		fmt.Printf("apidiff: no breaking changes from %s\n", rev)
		return 0, nil
	}
	fmt.Printf("apidiff: %d breaking changes from %s:\n", len(changes), rev)
	for _, c := range changes {
		fmt.Println("  " + c)
	}
	return 1, nil
}

func load(name string, b []byte) (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return doc, nil
}
