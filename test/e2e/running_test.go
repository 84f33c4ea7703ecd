//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// A BIOS VM and a UEFI VM install a real Debian at once, reboot into it
// from their disks (the boot plane sends them on from PXE: on UEFI iPXE
// hands back with an error, so OVMF tries the disk's \EFI\BOOT\BOOTX64.EFI
// instead of opening its menu), cloud-init sets the hostname from the
// node's seed and the report script reports: running — the UEFI VM's
// reports quoted by its TPM (swtpm, registered in Git: its check-in
// proved it, and its install is bound to it). A reboot keeps the BIOS one
// running, without a reinstall; raising reprovision reinstalls the UEFI one, and
// it is running again at generation 1.
func TestRunning(t *testing.T) {
	t.Parallel()
	imgDir, gzSHA := debianImage(t)
	l := newLab(t, true)
	l.vms(2)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")
	nodes := map[string]string{"vm-bios": "52:54:00:e2:40:01", "vm-uefi": "52:54:00:e2:40:02"}
	// vm-uefi has a TPM, registered in Git: its install is bound to it,
	// and the installed Debian's reports are quoted by the TPM's key.
	tp := l.tpm("running")
	hasTPM := map[string]bool{"vm-uefi": true}
	repo := provisionRepo(t, images4, gzSHA, "running", vars{"EK": tp.EKHash})
	l.serve(repo)

	disks := map[string]string{}
	for name := range nodes {
		disks[name] = filepath.Join(l.dir, name+".disk")
		f, _ := os.Create(disks[name])
		f.Truncate(3 << 30) // the image is 1.1 GiB: the root partition grows into the rest
		f.Close()
	}
	// Each round is a power-on: the NIC first, then the disk. The UEFI VM
	// keeps its NVRAM between rounds, as a machine does; no IPv6, so OVMF
	// does not wait for a PXEv6 answer before the disk.
	boot := func(name, round string) *vm {
		if name == "vm-uefi" {
			// OVMF's own PXE and HTTP boot (romfile=: no iPXE ROM on the
			// NIC), as on a machine from the factory.
			return l.uefiBoot("uefi"+round, nodes[name], ",romfile=,bootindex=1", slices.Concat(l.tpmArgs(tp), noIPv6, bootDisk(disks[name]))...)
		}
		return l.boot("bios"+round, nodes[name], ",bootindex=1", bootDisk(disks[name])...)
	}
	bootAll := func(round string) map[string]*vm {
		vms := map[string]*vm{}
		for name := range nodes {
			vms[name] = boot(name, round)
		}
		return vms
	}
	killAll := func(vms map[string]*vm) {
		for _, v := range vms {
			v.cmd.Process.Kill()
			waitVMs(time.Minute, v)
		}
	}
	start := time.Now()
	vms := bootAll("1")
	provisioned := map[string]time.Duration{}
	waitFor(t, "both installs", 25*time.Minute, func() bool {
		for name := range nodes {
			if s, _ := nodeState(l, "lab/"+name); s == "provisioned" && provisioned[name] == 0 {
				provisioned[name] = time.Since(start).Round(time.Second)
			}
		}
		return len(provisioned) == len(nodes)
	})
	for _, v := range vms {
		waitVMs(2*time.Minute, v) // the agent's reboot ends QEMU (-no-reboot)
	}
	downloads := strings.Count(l.log("images"), "GET /debian.raw.gz")
	t.Logf("timing: power-on → provisioned, both at once: BIOS %s, UEFI %s", provisioned["vm-bios"], provisioned["vm-uefi"])

	// From the disk: the installed OS, its cloud-init, its report. On the
	// way, the nodes are provisioned, then running: never sent back.
	vms = bootAll("2")
	seen := map[string]map[string]bool{"vm-bios": {}, "vm-uefi": {}}
	running := map[string]time.Duration{}
	if !testutil.Poll(25*time.Minute, every, func() bool {
		for name := range nodes {
			s, _ := nodeState(l, "lab/"+name)
			seen[name][s] = true
			if s == "running" && running[name] == 0 {
				running[name] = time.Since(start).Round(time.Second)
			}
		}
		return len(running) == len(nodes)
	}) {
		// Why not: what each installed system logged, from its disk.
		killAll(vms)
		for name := range nodes {
			if running[name] == 0 {
				t.Errorf("%s not running after 25m0s; its console:\n%s\nwhat its installed system logged:\n%s",
					name, testutil.Tail(mustRead(vms[name].console), 20), installedLogs(t, disks[name], ""))
			}
		}
		t.FailNow()
	}
	t.Logf("timing: power-on → running (install, reboot, first boot of the installed OS), both at once: BIOS %s, UEFI %s", running["vm-bios"], running["vm-uefi"])
	for name, v := range vms {
		if len(seen[name]) != 2 || !seen[name]["provisioned"] {
			t.Errorf("%s went through %v between its install and its report; want provisioned, then running", name, seen[name])
		}
		host := "e2e-" + strings.TrimPrefix(name, "vm-")
		// Any host name: on a loaded machine the serial getty can print its
		// prompt before cloud-init has set the host name (the boot went
		// on for 6 min in one CI run); the name is checked in the status,
		// from the installed OS's report. 20 min: with the edge tests'
		// five VMs beside it, a BIOS VM's getty came more than 10 min
		// after its report.
		v.wait(t, " login:", 20*time.Minute)
		m, _ := l.machine("lab/" + name)
		if m.Hostname != host || !strings.HasPrefix(m.Kernel, "6.") {
			t.Errorf("%s: hostname %q, kernel %q in the status", name, m.Hostname, m.Kernel)
		}
		log := l.logs("lab/" + name)
		if !strings.Contains(log, "served local-disk script") {
			t.Errorf("%s: its boot from disk is not on its timeline:\n%s", name, log)
		}
		// The TPM's machine: its report quoted by the TPM (with
		// tpm2-tools, through the kernel's /dev/tpmrm0); the other's by
		// its credential alone.
		if quoted := strings.Contains(log, "quoted by its TPM"); quoted != hasTPM[name] {
			t.Errorf("%s: quoted by its TPM: %v, want %v:\n%s", name, quoted, hasTPM[name], log)
		}
	}
	// OVMF says on the console which boot option it starts: after iPXE
	// handed back (from each network option: PXEv4, then HTTPv4), a
	// disk's, not a network one.
	c, _ := os.ReadFile(vms["vm-uefi"].console)
	i := strings.LastIndex(string(c), "booting from its disk")
	disk := ""
	for _, line := range strings.Split(string(c[max(i, 0):]), "\n") {
		if strings.Contains(line, "BdsDxe: starting Boot") && !strings.Contains(line, "MAC(") {
			disk = line[strings.Index(line, "BdsDxe"):]
		}
	}
	if i < 0 || disk == "" {
		t.Errorf("vm-uefi: OVMF started no disk after the local-disk script:\n%s", grepLines(string(c), "BdsDxe"))
	}
	t.Logf("vm-uefi: %d local-disk scripts (one per network boot option), then %s", strings.Count(string(c), "booting from its disk"), disk)
	killAll(vms)
	checkGrown(t, disks["vm-bios"])
	checkGrown(t, disks["vm-uefi"])

	// Again, vm-bios (one reboot shows it; each Debian boot under TCG is
	// minutes of CI's CPU-bound e2e stage): running, a second report, no
	// reinstall, no download. vm-uefi's next boot is its reinstall's.
	reports := strings.Count(l.logs("lab/vm-bios"), "running: hostname")
	bios := boot("vm-bios", "3")
	waitFor(t, "vm-bios's second report", 20*time.Minute, func() bool {
		return strings.Count(l.logs("lab/vm-bios"), "running: hostname") > reports
	})
	for name := range nodes {
		if s, _ := nodeState(l, "lab/"+name); s != "running" {
			t.Errorf("%s after a reboot: %s, want running", name, s)
		}
		if n := strings.Count(l.logs("lab/"+name), "started 2/4 image-to-disk"); n != 1 {
			t.Errorf("%s: installed %d times", name, n)
		}
	}
	if got := strings.Count(l.log("images"), "GET /debian.raw.gz"); got != downloads {
		t.Errorf("the image was downloaded again: %d downloads, %d before", got, downloads)
	}
	killAll(map[string]*vm{"vm-bios": bios})

	// Git raises vm-uefi's reprovision: reinstalled, running at generation 1.
	n := filepath.Join(repo, "sites/lab/nodes/vm-uefi.yaml")
	b, _ := os.ReadFile(n)
	os.WriteFile(n, append(b, "reprovision: 1\n"...), 0o644)
	time.Sleep(3 * time.Second) // the daemon compiles the edit
	again := boot("vm-uefi", "4")
	again.ended(t, 15*time.Minute) // the agent's reboot ends QEMU (-no-reboot)
	waitState(t, l, "lab/vm-uefi", "provisioned", time.Minute)
	again = boot("vm-uefi", "5")
	waitFor(t, "vm-uefi running at generation 1", 8*time.Minute, func() bool {
		log := l.logs("lab/vm-uefi")
		i := strings.Index(log, "provisioned (generation 1)")
		return i >= 0 && strings.Contains(log[i:], "running: hostname e2e-uefi") && strings.Contains(log[i:], "instance-id vm-uefi-1")
	})
	// The reinstall's check-in proved the TPM with a key of its own: the
	// report of generation 1 is quoted by that one.
	if log := l.logs("lab/vm-uefi"); !strings.Contains(log[strings.Index(log, "provisioned (generation 1)"):], "quoted by its TPM") {
		t.Errorf("vm-uefi's report after the reinstall is not quoted by its TPM:\n%s", log)
	}
	again.cmd.Process.Kill()
}

// checkGrown reads the installed disk's table: the backup GPT at its end
// and the root partition grown into the space the image did not cover.
func checkGrown(t *testing.T, disk string) {
	t.Helper()
	out := run(t, "sfdisk", "-d", disk)
	if !strings.Contains(out, "last-lba: 6291422") {
		t.Errorf("%s: the GPT does not reach the disk's end:\n%s", disk, out)
	}
	var size int64
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "name=\"root\"") {
			fmt.Sscanf(l[strings.Index(l, "size=")+5:], "%d", &size)
		}
	}
	if size*512 < 2<<30 {
		t.Errorf("%s: the root partition is %d MiB: not grown into the 3 GiB disk\n%s", disk, size>>11, out)
	}
}
