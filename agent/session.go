package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/bootops/bootops/plan"
)

// Version is the agent's version, reported at check-in (set by the
// command at build time).
var Version = "dev"

// ParseCmdline reads the key=value words of a kernel command line.
func ParseCmdline(s string) map[string]string {
	out := map[string]string{}
	for _, w := range strings.Fields(s) {
		k, v, _ := strings.Cut(w, "=")
		out[k] = v
	}
	return out
}

// maxRefused is how many refused check-ins (401) the agent takes before it
// boots again for a new boot token.
const maxRefused = 3

// Session is one life of the agent: it reads who the machine is, checks in
// with the server named on the kernel command line (args), runs the
// workflow it gets and reports every step. tweak, when set, adjusts the
// Runner before it runs (the fleet simulation and the tests point its disks
// at files and record its power actions).
func Session(ctx context.Context, args map[string]string, sysfs string, console io.Writer, tweak func(*Runner)) error {
	server, site, node, machine, token := args[plan.CmdlineServer], args[plan.CmdlineSite], args[plan.CmdlineNode], args[plan.CmdlineMachine], args[plan.CmdlineToken]
	if server == "" || site == "" || token == "" || (node == "" && machine == "") {
		return errors.New("the kernel command line lacks bootops.server, bootops.site, bootops.token or bootops.node: was this booted by bootops?")
	}
	id, err := Identity(sysfs)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	disks, err := Disks(sysfs)
	if err != nil {
		return fmt.Errorf("disks: %w", err)
	}
	fmt.Fprintf(console, "bootops-agent %s: node %q on site %s, serial %q, uuid %s, %d NICs, %d disks; server %s\n",
		Version, node, site, id.Serial, id.UUID, len(id.MACs), len(disks), server)
	up := newUplink(server, site, node, machine, token, console)
	sendCtx, stop := context.WithCancel(ctx)
	defer stop()
	go up.run(sendCtx)

	r := &Runner{Report: up}
	if tweak != nil {
		tweak(r)
	}
	var reply plan.CheckInReply
	refused := 0
	first := r.Backoff
	if first <= 0 {
		first = 2 * time.Second
	}
checkIn:
	for wait := first; ; wait = min(2*wait, 30*time.Second) {
		reply, err = up.checkIn(ctx, plan.CheckIn{Identity: id, Arch: runtime.GOARCH, Disks: disks, Agent: Version})
		var he *httpError
		if errors.As(err, &he) && he.code == http.StatusUnauthorized {
			refused++
		}
		switch {
		case refused >= maxRefused:
			// The credential is spent, expired or wrong: a new boot gets
			// a new one.
			fmt.Fprintf(console, "bootops-agent: check-in refused %d times (%v): booting again for a new credential\n", refused, err)
			if r.Power != nil {
				return r.Power("reboot")
			}
			return defaultPower("reboot")
		case err != nil:
			fmt.Fprintf(console, "bootops-agent: check-in: %v (again in %s)\n", err, wait)
		case reply.Workflow != nil:
			break checkIn
		case reply.RetrySeconds > 0:
			fmt.Fprintf(console, "bootops-agent: held: %s (asking again in %d s)\n", reply.Hold, reply.RetrySeconds)
			wait = time.Duration(reply.RetrySeconds) * time.Second
		default:
			// Told to boot again: what the Plan says now is another script.
			fmt.Fprintf(console, "bootops-agent: %s\n", reply.Hold)
			if r.Power != nil {
				return r.Power("reboot")
			}
			return defaultPower("reboot")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	r.Generation = reply.Generation
	if r.CloudInit == nil {
		r.CloudInit = func(context.Context) (Seed, error) {
			if reply.CloudInit == nil {
				return Seed{}, nil
			}
			return Seed{UserData: reply.CloudInit.UserData, MetaData: reply.CloudInit.MetaData, NetworkConfig: reply.CloudInit.NetworkConfig}, nil
		}
	}
	err = r.Run(ctx, *reply.Workflow)
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if ferr := up.Flush(fctx); ferr != nil {
		fmt.Fprintf(console, "bootops-agent: %v\n", ferr)
	}
	if err != nil {
		return fmt.Errorf("workflow failed: %w (the machine stays in the Micro-OS; the failure is in `bootops status`)", err)
	}
	return nil
}
