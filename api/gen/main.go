// Command gen writes api/openapi.json from api/spec (go generate ./api).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/bootops/bootops/api/spec"
)

func main() {
	out := flag.String("o", "openapi.json", "the file to write")
	flag.Parse()
	b, err := spec.JSON()
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "api/gen:", err)
		os.Exit(1)
	}
}
