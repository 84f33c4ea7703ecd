//go:build package

// Package pkgtest installs the Debian package on a clean Debian bookworm
// (mmdebstrap, chroot) and checks it as an administrator would meet it:
// the files, units and user; serve started with the unit's own command
// line and the shipped settings; an upgrade that keeps state and a changed
// conffile; remove that keeps both, purge that deletes them. It also runs
// lintian and systemd-analyze on the package. Root only:
//
//	go test -tags package -v ./test/package   (make package-test)
//
// BOOTOPS_DEB=path tests that package instead of building one.
package pkgtest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// The exposure systemd-analyze security measured for each unit (lower is
// safer; docs/install.md), and how much worse a change may make it before
// the test fails.
var exposure = map[string]float64{"bootops.service": 1.6, "bootops-hub.service": 1.2}

const exposureMargin = 0.5

// base is what the clean system is made of. Its packages are those of any
// Debian server (minbase) and systemd (for systemd-analyze); the package's
// dependencies are only downloaded into apt's cache, so that
// `apt-get -f install` resolves and installs them, without the network.
var base = struct {
	suite, variant string
	include        []string
}{"bookworm", "minbase", []string{"systemd"}}

func TestInstallUpgradeRemovePurge(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (chroot, mounts, dpkg): run as root")
	}
	for _, tool := range []string{"mmdebstrap", "lintian", "dpkg-deb", "tar", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed: bash test/deps.sh mmdebstrap lintian", tool)
		}
	}
	work := t.TempDir()
	debPath := buildDeb(t, work)
	version := field(t, debPath, "Version")
	depends := dependsOf(t, debPath)
	newer := bumpVersion(t, debPath, version+"+1", work)

	t.Run("lintian", func(t *testing.T) { lintian(t, debPath) })

	tarball := baseTarball(t, depends)
	root := filepath.Join(work, "root")
	unpack(t, tarball, root)
	c := &chroot{t: t, root: root}
	copyFile(t, debPath, filepath.Join(root, "tmp/bootops.deb"))
	copyFile(t, newer, filepath.Join(root, "tmp/bootops-newer.deb"))

	// dpkg -i stops at the missing dependencies; apt-get -f install
	// brings them and configures the package.
	start := time.Now()
	if out, err := c.try("dpkg", "-i", "/tmp/bootops.deb"); err == nil && len(depends) > 0 {
		t.Logf("dpkg -i succeeded before the dependencies were there:\n%s", out)
	}
	c.run("apt-get", "-f", "install", "-y", "--no-install-recommends")
	t.Logf("installed in %s", time.Since(start).Round(time.Millisecond))
	if s := c.run("dpkg-query", "-W", "-f=${Status} ${Version}", "bootops"); s != "install ok installed "+version {
		t.Fatalf("after apt-get -f install, bootops is %q, want installed %s", s, version)
	}

	t.Run("files", func(t *testing.T) { checkFiles(t, c) })
	t.Run("units", func(t *testing.T) { checkUnits(t, c) })
	t.Run("serve", func(t *testing.T) { serveFromUnit(t, c) })
	t.Run("hub", func(t *testing.T) { hubFromUnit(t, c) })

	// The upgrade keeps the state, the changed serve.yaml and the user.
	marker := "/var/lib/bootops/kept-across-upgrade"
	c.write(marker, "state\n")
	conf := c.read("/etc/bootops/serve.yaml")
	if !strings.Contains(conf, "127.0.0.1:") {
		t.Fatalf("serve.yaml was not changed by the serve step:\n%s", conf)
	}
	c.run("dpkg", "-i", "/tmp/bootops-newer.deb")
	if s := c.run("dpkg-query", "-W", "-f=${Status} ${Version}", "bootops"); s != "install ok installed "+version+"+1" {
		t.Fatalf("after the upgrade, bootops is %q", s)
	}
	if got := c.read("/etc/bootops/serve.yaml"); got != conf {
		t.Errorf("the upgrade replaced the changed conffile:\n%s", got)
	}
	for _, p := range []string{marker, "/var/lib/bootops/status.db", "/var/lib/bootops/secret"} {
		if !c.exists(p) {
			t.Errorf("the upgrade lost %s", p)
		}
	}
	c.run("getent", "passwd", "bootops")

	// remove: the program goes; settings, state and the user stay.
	c.run("apt-get", "remove", "-y", "bootops")
	if s := c.run("dpkg-query", "-W", "-f=${Status}", "bootops"); s != "deinstall ok config-files" {
		t.Errorf("after remove, bootops is %q, want deinstall ok config-files", s)
	}
	if c.exists("/usr/lib/bootops/bootops") || c.exists("/usr/bin/bootops") {
		t.Error("remove left the binaries")
	}
	for _, p := range []string{"/etc/bootops/serve.yaml", "/etc/bootops/hub.env", marker, "/var/lib/bootops/status.db"} {
		if !c.exists(p) {
			t.Errorf("remove deleted %s; only purge may", p)
		}
	}
	c.run("getent", "passwd", "bootops")

	// purge: everything goes.
	c.run("apt-get", "purge", "-y", "bootops")
	if out, err := c.try("dpkg-query", "-W", "-f=${Status}", "bootops"); err == nil && strings.TrimSpace(out) != "unknown ok not-installed" {
		t.Errorf("after purge, bootops is %q", out)
	}
	for _, p := range []string{"/etc/bootops", "/var/lib/bootops", "/var/lib/bootops-hub"} {
		if c.exists(p) {
			t.Errorf("purge left %s", p)
		}
	}
	if out, err := c.try("getent", "passwd", "bootops"); err == nil {
		t.Errorf("purge left the user bootops: %s", out)
	}
}

