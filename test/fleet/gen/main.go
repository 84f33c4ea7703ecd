// Command gen writes a synthetic fleet repository.
//
//	go run ./test/fleet/gen -sites 50 -nodes 10000 -o /tmp/fleet
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/bootops/bootops/test/fleet"
)

func main() {
	sites := flag.Int("sites", 50, "number of sites")
	nodes := flag.Int("nodes", 10000, "number of nodes")
	out := flag.String("o", "", "output directory (must not exist)")
	flag.Parse()
	if *out == "" || *sites < 1 || *nodes < 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := fleet.Generate(*out, *sites, *nodes); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s: %d sites, %d nodes\n", *out, *sites, *nodes)
}
