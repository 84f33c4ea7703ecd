//go:build image

// The image end to end (make image-test, root): build it twice and compare
// the digests, read its config and files, then run it with podman from
// Debian and ask the status API of the demo repository's daemon.
package image

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

const repoRoot = "../.."

func TestImage(t *testing.T) {
	tmp := t.TempDir()
	epoch := strings.TrimSpace(run(t, repoRoot, "git", "log", "-1", "--format=%ct"))
	revision := strings.TrimSpace(run(t, repoRoot, "git", "rev-parse", "HEAD"))

	// The binaries as make image builds them, and mkimage.
	start := time.Now()
	static := []string{"build", "-trimpath", "-ldflags", "-s -w -buildid="}
	in := filepath.Join(tmp, "in")
	runEnv(t, repoRoot, []string{"CGO_ENABLED=0"}, "go", append(static, "-o", filepath.Join(in, "bootops"), "./cmd/bootops")...)
	runEnv(t, repoRoot, []string{"CGO_ENABLED=0"}, "go", append(static, "-o", filepath.Join(in, "bootops-agent"), "./cmd/bootops-agent")...)
	mkimage := filepath.Join(tmp, "mkimage")
	run(t, repoRoot, "go", "build", "-o", mkimage, "./packaging/image/mkimage")
	t.Logf("binaries built in %v", time.Since(start).Round(time.Millisecond))

	build := func(in, out string) (string, time.Duration) {
		start := time.Now()
		runEnv(t, repoRoot, []string{"SOURCE_DATE_EPOCH=" + epoch}, mkimage,
			"-bootops", filepath.Join(in, "bootops"), "-agent", filepath.Join(in, "bootops-agent"),
			"-o", out, "-version", "test", "-revision", revision)
		took := time.Since(start)
		d, err := os.ReadFile(filepath.Join(out, "digest"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(d)), took
	}
	out := filepath.Join(tmp, "out")
	digest, took := build(in, out)
	t.Logf("image %s written in %v", digest, took.Round(time.Millisecond))

	// Again, from copies of the inputs with other modes and times: the
	// image must not see either.
	again := filepath.Join(tmp, "again")
	for _, n := range []string{"bootops", "bootops-agent"} {
		b, err := os.ReadFile(filepath.Join(in, n))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(again, n)
		if err := os.MkdirAll(again, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, time.Unix(1, 0), time.Unix(1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	digest2, took2 := build(again, filepath.Join(tmp, "out2"))
	t.Logf("built again in %v: %s", took2.Round(time.Millisecond), digest2)
	if digest2 != digest {
		t.Fatalf("the same commit gave two digests: %s and %s", digest, digest2)
	}
	for _, f := range []string{"bootops.tar", "oci/index.json"} {
		a, _ := os.ReadFile(filepath.Join(out, f))
		b, _ := os.ReadFile(filepath.Join(tmp, "out2", f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs between the two builds (or is empty: %d bytes)", f, len(a))
		}
	}
	if fi, err := os.Stat(filepath.Join(out, "bootops.tar")); err == nil {
		t.Logf("docker archive: %d bytes", fi.Size())
	}

	img := readLayout(t, filepath.Join(out, "oci"), digest)
	checkConfig(t, img, epoch, revision)
	checkFiles(t, img, epoch)

	cfgDigest, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	runPodman(t, tmp, filepath.Join(out, "bootops.tar"), cfgDigest.Hex)
}

func readLayout(t *testing.T, dir, digest string) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := v1.NewHash(digest)
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(h)
	if err != nil {
		t.Fatalf("%s: the image %s: %v", dir, digest, err)
	}
	return img
}

func checkConfig(t *testing.T, img v1.Image, epoch, revision string) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (nonroot)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/bin/bootops"}) || !slices.Equal(c.Cmd, []string{"serve", "--config", "/etc/bootops/serve.yaml"}) {
		t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
	}
	if _, ok := c.Volumes["/var/lib/bootops"]; !ok {
		t.Errorf("volumes %v: no /var/lib/bootops", c.Volumes)
	}
	for _, p := range []string{"67/udp", "69/udp", "8080/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("exposed ports %v: no %s", c.ExposedPorts, p)
		}
	}
	if got := c.Labels["org.opencontainers.image.revision"]; got != revision {
		t.Errorf("revision label %q, want %s", got, revision)
	}
	if c.Labels["org.opencontainers.image.source"] == "" || c.Labels["org.opencontainers.image.version"] != "test" {
		t.Errorf("labels %v", c.Labels)
	}
	if got := strconv.FormatInt(cf.Created.Unix(), 10); got != epoch {
		t.Errorf("created %v (%s), want the commit's time %s", cf.Created, got, epoch)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
}

func checkFiles(t *testing.T, img v1.Image, epoch string) {
	entries, err := Files(img)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]Entry{}
	var size int64
	for _, e := range entries {
		byPath[e.Path] = e
		size += e.Size
		if got := strconv.FormatInt(e.ModTime.Unix(), 10); got != epoch {
			t.Errorf("%s: mtime %v, want %s", e.Path, e.ModTime, epoch)
		}
		if e.Type != '0' && e.Type != '5' {
			t.Errorf("%s: tar type %q: only files and folders belong in the image", e.Path, e.Type)
		}
	}
	t.Logf("%d entries, %d bytes of files", len(entries), size)
	for p, mode := range map[string]int64{
		"/usr/bin/bootops": 0o755, "/usr/lib/bootops/bootops-agent": 0o755,
		"/usr/lib/ipxe/ipxe.efi": 0o644, "/usr/lib/ipxe/undionly.kpxe": 0o644,
		"/usr/lib/shim/shimx64.efi.signed": 0o644, "/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed": 0o644,
		"/etc/ssl/certs/ca-certificates.crt": 0o644, "/etc/passwd": 0o644, "/etc/group": 0o644,
		"/etc/bootops/serve.yaml": 0o644, "/tmp": 0o1777, "/var/lib/bootops": 0o700,
	} {
		e, ok := byPath[p]
		switch {
		case !ok:
			t.Errorf("%s: not in the image", p)
		case e.Mode != mode:
			t.Errorf("%s: mode %o, want %o", p, e.Mode, mode)
		case e.Type == '0' && e.Size == 0:
			t.Errorf("%s: empty", p)
		}
	}
	if e := byPath["/var/lib/bootops"]; e.UID != 65532 || e.GID != 65532 {
		t.Errorf("/var/lib/bootops owned by %d:%d, want the image's user 65532:65532", e.UID, e.GID)
	}
	// Distroless: nothing to run but bootops.
	for _, p := range []string{"/bin", "/sbin", "/bin/sh", "/usr/bin/sh", "/bin/bash", "/bin/busybox", "/usr/bin/apt", "/usr/bin/dpkg", "/var/lib/dpkg"} {
		if _, ok := byPath[p]; ok {
			t.Errorf("%s is in the image: no shell, no package manager", p)
		}
	}
	for _, e := range entries {
		if e.Type == '0' && e.Mode&0o111 != 0 && e.Path != "/usr/bin/bootops" && e.Path != "/usr/lib/bootops/bootops-agent" {
			t.Errorf("%s: executable (%o); only bootops and its agent are", e.Path, e.Mode)
		}
	}
	passwd := readFile(t, img, "/etc/passwd")
	if !strings.Contains(passwd, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user:\n%s", passwd)
	}
}
