//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// slaac: RA flags M, O and A. OVMF's PXE takes its address from DHCPv6
// (IA_NA) and the Micro-OS, which has no DHCPv6 client, forms one by SLAAC.
var slaac = raFlags{managed: true, other: true, autonomous: true}

// An OVMF VM on an IPv6-only link, registered by MAC with an IPv6
// reservation, provisioned through bootops alone: its DHCPv6 (the reserved
// address for OVMF's PXE, a tftp:// boot file), TFTP over IPv6 (snponly.efi),
// iPXE's own DHCPv6 and the script from http://[server6]:8080, the
// Micro-OS on its SLAAC address, the agent's check-in and the image from
// [server6]:8081.
func TestIPv6Provision(t *testing.T) {
	t.Parallel()
	l := newLab6(t, false, slaac)
	l.vms(1)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "["+server6+"]:8081")
	const mac, reserved = "52:54:00:e2:60:21", "2001:db8:1::21"
	l.serveOn(provisionRepo(t, images6, gzSHA, "ipv6-provision", nil), "["+server6+"]:8080", "["+server6+"]:69") // mac, reserved: the archive's node

	d := disk(t, l, "v6prov")
	start := time.Now()
	v := l.uefiVM("v6prov", mac, append(append(withDisk(d), pxeV6Only...), "-smbios", "type=1,serial=E2E-V6")...)
	v.ended(t, 10*time.Minute)
	t.Logf("timing: IPv6-only, OVMF PXEv6 → TFTP snponly.efi → iPXE DHCPv6 → HTTP over IPv6 → Micro-OS (SLAAC) → image installed, VM start → provisioned and rebooted: %s", time.Since(start).Round(time.Second))

	var state, msg string
	if !testutil.Poll(30*time.Second, every, func() bool { state, msg = nodeStateAt(t, l, url6, "lab/vm6"); return state == "provisioned" }) {
		t.Fatalf("lab/vm6: state %q (%s), want provisioned; console:\n%s", state, msg, testutil.Tail(mustRead(v.console), 40))
	}
	checkDisk(t, d, rawSHA)

	out := mustRead(v.console)
	for _, want := range []string{">>Start PXE over IPv6", "Station IP address is 2001:DB8:1:0:0:0:0:21", "NBP filename is snponly.efi"} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q:\n%s", want, testutil.Tail(out, 40))
		}
	}
	evs, js := events(t, l, url6, "lab/vm6")
	var dhcp6, checkin bool
	for _, e := range evs {
		if strings.HasPrefix(e.Message, "DHCPv6") {
			dhcp6 = true
			t.Logf("event: %s", e.Message)
		}
		if strings.Contains(e.Message, "agent checked in") && strings.HasPrefix(e.IP, "2001:db8:1:") {
			checkin = true
			t.Logf("check-in from %s", e.IP)
		}
	}
	if !dhcp6 || !checkin {
		t.Errorf("the timeline lacks DHCPv6 events (%v) or a check-in from an IPv6 address (%v):\n%s", dhcp6, checkin, js)
	}
	// OVMF's PXE got snponly.efi over TFTP, iPXE the script, both with the
	// reserved address.
	for _, want := range []string{
		"DHCPv6 REPLY " + reserved + " to vm6: tftp://[" + server6 + "]/snponly.efi",
		"DHCPv6 REPLY " + reserved + " to vm6: " + url6 + "/boot.ipxe",
	} {
		if !strings.Contains(js, want) {
			t.Errorf("the timeline lacks %q", want)
		}
	}
	if strings.Contains(l.log("bootops"), "--ipxe-dir has none") {
		t.Errorf("bootops warned of a missing snponly.efi in /usr/lib/ipxe:\n%s", grepLines(l.log("bootops"), "ipxe-dir"))
	}
	if !strings.Contains(l.log("bootops"), "msg=tftp file=snponly.efi peer="+reserved+" ") {
		t.Errorf("snponly.efi was not fetched over TFTP from the reserved address:\n%s", grepLines(l.log("bootops"), "tftp"))
	}
	if log := l.log("images"); !strings.Contains(log, "from=[2001:db8:1:") {
		t.Errorf("the image was not fetched over IPv6:\n%s", log)
	}
}

