//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// IPv6 in the lab. The link's prefix is prefix6 (documentation space); the
// server, on br0 in namespace lan, is server6. Router Advertisements come
// from radvd in namespace lan, as they come from a site's router: bootops
// never sends them.
//
// The IPv6 tests built on these helpers:
//   - against reference servers (ipv6_test.go): TestIPv6Reference (dnsmasq's
//     DHCPv6 and TFTP; OVMF PXEv6 → ipxe.efi → iPXE's DHCPv6 → an http://[…]
//     script; dhclient -6), TestIPv6ReferenceStateless (SLAAC, snponly.efi),
//     TestIPv6DualStackLab (radvd beside IPv4, no VM);
//   - through bootops alone: TestIPv6Provision and TestIPv6Running (PXE over
//     IPv6 to provisioned and to running), TestIPv6HTTPBoot (UEFI HTTP boot
//     over IPv6), TestIPv6DualStack (a BIOS VM over IPv4 and an OVMF VM over
//     IPv6 at once), TestIPv6Proxy (OVMF against bootops' DHCPv6 proxy
//     mode beside the site's DHCPv6 server, ipv6_proxy_test.go).
const (
	prefix6 = "2001:db8:1::/64"
	server6 = "2001:db8:1::1"
)

// raFlags are the flags of the Router Advertisements radvd sends. Managed
// (M): addresses come from DHCPv6; other (O): other configuration (DNS,
// boot options) does; autonomous: hosts may also form SLAAC addresses in
// the prefix.
type raFlags struct {
	managed, other, autonomous bool
}

var (
	// managed: addresses and options from DHCPv6 (M and O, no SLAAC).
	managed = raFlags{managed: true, other: true}
	// stateless: SLAAC addresses, options from DHCPv6 (O only).
	stateless = raFlags{other: true, autonomous: true}
)

// pxeV6Only makes PXE over IPv6 OVMF's first network boot (its fw_cfg
// knobs, opt/org.tianocore/*): PXE over IPv4 off, IPv6 on; its UEFI HTTP
// boot options come after PXE in the boot order.
// noIPv6 turns OVMF's IPv6 off, so it does not wait for a PXEv6 answer
// before the next boot option (a disk).
var noIPv6 = []string{"-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n", "-fw_cfg", "name=opt/org.tianocore/IPv6Support,string=n"}

var pxeV6Only = []string{"-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n", "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=y", "-fw_cfg", "name=opt/org.tianocore/IPv6Support,string=y"}

// newLab6 is a lab whose bridge has IPv6: br0 holds server6/64 and radvd
// advertises prefix6 with ra. With ipv4 the link is dual-stack: it is
// newLab's LAN unchanged (198.18.0.1 on br0, dnsmasq handing out IPv4
// addresses in namespace dhcp) plus IPv6. Without, it is IPv6-only: no
// IPv4 address anywhere and no IPv4 DHCP server, and namespace dhcp's eth0
// (a port of br0) is free for a client such as dhclient -6.
func newLab6(t *testing.T, ipv4 bool, ra raFlags) *lab {
	t.Helper()
	for bin, pkg := range map[string]string{"radvd": "radvd", "dhclient": "isc-dhcp-client"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing: run `make e2e`, which installs %s", bin, pkg)
		}
	}
	var l *lab
	if ipv4 {
		l = newLab(t, true)
	} else {
		l = newLabNS(t, true)
		run(t, "ip", "-n", l.lan, "addr", "del", "198.18.0.1/24", "dev", "br0")
		run(t, "ip", "-n", l.dhc, "addr", "del", "198.18.0.2/24", "dev", "eth0")
	}
	l.ipv6()
	l.startRadvd(ra)
	return l
}

