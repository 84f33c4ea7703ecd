//go:build e2e

package e2e

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// siteDHCP6 runs the site's own DHCPv6 server, dnsmasq, on eth0 of
// namespace dhcp (2001:db8:1::2): addresses 2001:db8:1::100–1ff (IA_NA,
// 10 minutes) and no boot option, unless ipxeURL is set: then iPXE (user
// class iPXE) is told that URL (option 59), the line a site adds to its
// server for iPXE. Its log is name.log; the returned process ends it.
func (l *lab) siteDHCP6(name, ipxeURL string) *exec.Cmd {
	l.t.Helper()
	args := []string{"ip", "netns", "exec", l.dhc, "dnsmasq", "--keep-in-foreground", "--no-daemon", "--port=0",
		"--interface=eth0", "--bind-interfaces", "--dhcp-range=2001:db8:1::100,2001:db8:1::1ff,64,10m",
		"--dhcp-leasefile=" + filepath.Join(l.dir, name+".leases"), "--log-dhcp", "--pid-file=" + filepath.Join(l.dir, name+".pid")}
	if ipxeURL != "" {
		args = append(args, "--dhcp-userclass=set:ipxe,iPXE", "--dhcp-option=tag:ipxe,option6:bootfile-url,"+ipxeURL)
	}
	cmd := l.start(name, args...)
	l.started(name, "DHCPv6, IP range", 10*time.Second)
	return cmd
}

// proxyLab6 is an IPv6-only lab (RAs with M, O and A) whose site's DHCPv6
// server is in namespace dhcp at 2001:db8:1::2, with tcpdump recording
// the bridge's UDP port 4011 and ICMPv6 destination unreachable (a Reply
// that found the firmware's port closed) in port4011.pcap.
func proxyLab6(t *testing.T) (l *lab, pcap string) {
	t.Helper()
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Fatal("tcpdump is missing: run `make e2e`, which installs it")
	}
	l = newLab6(t, false, slaac)
	run(t, "ip", "-n", l.dhc, "addr", "add", "2001:db8:1::2/64", "dev", "eth0", "nodad")
	l.linkLocal(l.dhc, "eth0")
	pcap = filepath.Join(l.dir, "port4011.pcap")
	l.start("tcpdump", "ip", "netns", "exec", l.lan, "tcpdump", "-U", "-i", "br0", "-n", "-w", pcap, "ip6 and (udp port 4011 or (icmp6 and ip6[40] == 1))")
	return l, pcap
}

// firmwareLines are OVMF's network boot lines of a console: which boot
// option started, its addresses, its boot file, its errors.
func firmwareLines(console string) string {
	return strings.Join(regexp.MustCompile(`(?m)^.*(Start (PXE|HTTP)|Station IP|Server IP|NBP file|URI:|PXE-E|Error:).*$`).FindAllString(console, -1), "\n")
}

// stop ends a process the lab started, and its group.
func stop(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
}

