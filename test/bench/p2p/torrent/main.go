// Command p2ptorrent is the BitTorrent side of the bootops image-sharing
// benchmark. It wraps github.com/anacrolix/torrent in three subcommands:
//
//	p2ptorrent info -in RAW -piece 4194304 -o FILE.torrent [-webseed URL]
//	p2ptorrent seed -torrent F -data RAW -listen IP:PORT
//	p2ptorrent get  -torrent F -out PATH -listen IP:PORT -peers ip:port,... [-linger 60s] [-done FILE]
//
// Results go to stdout as one JSON object per line; diagnostics and the
// library's own logging go to stderr.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

const usage = `usage:
  p2ptorrent info -in RAW -piece 4194304 -o FILE.torrent [-webseed URL]
  p2ptorrent seed -torrent F -data RAW -listen IP:PORT
  p2ptorrent get  -torrent F -out PATH -listen IP:PORT -peers ip:port,... [-linger 60s] [-done FILE]
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"info": runInfo,
		"seed": runSeed,
		"get":  runGet,
	}
	run, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "p2ptorrent: unknown subcommand %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "p2ptorrent %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// emit writes v to stdout as one JSON line.
func emit(v any) {
	// Encoding a struct of numbers and strings cannot fail.
	_ = json.NewEncoder(os.Stdout).Encode(v)
}
