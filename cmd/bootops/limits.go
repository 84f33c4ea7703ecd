package main

import (
	"flag"
	"time"

	bootopsd "github.com/bootops/bootops/daemon"
)

// limits are what the daemon lets traffic from the LAN take: connections,
// machines new to it, and what it keeps of machines that are no node.
type limits struct {
	maxConns, perSource int
	newBurst            int
	newEvery            time.Duration
	unknownMax          int
	unknownMB           int
	nodeGrace           time.Duration
	nodeBurst           int
	nodeEvery           time.Duration
}

func addLimitFlags(fs *flag.FlagSet, l *limits) {
	fs.IntVar(&l.maxConns, "max-conns", 0, "HTTP connections open at once on all listeners; past it the longest-idle keep-alive is closed (default: half the open-files limit)")
	fs.IntVar(&l.perSource, "max-conns-per-source", 64, "HTTP connections open at once from one address")
	fs.IntVar(&l.newBurst, "new-machines-burst", 20, "machines new to the daemon one address may introduce at once (script requests, check-ins); past it 429 until…")
	fs.DurationVar(&l.newEvery, "new-machines-every", time.Second, "…one more per this long")
	fs.IntVar(&l.unknownMax, "unknown-max", 20000, "machines that are no node kept in the status store (the least recently seen go first; a registered node never does)")
	fs.IntVar(&l.unknownMB, "unknown-max-mb", 64, "MiB of events kept for machines that are no node")
	fs.DurationVar(&l.nodeGrace, "node-grace", 7*24*time.Hour, "how long a node removed from Git keeps its status (provisioned generation, timeline) in case it comes back")
	fs.IntVar(&l.nodeBurst, "node-events-burst", 200, "boot-plane events (DHCP, TFTP, scripts) one node's timeline takes at once; past it…")
	fs.DurationVar(&l.nodeEvery, "node-events-every", time.Second, "…one more per this long (the rest are counted in the next)")
}

func (l limits) check() error {
	switch {
	case l.maxConns < 0 || l.perSource < 1 || l.newBurst < 1 || l.unknownMax < 1 || l.unknownMB < 1 || l.nodeBurst < 1:
		return usagef("--max-conns-per-source, --new-machines-burst, --unknown-max, --unknown-max-mb and --node-events-burst: at least 1")
	case l.newEvery <= 0 || l.nodeEvery <= 0 || l.nodeGrace < 0:
		return usagef("--new-machines-every and --node-events-every: more than 0")
	}
	return nil
}

// conns is --max-conns, or what the open-files limit allows.
func (l limits) conns() int { return bootopsd.HTTPConfig{MaxConns: l.maxConns}.Conns() }
