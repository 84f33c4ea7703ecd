//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// The IPv6 boot path against a reference server (dnsmasq for DHCPv6 and
// TFTP, radvd for Router Advertisements with M and O), before bootops
// serves it: on an IPv6-only link, ISC dhclient -6 takes a lease, and an
// OVMF VM with only PXE over IPv6 loads ipxe.efi over TFTP from the URL in
// option 59, whose iPXE then does DHCPv6 itself and fetches its script
// over HTTP from [2001:db8:1::1]:8080. What the firmware sent and accepted
// is written down in docs/serving.md ("IPv6: what firmware needs").
func TestIPv6Reference(t *testing.T) {
	t.Parallel()
	l := referenceLab(t, managed, "ipxe.efi")
	l.vms(1)

	// Namespace dhcp's eth0 is a client of the link: a stateful lease.
	start := time.Now()
	addr := l.dhclient6("eth0")
	if !regexp.MustCompile(`^2001:db8:1::1[0-9a-f]{2}$`).MatchString(addr) {
		t.Errorf("dhclient -6 got %q, want an address of 2001:db8:1::100-1ff", addr)
	}
	t.Logf("dhclient -6: %s in %s", addr, time.Since(start).Round(100*time.Millisecond))

	start = time.Now()
	v := l.uefiVM("v6", "52:54:00:e2:60:01", append(pxeV6Only, "-smbios", "type=1,uuid=e2e00006-0000-4000-8000-000000000601")...)
	out := v.wait(t, "IPV6-SCRIPT", 4*time.Minute)
	t.Logf("OVMF PXEv6 → iPXE → script: %s", time.Since(start).Round(time.Second))
	for _, want := range []string{
		">>Start PXE over IPv6",
		"Station IP address is 2001:DB8:1:0:0:0:0:1", // OVMF's leased address (pool ::100-1ff), its own notation
		"Server IP address is 2001:DB8:1:0:0:0:0:1\r\n",
		"NBP filename is ipxe.efi",
		"NBP file downloaded successfully.",
		"Filename: http://[2001:db8:1::1]:8080/boot.ipxe",
		"IPV6-SCRIPT ip6=2001:db8:1::1", // iPXE's own DHCPv6 lease
	} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q:\n%s", want, testutil.Tail(out, 30))
		}
	}
	if !regexp.MustCompile(`(?m)^dnsmasq-tftp: sent \S+/ipxe\.efi to 2001:db8:1::1[0-9a-f]{2}$`).MatchString(l.log("dnsmasq6")) {
		t.Errorf("no TFTP transfer of ipxe.efi over IPv6 in dnsmasq's log:\n%s", grepLines(l.log("dnsmasq6"), "tftp"))
	}
	if !regexp.MustCompile(`GET /boot\.ipxe range="" from=\[2001:db8:1::1[0-9a-f]{2}\]:\d+`).MatchString(l.log("images6")) {
		t.Errorf("the script was not fetched over IPv6 from the pool:\n%s", l.log("images6"))
	}
	// Who asked, as dnsmasq saw it: the client DUIDs (OVMF's and iPXE's)
	// and iPXE's user class.
	log := l.log("dnsmasq6")
	t.Logf("DHCPv6 clients:\n%s", grepLines(log, "DHCPSOLICIT"))
	for _, want := range []string{
		// Both send a DUID-UUID (type 4) of the SMBIOS UUID, but OVMF in
		// SMBIOS byte order (the first three fields little-endian) and
		// iPXE in the UUID's text order: one machine, two DUIDs.
		"DHCPSOLICIT(br0) 00:04:06:00:e0:e2:00:00:00:40:80:00:00:00:00:00:06:01",
		"DHCPREQUEST(br0) 00:04:e2:e0:00:06:00:00:40:00:80:00:00:00:00:00:06:01",
		"tags: ipxe, dhcpv6, br0",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("dnsmasq's log lacks %q:\n%s", want, testutil.Tail(log, 40))
		}
	}
}

