package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootops/bootops/internal/testutil"
)

// importRun runs `bootops import ARGS…` as run does, whether or not main
// lists the command yet.
func importRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	c := importCmd()
	err := c.run(context.Background(), e, args)
	var ue usageError
	code := exitOK
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, &ue):
		fmt.Fprintf(&errb, "bootops import: %s\n", ue.msg)
		code = exitUsage
	case errors.Is(err, errSilent):
		code = exitInvalid
	default:
		fmt.Fprintf(&errb, "bootops import: %v\n", err)
		code = exitInvalid
	}
	return code, out.String(), errb.String()
}

func TestImportHelp(t *testing.T) {
	code, out, _ := importRun(t, "--help")
	if code != 0 || !strings.Contains(out, "Example:\n  bootops import") {
		t.Errorf("--help: exit %d, %q", code, out)
	}
	for _, args := range [][]string{nil, {"xml"}, {"csv", "f.csv"}, {"eim-profile"}} {
		if code, _, _ := importRun(t, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// eimDir holds EIM-format samples of our own (interop/testdata/eim).
const eimDir = "../../interop/testdata/eim"

// importRepo is a repository with site s1, a Micro-OS and the EIM sample
// profiles imported with `bootops import eim-profile`.
func importRepo(t *testing.T) string {
	t.Helper()
	samples, _ := filepath.Glob(filepath.Join(eimDir, "os-profile-*.yaml"))
	if len(samples) != 2 {
		t.Fatalf("EIM samples in %s: %v, want 2", eimDir, samples)
	}
	dir := t.TempDir()
	write(t, dir, "sites/s1/site.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: s1\nnetwork:\n  serverAddress: 198.18.0.1\ndefaultProfile: microvisor-standalone\n")
	write(t, dir, "microos/default.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\n"+
		"kernel:\n  url: http://files.example/vmlinuz\n  sha256: "+strings.Repeat("a", 64)+"\n"+
		"initrd:\n  url: http://files.example/initrd.img\n  sha256: "+strings.Repeat("b", 64)+"\n")
	args := append([]string{"import", "eim-profile", "-o", filepath.Join(dir, "profiles")}, samples...)
	code, out, stderr := importRun(t, args[1:]...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("imported %d profiles", len(samples))) {
		t.Fatalf("import eim-profile: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if !strings.Contains(stderr, "os-profile-microvisor-standalone.yaml: no equivalent for: metadata.standalone-node, provider, osPackageManifestURL, osExistingCvesURL, osFixedCvesURL, securityFeature, platformBundle\n") {
		t.Errorf("stderr does not list the fields without equivalent: %q", stderr)
	}
	return dir
}

func TestImportEIMProfilesCompile(t *testing.T) {
	dir := importRepo(t)
	code, out, stderr := bootops(t, nil, "validate", dir)
	if code != 0 || !strings.Contains(out, "2 profiles") {
		t.Fatalf("validate: exit %d, %q, %q", code, out, stderr)
	}
	data, err := os.ReadFile(filepath.Join(dir, "profiles/ubuntu-24-04-lts-generic.yaml"))
	if err != nil || !strings.Contains(string(data), "type: mutable") || !strings.Contains(string(data), `version: "24.04"`) {
		t.Errorf("ubuntu profile: %v\n%s", err, data)
	}
	if _, err := compileDir(&env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, dir); err != nil {
		t.Fatal(err)
	}
}

func TestImportEIMProfileMissingURL(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p.yaml", "appVersion: apps/v1\nspec:\n  type: OS_TYPE_MUTABLE\n  profileName: p\n  osImageSha256: "+strings.Repeat("a", 64)+"\n")
	code, _, stderr := importRun(t, "eim-profile", "-o", filepath.Join(dir, "out"), filepath.Join(dir, "p.yaml"))
	if code != 1 || !strings.Contains(stderr, "p.yaml:3: spec.osImageUrl: missing") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Errorf("output written on error: %v", err)
	}
}

func TestImportCSV(t *testing.T) {
	dir := importRepo(t)
	csv := filepath.Join(t.TempDir(), "b.csv")
	write(t, filepath.Dir(csv), "b.csv", "\uFEFFSerial,UUID,OSProfile,Site,Secure,RemoteUser,Metadata\r\n"+
		"SN0A1B2C3D,4c4c4544-0041-3110-8042-b4c04f4e3232,microvisor-standalone,s1,false,,line=a&rack=r1\r\n"+
		"SN0A1B2C3E,,ubuntu-24.04-lts-generic,,true,localaccount-1,\"line=a;rack=r1,r2\"\r\n")
	nodes := filepath.Join(dir, "sites/s1/nodes")
	code, out, stderr := importRun(t, "csv", csv, "--site", "s1", "--repo", dir)
	if code != 0 || out != "imported 2 nodes into "+nodes+" (0 unchanged)\n" {
		t.Fatalf("import: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if !strings.Contains(stderr, "column Secure has no equivalent in bootops: ignored for 2 rows") ||
		!strings.Contains(stderr, "column RemoteUser has no equivalent in bootops: ignored for 1 rows") {
		t.Errorf("stderr %q", stderr)
	}
	if code, out, stderr := bootops(t, nil, "validate", dir); code != 0 || !strings.Contains(out, "2 nodes") {
		t.Fatalf("validate: exit %d, %q, %q", code, out, stderr)
	}
	before := tree(t, dir)

	// Re-importing changes nothing.
	code, out, stderr = importRun(t, "csv", csv, "--site", "s1", "--repo", dir)
	if code != 0 || out != "imported 2 nodes into "+nodes+" (2 unchanged)\n" {
		t.Fatalf("re-import: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	assertTree(t, dir, before)

	// A new file clashing with the repository: every error, nothing written.
	write(t, filepath.Dir(csv), "c.csv", "Serial,UUID,OSProfile,Site,Secure,RemoteUser,Metadata,MAC\n"+
		"NEW-1,,,,,,,52:54:00:00:00:01\n"+
		"NEW-2,4C4C4544-0041-3110-8042-B4C04F4E3232,,,,,,\n"+
		"NEW-3,,nope,,,,,\n"+
		"NEW-4,,,,,,,52:54:00:00:00:01\n")
	c2 := filepath.Join(filepath.Dir(csv), "c.csv")
	code, out, stderr = importRun(t, "csv", c2, "--site", "s1", "--repo", dir)
	want := c2 + ":3: uuid 4C4C4544-0041-3110-8042-B4C04F4E3232 also on node sn0a1b2c3d at sites/s1/nodes/sn0a1b2c3d.yaml:1\n" +
		c2 + ":4: OSProfile \"nope\": no profile \"nope\" in the repository (import it with `bootops import eim-profile`)\n" +
		c2 + ":5: mac 52:54:00:00:00:01 also on line 2\n" +
		"3 errors in " + c2 + ": nothing written\n"
	if code != 1 || out != "" || stderr != want {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant:\n%s", code, out, stderr, want)
	}
	assertTree(t, dir, before)
}

func assertTree(t *testing.T, dir string, want map[string][]byte) {
	t.Helper()
	got := tree(t, dir)
	if len(got) != len(want) {
		t.Errorf("%d files, want %d", len(got), len(want))
	}
	for k, v := range want {
		if string(got[k]) != string(v) {
			t.Errorf("%s changed", k)
		}
	}
}

func TestImportCSVHundredThousand(t *testing.T) {
	testutil.Slow(t)
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big.csv"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "Serial,UUID,OSProfile,Site,Secure,RemoteUser,Metadata,MAC")
	const n = 100_000
	for i := range n {
		fmt.Fprintf(f, "SN%08d,%08x-0000-0000-0000-%012x,,,false,,rack=r%d,52:54:%02x:%02x:%02x:%02x\n", i, i, i, i%40, i>>24&255, i>>16&255, i>>8&255, i&255)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "nodes")
	code, stdout, stderr := importRun(t, "csv", filepath.Join(dir, "big.csv"), "--site", "s1", "--repo", filepath.Join(dir, "none"), "-o", out)
	if code != 0 || stdout != fmt.Sprintf("imported %d nodes into %s (0 unchanged)\n", n, out) {
		t.Fatalf("exit %d, stdout %q, stderr %.500s", code, stdout, stderr)
	}
	ents, err := os.ReadDir(out)
	if err != nil || len(ents) != n {
		t.Fatalf("%d files, %v", len(ents), err)
	}
}

// docs/interop.md's spreadsheet walk-through, run as written there: every
// output line it shows after a command is what the command printed.
func TestReadmeImportCSV(t *testing.T) {
	readme, err := os.ReadFile("../../docs/interop.md")
	if err != nil {
		t.Fatal(err)
	}
	block := readmeBlock(t, string(readme), "## A delivery of machines from a spreadsheet\n")
	dir := walkthroughDir(t)
	cmd := exec.Command("bash", "-c", block)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("walk-through: %v\n%s", err, out)
	}
	got := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		got[strings.TrimRight(l, " ")] = true
	}
	shown, after := 0, false
	for _, line := range strings.Split(block, "\n") {
		switch {
		case strings.HasPrefix(line, "bootops ") || strings.HasPrefix(line, "cat sites/"):
			after = true
		case after && strings.HasPrefix(line, "# "):
			shown++
			if want := strings.TrimPrefix(line, "# "); !got[want] {
				t.Errorf("README shows %q; the walk-through printed:\n%s", want, out)
			}
		default:
			after = false
		}
	}
	if shown < 15 {
		t.Fatalf("README shows only %d output lines", shown)
	}
}