// A dual-stack site served by one daemon: IPv4 in proxy mode beside the
// lab's dnsmasq, IPv6 in reservation mode, HTTP and TFTP on both families,
// RAs with M, O and A. A BIOS VM (SeaBIOS, iPXE in the NIC's ROM) and an
// OVMF VM with only PXE over IPv6 boot at once, and each goes on in its
// firmware's family: iPXE, told by the RA to run DHCPv6, asks both
// families and would boot the DHCPv6 URL; bootops gives that URL only to
// machines whose firmware booted over IPv6 (boot/dhcp6 Firmware), so the
// BIOS VM's script, agent and image come over IPv4 and the OVMF VM's over
// IPv6.
func TestIPv6DualStack(t *testing.T) {
	t.Parallel()
	l := newLab6(t, true, slaac)
	l.vms(2)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")
	l.start("images6", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "["+server6+"]:8081")
	const mac4, mac6, reserved = "52:54:00:e2:60:31", "52:54:00:e2:60:32", "2001:db8:1::32" // the archive's nodes
	repo := provisionRepo(t, images6, gzSHA, "ipv6-dual-stack", nil)
	l.serveOn(repo, "198.18.0.1:8080,["+server6+"]:8080", "198.18.0.1:69,["+server6+"]:69")

	d4, d6 := disk(t, l, "ds4"), disk(t, l, "ds6")
	start := time.Now()
	v4 := l.vm("ds4", mac4, append(withDisk(d4), "-smbios", "type=1,serial=E2E-DS4")...)
	v6 := l.uefiVM("ds6", mac6, append(append(withDisk(d6), pxeV6Only...), "-smbios", "type=1,serial=E2E-DS6")...)
	done := make(chan string, 2)
	for _, v := range []*vm{v4, v6} {
		go func(v *vm) {
			v.cmd.Wait()
			done <- fmt.Sprintf("%s %s", v.name, time.Since(start).Round(time.Second))
		}(v)
	}
	timeout := time.After(15 * time.Minute)
	for i := 0; i < 2; i++ {
		select {
		case s := <-done:
			t.Logf("timing: dual-stack site, two VMs at once (BIOS over IPv4, OVMF over IPv6), VM start → provisioned and rebooted: %s", s)
		case <-timeout:
			v4.cmd.Process.Kill()
			v6.cmd.Process.Kill()
			t.Fatalf("the VMs did not both provision and reboot in 15 min; consoles:\n%s\n%s", testutil.Tail(mustRead(v4.console), 30), testutil.Tail(mustRead(v6.console), 30))
		}
	}

	for _, c := range []struct {
		key, server, disk string
		firmware, dhcp6   string // in the timeline
		from, script      string // the check-in's address; the script iPXE fetched
		console           *vm
	}{
		// The BIOS VM: a DHCPv4 proxy offer of the IPv4 script URL; its
		// iPXE's DHCPv6 gets an address and no boot URL.
		{"lab/vm4", "http://198.18.0.1:8080", d4, "proxy OFFER: http://198.18.0.1:8080/", "no boot URL: dual-stack site",
			"198.18.0.", "http://198.18.0.1:8080/boot.ipxe", v4},
		// The OVMF VM: its reserved address and a tftp:// boot file, then
		// iPXE's script URL, over DHCPv6.
		{"lab/vm6", url6, d6, "DHCPv6 REPLY " + reserved + " to vm6: tftp://[" + server6 + "]", "DHCPv6 REPLY " + reserved + " to vm6: " + url6 + "/boot.ipxe",
			"2001:db8:1:", url6 + "/boot.ipxe", v6},
	} {
		if state, msg := nodeStateAt(t, l, c.server, c.key); state != "provisioned" {
			t.Errorf("%s: state %q (%s), want provisioned", c.key, state, msg)
		}
		checkDisk(t, c.disk, rawSHA)
		evs, js := events(t, l, c.server, c.key)
		var firmware, dhcp6 bool
		var checkin string
		for _, e := range evs {
			firmware = firmware || strings.HasPrefix(e.Message, c.firmware)
			dhcp6 = dhcp6 || strings.Contains(e.Message, c.dhcp6)
			if strings.Contains(e.Message, "agent checked in") {
				checkin = e.IP
			}
		}
		if !firmware || !dhcp6 {
			t.Errorf("%s: %q in its timeline: %v, %q: %v:\n%s", c.key, c.firmware, firmware, c.dhcp6, dhcp6, js)
		}
		if !strings.HasPrefix(checkin, c.from) {
			t.Errorf("%s: agent checked in from %q, want an address of %s:\n%s", c.key, checkin, c.from, js)
		}
		if out := mustRead(c.console.console); !strings.Contains(out, c.script) {
			t.Errorf("%s: iPXE did not fetch %s:\n%s", c.key, c.script, testutil.Tail(out, 30))
		}
		t.Logf("%s: agent checked in from %s", c.key, checkin)
	}
	if out := mustRead(v6.console); !strings.Contains(out, "Station IP address is 2001:DB8:1:0:0:0:0:32") || !strings.Contains(out, "NBP filename is snponly.efi") {
		t.Errorf("OVMF did not get vm6's reserved address and snponly.efi:\n%s", testutil.Tail(out, 40))
	}
	if !strings.Contains(l.log("images"), "from=198.18.0.") || !strings.Contains(l.log("images6"), "from=[2001:db8:1:") {
		t.Errorf("the image was not fetched once over each family:\nIPv4: %s\nIPv6: %s", l.log("images"), l.log("images6"))
	}
}

