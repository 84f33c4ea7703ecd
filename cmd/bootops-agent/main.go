// Command bootops-agent runs in the Micro-OS: it reads who it is from the
// kernel command line and the machine (SMBIOS, NICs, disks), checks in with
// the boot server with its per-node token, runs the workflow it gets and
// reports every step, then reboots into the installed system.
//
// The kernel command line the boot server renders carries
// bootops.server=URL bootops.site=S bootops.node=N bootops.token=T (an
// unknown machine: bootops.machine=mac:… instead of bootops.node).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/bootops/bootops/agent"
	"github.com/bootops/bootops/plan"
)

// version is set at build time (-ldflags -X main.version=…).
var version = "dev"

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help") {
		fmt.Println("bootops-agent runs in the bootops Micro-OS; it takes its settings from /proc/cmdline (bootops.server, bootops.site, bootops.node, bootops.token).")
		return
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bootops-agent:", err)
		os.Exit(1)
	}
	if err := run(context.Background(), parseCmdline(string(cmdline)), "/sys", os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stdout, "bootops-agent:", err)
		os.Exit(1)
	}
}

// parseCmdline reads key=value words.
func parseCmdline(s string) map[string]string {
	out := map[string]string{}
	for _, w := range strings.Fields(s) {
		k, v, _ := strings.Cut(w, "=")
		out[k] = v
	}
	return out
}

// run is the agent; tweak, when set, adjusts the Runner (tests point its
// disks at files and record its power actions).
func run(ctx context.Context, args map[string]string, sysfs string, console io.Writer, tweak func(*agent.Runner)) error {
	server, site, node, machine, token := args[plan.CmdlineServer], args[plan.CmdlineSite], args[plan.CmdlineNode], args[plan.CmdlineMachine], args[plan.CmdlineToken]
	if server == "" || site == "" || token == "" || (node == "" && machine == "") {
		return errors.New("the kernel command line lacks bootops.server, bootops.site, bootops.token or bootops.node: was this booted by bootops?")
	}
	id, err := agent.Identity(sysfs)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	disks, err := agent.Disks(sysfs)
	if err != nil {
		return fmt.Errorf("disks: %w", err)
	}
	fmt.Fprintf(console, "bootops-agent %s: node %q on site %s, serial %q, uuid %s, %d NICs, %d disks; server %s\n",
		version, node, site, id.Serial, id.UUID, len(id.MACs), len(disks), server)
	up := newUplink(server, site, node, machine, token, console)
	sendCtx, stop := context.WithCancel(ctx)
	defer stop()
	go up.run(sendCtx)

	var reply plan.CheckInReply
	for wait := 2 * time.Second; ; wait = min(2*wait, 30*time.Second) {
		reply, err = up.checkIn(ctx, plan.CheckIn{Identity: id, Arch: runtime.GOARCH, Disks: disks, Agent: version})
		switch {
		case err != nil:
			fmt.Fprintf(console, "bootops-agent: check-in: %v (again in %s)\n", err, wait)
		case reply.Workflow != nil:
		case reply.RetrySeconds > 0:
			fmt.Fprintf(console, "bootops-agent: held: %s (asking again in %d s)\n", reply.Hold, reply.RetrySeconds)
			wait = time.Duration(reply.RetrySeconds) * time.Second
		default:
			fmt.Fprintf(console, "bootops-agent: %s\n", reply.Hold)
			return power("reboot")
		}
		if err == nil && reply.Workflow != nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	r := &agent.Runner{
		Report:     up,
		Generation: reply.Generation,
		CloudInit: func(context.Context) (agent.Seed, error) {
			if reply.CloudInit == nil {
				return agent.Seed{}, nil
			}
			return agent.Seed{UserData: reply.CloudInit.UserData, MetaData: reply.CloudInit.MetaData, NetworkConfig: reply.CloudInit.NetworkConfig}, nil
		},
		Power: func(action string) error {
			// Nothing is lost: every event is acknowledged before the
			// machine goes away.
			fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			if err := up.flush(fctx); err != nil {
				fmt.Fprintf(console, "bootops-agent: %v\n", err)
			}
			return power(action)
		},
	}
	if tweak != nil {
		tweak(r)
	}
	err = r.Run(ctx, *reply.Workflow)
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if ferr := up.flush(fctx); ferr != nil {
		fmt.Fprintf(console, "bootops-agent: %v\n", ferr)
	}
	if err != nil {
		return fmt.Errorf("workflow failed: %w (the machine stays in the Micro-OS; the failure is in `bootops status`)", err)
	}
	return nil
}
