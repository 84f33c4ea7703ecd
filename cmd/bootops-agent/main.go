// Command bootops-agent runs in the Micro-OS: it reads who it is from the
// kernel command line and the machine (SMBIOS, NICs, disks), checks in with
// the boot server with its per-node token, runs the workflow it gets and
// reports every step, then reboots into the installed system.
//
// The kernel command line the boot server renders carries
// bootops.server=URL bootops.site=S bootops.node=N bootops.token=T (an
// unknown machine: bootops.machine=mac:… instead of bootops.node). A
// Micro-OS built with settings (bootops microos build --server --ca, a
// UKI) or a signed site overlay takes them from there; over TLS it checks
// in by the machine's identity, with no token.
//
// `bootops-agent dhcp6 IFACE` asks the link's DHCPv6 server for an
// address: the Micro-OS's /init runs it when an IPv6 link gives no SLAAC
// address. It writes the lease down; the agent renews it while it runs.
package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"time"

	"github.com/bootops/bootops/agent"
)

// version is set at build time (-ldflags -X main.version=…).
var version = "dev"

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help") {
		fmt.Println("bootops-agent runs in the bootops Micro-OS; it takes its settings from /proc/cmdline (bootops.server, bootops.site, bootops.node, bootops.token).")
		fmt.Println("bootops-agent dhcp6 IFACE asks the link's DHCPv6 server for an address, prints it and writes the lease to " + agent.Lease6Dir + ", where the agent finds and renews it (the Micro-OS's /init, on a link without SLAAC).")
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "dhcp6" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := agent.LeaseV6(ctx, os.Args[2])
		if err == nil {
			l.Iface = os.Args[2]
			err = l.Save(agent.Lease6Dir)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bootops-agent:", err)
			os.Exit(1)
		}
		fmt.Println(l.Addr)
		return
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bootops-agent:", err)
		os.Exit(1)
	}
	agent.Version = version
	keepLeases()
	cfg, err := agent.Load(agent.ParseCmdline(string(cmdline)), "/", "/sys")
	if err != nil {
		// A tampered or missing overlay, a broken image: say so where
		// the operator looks, and install nothing.
		fmt.Fprintln(os.Stdout, "bootops-agent: REFUSED:", err, "- nothing will be installed")
		os.Exit(1)
	}
	if err := agent.Run(context.Background(), cfg, "/sys", os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stdout, "bootops-agent:", err)
		os.Exit(1)
	}
}

// keepLeases keeps the DHCPv6 leases /init took (bootops-agent dhcp6) for
// as long as the agent runs: the Micro-OS may wait for hours (an unknown
// machine held until its Node is committed), the lease lasts an hour.
func keepLeases() {
	leases, err := agent.Leases6(agent.Lease6Dir)
	if err != nil {
		fmt.Println("bootops-agent: dhcpv6:", err)
	}
	say := func(format string, a ...any) { fmt.Printf("bootops-agent: "+format+"\n", a...) }
	for _, l := range leases {
		go func() {
			if err := agent.KeepV6(context.Background(), l, move, say); err != nil {
				say("dhcpv6 on %s: %v", l.Iface, err)
			}
		}()
	}
}

// move puts new in place of old on iface (/64, as /init added old).
func move(iface string, old, new netip.Addr) error {
	if out, err := exec.Command("ip", "-6", "addr", "add", new.String()+"/64", "dev", iface).CombinedOutput(); err != nil {
		return fmt.Errorf("ip -6 addr add: %v: %s", err, out)
	}
	if out, err := exec.Command("ip", "-6", "addr", "del", old.String()+"/64", "dev", iface).CombinedOutput(); err != nil {
		return fmt.Errorf("ip -6 addr del: %v: %s", err, out)
	}
	return nil
}
