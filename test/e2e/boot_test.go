//go:build e2e

package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The binaries the tests run: bootops, the agent (static, for the
// Micro-OS) and the image server.
var bootops, agentBin, imageServer string

func TestMain(m *testing.M) {
	flag.Parse() // -run decides whether the Debian image is built
	if os.Geteuid() == 0 {
		sweepLabs()
	}
	dir, err := os.MkdirTemp("", "bootops-e2e-")
	if err != nil {
		panic(err)
	}
	bootops = filepath.Join(dir, "bootops")
	agentBin = filepath.Join(dir, "bootops-agent")
	imageServer = filepath.Join(dir, "imageserver")
	for _, b := range [][2]string{{bootops, "../../cmd/bootops"}, {agentBin, "../../cmd/bootops-agent"}, {imageServer, "./imageserver"}} {
		cmd := exec.Command("go", "build", "-o", b[0], b[1])
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", b[1], err, out)
			os.Exit(1)
		}
	}
	// The longest step of a fresh machine's run starts first, beside
	// every test (only `go test -run` of tests that need no VM skips it).
	if os.Geteuid() == 0 && wantsImage() {
		startDebianImage()
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// wantsImage reports whether this run's -run pattern may select
// TestRunning or TestRollout (the tests that boot the Debian image).
func wantsImage() bool {
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return true
	}
	re, err := regexp.Compile(f.Value.String())
	return err != nil || re.MatchString("TestRunning") || re.MatchString("TestRollout") || re.MatchString("TestIPv6Running")
}

// repo writes a repository whose Micro-OS is the Debian kernel and the
// test initramfs.
func repo(t *testing.T, site string, nodes ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	os.MkdirAll(filepath.Join(dir, "microos"), 0o755)
	k, err := os.ReadFile(kernel(t))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "microos/vmlinuz"), k, 0o644)
	initramfs(t, filepath.Join(dir, "microos/initrd.img"))
	files := map[string]string{
		"microos/default.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\nkernel: {path: microos/vmlinuz}\ninitrd: {path: microos/initrd.img}\ncmdline: console=ttyS0,115200 panic=-1 no_timer_check\n",
		"profiles/test-os.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: test-os\nos: {type: immutable}\n" +
			"image: {url: \"http://198.18.0.1:8080/images/test.raw.gz\", sha256: aba2c9d06fdff3e9329ddd3e8be90714ac05250b4260a0c7ae04dd4406db25a9, compression: gz}\n",
		"sites/lab/site.yaml": site,
	}
	writeRepo(dir, files, nodes)
	return dir
}

// writeRepo writes files and the nodes (as sites/lab/nodes/n<i>.yaml)
// into dir.
func writeRepo(dir string, files map[string]string, nodes []string) {
	for i, n := range nodes {
		files[fmt.Sprintf("sites/lab/nodes/n%d.yaml", i)] = n
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body), 0o644)
	}
}

func node(name, identity string) string {
	return "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: " + name + "\nidentity: {" + identity + "}\nprofile: test-os\n"
}

// serve starts bootops in the lab on the IPv4 LAN's address.
func (l *lab) serve(repo string, flags ...string) {
	l.t.Helper()
	l.serveOn(repo, "198.18.0.1:8080", "198.18.0.1:69", flags...)
}

// serveOn starts bootops in the lab with HTTP and TFTP on the given
// listener lists (comma-separated, as --http-addr and --tftp-addr take).
func (l *lab) serveOn(repo, httpAddr, tftpAddr string, flags ...string) {
	l.t.Helper()
	args := []string{"ip", "netns", "exec", l.lan, bootops, "serve", "--open-reads", "--source", repo, "--state-dir", filepath.Join(l.dir, "state"),
		"--http-addr", httpAddr, "--tftp-addr", tftpAddr, "--interface", "br0", "--ipxe-dir", "/usr/lib/ipxe", "--log-format", "text"}
	l.start("bootops", append(args, flags...)...)
	l.started("bootops", "msg=serving", 20*time.Second)
}

// url4 is the server's HTTP URL on the IPv4 LAN.
const url4 = "http://198.18.0.1:8080"

func (l *lab) status() map[string]any { return statusAt(l.t, l, url4) }

