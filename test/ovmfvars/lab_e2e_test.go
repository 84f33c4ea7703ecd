//go:build e2e

package ovmfvars_test

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bootops/bootops/internal/testutil"
)

// The lab: namespace lan holds bridge br0 (198.18.40.1/24, where the test's
// HTTP and HTTPS servers listen) and the VMs' taps; namespace dhcp holds
// dnsmasq at 198.18.40.2, handing out 198.18.40.100-199 and nothing else:
// no boot file, no vendor class, as a store's router would. A lab made
// without DHCP has the namespaces and no dnsmasq.
const (
	serverIP = "198.18.40.1"
	dhcpIP   = "198.18.40.2"
	ovmfDir  = "/usr/share/OVMF"
	// bootEFI is the program served: iPXE prints its banner on the
	// console, so the test sees the firmware run what it fetched.
	bootEFI = "/usr/lib/ipxe/ipxe.efi"
	vmLimit = 5 * time.Minute
)

type lab struct {
	t        *testing.T
	lan, dhc string
	dir      string
	dhcp     bool // dnsmasq runs
	procs    []*proc
}

// proc is a process the lab started; done closes when it has ended.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// kill ends the process's whole group (QEMU under ip netns exec and
// timeout) and waits for it.
func (p *proc) kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

var labs atomic.Int64

// need fails the test when something the lab needs is missing: these
// tests never skip.
func need(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the firmware tests need root (network namespaces, tap devices)")
	}
	for bin, pkg := range map[string]string{"ip": "iproute2", "qemu-system-x86_64": "qemu-system-x86", "dnsmasq": "dnsmasq-base"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing (Debian package %s)", bin, pkg)
		}
	}
	for _, f := range []string{ovmfDir + "/OVMF_CODE_4M.fd", ovmfDir + "/OVMF_VARS_4M.fd", bootEFI} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v (Debian packages ovmf and ipxe)", err)
		}
	}
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// sweep removes the labs of runs killed before their cleanup ran (a
// timeout, a kill -9): a lab's name carries its run's pid.
func sweep() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "ovv-") {
			continue
		}
		parts := strings.Split(f[0], "-")
		if len(parts) != 4 || parts[2] == strconv.Itoa(os.Getpid()%100000) {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + parts[2] + "/comm"); err == nil && strings.HasPrefix(string(comm), "ovmfvars.test") {
			continue // another run's, still going
		}
		killNetns(f[0])
		exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

// killNetns kills every process in namespace ns but this one.
func killNetns(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// newLab builds the namespaces and, with dhcp, starts dnsmasq.
func newLab(t *testing.T, dhcp bool) *lab {
	need(t)
	sweep()
	id := fmt.Sprintf("%d-%d", os.Getpid()%100000, labs.Add(1))
	l := &lab{t: t, lan: "ovv-lan-" + id, dhc: "ovv-dhcp-" + id, dir: t.TempDir(), dhcp: dhcp}
	t.Cleanup(l.close)
	run(t, "ip", "netns", "add", l.lan)
	run(t, "ip", "netns", "add", l.dhc)
	run(t, "ip", "-n", l.lan, "link", "set", "lo", "up")
	run(t, "ip", "-n", l.lan, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", l.lan, "addr", "add", serverIP+"/24", "dev", "br0")
	run(t, "ip", "-n", l.lan, "link", "set", "br0", "up")
	run(t, "ip", "-n", l.lan, "link", "add", "vdhcp", "type", "veth", "peer", "name", "eth0", "netns", l.dhc)
	run(t, "ip", "-n", l.lan, "link", "set", "vdhcp", "master", "br0", "up")
	run(t, "ip", "-n", l.dhc, "addr", "add", dhcpIP+"/24", "dev", "eth0")
	run(t, "ip", "-n", l.dhc, "link", "set", "eth0", "up")
	if !dhcp {
		return l
	}
	l.start("dnsmasq", "ip", "netns", "exec", l.dhc, "dnsmasq", "--keep-in-foreground", "--no-daemon", "--port=0",
		"--interface=eth0", "--bind-interfaces", "--dhcp-range=198.18.40.100,198.18.40.199,255.255.255.0,10m",
		"--dhcp-leasefile="+filepath.Join(l.dir, "leases"), "--log-dhcp", "--pid-file="+filepath.Join(l.dir, "dnsmasq.pid"))
	return l
}

// start runs a process in its own group, killed at cleanup (and by the
// kernel should the test process die first); output in dir/<name>.log.
func (l *lab) start(name string, argv ...string) *proc {
	l.t.Helper()
	f, err := os.Create(filepath.Join(l.dir, name+".log"))
	if err != nil {
		l.t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); f.Close(); close(p.done) }()
	l.procs = append(l.procs, p)
	return p
}

func (l *lab) close() {
	for _, p := range l.procs {
		p.kill()
	}
	for _, ns := range []string{l.lan, l.dhc} {
		killNetns(ns)
		exec.Command("ip", "netns", "del", ns).Run()
	}
	if l.t.Failed() {
		b, _ := os.ReadFile(filepath.Join(l.dir, "dnsmasq.log"))
		l.t.Logf("---- dnsmasq log\n%s", testutil.Tail(string(b), 30))
	}
}

// listen opens a TCP listener inside namespace ns. Its goroutine's thread
// enters ns and comes back before it is unlocked; should coming back
// fail, the thread stays locked and ends with the goroutine. (Left in ns,
// the process's main thread would make the process one of ns's, and
// close would kill it.)
func listen(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer home.Close()
		there, err := os.Open("/run/netns/" + ns)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer there.Close()
		if err := unix.Setns(int(there.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		ln, err := net.Listen("tcp4", addr)
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{ln, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.ln
}

// request is what the servers saw: an HTTP request (TLS or not), or a
// failed TLS handshake (Method "", Err set).
type request struct {
	At           time.Time
	Method, Path string
	TLS          bool
	Remote, Err  string
	TLSVersion   uint16
	Cipher       uint16
	BytesServed  int
}

// recorder keeps the servers' requests and handshake failures in order.
type recorder struct {
	mu   sync.Mutex
	seen []request
}

func (r *recorder) add(q request) {
	r.mu.Lock()
	r.seen = append(r.seen, q)
	r.mu.Unlock()
}

func (r *recorder) since(i int) []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.seen[min(i, len(r.seen)):]...)
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// Write takes the servers' error log: a failed handshake is one line.
func (r *recorder) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if _, rest, ok := strings.Cut(line, "http: TLS handshake error from "); ok {
		remote, msg, _ := strings.Cut(rest, ": ")
		r.add(request{At: time.Now(), TLS: true, Remote: remote, Err: msg})
	}
	return len(p), nil
}

// servers serves the boot program at serverIP in the lab: over HTTPS on
// each port of tlsConfs with its settings, over plain HTTP on :80; every
// path answers with it.
func (l *lab) servers(rec *recorder, program []byte, tlsConfs map[string]*tls.Config) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := request{At: time.Now(), Method: r.Method, Path: r.URL.Path, TLS: r.TLS != nil, Remote: r.RemoteAddr}
		if r.TLS != nil {
			q.TLSVersion, q.Cipher = r.TLS.Version, r.TLS.CipherSuite
		}
		w.Header().Set("Content-Type", "application/efi")
		http.ServeContent(w, r, "boot.efi", time.Time{}, bytes.NewReader(program))
		if r.Method == http.MethodGet {
			q.BytesServed = len(program)
		}
		rec.add(q)
	})
	errLog := log.New(rec, "", 0)
	plain := &http.Server{Handler: h, ErrorLog: errLog}
	go plain.Serve(listen(l.t, l.lan, serverIP+":80"))
	l.t.Cleanup(func() { plain.Close() })
	for port, conf := range tlsConfs {
		srv := &http.Server{Handler: h, TLSConfig: conf, ErrorLog: errLog}
		go srv.ServeTLS(listen(l.t, l.lan, serverIP+port), "", "")
		l.t.Cleanup(func() { srv.Close() })
	}
}