// The IPv6-only path to running: an OVMF VM installs the real Debian image
// over IPv6 (as in TestIPv6Provision), and the installed OS, given the
// node's reserved address by its cloud-init network-config, reports to
// http://[server6]:8080: running. Both power-ons start from the network,
// as a warehouse's machines do: the second gets bootops' local-disk script
// over IPv6, iPXE (snponly.efi) exits, and OVMF goes on to the disk. (With
// ipxe.efi, which replaces the firmware's network drivers, OVMF hung or
// reset after that exit instead.)
func TestIPv6Running(t *testing.T) {
	t.Parallel()
	imgDir, gzSHA := debianImage(t)
	l := newLab6(t, false, slaac)
	l.vms(1)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "["+server6+"]:8081")
	const mac, reserved = "52:54:00:e2:60:41", "2001:db8:1::41"
	repo := provisionRepo(t, images6, gzSHA, "ipv6-running", nil) // mac, reserved: the archive's node
	l.serveOn(repo, "["+server6+"]:8080", "["+server6+"]:69")

	d := filepath.Join(l.dir, "v6run.disk")
	f, err := os.Create(d)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(3 << 30)
	f.Close()
	// Each power-on: OVMF's PXE over IPv6 first, then the disk.
	start := time.Now()
	l.uefiBoot("v6run1", mac, ",romfile=,bootindex=1", append(append([]string{}, pxeV6Only...), bootDisk(d)...)...).ended(t, 20*time.Minute)
	t.Logf("timing: IPv6-only, power-on → Debian installed and rebooted: %s", time.Since(start).Round(time.Second))
	if state, msg := nodeStateAt(t, l, url6, "lab/vm6"); state != "provisioned" {
		t.Fatalf("lab/vm6: state %q (%s), want provisioned", state, msg)
	}
	v := l.uefiBoot("v6run2", mac, ",romfile=,bootindex=1", append(append([]string{}, pxeV6Only...), bootDisk(d)...)...)
	waitFor(t, "lab/vm6 running", 25*time.Minute, func() bool {
		s, _ := nodeStateAt(t, l, url6, "lab/vm6")
		return s == "running"
	})
	t.Logf("timing: IPv6-only, power-on → running (install, reboot, first boot of Debian): %s", time.Since(start).Round(time.Second))
	// The installed OS's own report from its IPv6 address (checked below)
	// is the proof it booted and reached the network; its login prompt is
	// TestRunning's check of the same image (here it came more than 10 min
	// after the report on a loaded machine, the boot still going on).
	evs, js := events(t, l, url6, "lab/vm6")
	var report, from string
	var local bool
	for _, e := range evs {
		if strings.HasPrefix(e.Message, "running: hostname e2e-v6") {
			report, from = e.Message, e.IP
		}
		local = local || strings.HasPrefix(e.Message, "served local-disk script") && strings.HasPrefix(e.IP, "2001:db8:1:")
	}
	t.Logf("report from %s: %s", from, report)
	if out := mustRead(v.console); !local || !strings.Contains(out, "NBP filename is snponly.efi") || !strings.Contains(out, "booting from its disk") {
		t.Errorf("the second power-on did not go from PXE over IPv6 through the local-disk script to the disk (served over IPv6: %v):\n%s", local, firmwareLines(out))
	}
	if !strings.HasPrefix(from, "2001:db8:1:") || !strings.Contains(report, reserved) {
		t.Errorf("the installed OS reported from %q with %q; want an address of %s and its reserved one, %s, among its addresses:\n%s", from, report, prefix6, reserved, js)
	}
	v.cmd.Process.Kill()
}
