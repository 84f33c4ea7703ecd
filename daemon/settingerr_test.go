package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/bootops/bootops/boot/status"
)

// What a daemon that cannot start says: the setting to change and to what.
// (A refused bind is made up here: the tests may run as root.)
func TestSettingErrors(t *testing.T) {
	refused := func(addr string, errno syscall.Errno) error {
		return &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", errno)}
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{listenErr("http-addr", ":80", refused(":80", syscall.EACCES)),
			"listen on :80 (--http-addr or BOOTOPS_HTTP_ADDR): permission denied: ports below 1024 need root (or CAP_NET_BIND_SERVICE): run as root or choose a port above 1023"},
		{listenErr("https-addr", "198.18.0.1:8443", refused("", syscall.EACCES)),
			"listen on 198.18.0.1:8443 (--https-addr or BOOTOPS_HTTPS_ADDR): permission denied"},
		{listenErr("http-addr", ":8080", refused("", syscall.EADDRINUSE)),
			"listen on :8080 (--http-addr or BOOTOPS_HTTP_ADDR): address already in use: another process listens there (another bootops serve?): stop it or choose another address"},
		{listenErr("swarm-addr", "198.18.9.9:7000", refused("", syscall.EADDRNOTAVAIL)),
			"listen on 198.18.9.9:7000 (--swarm-addr or BOOTOPS_SWARM_ADDR): no network interface of this machine has that address: choose one it has, or leave the host out (:PORT)"},
		// The DHCP library's errors are text: the refusal is found in it.
		{dhcpErr("lab", "eth1", errors.New("dhcp: listen on port 67: cannot bind to port 67: permission denied")),
			"DHCP of site lab on eth1 (--dhcp or BOOTOPS_DHCP, else the site's network.dhcp): dhcp: listen on port 67: cannot bind to port 67: permission denied: DHCP's ports 67 and 4011 need root (or CAP_NET_BIND_SERVICE; CAP_NET_RAW too on kernels before 5.7): run as root, or --dhcp off and let the LAN's DHCP server send machines to bootops (docs/serving.md)"},
		{stateDirErr("/var/lib/bootops", &os.PathError{Op: "mkdir", Path: "/var/lib/bootops", Err: syscall.EACCES}),
			"--state-dir /var/lib/bootops (--state-dir or BOOTOPS_STATE_DIR): mkdir /var/lib/bootops: permission denied: run as root, or choose a folder you may write (--state-dir /tmp/bootops)"},
		{storeErr("/srv/state", fmt.Errorf("x: %w", &status.InUseError{Path: "/srv/state/status.db", PID: 4242})),
			"state directory /srv/state is in use by another bootops serve (pid 4242): one state directory per daemon (--state-dir or BOOTOPS_STATE_DIR)"},
		{storeErr("/srv/state", &status.InUseError{Path: "/srv/state/status.db"}),
			"state directory /srv/state is in use by another bootops serve: one state directory per daemon (--state-dir or BOOTOPS_STATE_DIR)"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
	var ce *ConfigError
	if err := checkInterface("lab", "no-such-if0"); !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "--interface no-such-if0 (--interface or BOOTOPS_INTERFACE, else site lab's network.interface): no such network interface here (this machine has: lo") {
		t.Errorf("a missing interface: %v", err)
	}
	if err := checkInterface("lab", "lo"); err != nil {
		t.Errorf("lo: %v", err)
	}
}

// docs/troubleshooting.md quotes the state folder's refusal as the daemon
// words it (DIR and N for the folder and the process).
func TestTroubleshootingQuotesInUse(t *testing.T) {
	b, err := os.ReadFile("../docs/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	msg := storeErr("DIR", &status.InUseError{PID: 987654}).Error()
	msg = strings.Replace(msg, "987654", "N", 1)
	if !strings.Contains(string(b), "| `"+msg+"` |") {
		t.Errorf("docs/troubleshooting.md does not quote %q", msg)
	}
	for _, quoted := range []string{
		strings.SplitAfter(listenErr("http-addr", "ADDR", &net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EACCES)}).Error(), "need root")[0],
		strings.SplitAfter(dhcpErr("S", "IF", errors.New("permission denied")).Error(), "network.dhcp)")[0],
	} {
		if !strings.Contains(string(b), quoted) {
			t.Errorf("docs/troubleshooting.md does not quote %q", quoted)
		}
	}
}
