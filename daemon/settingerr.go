package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/bootops/bootops/boot/status"
)

// What an operator reads when the daemon cannot start: the setting to
// change, as a flag and its BOOTOPS_ variable (the settings file's key is
// the flag's name), and what to change it to.

// setting names a flag as the operator changes it: "--state-dir or
// BOOTOPS_STATE_DIR".
func setting(flag string) string {
	return "--" + flag + " or BOOTOPS_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// listenErr is a listener of setting flag that could not open on addr.
func listenErr(flag, addr string, err error) error {
	where := fmt.Sprintf("listen on %s (%s)", addr, setting(flag))
	switch {
	case errors.Is(err, syscall.EACCES):
		if port(addr) < 1024 {
			return fmt.Errorf("%s: permission denied: ports below 1024 need root (or CAP_NET_BIND_SERVICE): run as root or choose a port above 1023", where)
		}
		return fmt.Errorf("%s: permission denied", where)
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%s: address already in use: another process listens there (another bootops serve?): stop it or choose another address", where)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("%s: no network interface of this machine has that address: choose one it has, or leave the host out (:PORT)", where)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// port is addr's port number, -1 when it has none.
func port(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return n
}

// dhcpErr is a site's DHCP server that could not start on iface. The DHCP
// library formats its system errors as text: a refusal is found in it.
func dhcpErr(site, iface string, err error) error {
	if errors.Is(err, syscall.EACCES) || strings.Contains(err.Error(), syscall.EACCES.Error()) {
		return fmt.Errorf("DHCP of site %s on %s (%s, else the site's network.dhcp): %v: DHCP's ports 67 and 4011 need root (or CAP_NET_BIND_SERVICE; CAP_NET_RAW too on kernels before 5.7): run as root, or --dhcp off and let the LAN's DHCP server send machines to bootops (docs/serving.md)",
			site, iface, setting("dhcp"), err)
	}
	return fmt.Errorf("DHCP of site %s on %s: %w", site, iface, err)
}

// checkInterface refuses a DHCP interface this machine does not have,
// naming those it has.
func checkInterface(site, iface string) error {
	if iface == "" {
		return nil
	}
	if _, err := net.InterfaceByName(iface); err == nil {
		return nil
	}
	var names []string
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			names = append(names, i.Name)
		}
	}
	return configErrf("--interface %s (%s, else site %s's network.interface): no such network interface here (this machine has: %s); or --dhcp off to serve no DHCP",
		iface, setting("interface"), site, strings.Join(names, ", "))
}

// stateDirErr is a state folder the daemon cannot make or use.
func stateDirErr(dir string, err error) error {
	if errors.Is(err, os.ErrPermission) {
		return configErrf("--state-dir %s (%s): %v: run as root, or choose a folder you may write (--state-dir /tmp/bootops)", dir, setting("state-dir"), err)
	}
	return configErrf("--state-dir %s (%s): %w", dir, setting("state-dir"), err)
}

// storeErr says a state folder is another daemon's.
func storeErr(dir string, err error) error {
	var inUse *status.InUseError
	if !errors.As(err, &inUse) {
		return err
	}
	pid := ""
	if inUse.PID > 0 {
		pid = fmt.Sprintf(" (pid %d)", inUse.PID)
	}
	return fmt.Errorf("state directory %s is in use by another bootops serve%s: one state directory per daemon (%s)", dir, pid, setting("state-dir"))
}
