package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// bootops runs the CLI in-process and returns its exit code and output.
func bootops(t *testing.T, environ map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return environ[k] }}
	code := run(context.Background(), e, args)
	return code, out.String(), errb.String()
}

// validate's sessions (the examples, errors, a folder that is no
// repository) are in testdata/script/validate.txtar. Exit code 2 for a
// usage mistake, which a script cannot tell from 1, is checked here.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"validate", "a", "b"},
		{"compile", "../../examples/warehouse"},
		{"render", "../../examples/warehouse"},
		{"render", "../../examples/warehouse", "--node", "rack1-01", "--what", "ipxee"},
		{"explain", "../../examples/warehouse"},
		{"explain", "../../examples/warehouse", "--mac", "nope"},
		{"validate", "--no-such-flag"},
	} {
		code, _, stderr := bootops(t, nil, args...)
		if code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
	code, _, stderr := bootops(t, nil, "validate", filepath.Join(t.TempDir(), "missing"))
	if code != 1 || !strings.Contains(stderr, "no such file or directory") {
		t.Errorf("missing dir: exit %d, stderr %q", code, stderr)
	}
}

func TestHelpHasExamples(t *testing.T) {
	for _, c := range commands() {
		code, out, _ := bootops(t, nil, c.name, "--help")
		if code != 0 || !strings.Contains(out, "Example:\n  bootops "+c.name) {
			t.Errorf("%s --help: exit %d, output %q", c.name, code, out)
		}
	}
	code, out, _ := bootops(t, nil, "help")
	if code != 0 || !strings.Contains(out, "validate") {
		t.Errorf("help: exit %d, %q", code, out)
	}
}

func TestCompileIsReproducible(t *testing.T) {
	for _, ex := range []string{"warehouse", "cue-fleet", "reservation"} {
		a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
		for _, out := range []string{a, b} {
			if code, _, stderr := bootops(t, nil, "compile", "../../examples/"+ex, "-o", out); code != 0 {
				t.Fatalf("compile %s: %d %s", ex, code, stderr)
			}
		}
		ta, tb := tree(t, a), tree(t, b)
		if len(ta) < 5 {
			t.Fatalf("%s: only %d files", ex, len(ta))
		}
		for name, data := range ta {
			if !bytes.Equal(data, tb[name]) {
				t.Errorf("%s: %s differs between two compilations", ex, name)
			}
		}
		// Compiling over an earlier output replaces it whole.
		if code, _, stderr := bootops(t, nil, "compile", "../../examples/"+ex, "-o", a); code != 0 {
			t.Fatalf("recompile: %s", stderr)
		}
		if len(tree(t, a)) != len(ta) {
			t.Errorf("%s: recompiling changed the file count", ex)
		}
	}
	// A directory that is not an earlier output is never overwritten.
	other := t.TempDir()
	write(t, other, "precious.txt", "keep")
	code, _, stderr := bootops(t, nil, "compile", "../../examples/warehouse", "-o", other)
	if code != 1 || !strings.Contains(stderr, "not a bootops output") {
		t.Errorf("compile into a foreign dir: exit %d, %q", code, stderr)
	}
}

