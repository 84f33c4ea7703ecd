//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	"github.com/rogpeppe/go-internal/txtar"

	"github.com/bootops/bootops/internal/testutil"
)

// vars are the values of a repository's placeholders, by name.
type vars map[string]string

// writeRepo writes the archives testdata/<name>.txtar into dir, in the
// order given: a file of a later archive replaces an earlier one's, so a
// test's archive lays its site, nodes and profiles over a base-*.txtar.
// Each file's body is a text/template: {{.Name}} stands for v["Name"], a
// value only the run knows (an image's sha256, a TPM's EK hash); a
// placeholder v lacks fails the test, so nothing is written half filled
// in. An archive's comment says which test serves it and what its
// placeholders are. It returns dir.
func writeRepo(t *testing.T, dir string, v vars, archives ...string) string {
	t.Helper()
	for _, name := range archives {
		path := filepath.Join("testdata", name+".txtar")
		a, err := txtar.ParseFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range a.Files {
			tmpl, err := template.New(path + ":" + f.Name).Option("missingkey=error").Parse(string(f.Data))
			if err != nil {
				t.Fatal(err)
			}
			var body strings.Builder
			if err := tmpl.Execute(&body, v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			testutil.WriteFile(t, dir, f.Name, body.String())
		}
	}
	return dir
}

// testRepo is a repository whose Micro-OS is the Debian kernel and the
// test initramfs (base-testinit) with archive laid over it.
func testRepo(t *testing.T, archive string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	os.MkdirAll(filepath.Join(dir, "microos"), 0o755)
	k, err := os.ReadFile(kernel(t))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "microos/vmlinuz"), k, 0o644)
	initramfs(t, filepath.Join(dir, "microos/initrd.img"))
	return writeRepo(t, dir, nil, "base-testinit", archive)
}

// images4 and images6 are the image server's URL on each family's LAN
// (test/e2e/imageserver on port 8081).
const (
	images4 = "http://198.18.0.1:8081"
	images6 = "http://[" + server6 + "]:8081"
)

// provisionRepo is a repository whose Micro-OS is the real one (Debian's
// kernel, the agent) and whose profile installs the image of sha256
// imageSHA from images (images4, images6): base-provision with archive
// laid over it, v's values filling the placeholders beside those two.
func provisionRepo(t *testing.T, images, imageSHA, archive string, v vars) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	run(t, bootops, "microos", "build", "--kernel", kernel(t), "--agent", agentBin, "-o", filepath.Join(dir, "microos"))
	all := vars{"Images": images, "ImageSHA": imageSHA}
	for k, val := range v {
		all[k] = val
	}
	return writeRepo(t, dir, all, "base-provision", archive)
}

// placeholderRepo writes a repository of placeholder Micro-OS files
// (base-placeholder) with archive over it, and a folder of placeholder
// iPXE builds (ipxe.efi and undionly.kpxe, each the text "placeholder"),
// for daemons no machine boots from.
func (l *lab) placeholderRepo(archive string, v vars) (repo, ipxe string) {
	repo = writeRepo(l.t, filepath.Join(l.dir, "repo"), v, "base-placeholder", archive)
	ipxe = filepath.Join(l.dir, "ipxe")
	os.MkdirAll(ipxe, 0o755)
	for _, f := range []string{"undionly.kpxe", "ipxe.efi"} {
		os.WriteFile(filepath.Join(ipxe, f), []byte("placeholder"), 0o644)
	}
	return repo, ipxe
}
