package agent

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/agentapi"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/internal/testutil"
)

// machineSysfs is a machine with one NIC and one disk.
func machineSysfs(t *testing.T, serial, mac string) string {
	d := t.TempDir()
	testutil.WriteFile(t, d, "class/dmi/id/product_serial", serial+"\n")
	testutil.WriteFile(t, d, "class/dmi/id/product_uuid", "01020304-0506-0708-090a-0b0c0d0e0f10\n")
	testutil.WriteFile(t, d, "class/net/eth0/address", mac+"\n")
	os.MkdirAll(filepath.Join(d, "class/net/eth0/device"), 0o755)
	testutil.WriteFile(t, d, "block/vda/size", "524288\n")
	testutil.WriteFile(t, d, "block/vda/removable", "0\n")
	return d
}

// The whole flow without a VM: a compiled repository served by the real
// boot server with the durable store; the agent checks in with its token,
// streams the image to a file, writes the cloud-init seed, reports, and
// "reboots"; the store holds the timeline and the node is provisioned.
func TestAgentAgainstServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, store, image := agentServer(t, ctx, "{serial: S-N1}")
	disk := filepath.Join(t.TempDir(), "vda")
	os.WriteFile(disk, make([]byte, 4<<20), 0o644)
	mnt := t.TempDir()
	var powered []string
	var console bytes.Buffer
	// The kernel command line of the script the machine is served.
	args := bootArgs(t, "http://"+addr+"/ipxe?serial=S-N1&site=lab")
	if args["bootops.node"] != "n1" || args["bootops.token"] == "" {
		t.Fatalf("kernel command line: %v", args)
	}
	err := Session(ctx, args, machineSysfs(t, "S-N1", "52:54:00:00:00:01"), &console, func(r *Runner) {
		r.ResolveDisk = func(string) (string, error) { return disk, nil }
		r.Mount = func(dev, fstype, dir string) error { return os.Symlink(mnt, filepath.Join(dir, "m")) }
		r.Unmount = func(string) error { return nil }
		r.Power = func(action string) error { powered = append(powered, action); return nil }
	})
	if err != nil {
		t.Fatalf("agent: %v\n%s", err, console.String())
	}
	got, _ := os.ReadFile(disk)
	if !bytes.Equal(got[:len(image)], image) {
		t.Error("the disk does not hold the image")
	}
	if len(powered) != 1 || powered[0] != "reboot" {
		t.Errorf("power actions: %v", powered)
	}
	gen, ok := store.Provisioned("lab", "n1")
	if !ok || gen != 3 {
		t.Errorf("provisioned: %d %v\n%s", gen, ok, console.String())
	}
	var states []string
	for _, e := range store.Events("lab/n1") {
		if e.State != "" && (len(states) == 0 || states[len(states)-1] != e.State) {
			states = append(states, e.State)
		}
	}
	if strings.Join(states, " ") != "booting microos provisioning provisioned" {
		t.Errorf("states: %v", states)
	}
	// The spent token, or a wrong one: the check-in is refused, and the
	// agent boots again for a new one.
	for _, tok := range []string{args["bootops.token"], "nope"} {
		args["bootops.token"] = tok
		ctx2, cancel2 := context.WithTimeout(ctx, 10*time.Second)
		var out bytes.Buffer
		powered = nil
		err := Session(ctx2, args, machineSysfs(t, "S-N1", "52:54:00:00:00:01"), &out, func(r *Runner) {
			r.Backoff = 10 * time.Millisecond
			r.Power = func(action string) error { powered = append(powered, action); return nil }
		})
		cancel2()
		if err != nil || !strings.Contains(out.String(), "401 Unauthorized") || !strings.Contains(out.String(), "refused 3 times") || len(powered) != 1 {
			t.Errorf("token %s: %v, powered %v\n%s", tok, err, powered, out.String())
		}
	}
}

// agentServer serves, on loopback, a compiled repository whose node n1
// has the identity given (YAML flow), from the real boot server with the
// durable store; it returns the server's address, the store and the image
// n1 installs.
func agentServer(t *testing.T, ctx context.Context, identity string) (string, *status.Durable, []byte) {
	t.Helper()
	addr, store, image, _ := agentServerOn(t, ctx, "127.0.0.1:0", identity)
	return addr, store, image
}

// served is what agentServerOn serves: the live Plan, and the repository
// it was compiled from (a test edits it and calls swap).
type served struct {
	live *boot.Live
	repo string
}

// swap compiles the repository again and serves its Plan.
func (s served) swap(t *testing.T) {
	t.Helper()
	c, err := compiler.New()
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Compile(os.DirFS(s.repo))
	if err != nil {
		t.Fatal(err)
	}
	s.live.Swap(p)
}

