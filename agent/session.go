package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/tpm"
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

// Session is one life of the agent booted with the kernel command line
// args alone (see Run).
func Session(ctx context.Context, args map[string]string, sysfs string, console io.Writer, tweak func(*Runner)) error {
	return Run(ctx, FromCmdline(args), sysfs, console, tweak)
}

// Run is one life of the agent: it reads who the machine is, checks in
// with the server cfg names, runs the workflow it gets and reports every
// step. tweak, when set, adjusts the Runner before it runs (the fleet
// simulation and the tests point its disks at files and record its power
// actions).
func Run(ctx context.Context, cfg Config, sysfs string, console io.Writer, tweak func(*Runner)) error {
	if err := cfg.check(); err != nil {
		return err
	}
	ci, err := discover(cfg, sysfs, console)
	if err != nil {
		return err
	}
	for k, v := range cfg.Env {
		os.Setenv(k, v)
	}
	up := newUplink(cfg.Server, cfg.Site, cfg.Node, cfg.Machine, cfg.Token, console)
	up.client = cfg.client(30 * time.Second)
	sendCtx, stop := context.WithCancel(ctx)
	defer stop()
	go up.run(sendCtx)

	r := &Runner{Report: up, HTTP: cfg.client(0)}
	if tweak != nil {
		tweak(r)
	}
	m, tpmID := openTPM(sysfs, console)
	if m != nil {
		defer m.Close()
	}
	ci.TPM = tpmID
	if r.QAStream == nil {
		r.QAStream = up.qaStream(cfg.client(0))
	}
	swarm, cloudInit := r.Swarm, r.CloudInit // a test's, else each reply's
	for {
		reply, ok, err := checkInForWorkflow(ctx, up, r, ci, m, cfg.Server, sysfs, console)
		if !ok {
			return err
		}
		r.Generation = reply.Generation
		r.Swarm, r.Peers = swarm, nil
		if reply.Peers != nil && swarm == nil {
			r.Swarm, r.Peers = swarmLine{up}, reply.Peers
		}
		r.CloudInit = cloudInit
		if cloudInit == nil {
			r.CloudInit = cloudInitSeed(reply.CloudInit, m)
		}
		err = r.Run(ctx, *reply.Workflow)
		fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		if ferr := up.Flush(fctx); ferr != nil {
			fmt.Fprintf(console, "bootops-agent: %v\n", ferr)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("workflow failed: %w (the machine stays in the Micro-OS; the failure is in `bootops status`)", err)
		}
		if !reply.Workflow.Commission {
			return nil
		}
		// A held node's QA passed: it asks again, and waits.
		fmt.Fprintf(console, "bootops-agent: commissioned: %d QA actions passed; asking the server again\n", len(reply.Workflow.Actions))
	}
}

// discover reads who the machine is and what it has, says it on the
// console, and returns the check-in that carries it (without the TPM's
// identity).
func discover(cfg Config, sysfs string, console io.Writer) (plan.CheckIn, error) {
	id, err := Identity(sysfs)
	if err != nil {
		return plan.CheckIn{}, fmt.Errorf("identity: %w", err)
	}
	disks, err := Disks(sysfs)
	if err != nil {
		return plan.CheckIn{}, fmt.Errorf("disks: %w", err)
	}
	// sysfs is root's sys/ ("/sys", or a test's folder): the inventory
	// reads proc/ beside it too. What it cannot read is left out; nothing
	// at all is no inventory, not a failed check-in.
	inv, err := Inventory(filepath.Dir(sysfs))
	if err != nil {
		fmt.Fprintf(console, "bootops-agent: no hardware inventory: %v\n", err)
		inv = nil
	}
	fmt.Fprintf(console, "bootops-agent %s: node %q on site %s, serial %q, uuid %s, %d NICs, %d disks; server %s (%s); boot: %s\n",
		Version, cfg.Node, cfg.Site, id.Serial, id.UUID, len(id.MACs), len(disks), cfg.Server, cfg.Source, cfg.Boot)
	fmt.Fprintf(console, "bootops-agent: tpm: %s\n", tpmPresence(sysfs))
	return plan.CheckIn{Identity: id, Arch: runtime.GOARCH, Disks: disks, Agent: Version, Boot: cfg.Boot, Inventory: inv}, nil
}

// checkInForWorkflow checks in, again and again with a growing wait, until
// the server sends a workflow (ok). It returns ok false when this life is
// over instead: the server sent the machine to boot again, or refused its
// credential maxRefused times (err is the reboot's), or ctx ended.
func checkInForWorkflow(ctx context.Context, up *uplink, r *Runner, ci plan.CheckIn, m *tpm.Machine, server, sysfs string, console io.Writer) (reply plan.CheckInReply, ok bool, err error) {
	refused, said := 0, ""
	first := r.Backoff
	if first <= 0 {
		first = 2 * time.Second
	}
	for wait := first; ; wait = min(2*wait, 30*time.Second) {
		reply, err = checkInProved(ctx, up, ci, m, sysfs, console)
		if why := tlsRefusal(err); why != "" {
			// Not the site's server, or someone between: nothing it says
			// is believed, nothing is installed.
			fmt.Fprintf(console, "bootops-agent: REFUSED %s: %s; nothing will be installed (%v)\n", server, why, err)
		}
		var he *httpError
		if errors.As(err, &he) && he.code == http.StatusUnauthorized {
			refused++
		}
		switch {
		case refused >= maxRefused:
			// The credential is spent, expired or wrong: a new boot gets
			// a new one.
			fmt.Fprintf(console, "bootops-agent: check-in refused %d times (%v): booting again for a new credential\n", refused, err)
			return reply, false, r.reboot()
		case err != nil:
			fmt.Fprintf(console, "bootops-agent: check-in: %v (again in %s)\n", err, wait)
		case reply.Workflow != nil:
			return reply, true, nil
		case reply.RetrySeconds > 0:
			// Said once while the reason stays: a node Git holds asks
			// every few seconds, maybe for days.
			if reply.Hold != said {
				fmt.Fprintf(console, "bootops-agent: held: %s (asking again every %d s)\n", reply.Hold, reply.RetrySeconds)
				said = reply.Hold
			}
			wait = time.Duration(reply.RetrySeconds) * time.Second
		default:
			// Told to boot again: what the Plan says now is another script.
			fmt.Fprintf(console, "bootops-agent: %s\n", reply.Hold)
			return reply, false, r.reboot()
		}
		if !sleep(ctx, wait) {
			return reply, false, ctx.Err()
		}
	}
}

// reboot boots the machine again, through the Runner's Power when set.
func (r *Runner) reboot() error {
	if r.Power != nil {
		return r.Power("reboot")
	}
	return defaultPower("reboot")
}

// cloudInitSeed is the Runner's CloudInit for the check-in's seed ci (none:
// an empty seed). With a TPM m, the seed carries the key the check-in
// proved (a server challenges every check-in with a TPM): it keeps its
// public area with this install.
func cloudInitSeed(ci *plan.CloudInitSeed, m *tpm.Machine) func(context.Context) (Seed, error) {
	return func(context.Context) (Seed, error) {
		if ci == nil {
			return Seed{}, nil
		}
		seed := Seed{UserData: ci.UserData, MetaData: ci.MetaData, NetworkConfig: ci.NetworkConfig, Report: ci.Report}
		if m != nil {
			k, err := m.ReportKey()
			if err != nil {
				return Seed{}, err
			}
			seed.ReportKey = &k
		}
		return seed, nil
	}
}