// buildDeb is $BOOTOPS_DEB, else the package make package builds, into dir.
func buildDeb(t *testing.T, dir string) string {
	if p := os.Getenv("BOOTOPS_DEB"); p != "" {
		return p
	}
	start := time.Now()
	cmd := exec.Command("go", "run", "./packaging/cmd/mkdeb", "-o", dir)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mkdeb: %v\n%s", err, stderrOf(err))
	}
	t.Logf("built %s in %s", strings.TrimSpace(string(out)), time.Since(start).Round(time.Millisecond))
	return strings.TrimSpace(string(out))
}

func field(t *testing.T, deb, name string) string {
	out, err := exec.Command("dpkg-deb", "--field", deb, name).Output()
	if err != nil {
		t.Fatalf("dpkg-deb --field %s %s: %v", deb, name, err)
	}
	return strings.TrimSpace(string(out))
}

// dependsOf names the package's Depends, without versions or alternatives
// beyond the first.
func dependsOf(t *testing.T, deb string) []string {
	var out []string
	for _, d := range strings.Split(field(t, deb, "Depends"), ",") {
		d = strings.TrimSpace(strings.Split(d, "|")[0])
		if d = strings.Fields(d + " ")[0]; d != "" {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// bumpVersion writes a copy of deb with another version, as the next
// release would be.
func bumpVersion(t *testing.T, deb, version, dir string) string {
	tree := filepath.Join(dir, "newer")
	mustRun(t, "dpkg-deb", "-R", deb, tree)
	control := filepath.Join(tree, "DEBIAN/control")
	b, err := os.ReadFile(control)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`(?m)^Version: .*$`).ReplaceAll(b, []byte("Version: "+version))
	if err := os.WriteFile(control, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bootops-newer.deb")
	mustRun(t, "dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "-b", tree, out) // fast; only dpkg reads it
	return out
}

// lintian fails on any error; warnings are logged.
func lintian(t *testing.T, deb string) {
	out, _ := exec.Command("lintian", "--allow-root", deb).CombinedOutput()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case strings.HasPrefix(l, "E:"):
			t.Errorf("lintian: %s", l)
		case l != "":
			t.Logf("lintian: %s", l)
		}
	}
}

func checkFiles(t *testing.T, c *chroot) {
	c.run("test", "-x", "/usr/lib/bootops/bootops-agent")
	if got := c.run("readlink", "-f", "/usr/bin/bootops"); got != "/usr/lib/bootops/bootops" {
		t.Errorf("/usr/bin/bootops resolves to %q, want /usr/lib/bootops/bootops (microos build finds the agent beside it)", got)
	}
	if v := c.run("/usr/bin/bootops", "version"); !strings.HasPrefix(v, "bootops ") {
		t.Errorf("bootops version: %q", v)
	}
	// Static: the clean system's dynamic loader is never asked.
	if out, err := c.try("/usr/lib/bootops/bootops-agent", "--help"); strings.Contains(out, "not found") || strings.Contains(out, "No such file") {
		t.Errorf("bootops-agent does not run: %v %s", err, out)
	}
	for _, p := range []string{"/etc/bootops/serve.yaml", "/etc/bootops/hub.env", "/etc/bootops/hub-sites",
		"/usr/share/doc/bootops/copyright", "/usr/share/doc/bootops/changelog.gz", "/usr/share/man/man1/bootops.1.gz"} {
		if !c.exists(p) {
			t.Errorf("%s is missing", p)
		}
	}
	if conf := c.run("dpkg-query", "--showformat=${Conffiles}", "-W", "bootops"); !strings.Contains(conf, "/etc/bootops/serve.yaml") || !strings.Contains(conf, "/etc/bootops/hub.env") {
		t.Errorf("conffiles: %q", conf)
	}
	if u := c.run("getent", "passwd", "bootops"); !strings.HasSuffix(u, ":/var/lib/bootops:/usr/sbin/nologin") {
		t.Errorf("user bootops: %q, want a system user with home /var/lib/bootops and no shell", u)
	}
	for _, d := range []string{"/var/lib/bootops", "/var/lib/bootops-hub"} {
		if got := c.run("stat", "-c", "%U:%G %a", d); got != "bootops:bootops 700" {
			t.Errorf("%s: %s, want bootops:bootops 700", d, got)
		}
	}
}

// checkUnits: systemd-analyze verify is clean and the exposure is at most
// the measured one plus the margin.
func checkUnits(t *testing.T, c *chroot) {
	units := []string{"bootops.service", "bootops-hub.service"}
	if out, err := c.try(append([]string{"systemd-analyze", "verify"}, units...)...); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	re := regexp.MustCompile(`Overall exposure level for (\S+): ([0-9.]+) (\S+)`)
	for _, u := range units {
		out, _ := c.try("systemd-analyze", "security", "--offline=yes", u)
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Errorf("systemd-analyze security %s: no exposure level in:\n%s", u, out)
			continue
		}
		got, _ := strconv.ParseFloat(m[2], 64)
		t.Logf("%s: exposure %.1f %s", u, got, m[3])
		if got > exposure[u]+exposureMargin {
			t.Errorf("%s: exposure %.1f, worse than the measured %.1f + %.1f:\n%s", u, got, exposure[u], exposureMargin, out)
		}
	}
}

// serveFromUnit runs the installed unit's ExecStart as the unit would (its
// user, its capabilities), with the installed serve.yaml pointed at a copy
// of the demo repository and loopback ports, and waits for the status API
// to name the demo's nodes.
func serveFromUnit(t *testing.T, c *chroot) {
	unit := c.read("/usr/lib/systemd/system/bootops.service")
	set := unitSettings(unit)
	argv := strings.Fields(set["ExecStart"])
	if len(argv) == 0 || set["User"] != "bootops" {
		t.Fatalf("bootops.service: ExecStart %q, User %q", set["ExecStart"], set["User"])
	}
	// The shipped settings name /srv/bootops/repo; the demo goes there.
	conf := c.read("/etc/bootops/serve.yaml")
	source := regexp.MustCompile(`(?m)^source: (\S+)$`).FindStringSubmatch(conf)
	if source == nil {
		t.Fatalf("serve.yaml names no source:\n%s", conf)
	}
	c.run("mkdir", "-p", filepath.Dir(source[1]))
	mustRun(t, "cp", "-a", "../../sites", filepath.Join(c.root, source[1]))
	// The demo's Micro-OS is build output (make microos); nothing boots
	// here, so stand-ins let the repository compile.
	for _, f := range []string{"microos/vmlinuz", "microos/initrd.img"} {
		c.write(filepath.Join(source[1], f), "stand-in for "+f+"\n")
	}
	c.run("chown", "-R", "bootops:bootops", source[1])
	httpAddr, tftpAddr := testutil.FreePort(t), testutil.FreeUDP(t, "udp4")
	conf = regexp.MustCompile(`(?m)^http-addr: .*$`).ReplaceAllString(conf, "http-addr: "+httpAddr)
	conf = regexp.MustCompile(`(?m)^tftp-addr: .*$`).ReplaceAllString(conf, "tftp-addr: "+tftpAddr.String())
	c.write("/etc/bootops/serve.yaml", conf)

	// The status API needs an operator's token: the one serve made in its
	// state folder (readable by the bootops user only).
	body := runUnit(t, c, set, nil, "http://"+httpAddr+"/api/v1/status", `"vm-serial"`, "/var/lib/bootops/operator-token")
	if st, err := os.Stat(filepath.Join(c.root, "/var/lib/bootops/operator-token")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the operator token: %v, mode %v", err, st)
	}
	for _, n := range []string{"vm-serial", "vm-mac", "vm-uuid"} {
		if !strings.Contains(body, `"`+n+`"`) {
			t.Errorf("status names no node %s: %s", n, body)
		}
	}
	for _, p := range []string{"/var/lib/bootops/status.db", "/var/lib/bootops/secret"} {
		if got := c.run("stat", "-c", "%U %a", p); got != "bootops 600" {
			t.Errorf("%s: %s, want bootops 600", p, got)
		}
	}
}

// hubFromUnit does what docs/install.md says before the hub starts (its
// TLS certificate, a site), then runs the unit's ExecStart with the
// variables of the installed hub.env, its listeners moved to free loopback
// ports, and waits for the view (no site has reported yet: it names the
// hub and no site).
func hubFromUnit(t *testing.T, c *chroot) {
	set := unitSettings(c.read("/usr/lib/systemd/system/bootops-hub.service"))
	if set["EnvironmentFile"] != "/etc/bootops/hub.env" || set["User"] != "bootops" {
		t.Fatalf("bootops-hub.service: EnvironmentFile %q, User %q", set["EnvironmentFile"], set["User"])
	}
	c.run("runuser", "-u", "bootops", "--", "bootops", "ca", "init", "--host", "127.0.0.1", "--state-dir", "/var/lib/bootops-hub")
	c.run("bootops", "hub", "add-site", "store-0042", "--sites-dir", "/etc/bootops/hub-sites", "-o", "/root/store-0042.seed")
	var env []string
	for _, l := range strings.Split(c.read(set["EnvironmentFile"]), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			env = append(env, l)
		}
	}
	addrs := testutil.FreePorts(t, 2)
	natsAddr, httpAddr := addrs[0], addrs[1]
	env = append(env, "BOOTOPS_NATS_ADDR="+natsAddr, "BOOTOPS_HTTP_ADDR="+httpAddr)
	runUnit(t, c, set, env, "http://"+httpAddr+"/api/v1/status", `"hub"`, "")
}