func TestRender(t *testing.T) {
	dir := "../../examples/warehouse"
	for what, want := range map[string]string{
		"ipxe":           "initrd=initrd bootops.server=http://198.18.0.1:8080 bootops.node=rack1-12",
		"user-data":      "#cloud-config\nhostname: rack1-12\n",
		"meta-data":      "instance-id: rack1-12-0\n",
		"network-config": "macaddress: \"52:54:00:00:01:0c\"",
		"cloud-init":     "# ---- network-config\nversion: 2\n",
		"workflow":       "\"action\": \"image-to-disk\"",
	} {
		code, out, stderr := bootops(t, nil, "render", dir, "--node", "rack1-12", "--what", what)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("render --what %s: exit %d, stderr %q, output:\n%s\nwant it to contain %q", what, code, stderr, out, want)
		}
	}
	code, _, stderr := bootops(t, nil, "render", dir, "--node", "rack1-1")
	if code != 1 || !strings.Contains(stderr, `no node "rack1-1" (did you mean "rack1-01"?)`) {
		t.Errorf("unknown node: exit %d, %q", code, stderr)
	}
	code, _, stderr = bootops(t, nil, "render", dir, "--node", "rack1-12", "--what", "grub")
	if code != 1 || !strings.Contains(stderr, "its Micro-OS's chain is not shim") {
		t.Errorf("grub of an iPXE node: exit %d, %q", code, stderr)
	}
	// Flags from the environment.
	code, out, _ := bootops(t, map[string]string{"BOOTOPS_NODE": "rack1-02", "BOOTOPS_WHAT": "meta-data"}, "render", dir)
	if code != 0 || out != "instance-id: rack1-02-0\nlocal-hostname: rack1-02\n" {
		t.Errorf("render from env: exit %d, %q", code, out)
	}
}

// A shim-chain node's GRUB config: every kernel word quoted, over TFTP,
// with the site overlay; a TLS site's carries no token.
func TestRenderGRUB(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "microos/m.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\nchain: shim\noverlay: true\n"+
		"kernel: {url: \"http://198.18.0.1/k\", sha256: "+strings.Repeat("1a", 32)+"}\ninitrd: {url: \"http://198.18.0.1/i\", sha256: "+strings.Repeat("2b", 32)+"}\n")
	write(t, dir, "profiles/p.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: p\nos: {type: immutable}\n"+
		"image: {url: \"http://198.18.0.1/img\", sha256: "+strings.Repeat("3c", 32)+"}\n")
	write(t, dir, "sites/lab/site.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: lab\nnetwork: {serverAddress: 198.18.0.1, httpsPort: 8443}\ndefaultProfile: p\n")
	write(t, dir, "sites/lab/nodes/n.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n\nidentity: {serial: S-1}\n")
	code, out, stderr := bootops(t, nil, "render", dir, "--node", "n", "--what", "grub")
	want := "linux (tftp,198.18.0.1)/artifacts/microos/default/kernel 'bootops.server=https://198.18.0.1:8443' 'bootops.node=n' 'bootops.site=lab' 'console=tty0' 'console=ttyS0,115200' 'bootops.chain=shim'\n" +
		"initrd (tftp,198.18.0.1)/artifacts/microos/default/initrd (tftp,198.18.0.1)/artifacts/overlay/lab\nboot\n"
	if code != 0 || !strings.HasSuffix(out, want) || strings.Contains(out, "token") {
		t.Errorf("render --what grub: exit %d, stderr %q, output:\n%s\nwant it to end with:\n%s", code, stderr, out, want)
	}
}

func TestExplain(t *testing.T) {
	dir := "../../examples/warehouse"
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--serial", "sn-a0001"}, 0, "match: node rack1-01 (site warehouse) installs profile microvisor"},
		{[]string{"--uuid", "4C4C4544-0041-3110-8042-B4C04F4E0002"}, 0, "match: node rack1-02"},
		{[]string{"--mac", "52-54-00-00-01-03"}, 0, "match: node rack1-03"},
		{[]string{"--serial", "SN-A0004", "--mac", "52:54:00:00:02:04"}, 0, "match: node rack1-04"},
		{[]string{"--serial", "SN-A0004", "--mac", "52:54:00:00:01:03"}, 1, "identifiers point at different nodes"},
		{[]string{"--serial", "SN-A0004", "--uuid", "4c4c4544-0041-3110-8042-b4c04f4e9999"}, 1, "uuid 4c4c4544-0041-3110-8042-b4c04f4e9999 presented, 4c4c4544-0041-3110-8042-b4c04f4e0004 registered"},
		{[]string{"--serial", "NEW-MACHINE"}, 0, "unknown: installs site warehouse's default profile microvisor"},
	} {
		code, out, stderr := bootops(t, nil, append([]string{"explain", dir}, c.args...)...)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("explain %v: exit %d (want %d), stderr %q, output:\n%s\nwant it to contain %q", c.args, code, c.code, stderr, out, c.want)
		}
	}
	code, out, _ := bootops(t, nil, "explain", dir, "--serial", "SN-A0001", "-o", "json")
	var d struct {
		Outcome, Node, Site, Profile string
		Boots                        bool
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != 0 || d.Outcome != "match" || d.Node != "rack1-01" || !d.Boots {
		t.Errorf("explain -o json: %d %v %+v\n%s", code, err, d, out)
	}
	// Several sites and no --site: an unknown machine cannot be placed.
	code, out, _ = bootops(t, nil, "explain", "../../examples/cue-fleet", "--serial", "NOBODY")
	if code != 1 || !strings.Contains(out, "name the site") {
		t.Errorf("explain unknown without site: %d %q", code, out)
	}
}

