package agent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootops/bootops/plan"
)

// TestAgentOverIPv6: a machine of a dual-stack site that fetched its
// script over IPv6 is told bootops.server=http://[::1]:PORT; its agent
// checks in there, sends its events and installs, and the installed OS's
// report goes to the same bracketed address.
func TestAgentOverIPv6(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, store, image, _ := agentServerOn(t, ctx, "[::1]:0", "{serial: S-N1}")
	args := bootArgs(t, "http://"+addr+"/ipxe?serial=S-N1&site=lab")
	if args["bootops.server"] != "http://"+addr || args["bootops.token"] == "" {
		t.Fatalf("kernel command line: %v", args)
	}
	disk := filepath.Join(t.TempDir(), "vda")
	os.WriteFile(disk, make([]byte, 4<<20), 0o644)
	var report string
	var console bytes.Buffer
	err := Session(ctx, args, machineSysfs(t, "S-N1", "52:54:00:00:00:01"), &console, func(r *Runner) {
		r.ResolveDisk = func(string) (string, error) { return disk, nil }
		r.Mount = func(dev, fstype, dir string) error { return nil }
		r.Unmount = func(dir string) error {
			// The install's cloud-init, read before its folder goes.
			if b, err := os.ReadFile(filepath.Join(dir, "var/lib/cloud/scripts/per-boot/bootops-report")); err == nil {
				report = string(b)
			}
			return nil
		}
		r.Power = func(string) error { return nil }
	})
	if err != nil {
		t.Fatalf("agent: %v\n%s", err, console.String())
	}
	if got, _ := os.ReadFile(disk); !bytes.Equal(got[:len(image)], image) {
		t.Error("the disk does not hold the image")
	}
	if gen, ok := store.Provisioned("lab", "n1"); !ok || gen != 3 {
		t.Errorf("provisioned: %d %v\n%s", gen, ok, console.String())
	}
	checkedIn := false
	for _, e := range store.Events("lab/n1") {
		checkedIn = checkedIn || e.State == "microos" && e.IP == "::1"
	}
	if !checkedIn {
		t.Errorf("no check-in from ::1: %+v", store.Events("lab/n1"))
	}
	// The report script in the install's cloud-init.
	if !strings.Contains(report, "http://"+addr+plan.ReportPath) || strings.Contains(report, "127.0.0.1") {
		t.Errorf("the installed OS reports elsewhere:\n%s", report)
	}
}