// statusAt is `bootops status -o json` asked at server (a URL).
func statusAt(t *testing.T, l *lab, server string) map[string]any {
	t.Helper()
	out := run(t, "ip", "netns", "exec", l.lan, bootops, "status", "--server", server, "-o", "json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	return doc
}

// event is a timeline entry as `bootops logs -o json` prints it.
type event struct {
	Time    string `json:"time"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Seq     uint64 `json:"seq"`
	IP      string `json:"ip"`
}

// timeline is a machine's timeline on the IPv4 LAN's server.
func timeline(t *testing.T, l *lab, key string) []event {
	t.Helper()
	evs, _ := events(t, l, url4, key)
	return evs
}

// events is a machine's timeline asked at server, and its JSON.
func events(t *testing.T, l *lab, server, key string) ([]event, string) {
	t.Helper()
	js := run(t, "ip", "netns", "exec", l.lan, bootops, "logs", key, "-o", "json", "--server", server)
	var evs []event
	if err := json.Unmarshal([]byte(js), &evs); err != nil {
		t.Fatalf("logs %s: %v\n%s", key, err, js)
	}
	return evs, js
}

const proxySite = "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: lab\nnetwork: {interface: br0, serverAddress: 198.18.0.1, dhcp: proxy}\ndefaultProfile: test-os\nunknownNodes: provision\n"

// Proxy mode beside the site's own DHCP server: a BIOS VM registered by
// serial only, an unregistered VM, and a VM presenting one node's MAC and
// another node's serial.
func TestProxyModeBIOS(t *testing.T) {
	t.Parallel()
	l := newLab(t, true)
	l.serve(repo(t, proxySite,
		node("vm-serial", "serial: E2E-SERIAL-1"),
		node("node-a", "mac: \"52:54:00:e2:00:0a\""),
		node("node-b", "serial: E2E-B"),
	))
	serial := l.vm("bios-serial", "52:54:00:e2:00:01", "-smbios", "type=1,serial=E2E-SERIAL-1,uuid=01020304-0506-0708-090a-0b0c0d0e0f10")
	unknown := l.vm("bios-unknown", "52:54:00:e2:00:02", "-smbios", "type=1,serial=E2E-NOBODY")
	mismatch := l.vm("bios-mismatch", "52:54:00:e2:00:0a", "-smbios", "type=1,serial=E2E-B")

	out := serial.wait(t, "BOOTOPS-MICROOS", 6*time.Minute)
	if !strings.Contains(out, "BOOTOPS-MICROOS node=vm-serial profile=none serial=E2E-SERIAL-1") {
		t.Errorf("registered VM booted the wrong thing:\n%s", tail(out, 5))
	}
	out = unknown.wait(t, "BOOTOPS-MICROOS", 6*time.Minute)
	if !strings.Contains(out, "BOOTOPS-MICROOS node=none profile=test-os serial=E2E-NOBODY") {
		t.Errorf("unknown VM did not boot the default profile:\n%s", tail(out, 5))
	}
	// The mismatched VM must be refused: an event, and no Micro-OS.
	deadline := time.Now().Add(3 * time.Minute)
	refused := false
	for time.Now().Before(deadline) && !refused {
		doc := l.status()
		nodes, _ := doc["nodes"].([]any)
		for _, n := range nodes {
			m := n.(map[string]any)
			if m["node"] == "node-a" && m["state"] == "mismatch" {
				refused = true
			}
		}
		time.Sleep(2 * time.Second)
	}
	if !refused {
		t.Errorf("no mismatch for the VM with node-a's MAC and node-b's serial; status: %v", l.status())
	}
	if b, _ := os.ReadFile(mismatch.console); strings.Contains(string(b), "BOOTOPS-MICROOS") {
		t.Errorf("the mismatched VM booted a Micro-OS:\n%s", tail(string(b), 5))
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
	l.serve(repo(t, proxySite, node("vm-uuid", "uuid: 01020304-0506-0708-090a-0b0c0d0e0f10")))
	start := time.Now()
	v := l.uefiVM("uefi-uuid", "52:54:00:e2:00:11", "-smbios", "type=1,serial=E2E-UEFI,uuid=01020304-0506-0708-090a-0b0c0d0e0f10")
	out := v.wait(t, "BOOTOPS-MICROOS", 8*time.Minute)
	t.Logf("timing: ipxe chain (UEFI, PXE, TFTP then plain HTTP), VM start → Micro-OS running: %s", time.Since(start).Round(time.Second))
	if !strings.Contains(out, "BOOTOPS-MICROOS node=vm-uuid profile=none serial=E2E-UEFI uuid=01020304-0506-0708-090a-0b0c0d0e0f10") {
		t.Errorf("UEFI VM booted the wrong thing:\n%s", tail(out, 5))
	}
	log := l.log("bootops")
	if !strings.Contains(log, "file=ipxe.efi") || !strings.Contains(log, "msg=tftp") {
		t.Errorf("ipxe.efi was not fetched over TFTP from bootops:\n%s", tail(log, 30))
	}
}

// Reservation mode on an isolated LAN (no other DHCP server): the VM gets
// its registered static address from bootops, and boots from it.
func TestReservationMode(t *testing.T) {
	t.Parallel()
	l := newLab(t, false)
	site := "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: lab\nnetwork: {interface: br0, serverAddress: 198.18.0.1, dhcp: reservation, subnet: 198.18.0.0/24, gateway: 198.18.0.254}\ndefaultProfile: test-os\nunknownNodes: ignore\n"
	l.serve(repo(t, site, node("vm-static", "mac: \"52:54:00:e2:00:21\"")+"ip: 198.18.0.21\n"))
	v := l.vm("bios-static", "52:54:00:e2:00:21", "-smbios", "type=1,serial=E2E-STATIC")
	out := v.wait(t, "BOOTOPS-MICROOS", 6*time.Minute)
	if !strings.Contains(out, "BOOTOPS-MICROOS node=vm-static") {
		t.Errorf("VM booted the wrong thing:\n%s", tail(out, 5))
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
			start(l)
			l.serve(repo(t, proxySite, node("vm-serial", "serial: E2E-OFF")), "--dhcp", "off")
			v := l.vm("off-"+name, "52:54:00:e2:00:31", "-smbios", "type=1,serial=E2E-OFF")
			out := v.wait(t, "BOOTOPS-MICROOS", 6*time.Minute)
			if !strings.Contains(out, "BOOTOPS-MICROOS node=vm-serial") {
				t.Errorf("booted the wrong thing:\n%s", tail(out, 5))
			}
			if t.Failed() {
				t.Logf("---- %s log\n%s", name, tail(l.log("dhcp"), 40))
			}
		})
	}
}