// ipv6 gives br0 server6/64 and makes namespace lan an IPv6 router (the
// one that radvd speaks for). Duplicate address detection is off on the
// lab's interfaces, so addresses are usable at once; the namespaces are
// the test's own, nothing outside changes.
func (l *lab) ipv6() {
	l.t.Helper()
	for _, ns := range []string{l.lan, l.dhc} {
		run(l.t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	run(l.t, "ip", "netns", "exec", l.dhc, "sysctl", "-qw", "net.ipv6.conf.eth0.accept_dad=0")
	run(l.t, "ip", "netns", "exec", l.lan, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1", "net.ipv6.conf.br0.accept_dad=0")
	run(l.t, "ip", "-n", l.lan, "addr", "add", server6+"/64", "dev", "br0", "nodad")
}

// startRadvd runs radvd on br0 in namespace lan, advertising prefix6 every
// 3 to 10 s with flags ra; its log is radvd.log, and the lab's cleanup
// ends it with the namespace.
func (l *lab) startRadvd(ra raFlags) {
	l.t.Helper()
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	conf := filepath.Join(l.dir, "radvd.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`interface br0 {
	AdvSendAdvert on;
	MinRtrAdvInterval 3;
	MaxRtrAdvInterval 10;
	AdvManagedFlag %s;
	AdvOtherConfigFlag %s;
	prefix %s { AdvOnLink on; AdvAutonomous %s; };
};
`, onOff(ra.managed), onOff(ra.other), prefix6, onOff(ra.autonomous))), 0o644)
	l.start("radvd", "ip", "netns", "exec", l.lan, "radvd", "--nodaemon", "--logmethod", "stderr", "--config", conf,
		"--pidfile", filepath.Join(l.dir, "radvd.pid"))
	l.started("radvd", "started", 10*time.Second)
}

// dnsmasq6 runs dnsmasq in namespace lan as the reference DHCPv6 and TFTP
// server on br0 (no DNS, no IPv4): addresses 2001:db8:1::100–1ff (IA_NA,
// 10 minutes), TFTP over IPv6 from a folder holding Debian's ipxe.efi and
// snponly.efi, and a boot file URL (option 59): script for iPXE (user
// class iPXE), tftp://[server6]/nbp for the others. Its log (every
// option it sends) is dnsmasq6.log. It is no reference for UEFI HTTP boot:
// OVMF takes an HTTP offer only with vendor class HTTPClient (option 16)
// in it, which dnsmasq 2.90 cannot send (docs/serving.md).
func (l *lab) dnsmasq6(nbp, script string) {
	l.t.Helper()
	tftp := filepath.Join(l.dir, "tftp6")
	os.MkdirAll(tftp, 0o755)
	for _, f := range []string{"ipxe.efi", "snponly.efi"} {
		b, err := os.ReadFile(filepath.Join("/usr/lib/ipxe", f))
		if err != nil {
			l.t.Fatalf("%v (Debian package ipxe)", err)
		}
		os.WriteFile(filepath.Join(tftp, f), b, 0o644)
	}
	l.start("dnsmasq6", "ip", "netns", "exec", l.lan, "dnsmasq", "--keep-in-foreground", "--no-daemon", "--port=0",
		"--interface=br0", "--bind-interfaces", "--dhcp-range=2001:db8:1::100,2001:db8:1::1ff,64,10m",
		"--dhcp-leasefile="+filepath.Join(l.dir, "leases6"), "--log-dhcp", "--pid-file="+filepath.Join(l.dir, "dnsmasq6.pid"),
		"--enable-tftp", "--tftp-root="+tftp,
		"--dhcp-userclass=set:ipxe,iPXE",
		"--dhcp-option=tag:ipxe,option6:bootfile-url,"+script,
		"--dhcp-option=tag:!ipxe,option6:bootfile-url,tftp://["+server6+"]/"+nbp)
	l.started("dnsmasq6", "TFTP root is", 10*time.Second)
}

// imageServer6 serves dir over HTTP at [server6]:8080 from namespace lan
// (test/e2e/imageserver); its log, images6.log, names each request's
// client address.
func (l *lab) imageServer6(dir string) {
	l.t.Helper()
	l.start("images6", "ip", "netns", "exec", l.lan, imageServer, "-dir", dir, "-addr", "["+server6+"]:8080")
	if testutil.Poll(10*time.Second, 200*time.Millisecond, func() bool {
		return exec.Command("ip", "netns", "exec", l.lan, "busybox", "wget", "-q", "-O", "/dev/null", "http://["+server6+"]:8080/").Run() == nil ||
			strings.Contains(l.log("images6"), "GET /")
	}) {
		return
	}
	l.t.Fatalf("imageserver on [%s]:8080 did not answer:\n%s", server6, l.log("images6"))
}

// linkLocal waits (at most 10 s) until iface in namespace ns has a usable
// link-local address: DHCPv6 clients send from it, and fail to bind
// while it is tentative.
func (l *lab) linkLocal(ns, iface string) {
	l.t.Helper()
	var out []byte
	if testutil.Poll(10*time.Second, 100*time.Millisecond, func() bool {
		out, _ = exec.Command("ip", "-n", ns, "-6", "addr", "show", "dev", iface, "scope", "link").Output()
		return strings.Contains(string(out), "fe80::") && !strings.Contains(string(out), "tentative")
	}) {
		return
	}
	l.t.Fatalf("%s in %s has no usable link-local address after 10 s:\n%s", iface, ns, out)
}
