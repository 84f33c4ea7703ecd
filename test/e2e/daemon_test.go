//go:build e2e

package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// The binaries the tests run: bootops, the agent (static, for the
// Micro-OS), the image server and the Redfish BMC in front of a VM.
var bootops, agentBin, imageServer, redfishVMD string

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
	redfishVMD = filepath.Join(dir, "redfishvmd")
	for _, b := range [][2]string{{bootops, "../../cmd/bootops"}, {agentBin, "../../cmd/bootops-agent"}, {imageServer, "./imageserver"}, {redfishVMD, "../redfishvm/redfishvmd"}} {
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

// serve starts bootops in the lab on the IPv4 LAN's address.
func (l *lab) serve(repo string, flags ...string) {
	l.t.Helper()
	l.serveOn(repo, "198.18.0.1:8080", "198.18.0.1:69", flags...)
}

// serveOn starts bootops in the lab with HTTP and TFTP on the given
// listener lists (comma-separated, as --http-addr and --tftp-addr take).
func (l *lab) serveOn(repo, httpAddr, tftpAddr string, flags ...string) {
	l.t.Helper()
	l.serveIn(l.lan, "br0", repo, httpAddr, tftpAddr, flags...)
}

// serveIn starts bootops in namespace ns, its DHCP on iface (the WAN lab's
// server has a namespace of its own).
func (l *lab) serveIn(ns, iface, repo, httpAddr, tftpAddr string, flags ...string) {
	l.t.Helper()
	args := []string{"ip", "netns", "exec", ns, bootops, "serve", "--open-reads", "--source", repo, "--state-dir", filepath.Join(l.dir, "state"),
		"--http-addr", httpAddr, "--tftp-addr", tftpAddr, "--interface", iface, "--ipxe-dir", "/usr/lib/ipxe", "--log-format", "text"}
	l.start("bootops", append(args, flags...)...)
	l.started("bootops", "msg=serving", 20*time.Second)
}

// url4 is the server's HTTP URL on the IPv4 LAN.
const url4 = "http://198.18.0.1:8080"

// url6 is the server's HTTP URL over IPv6.
const url6 = "http://[" + server6 + "]:8080"

// serveAs starts bootops in the lab under a log name of its own (a
// restarted daemon keeps the first one's log).
func (l *lab) serveAs(name, repo string) *exec.Cmd {
	l.t.Helper()
	cmd := l.start(name, "ip", "netns", "exec", l.lan, bootops, "serve", "--open-reads", "--source", repo, "--state-dir", filepath.Join(l.dir, "state"),
		"--http-addr", "198.18.0.1:8080", "--tftp-addr", "198.18.0.1:69", "--interface", "br0", "--ipxe-dir", "/usr/lib/ipxe", "--log-format", "text")
	if !testutil.Poll(20*time.Second, 200*time.Millisecond, func() bool { return strings.Contains(l.log(name), "msg=serving") }) {
		l.t.Fatalf("bootops did not start:\n%s", l.log(name))
	}
	return cmd
}

func (l *lab) logs(key string) string {
	return run(l.t, "ip", "netns", "exec", l.lan, bootops, "logs", key, "--server", "http://198.18.0.1:8080")
}