func TestSchema(t *testing.T) {
	code, out, _ := bootops(t, nil, "schema")
	if code != 0 || !strings.Contains(out, "#Node: {") {
		t.Errorf("schema: %d %q", code, out)
	}
	code, out, _ = bootops(t, nil, "schema", "--jsonschema")
	var js struct {
		Schema      string                     `json:"$schema"`
		Definitions map[string]json.RawMessage `json:"definitions"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || code != 0 {
		t.Fatalf("schema --jsonschema: %d %v", code, err)
	}
	var node struct {
		Required             []string       `json:"required"`
		AdditionalProperties *bool          `json:"additionalProperties"`
		Properties           map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(js.Definitions["Node"], &node); err != nil {
		t.Fatal(err)
	}
	if node.AdditionalProperties == nil || *node.AdditionalProperties || strings.Join(node.Required, ",") != "apiVersion,kind,name,identity" || node.Properties["reprovision"] == nil {
		t.Errorf("Node definition: %s", js.Definitions["Node"])
	}
}

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func tree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The README's "break something" walk-through, as written there.
func TestReadmeBrokenExample(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "warehouse")
	if err := os.CopyFS(dir, os.DirFS("../../examples/warehouse")); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "sites/warehouse/nodes/rack1-01.yaml")
	data, _ := os.ReadFile(f)
	os.WriteFile(f, bytes.Replace(data, []byte("identity:"), []byte("idenity:"), 1), 0o644)
	code, _, stderr := bootops(t, nil, "validate", dir)
	want := "sites/warehouse/nodes/rack1-01.yaml:1:1: identity: missing required field\n" +
		"sites/warehouse/nodes/rack1-01.yaml:4:1: idenity: unknown field (did you mean \"identity\"?)\n" +
		"2 errors in " + dir + "\n"
	if code != 1 || stderr != want {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", code, stderr, want)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(strings.ReplaceAll(want, dir, "examples/warehouse")), "\n") {
		if !strings.Contains(string(readme), "\n"+line+"\n") {
			t.Errorf("README does not show %q", line)
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// demoRepo copies sites/ with stand-in Micro-OS files.
func demoRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sites")
	if err := os.CopyFS(dir, os.DirFS("../../sites")); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "microos/vmlinuz", "kernel bytes")
	write(t, dir, "microos/initrd.img", "initrd bytes")
	return dir
}

// The daemon serves the repository; status reads it with the operator
// token serve made in its state folder (and without one, is told why
// not); a broken edit keeps the last good plan.
func TestServeAndStatus(t *testing.T) {
	repo := demoRepo(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	done := make(chan int, 1)
	state := t.TempDir()
	go func() {
		e := &env{stdout: io.Discard, stderr: &stderr, getenv: func(string) string { return "" }}
		done <- run(ctx, e, []string{"serve", "--source", repo, "--state-dir", state, "--http-addr", "127.0.0.1:0", "--dhcp", "off", "--tftp-addr", ""})
	}()
	operator := map[string]string{"BOOTOPS_TOKEN_FILE": filepath.Join(state, "operator-token")}
	var addr string
	for i := 0; i < 200 && addr == ""; i++ {
		for _, line := range strings.Split(stderr.String(), "\n") {
			var l struct{ Msg, HTTP string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "serving" {
				addr = l.HTTP
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("serve did not start:\n%s", stderr.String())
	}
	resp, err := http.Get("http://" + addr + "/ipxe?serial=demo-0001&mac=52:54:00:12:34:56")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "bootops.node=vm-serial") || strings.Contains(string(b), "@BOOTOPS_TOKEN@") || !strings.Contains(string(b), "bootops.token=") {
		t.Errorf("script:\n%s", b)
	}
	resp, err = http.Get("http://" + addr + "/artifacts/microos/default/kernel")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "kernel bytes" {
		t.Errorf("kernel: %q", b)
	}
	// Events reach the store a few milliseconds after the request.
	var code int
	var out, errs string
	for i := 0; i < 100 && !strings.Contains(out, "booting"); i++ {
		time.Sleep(20 * time.Millisecond)
		code, out, errs = bootops(t, operator, "status", "--server", "http://"+addr)
	}
	if code != 0 || !strings.Contains(out, "serving:  dir:") || !regexp.MustCompile(`vm-serial\s+lab\s+booting`).MatchString(out) || !regexp.MustCompile(`vm-uuid\s+lab\s+registered`).MatchString(out) {
		t.Errorf("status: exit %d %s\n%s", code, errs, out)
	}
	code, out, _ = bootops(t, operator, "status", "--server", "http://"+addr, "-o", "json")
	if code != 0 || !strings.Contains(out, `"applied"`) || !strings.Contains(out, `"state": "booting"`) {
		t.Errorf("status -o json: %d\n%s", code, out)
	}
	// Without a credential, or with a wrong one: refused, and told how.
	for _, environ := range []map[string]string{nil, {"BOOTOPS_TOKEN": "not-the-operator-token"}} {
		code, out, errs = bootops(t, environ, "status", "--server", "http://"+addr)
		if code != 1 || strings.Contains(out, "vm-serial") || !strings.Contains(errs, "operator credential with the read role") || !strings.Contains(errs, "BOOTOPS_TOKEN") ||
			strings.Contains(errs, "is `bootops serve` running there?") {
			t.Errorf("status with %v: exit %d %s\n%s", environ, code, errs, out)
		}
	}
	// A broken edit of the folder: the daemon keeps serving the last good
	// Plan, and status says which attempt was refused and why.
	write(t, repo, "sites/lab/nodes/vm-serial.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: vm-serial\nidenity: {}\n")
	var statusOut string
	for i := 0; i < 100 && !strings.Contains(statusOut, "refused"); i++ {
		time.Sleep(50 * time.Millisecond)
		_, statusOut, _ = bootops(t, operator, "status", "--server", "http://"+addr)
	}
	if !strings.Contains(statusOut, "STALE:    the newest revision dir was refused: 2 errors") || !strings.Contains(statusOut, "\n          sites/lab/nodes/vm-serial.yaml:4:1: idenity: unknown field") {
		t.Errorf("status after a broken edit:\n%s", statusOut)
	}
	resp, err = http.Get("http://" + addr + "/ipxe?serial=demo-0001")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "bootops.node=vm-serial") {
		t.Errorf("the last good plan is no longer served:\n%s", b)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
	// Nothing listening: a clear error.
	code, _, errs = bootops(t, nil, "status", "--server", "http://"+addr)
	if code != 1 || !strings.Contains(errs, "is `bootops serve` running there?") {
		t.Errorf("status without a daemon: %d %q", code, errs)
	}
}