// runUnit runs a unit's ExecStart as the unit would (its user, its
// capabilities and no others, no new privileges) with env added, until url
// answers JSON that contains want; then stops it with SIGINT and returns
// that answer.
//
// tokenFile, when set, is the file in the chroot whose token the request
// presents (read again each try: the daemon makes it as it starts).
func runUnit(t *testing.T, c *chroot, set map[string]string, env []string, url, want, tokenFile string) string {
	argv := strings.Fields(set["ExecStart"])
	caps := "-all"
	if a := set["AmbientCapabilities"]; a != "" {
		caps += ",+" + strings.ToLower(strings.ReplaceAll(a, "CAP_", ""))
	}
	args := []string{"setpriv", "--reuid=" + set["User"], "--regid=" + set["Group"], "--init-groups", "--no-new-privs",
		"--inh-caps=" + caps, "--ambient-caps=" + caps, "--bounding-set=" + caps, "--"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := c.command(ctx, append(args, argv...)...)
	cmd.Env = append(append(cmd.Env, "HOME=/var/lib/bootops"), env...)
	log := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var body string
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("%s exited before answering: %v\n%s", argv, err, log)
		default:
		}
		var doc any
		token := ""
		if tokenFile != "" {
			b, _ := os.ReadFile(filepath.Join(c.root, tokenFile))
			token = strings.TrimSpace(string(b))
		}
		body = get(url, token)
		if json.Unmarshal([]byte(body), &doc) == nil && strings.Contains(body, want) {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("GET %s never answered JSON with %s; last answer %q\nlog:\n%s", url, want, body, log)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if got := get(url, ""); tokenFile != "" && strings.Contains(got, want) {
		t.Errorf("GET %s answered without a credential: %.200s", url, got)
	}
	cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("%s stopped with %v\n%s", argv, err, log)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Errorf("%s did not stop within 60 s of SIGINT\n%s", argv, log)
	}
	return body
}

