//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// Proxy mode beside the site's own DHCP server: a BIOS VM registered by
// serial only, an unregistered VM, and a VM presenting one node's MAC and
// another node's serial.
func TestProxyModeBIOS(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	l.vms(3)
	l.serve(testRepo(t, "proxy-bios"))
	serial := l.vm("bios-serial", "52:54:00:e2:00:01", "-smbios", "type=1,serial=E2E-SERIAL-1,uuid=01020304-0506-0708-090a-0b0c0d0e0f10")
	unknown := l.vm("bios-unknown", "52:54:00:e2:00:02", "-smbios", "type=1,serial=E2E-NOBODY")
	mismatch := l.vm("bios-mismatch", "52:54:00:e2:00:0a", "-smbios", "type=1,serial=E2E-B")

	out := serial.wait(t, "BOOTOPS-MICROOS", 6*time.Minute)
	if !strings.Contains(out, "BOOTOPS-MICROOS node=vm-serial profile=none serial=E2E-SERIAL-1") {
		t.Errorf("registered VM booted the wrong thing:\n%s", testutil.Tail(out, 5))
	}
	out = unknown.wait(t, "BOOTOPS-MICROOS", 6*time.Minute)
	if !strings.Contains(out, "BOOTOPS-MICROOS node=none profile=test-os serial=E2E-NOBODY") {
		t.Errorf("unknown VM did not boot the default profile:\n%s", testutil.Tail(out, 5))
	}
	// The mismatched VM must be refused: an event, and no Micro-OS.
	refused := testutil.Poll(3*time.Minute, every, func() bool {
		for _, m := range l.status().Nodes {
			if m.Node == "node-a" && m.State == "mismatch" {
				return true
			}
		}
		return false
	})
	if !refused {
		t.Errorf("no mismatch for the VM with node-a's MAC and node-b's serial; status: %s", states(l.status()))
	}
	if b, _ := os.ReadFile(mismatch.console); strings.Contains(string(b), "BOOTOPS-MICROOS") {
		t.Errorf("the mismatched VM booted a Micro-OS:\n%s", testutil.Tail(string(b), 5))
	}
	// The registered VM's script is in its timeline; its DHCP replies stay
	// with its MAC, which Git does not register for it (a script request
	// naming a MAC beside a serial binds nothing).
	ev := run(t, "ip", "netns", "exec", l.lan, "busybox", "wget", "-qO-", "http://198.18.0.1:8080/api/v1/events?site=lab&node=vm-serial")
	if strings.Contains(ev, `"kind": "dhcp"`) || !strings.Contains(ev, `"kind": "script"`) {
		t.Errorf("vm-serial's timeline lacks its script, or took the DHCP replies of a MAC Git does not register for it:\n%s", ev)
	}
	ev = run(t, "ip", "netns", "exec", l.lan, "busybox", "wget", "-qO-", "http://198.18.0.1:8080/api/v1/events?key=mac:52:54:00:e2:00:01")
	if !strings.Contains(ev, `"kind": "dhcp"`) {
		t.Errorf("the DHCP replies to vm-serial's MAC are not kept under it:\n%s", ev)
	}
}

// UEFI: OVMF's own PXE → TFTP ipxe.efi from bootops → iPXE → HTTP → the
// Micro-OS of a node registered by its SMBIOS UUID only (an asymmetric one,
// so a byte-order mix-up would not match).
func TestProxyModeUEFI(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	l.vms(1)
	l.serve(testRepo(t, "proxy-uefi"))
	start := time.Now()
	v := l.uefiVM("uefi-uuid", "52:54:00:e2:00:11", "-smbios", "type=1,serial=E2E-UEFI,uuid=01020304-0506-0708-090a-0b0c0d0e0f10")
	out := v.wait(t, "BOOTOPS-MICROOS", 8*time.Minute)
	t.Logf("timing: ipxe chain (UEFI, PXE, TFTP then plain HTTP), VM start → Micro-OS running: %s", time.Since(start).Round(time.Second))
	if !strings.Contains(out, "BOOTOPS-MICROOS node=vm-uuid profile=none serial=E2E-UEFI uuid=01020304-0506-0708-090a-0b0c0d0e0f10") {
		t.Errorf("UEFI VM booted the wrong thing:\n%s", testutil.Tail(out, 5))
	}
	log := l.log("bootops")
	if !strings.Contains(log, "file=ipxe.efi") || !strings.Contains(log, "msg=tftp") {
		t.Errorf("ipxe.efi was not fetched over TFTP from bootops:\n%s", testutil.Tail(log, 30))
	}
}

