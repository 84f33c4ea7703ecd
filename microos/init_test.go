package microos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// between is the part of /init from the line starting with from to the
// first line after it starting with to, both included.
func between(t *testing.T, from, to string) string {
	t.Helper()
	_, rest, ok := strings.Cut(initTemplate, "\n"+from)
	if !ok {
		t.Fatalf("/init has no line %q", from)
	}
	body, _, ok := strings.Cut(rest, "\n"+to)
	if !ok {
		t.Fatalf("/init has no line %q after %q", to, from)
	}
	return from + body + "\n" + to + "\n"
}

// busybox runs script with busybox sh (Debian's busybox-static, what the
// image runs) and returns its output.
func busybox(t *testing.T, script string, env ...string) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("busybox is not installed (Debian package busybox-static)")
	}
	cmd := exec.Command(bb, "sh", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, script)
	}
	return string(out)
}

func TestInitParses(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "init")
	os.WriteFile(f, initScript([]string{"virtio_net"}), 0o755)
	busybox(t, "sh -n "+f)
}

// TestInitChoosesIPv6: the network comes up over IPv6 when the server on
// the kernel command line is an IPv6 address, or bootops.ipv6=1 says so;
// else over IPv4 with DHCP, as always.
func TestInitChoosesIPv6(t *testing.T) {
	loop := strings.Replace(between(t, "debug=", "done"), "$(cat /proc/cmdline)", "$CMDLINE", 1)
	for cmdline, want := range map[string]string{
		"bootops.server=http://198.18.0.1:8080 bootops.site=lab":        "",
		"bootops.server=http://[2001:db8::1]:8080 bootops.site=lab":     "1",
		"bootops.server=https://[2001:db8::1]:8443 bootops.token=x":     "1",
		"bootops.site=lab bootops.ipv6=1":                               "1",
		"bootops.server=http://boot.example:8080 bootops.debug":         "",
		"bootops.server=http://198.18.0.1:8080/[x] bootops.ipv6=0 ipv6": "",
	} {
		if got := strings.TrimSpace(busybox(t, loop+"echo \"$ipv6\"", "CMDLINE="+cmdline)); got != want {
			t.Errorf("%q: ipv6=%q, want %q", cmdline, got, want)
		}
	}
}

// TestInitWaitsForAUsableGlobalAddress: global6 (what /init waits for
// before the agent starts) takes global addresses done with duplicate
// address detection, not link-local or tentative ones.
func TestInitWaitsForAUsableGlobalAddress(t *testing.T) {
	// A function, not a program on PATH: busybox sh runs its own applets
	// before PATH.
	fake := `ip() {
case "$*" in
*eth0*) printf '%s\n' '2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500' \
	'    inet6 2001:db8::5054:ff:fe00:1/64 scope global tentative dynamic' \
	'    inet6 fe80::5054:ff:fe00:1/64 scope link' ;;
*eth1*) printf '%s\n' '3: eth1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500' \
	'    inet6 2001:db8:1::5054:ff:fe00:2/64 scope global dynamic' \
	'       valid_lft 86383sec preferred_lft 14383sec' ;;
esac
}
`
	fn := between(t, "global6() {", "}")
	got := busybox(t, fake+fn+"all='eth0 eth1'\nglobal6")
	if strings.TrimSpace(got) != "eth1 2001:db8:1::5054:ff:fe00:2/64" {
		t.Errorf("global6: %q", got)
	}
}

// TestInitStaticNetwork: with a static network from Git on the boot
// media, /init sets the address (on a VLAN when it says one) on the NIC
// with the MAC it names, or the first with a link, adds the default route
// and the name servers, and runs no DHCP.
func TestInitStaticNetwork(t *testing.T) {
	block := between(t, "if [ -f /etc/bootops/network ]; then", "fi\nif [ -z \"$lease\" ]")
	block = strings.TrimSuffix(block, "if [ -z \"$lease\" ]\n")
	cases := []struct {
		name, conf string
		carrier    map[string]string
		want       []string
		lease      string
	}{
		{
			name:    "by MAC, on a VLAN",
			conf:    "BOOTOPS_NET_ADDRESS=198.19.7.10/24\nBOOTOPS_NET_GATEWAY=198.19.7.1\nBOOTOPS_NET_DNS='198.19.7.1 198.19.7.2'\nBOOTOPS_NET_VLAN=20\nBOOTOPS_NET_MAC=52:54:00:00:00:02\n",
			carrier: map[string]string{"eth0": "1", "eth1": "0"},
			want: []string{"ip link add link eth1 name eth1.20 type vlan id 20", "ip link set eth1.20 up",
				"ip addr add 198.19.7.10/24 dev eth1.20", "ip route add default via 198.19.7.1 dev eth1.20"},
			lease: "eth1.20",
		},
		{
			name:    "the first with a link",
			conf:    "BOOTOPS_NET_ADDRESS=198.19.7.11/24\nBOOTOPS_NET_DNS=198.19.7.1\n",
			carrier: map[string]string{"eth0": "0", "eth1": "1"},
			want:    []string{"ip addr add 198.19.7.11/24 dev eth1"},
			lease:   "eth1",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, n := range []string{"eth0", "eth1"} {
				os.MkdirAll(filepath.Join(dir, "sys", n), 0o755)
				os.WriteFile(filepath.Join(dir, "sys", n, "address"), []byte(fmt.Sprintf("52:54:00:00:00:%02d\n", i+1)), 0o644)
				os.WriteFile(filepath.Join(dir, "sys", n, "carrier"), []byte(c.carrier[n]+"\n"), 0o644)
			}
			os.WriteFile(filepath.Join(dir, "network"), []byte(c.conf), 0o644)
			script := strings.NewReplacer("/sys/class/net", dir+"/sys", "/etc/bootops/network", dir+"/network",
				"/etc/resolv.conf", dir+"/resolv.conf", "/run/bootops-microos", dir+"/run").Replace(block)
			fake := "ip() { echo \"ip $*\"; }\nfail() { echo \"FAIL $*\"; exit 1; }\nsleep() { :; }\nall='eth0 eth1'\nlease=\n"
			out := busybox(t, fake+script+"echo \"lease=$lease\"\n")
			for _, w := range c.want {
				if !strings.Contains(out, w+"\n") {
					t.Errorf("no %q in\n%s", w, out)
				}
			}
			if !strings.Contains(out, "lease="+c.lease+"\n") {
				t.Errorf("lease: want %s in\n%s", c.lease, out)
			}
			if strings.Contains(c.conf, "GATEWAY") != strings.Contains(out, "ip route add") {
				t.Errorf("a default route only with a gateway:\n%s", out)
			}
			resolv, _ := os.ReadFile(filepath.Join(dir, "resolv.conf"))
			if !strings.Contains(string(resolv), "nameserver 198.19.7.1\n") {
				t.Errorf("resolv.conf: %q", resolv)
			}
		})
	}
}