// unitSettings reads Key=Value lines of a unit file (the last one wins).
func unitSettings(unit string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(unit))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			m[k] = v
		}
	}
	return m
}

func get(url, token string) string {
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// baseTarball is the clean Debian, made once with mmdebstrap and kept in
// the user's cache under a key of everything that went into it.
func baseTarball(t *testing.T, depends []string) string {
	var mirrors []string
	h := sha256.New()
	fmt.Fprintf(h, "mmdebstrap v1 %s %s %v download:%v\n", base.suite, base.variant, base.include, depends)
	for _, pat := range []string{"/etc/apt/sources.list", "/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources"} {
		files, _ := filepath.Glob(pat)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil || strings.TrimSpace(string(b)) == "" {
				continue
			}
			mirrors = append(mirrors, f)
			fmt.Fprintf(h, "%s\n%s\n", f, b)
		}
	}
	if len(mirrors) == 0 {
		t.Fatal("no apt sources on this machine (/etc/apt/sources.list*) to make a clean Debian from")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "bootops", "mmdebstrap")
	path := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:16]+".tar")
	if _, err := os.Stat(path); err == nil {
		t.Logf("clean Debian from the cache: %s", path)
		return path
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tmp := strings.TrimSuffix(path, ".tar") + ".part.tar" // mmdebstrap picks the format by the name
	args := []string{"--variant=" + base.variant, "--include=" + strings.Join(base.include, ","),
		// apt's lists and cache stay: the package's dependencies are
		// installed from them, offline.
		"--skip=cleanup/apt",
		"--customize-hook=chroot \"$1\" apt-get install --download-only -y --no-install-recommends " + strings.Join(depends, " "),
		base.suite, tmp}
	cmd := exec.Command("mmdebstrap", append(args, mirrors...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		t.Fatalf("mmdebstrap: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	t.Logf("made the clean Debian %s in %s", path, time.Since(start).Round(time.Second))
	return path
}

// unpack extracts the tarball into root and mounts /proc and /dev there
// until the test ends.
func unpack(t *testing.T, tarball, root string) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "tar", "-xf", tarball, "-C", root)
	mustRun(t, "mount", "-t", "proc", "proc", filepath.Join(root, "proc"))
	t.Cleanup(func() { exec.Command("umount", "-l", filepath.Join(root, "proc")).Run() })
	mustRun(t, "mount", "--bind", "/dev", filepath.Join(root, "dev"))
	t.Cleanup(func() { exec.Command("umount", "-l", filepath.Join(root, "dev")).Run() })
}

// chroot runs commands in the clean system.
type chroot struct {
	t    *testing.T
	root string
}

func (c *chroot) command(ctx context.Context, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "chroot", append([]string{c.root}, argv...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"}
	return cmd
}

// try runs argv and returns its output (stdout and stderr).
func (c *chroot) try(argv ...string) (string, error) {
	out, err := c.command(context.Background(), argv...).CombinedOutput()
	return string(out), err
}

// run runs argv, fails the test if it fails, and returns its trimmed output.
func (c *chroot) run(argv ...string) string {
	c.t.Helper()
	out, err := c.try(argv...)
	if err != nil {
		c.t.Fatalf("in the clean Debian: %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return strings.TrimSpace(out)
}

func (c *chroot) read(p string) string {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.root, p))
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b)
}

func (c *chroot) write(p, s string) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.root, p), []byte(s), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

func (c *chroot) exists(p string) bool {
	_, err := os.Lstat(filepath.Join(c.root, p))
	return err == nil
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRun(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