// bootops in proxy mode on an IPv6-only link (RAs with M, O and A) beside
// the site's own DHCPv6 server (dnsmasq, addresses only): what OVMF
// 2022.11 and iPXE take from it (docs/serving.md, "IPv6: what firmware
// needs"). One VM at a time, in one lab:
//   - PXE over IPv6: OVMF takes dnsmasq's address and, from bootops'
//     Advertise without an address (option 59 and vendor class
//     PXEClient), asks again, unicast, at [server6]:4011 and boots the
//     tftp:// URL of that Reply: snponly.efi over TFTP. iPXE's own DHCPv6
//     (stateful: the RA says M) takes dnsmasq's address and ignores
//     bootops' Advertise, which has none: "Nothing to boot".
//   - The same once the site's server tells iPXE (by its user class) the
//     script URL: provisioned, on dnsmasq's addresses.
//   - UEFI HTTP boot over IPv6 takes bootops' HTTPClient Advertise without
//     an address beside dnsmasq's and loads snponly.efi over HTTP, whose
//     iPXE fetches its script.
func TestIPv6Proxy(t *testing.T) {
	t.Parallel()
	l, pcap := proxyLab6(t)
	l.vms(1)
	imgDir := t.TempDir()
	gzSHA, rawSHA := osImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "["+server6+"]:8081")
	const macPXE, macProv, macHTTP = "52:54:00:e2:60:51", "52:54:00:e2:60:52", "52:54:00:e2:60:53"
	l.serveOn(provisionRepo(t, images6, gzSHA, "ipv6-proxy", nil), "["+server6+"]:8080", "["+server6+"]:69") // the archive's nodes, by these MACs
	pool := `2001:db8:1::1[0-9a-f]{2}`                                                                       // dnsmasq's
	script := url6 + "/boot.ipxe?site=lab"

	t.Run("PXE", func(t *testing.T) {
		site := l.siteDHCP6("dnsmasq", "")
		defer stop(site)
		start := time.Now()
		v := l.uefiVM("v6p1", macPXE, pxeV6Only...)
		defer stop(v.cmd)
		out := v.wait(t, "Nothing to boot", 5*time.Minute)
		t.Logf("timing: proxy mode, OVMF PXEv6 → [server]:4011 → TFTP snponly.efi → iPXE's DHCPv6 without a boot file: %s", time.Since(start).Round(time.Second))
		var missing []string
		for _, re := range []string{
			`>>Start PXE over IPv6`,
			`Station IP address is 2001:DB8:1:0:0:0:0:1[0-9A-F]{2}\r?\n`, // dnsmasq's pool, OVMF's notation
			`Server IP address is 2001:DB8:1:0:0:0:0:1\r?\n`,             // the host of bootops' URL
			`NBP filename is snponly\.efi`,
			`NBP file downloaded successfully\.`,
			`net0: ` + pool + `/64`, // iPXE's lease, from dnsmasq
			`Nothing to boot`,
		} {
			if !regexp.MustCompile(re).MatchString(out) {
				missing = append(missing, re)
			}
		}
		if missing != nil {
			t.Errorf("console lacks %s; the firmware said:\n%s\nconsole's end:\n%s", strings.Join(missing, ", "), firmwareLines(out), testutil.Tail(out, 30))
		}
		_, js := events(t, l, url6, "lab/pxe")
		for _, want := range []string{
			"DHCPv6 ADVERTISE: tftp://[" + server6 + "]/snponly.efi", // the Advertise without an address
			"DHCPv6 REPLY: tftp://[" + server6 + "]/snponly.efi",     // the Reply on port 4011
			"DHCPv6 ADVERTISE: " + script,                            // to iPXE, which ignored it
		} {
			if !strings.Contains(js, want) {
				t.Errorf("lab/pxe's timeline lacks %q:\n%s", want, js)
			}
		}
		// The Request to port 4011 and bootops' Reply, as the bridge saw them.
		time.Sleep(2 * time.Second) // tcpdump -U writes each packet as it goes
		dump := run(t, "tcpdump", "-r", pcap, "-n")
		if !regexp.MustCompile(pool+`\.\d+ > `+regexp.QuoteMeta(server6)+`\.4011: UDP`).MatchString(dump) ||
			!regexp.MustCompile(regexp.QuoteMeta(server6)+`\.4011 > `+pool+`\.\d+: UDP`).MatchString(dump) {
			t.Errorf("no Request from dnsmasq's address to [%s]:4011 and Reply on the bridge:\n%s", server6, dump)
		}
		tftp := grepLines(l.log("bootops"), "msg=tftp file=snponly.efi")
		if !regexp.MustCompile(`peer=` + pool + ` .*bytes=`).MatchString(tftp) {
			t.Errorf("snponly.efi was not sent over TFTP to an address of dnsmasq's pool:\n%s", tftp)
		}
		t.Logf("port 4011:\n%s\nTFTP:\n%s", dump, tftp)
	})

	t.Run("Provision", func(t *testing.T) {
		site := l.siteDHCP6("dnsmasq-ipxe", script)
		defer stop(site)
		d := disk(t, l, "v6p2")
		start := time.Now()
		v := l.uefiVM("v6p2", macProv, append(append(withDisk(d), pxeV6Only...), "-smbios", "type=1,serial=E2E-V6P2")...)
		v.ended(t, 10*time.Minute)
		t.Logf("timing: proxy mode, OVMF PXEv6 → snponly.efi → iPXE (script URL from the site's server) → Micro-OS (SLAAC) → image installed, VM start → provisioned and rebooted: %s", time.Since(start).Round(time.Second))
		if state, msg := nodeStateAt(t, l, url6, "lab/prov"); state != "provisioned" {
			t.Fatalf("lab/prov: state %q (%s), want provisioned; console:\n%s", state, msg, testutil.Tail(mustRead(v.console), 40))
		}
		checkDisk(t, d, rawSHA)
		// Under a loaded make test this VM's PXE once failed and it went
		// on to UEFI HTTP boot (next in pxeV6Only's boot order), which
		// proxy mode serves too: EDK2 had missed bootops' Reply on port
		// 4011, now repeated (Server.repeat). The path is PXE's again.
		out := mustRead(v.console)
		for _, re := range []string{
			`>>Start PXE over IPv6`,
			`NBP filename is snponly\.efi`,
			`net0: ` + pool + `/64`,
			regexp.QuoteMeta("Filename: " + script),
		} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("console lacks %s; the firmware said:\n%s\nconsole's end:\n%s", re, firmwareLines(out), testutil.Tail(out, 40))
			}
		}
		_, js := events(t, l, url6, "lab/prov")
		if !strings.Contains(js, "DHCPv6 REPLY: tftp://["+server6+"]/snponly.efi") || !strings.Contains(js, "agent checked in") {
			t.Errorf("lab/prov's timeline lacks bootops' Reply on port 4011 or the agent's check-in:\n%s", js)
		}
		if log := l.log("dnsmasq-ipxe"); !strings.Contains(log, "tags: ipxe") {
			t.Errorf("dnsmasq did not tell iPXE the script URL:\n%s", testutil.Tail(log, 40))
		}
	})

	t.Run("HTTP", func(t *testing.T) {
		site := l.siteDHCP6("dnsmasq-http", script)
		defer stop(site)
		start := time.Now()
		v := l.uefiVM("v6p3", macHTTP, httpBootV6...)
		defer stop(v.cmd)
		out := v.wait(t, "Filename: "+script, 6*time.Minute)
		t.Logf("timing: proxy mode, OVMF HTTP boot (IPv4 first, then IPv6) → snponly.efi over HTTP → iPXE's script: %s", time.Since(start).Round(time.Second))
		for _, re := range []string{
			`>>Start HTTP Boot over IPv6`,
			`Station IPv6 address is 2001:DB8:1:0:0:0:0:1[0-9A-F]{2}\r?\n`, // dnsmasq's pool
			regexp.QuoteMeta("URI: " + url6 + "/tftp/snponly.efi"),         // bootops' Advertise
			`iPXE initialising devices`,
		} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("console lacks %s:\n%s", re, testutil.Tail(out, 30))
			}
		}
		if _, js := events(t, l, url6, "lab/http"); !strings.Contains(js, "DHCPv6 ADVERTISE: "+url6+"/tftp/snponly.efi") {
			t.Errorf("lab/http's timeline lacks the HTTPClient Advertise:\n%s", js)
		}
	})
}