// The same path with stateless Router Advertisements (O and A, no M) and
// snponly.efi: OVMF's PXE still asks for an address (IA_NA) and gets one,
// while iPXE forms its address by SLAAC and takes option 59 from the
// Reply to an Information-Request, which carries no address: for iPXE, an
// answer with boot options only is enough on such a link.
func TestIPv6ReferenceStateless(t *testing.T) {
	t.Parallel()
	l := referenceLab(t, stateless, "snponly.efi")
	l.vms(1)
	start := time.Now()
	v := l.uefiVM("v6sl", "52:54:00:e2:60:02", pxeV6Only...)
	out := v.wait(t, "IPV6-SCRIPT", 4*time.Minute)
	t.Logf("OVMF PXEv6 → snponly.efi → script: %s", time.Since(start).Round(time.Second))
	slaac := "2001:db8:1:0:5054:ff:fee2:6002" // EUI-64 of the MAC
	for _, want := range []string{
		"Station IP address is 2001:DB8:1:0:0:0:0:1", // PXE's leased address, from the pool
		"NBP filename is snponly.efi",
		"NBP file downloaded successfully.",
		"IPV6-SCRIPT ip6=" + slaac + "\r\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q:\n%s", want, testutil.Tail(out, 30))
		}
	}
	log := l.log("dnsmasq6")
	if !regexp.MustCompile(`(?m)^dnsmasq-tftp: sent \S+/snponly\.efi to 2001:db8:1::1[0-9a-f]{2}$`).MatchString(log) {
		t.Errorf("no TFTP transfer of snponly.efi over IPv6 in dnsmasq's log:\n%s", grepLines(log, "tftp"))
	}
	// iPXE (DUID-UUID of zeros: no SMBIOS UUID here) asked without an IA_NA.
	ipxe := "DHCPINFORMATION-REQUEST(br0) 00:04:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00"
	if !strings.Contains(log, ipxe) || strings.Contains(log, "DHCPSOLICIT(br0) 00:04:") {
		t.Errorf("iPXE did not take its options from an Information-Request alone:\n%s", grepLines(log, "(br0)"))
	}
	if !strings.Contains(l.log("images6"), "GET /boot.ipxe range=\"\" from=["+slaac+"]:") {
		t.Errorf("the script was not fetched from iPXE's SLAAC address:\n%s", l.log("images6"))
	}
}

// referenceLab is an IPv6-only lab with radvd sending ra, dnsmasq6 giving
// PXE clients tftp://[server6]/nbp and iPXE the script boot.ipxe, which
// prints "IPV6-SCRIPT ip6=<iPXE's address>", served by imageServer6.
func referenceLab(t *testing.T, ra raFlags, nbp string) *lab {
	l := newLab6(t, false, ra)
	www := filepath.Join(l.dir, "www")
	os.MkdirAll(www, 0o755)
	os.WriteFile(filepath.Join(www, "boot.ipxe"), []byte("#!ipxe\necho IPV6-SCRIPT ip6=${net0/ip6}\nshell\n"), 0o644)
	l.imageServer6(www)
	l.dnsmasq6(nbp, "http://["+server6+"]:8080/boot.ipxe")
	return l
}

// The dual-stack lab without a VM: radvd's Router Advertisements (stateless:
// O and A flags) give namespace dhcp's eth0 a SLAAC address in prefix6 and
// a default route through the server's link-local address, while IPv4 is
// there as before (dnsmasq at 198.18.0.2 reaches 198.18.0.1) and the server
// answers on server6. Then bootops, serving DHCPv6 without TFTP from an
// --ipxe-dir without snponly.efi, warns of it and serves the builds there
// for UEFI HTTP boot.
func TestIPv6DualStackLab(t *testing.T) {
	t.Parallel()
	l := newLab6(t, true, stateless)
	var addr, route string
	testutil.Poll(30*time.Second, 200*time.Millisecond, func() bool {
		addr = run(t, "ip", "-n", l.dhc, "-6", "addr", "show", "dev", "eth0", "scope", "global")
		route = run(t, "ip", "-n", l.dhc, "-6", "route", "show", "default")
		return strings.Contains(addr, "inet6 2001:db8:1:") && !strings.Contains(addr, "tentative") && strings.Contains(route, "via fe80::")
	})
	if !regexp.MustCompile(`inet6 2001:db8:1:0:[0-9a-f:]+/64 scope global dynamic`).MatchString(addr) || !strings.Contains(route, "proto ra") {
		t.Fatalf("no SLAAC address or default route from radvd in 30 s:\n%s\n%s\nradvd:\n%s", addr, route, l.log("radvd"))
	}
	run(t, "ip", "netns", "exec", l.dhc, "busybox", "ping", "-6", "-c", "1", "-W", "5", server6)
	run(t, "ip", "netns", "exec", l.dhc, "busybox", "ping", "-4", "-c", "1", "-W", "5", "198.18.0.1")
	if out := run(t, "ip", "-n", l.lan, "-4", "addr", "show", "dev", "br0"); !strings.Contains(out, "198.18.0.1/24") {
		t.Errorf("the dual-stack bridge lost its IPv4 address:\n%s", out)
	}

	// bootops serving DHCPv6 from an --ipxe-dir without snponly.efi (what
	// x86 UEFI machines are offered over IPv6) says so when it starts.
	dir, ipxe := l.placeholderRepo("ipv6-dual-stack-lab", nil)
	l.serveOn(dir, "["+server6+"]:8080", "", "--ipxe-dir", ipxe) // no TFTP: UEFI HTTP boot only
	if log := l.log("bootops"); !strings.Contains(log, "DHCPv6 offers x86 UEFI machines snponly.efi, and --ipxe-dir has none") {
		t.Errorf("no warning of the missing snponly.efi:\n%s", log)
	}
	// Without TFTP and without DHCPv4, the builds are still served for
	// UEFI HTTP boot.
	if got := run(t, "ip", "netns", "exec", l.lan, "busybox", "wget", "-qO-", url6+"/tftp/ipxe.efi"); got != "placeholder" {
		t.Errorf("GET /tftp/ipxe.efi: %q", got)
	}
}
