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
	server, site, node := cfg.Server, cfg.Site, cfg.Node
	id, err := Identity(sysfs)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	disks, err := Disks(sysfs)
	if err != nil {
		return fmt.Errorf("disks: %w", err)
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
		Version, node, site, id.Serial, id.UUID, len(id.MACs), len(disks), server, cfg.Source, cfg.Boot)
	fmt.Fprintf(console, "bootops-agent: tpm: %s\n", tpmPresence(sysfs))
	for k, v := range cfg.Env {
		os.Setenv(k, v)
	}
	up := newUplink(server, site, node, cfg.Machine, cfg.Token, console)
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
	var reply plan.CheckInReply
	refused := 0
	first := r.Backoff
	if first <= 0 {
		first = 2 * time.Second
	}
checkIn:
	for wait := first; ; wait = min(2*wait, 30*time.Second) {
		reply, err = checkInProved(ctx, up, plan.CheckIn{Identity: id, Arch: runtime.GOARCH, Disks: disks, Agent: Version, Boot: cfg.Boot, Inventory: inv, TPM: tpmID}, m, sysfs, console)
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
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
	r.Generation = reply.Generation
	if reply.Peers != nil && r.Swarm == nil {
		r.Swarm, r.Peers = swarmLine{up}, reply.Peers
	}
	if r.QAStream == nil {
		r.QAStream = up.qaStream(cfg.client(0))
	}
	if r.CloudInit == nil {
		r.CloudInit = func(context.Context) (Seed, error) {
			if reply.CloudInit == nil {
				return Seed{}, nil
			}
			seed := Seed{UserData: reply.CloudInit.UserData, MetaData: reply.CloudInit.MetaData, NetworkConfig: reply.CloudInit.NetworkConfig, Report: reply.CloudInit.Report}
			if m != nil {
				// The key the check-in proved (a server challenges
				// every check-in with a TPM): it keeps its public area
				// with this install.
				k, err := m.ReportKey()
				if err != nil {
					return Seed{}, err
				}
				seed.ReportKey = &k
			}
			return seed, nil
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