// agentServerOn is agentServer listening on listen: on [::1], its site is
// dual-stack (IPv4 127.0.0.1, IPv6 ::1) and scripts are fetched over
// IPv6. It returns what it serves too.
func agentServerOn(t *testing.T, ctx context.Context, listen, identity string) (string, *status.Durable, []byte, served) {
	t.Helper()
	image := bytes.Repeat([]byte("bootops image block "), 100000)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(image)
	zw.Close()
	sum := sha256.Sum256(gz.Bytes())
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "img", time.Time{}, bytes.NewReader(gz.Bytes()))
	}))
	t.Cleanup(images.Close)

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	network := "serverAddress: " + host
	if host == "::1" {
		// The compiler takes no loopback address for a site: the IPv6
		// one is set to ::1 once compiled.
		network = "serverAddress: 127.0.0.1, ipv6: {serverAddress: \"2001:db8::1\", prefix: \"2001:db8::/64\", dhcp: off}"
	}
	repo := t.TempDir()
	testutil.WriteFile(t, repo, "microos.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\nkernel: {url: \"http://198.18.0.1/k\", sha256: "+strings.Repeat("1a", 32)+"}\ninitrd: {url: \"http://198.18.0.1/i\", sha256: "+strings.Repeat("1a", 32)+"}\n")
	testutil.WriteFile(t, repo, "profile.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: base\nos: {type: immutable}\nimage: {url: \""+images.URL+"/img.raw.gz\", sha256: "+hex.EncodeToString(sum[:])+", compression: gz}\ncloudInit: {hostname: n1}\n")
	testutil.WriteFile(t, repo, "sites/lab/site.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: lab\nnetwork: {"+network+", httpPort: "+port+", dhcp: off}\ndefaultProfile: base\n")
	testutil.WriteFile(t, repo, "sites/lab/nodes/n1.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n1\nidentity: "+identity+"\nreprovision: 3\n")
	c, err := compiler.New()
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Compile(os.DirFS(repo))
	if err != nil {
		t.Fatal(err)
	}
	if host == "::1" {
		p.Sites[0].Network.IPv6.ServerAddress = "::1"
	}
	live := &boot.Live{}
	live.Swap(p)
	store, err := status.Open(filepath.Join(t.TempDir(), "status.db"), status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	secret, err := boot.LoadSecret(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	agentAPI := &agentapi.Server{Plans: live, Secret: secret, Store: store}
	srv := &bhttp.Server{Plans: live, Events: store, View: bhttp.View{Status: store}, Secret: secret, Agent: agentAPI}
	go srv.Serve(ctx, ln)

	return ln.Addr().String(), store, image, served{live, repo}
}

// bootArgs fetches a machine's script as iPXE would and reads its kernel
// command line.
func bootArgs(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "kernel "); ok {
			return ParseCmdline(rest)
		}
	}
	t.Fatalf("no kernel line in the script:\n%s", b)
	return nil
}

// A node Git holds, whose profile has QA: the agent runs the QA (and
// nothing else), is held, asks again while held, and installs when a
// commit releases it — one life of the agent, one reboot at its end.
func TestAgentHeldCommissionsThenInstalls(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, store, image, srv := agentServerOn(t, ctx, "127.0.0.1:0", "{serial: S-N1}")
	profile, _ := os.ReadFile(filepath.Join(srv.repo, "profile.yaml"))
	testutil.WriteFile(t, srv.repo, "profile.yaml", string(profile)+"workflow:\n  - {action: qa-cpu, duration: 1s}\n  - {action: image-to-disk}\n  - {action: cloud-init}\n  - {action: reboot}\n")
	node, _ := os.ReadFile(filepath.Join(srv.repo, "sites/lab/nodes/n1.yaml"))
	testutil.WriteFile(t, srv.repo, "sites/lab/nodes/n1.yaml", string(node)+"install: hold\n")
	srv.swap(t)

	disk := filepath.Join(t.TempDir(), "vda")
	os.WriteFile(disk, make([]byte, 4<<20), 0o644)
	mnt := t.TempDir()
	var powered []string
	var console testutil.SyncBuffer
	args := bootArgs(t, "http://"+addr+"/ipxe?serial=S-N1&site=lab")
	done := make(chan error, 1)
	go func() {
		done <- Session(ctx, args, machineSysfs(t, "S-N1", "52:54:00:00:00:01"), &console, func(r *Runner) {
			r.ResolveDisk = func(string) (string, error) { return disk, nil }
			r.Mount = func(dev, fstype, dir string) error { return os.Symlink(mnt, filepath.Join(dir, "m")) }
			r.Unmount = func(string) error { return nil }
			r.Power = func(action string) error { powered = append(powered, action); return nil }
		})
	}()
	if !testutil.Poll(60*time.Second, 50*time.Millisecond, func() bool {
		m, _ := store.Machine("lab/n1")
		return m.State == status.StateHeld && m.Commissioned != ""
	}) {
		m, _ := store.Machine("lab/n1")
		t.Fatalf("not held after its QA: state %q, commissioned %q\n%s", m.State, m.Commissioned, console.String())
	}
	if b, _ := os.ReadFile(disk); !bytes.Equal(b, make([]byte, 4<<20)) {
		t.Fatal("the disk was written while held")
	}
	// Released by a commit: the agent, asking again, installs.
	testutil.WriteFile(t, srv.repo, "sites/lab/nodes/n1.yaml", string(node))
	srv.swap(t)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent: %v\n%s", err, console.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("not installed within 60 s of its release:\n%s", console.String())
	}
	if got, _ := os.ReadFile(disk); !bytes.Equal(got[:len(image)], image) || len(powered) != 1 || powered[0] != "reboot" {
		t.Errorf("installed: image %v, power actions %v", bytes.Equal(got[:len(image)], image), powered)
	}
	var states []string
	for _, e := range store.Events("lab/n1") {
		if e.State != "" && (len(states) == 0 || states[len(states)-1] != e.State) {
			states = append(states, e.State)
		}
	}
	if got := strings.Join(states, " "); got != "booting commissioning held microos provisioning provisioned" {
		t.Errorf("states: %s", got)
	}
	if !strings.Contains(console.String(), "commissioned: 1 QA actions passed") {
		t.Errorf("console:\n%s", console.String())
	}
}
