//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// httpBootV6 turns OVMF's PXE off in both families, so its network boot
// is UEFI HTTP boot: over IPv4 first (about two minutes on a link with no
// DHCPv4 server), then over IPv6. Turning IPv4 off altogether
// (IPv4Support=n) does not save those minutes: HTTP boot over IPv6 then
// started while OVMF's IPv6 stack ran its own DHCPv6 exchange (the RA's M
// flag) and failed at once, without a Solicit of its own ("Could not
// retrieve NBP file size from HTTP server", "Unexpected network error").
var httpBootV6 = []string{"-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n", "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n",
	"-fw_cfg", "name=opt/org.tianocore/IPv6Support,string=y"}

// UEFI HTTP boot over IPv6 through bootops alone, on an IPv6-only link
// (after OVMF's HTTP boot over IPv4 timed out): OVMF's HTTP boot solicits with client architecture 0x0010 and vendor
// class HTTPClient; bootops' DHCPv6 gives the node's reserved address and
// http://[server6]:8080/tftp/snponly.efi with HTTPClient echoed; OVMF fetches
// iPXE over HTTP, iPXE does DHCPv6 itself and fetches its script, and the
// Micro-OS installs the image over IPv6. The link is managed (RA with M
// and O, no autonomous prefix): no machine gets a SLAAC address, and the
// Micro-OS takes the node's reserved address by DHCPv6 (bootops-agent
// dhcp6).
func TestIPv6HTTPBoot(t *testing.T) {
	t.Parallel()
	l := newLab6(t, false, managed)
	l.vms(1)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "["+server6+"]:8081")
	const mac, reserved = "52:54:00:e2:60:51", "2001:db8:1::51"
	l.serveOn(provisionRepo(t, images6, gzSHA, "ipv6-http-boot", nil), "["+server6+"]:8080", "["+server6+"]:69") // mac, reserved: the archive's node

	d := disk(t, l, "v6http")
	start := time.Now()
	v := l.uefiVM("v6http", mac, append(append(withDisk(d), httpBootV6...), "-smbios", "type=1,serial=E2E-V6H")...)
	v.ended(t, 14*time.Minute)
	t.Logf("timing: IPv6-only, OVMF HTTP boot → snponly.efi over HTTP → iPXE DHCPv6 → script → Micro-OS (DHCPv6, no SLAAC) → image installed, VM start → provisioned and rebooted: %s", time.Since(start).Round(time.Second))

	waitFor(t, "lab/vm6h provisioned", time.Minute, func() bool {
		s, _ := nodeStateAt(t, l, url6, "lab/vm6h")
		return s == "provisioned"
	})
	checkDisk(t, d, rawSHA)
	out := mustRead(v.console)
	for _, want := range []string{
		">>Start HTTP Boot over IPv6",
		"Station IPv6 address is 2001:DB8:1:0:0:0:0:51", // the reservation, in OVMF's notation
		"URI: " + url6 + "/tftp/snponly.efi",
		"bootops-microos: dhcpv6 on eth0: " + reserved,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q:\n%s", want, testutil.Tail(out, 40))
		}
	}
	if strings.Contains(out, "Start PXE") {
		t.Errorf("OVMF ran PXE; this test is about HTTP boot:\n%s", testutil.Tail(out, 40))
	}
	evs, js := events(t, l, url6, "lab/vm6h")
	for _, want := range []string{
		"DHCPv6 REPLY " + reserved + " to vm6h: " + url6 + "/tftp/snponly.efi",
		"DHCPv6 REPLY " + reserved + " to vm6h: " + url6 + "/boot.ipxe",
	} {
		if !strings.Contains(js, want) {
			t.Errorf("the timeline lacks %q:\n%s", want, js)
		}
	}
	checkin := ""
	for _, e := range evs {
		if strings.Contains(e.Message, "agent checked in") {
			checkin = e.IP
		}
	}
	if checkin != reserved {
		t.Errorf("the agent checked in from %q, want the reserved address %s (by DHCPv6):\n%s", checkin, reserved, js)
	}
	if log := l.log("bootops"); strings.Contains(log, "msg=tftp ") {
		t.Errorf("something was fetched over TFTP:\n%s", grepLines(log, "tftp"))
	}
	if log := l.log("images"); !strings.Contains(log, "from=[2001:db8:1:") {
		t.Errorf("the image was not fetched over IPv6:\n%s", log)
	}
}