// vm boots OVMF from a copy of vars on a tap of br0 (virtio-net without
// its option ROM, so OVMF's own network stack runs), bounded by vmLimit.
// It returns the console file and the time QEMU was started.
func (l *lab) vm(name, mac string, vars []byte) (console string, started time.Time, p *proc) {
	l.t.Helper()
	varsFile := filepath.Join(l.dir, name+".vars.fd")
	if err := os.WriteFile(varsFile, vars, 0o644); err != nil {
		l.t.Fatal(err)
	}
	tap := "t-" + name
	if len(tap) > 15 {
		tap = tap[:15]
	}
	run(l.t, "ip", "-n", l.lan, "tuntap", "add", "dev", tap, "mode", "tap")
	run(l.t, "ip", "-n", l.lan, "link", "set", tap, "master", "br0", "up")
	console = filepath.Join(l.dir, name+".console")
	started = time.Now()
	p = l.start(name, "ip", "netns", "exec", l.lan, "timeout", "--signal=KILL", strconv.Itoa(int(vmLimit.Seconds())),
		"qemu-system-x86_64", "-machine", "q35", "-accel", "tcg", "-m", "512", "-nographic", "-no-reboot",
		"-monitor", "none", "-serial", "file:"+console,
		"-drive", "if=pflash,format=raw,readonly=on,file="+ovmfDir+"/OVMF_CODE_4M.fd",
		"-drive", "if=pflash,format=raw,file="+varsFile,
		"-netdev", "tap,id=n0,ifname="+tap+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac="+mac+",romfile=")
	return console, started, p
}

// consoleText is the console without the firmware's escape sequences and
// carriage returns.
func consoleText(path string) string {
	b, _ := os.ReadFile(path)
	var out strings.Builder
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '\x1b':
			for i++; i < len(b) && !(b[i] >= 'A' && b[i] <= 'Z' || b[i] >= 'a' && b[i] <= 'z'); i++ {
			}
		case b[i] == '\r':
		default:
			out.WriteByte(b[i])
		}
	}
	return out.String()
}

// pki is a throwaway RSA CA and a server certificate for serverIP signed
// by it. RSA: EDK2 2022.11's OpenSSL is built without elliptic curves.
type pki struct {
	caDER []byte
	cert  tls.Certificate
}

func newPKI(t *testing.T, cn string) pki {
	t.Helper()
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: serverIP},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP(serverIP)}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pki{caDER: caDER, cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}
}

// waitConsole waits until the console shows want, or the process ends,
// or d passes; it reports whether want was seen.
func waitConsole(console, want string, p *proc, d time.Duration) bool {
	seen := func() bool { return strings.Contains(consoleText(console), want) }
	testutil.Poll(d, 500*time.Millisecond, func() bool {
		select {
		case <-p.done:
			return true
		default:
			return seen()
		}
	})
	return seen()
}