// Reservation mode on an isolated LAN (no other DHCP server): the VM gets
// its registered static address from bootops, and boots from it.
func TestReservationMode(t *testing.T) {
	t.Parallel()
	l := newLab(t, false)
	l.vms(1)
	l.serve(testRepo(t, "reservation"))
	v := l.vm("bios-static", "52:54:00:e2:00:21", "-smbios", "type=1,serial=E2E-STATIC")
	out := v.wait(t, "BOOTOPS-MICROOS", 6*time.Minute)
	if !strings.Contains(out, "BOOTOPS-MICROOS node=vm-static") {
		t.Errorf("VM booted the wrong thing:\n%s", testutil.Tail(out, 5))
	}
	ev := run(t, "ip", "netns", "exec", l.lan, "busybox", "wget", "-qO-", "http://198.18.0.1:8080/api/v1/events?site=lab&node=vm-static")
	if !strings.Contains(ev, `"message": "ACK 198.18.0.21 to vm-static"`) || !strings.Contains(ev, `"ip": "198.18.0.21"`) {
		t.Errorf("no ACK of the reserved address, or the script was not fetched from it:\n%s", ev)
	}
}

// --dhcp off: the site's DHCP server does the PXE part too, configured as
// the README shows (examples/dhcp-off/), and bootops only serves TFTP and
// HTTP. One BIOS VM per server.
func TestDHCPOff(t *testing.T) {
	t.Parallel()
	conf, _ := filepath.Abs("../../examples/dhcp-off")
	for name, start := range map[string]func(l *lab){
		"dnsmasq": func(l *lab) {
			l.start("dhcp", "ip", "netns", "exec", l.dhc, "dnsmasq", "--keep-in-foreground", "--port=0", "--interface=eth0", "--bind-interfaces",
				"--conf-file="+filepath.Join(conf, "dnsmasq.conf"), "--dhcp-leasefile="+filepath.Join(l.dir, "leases"), "--pid-file="+filepath.Join(l.dir, "d.pid"))
		},
		"isc-dhcpd": func(l *lab) {
			leases := filepath.Join(l.dir, "dhcpd.leases")
			os.WriteFile(leases, nil, 0o644)
			l.start("dhcp", "ip", "netns", "exec", l.dhc, "dhcpd", "-4", "-f", "-d", "-cf", filepath.Join(conf, "dhcpd.conf"),
				"-lf", leases, "-pf", filepath.Join(l.dir, "dhcpd.pid"), "eth0")
		},
		"kea": func(l *lab) {
			// Its PID and lock files in the lab, not /run/kea: a PID file
			// left there by a killed Kea, naming a PID the system has
			// since given another process, makes Kea exit at once
			// (DHCP4_ALREADY_RUNNING).
			l.start("dhcp", "ip", "netns", "exec", l.dhc, "env", "KEA_PIDFILE_DIR="+l.dir, "KEA_LOCKFILE_DIR="+l.dir,
				"kea-dhcp4", "-c", filepath.Join(conf, "kea-dhcp4.conf"))
			l.started("dhcp", "DHCP4_STARTED", 30*time.Second)
		},
	} {
		t.Run(name, func(t *testing.T) {
			l := newLabNS(t, true)
			l.vms(1)
			start(l)
			l.serve(testRepo(t, "dhcp-off"), "--dhcp", "off")
			v := l.vm("off-"+name, "52:54:00:e2:00:31", "-smbios", "type=1,serial=E2E-OFF")
			out := v.wait(t, "BOOTOPS-MICROOS", 6*time.Minute)
			if !strings.Contains(out, "BOOTOPS-MICROOS node=vm-serial") {
				t.Errorf("booted the wrong thing:\n%s", testutil.Tail(out, 5))
			}
			if t.Failed() {
				t.Logf("---- %s log\n%s", name, testutil.Tail(l.log("dhcp"), 40))
			}
		})
	}
}
