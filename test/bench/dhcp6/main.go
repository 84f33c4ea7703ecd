// Command dhcp6 runs bootops's DHCPv6 server (boot/dhcp6) alone on one
// interface, for test/bench/dhcp6.sh to measure against Kea: reservation
// mode, a site with no nodes that provisions unknown machines, a pool, a
// lease file in -state. It serves until SIGINT/SIGTERM and then prints what
// it dropped.
//
//	dhcp6 -i vsrv -addr 2001:db8:7::1 -pool 2001:db8:7::1000-2001:db8:7::ffff -state DIR
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/dhcp6"
	"github.com/bootops/bootops/plan"
)

func main() {
	iface := flag.String("i", "", "interface to serve")
	addr := flag.String("addr", "", "this server's IPv6 address on it")
	prefix := flag.String("prefix", "", "the link's prefix (default: addr/64)")
	pool := flag.String("pool", "", "FIRST-LAST addresses for the pool")
	state := flag.String("state", "", "directory for the lease file")
	flag.Parse()
	if err := run(*iface, *addr, *prefix, *pool, *state); err != nil {
		fmt.Fprintln(os.Stderr, "dhcp6:", err)
		os.Exit(1)
	}
}

func run(iface, addr, prefix, pool, state string) error {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	pfx := netip.PrefixFrom(ip, 64).Masked()
	if prefix != "" {
		if pfx, err = netip.ParsePrefix(prefix); err != nil {
			return fmt.Errorf("-prefix: %w", err)
		}
	}
	first, last, ok := strings.Cut(pool, "-")
	if !ok {
		return fmt.Errorf("-pool %q: want FIRST-LAST", pool)
	}
	lo, err1 := netip.ParseAddr(first)
	hi, err2 := netip.ParseAddr(last)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("-pool %q: want two IPv6 addresses", pool)
	}
	plans := &boot.Live{}
	plans.Swap(&plan.Plan{Sites: []*plan.Site{{Name: "bench", UnknownNodes: plan.PolicyProvision}}})
	reg := prometheus.NewRegistry()
	s := &dhcp6.Server{Plans: plans, Site: "bench", Interface: iface, Metrics: dhcp6.NewMetrics(reg),
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Config: dhcp6.Config{ServerIP: ip, Prefix: pfx, PoolFirst: lo, PoolLast: hi, LeaseTime: time.Hour,
			Mode: plan.DHCPReservation, HTTPPort: 8080, TFTP: true,
			Leases: &dhcp6.Pool{Path: filepath.Join(state, "leases6-bench.json")}}}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = s.Serve(ctx)
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				fmt.Fprintf(os.Stderr, "%s%v %v\n", mf.GetName(), m.GetLabel(), v)
			}
		}
	}
	return err
}
