//go:build e2e

package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// The test OS image: a GPT disk with one ext4 partition (at 1 MiB, 32 MiB
// long) holding /etc/bootops-test-image.
const (
	imagePartStart = 1 << 20
	imagePartSize  = 32 << 20
	imageMarker    = "bootops test image v1\n"
)

// osImage builds the image as dir/test.raw.gz and returns its sha256 and
// the sha256 of what the agent writes and leaves as it is outside the
// partition: the protective MBR's boot code and the primary GPT's
// partition entries (the headers change: the agent moves the backup to
// the disk's end; the cloud-init action writes into the partition, so
// only its files can be checked there).
func osImage(t *testing.T, dir string) (gzSHA, rawSHA string) {
	t.Helper()
	gzSHA, b := buildImage(t, dir, "test.raw", imageSize, "start=2048, size=65536, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\n", nil)
	return gzSHA, outsidePartition(b)
}

// buildImage writes dir/NAME.gz: a GPT disk image of size bytes with the
// partitions of table (sfdisk's syntax), the test's ext4 partition at
// 1 MiB, and whatever fill (if not nil) writes into it then. It returns
// the file's sha256 and the raw image.
func buildImage(t *testing.T, dir, name string, size int64, table string, fill func([]byte)) (string, []byte) {
	t.Helper()
	root := filepath.Join(dir, "rootfs")
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/bootops-test-image"), []byte(imageMarker), 0o644)
	part := filepath.Join(dir, "part.img")
	run(t, "mkfs.ext4", "-q", "-F", "-L", "testroot", "-E", "root_owner=0:0", "-d", root, part, "32M")
	raw := filepath.Join(dir, name)
	f, err := os.Create(raw)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size) // room for the backup GPT
	f.Close()
	cmd := exec.Command("sfdisk", "-q", raw)
	cmd.Stdin = strings.NewReader("label: gpt\n" + table)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(raw)
	p, _ := os.ReadFile(part)
	copy(b[imagePartStart:], p)
	if fill != nil {
		fill(b)
	}
	os.WriteFile(raw, b, 0o644)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(b)
	zw.Close()
	os.WriteFile(filepath.Join(dir, name+".gz"), gz.Bytes(), 0o644)
	gs := sha256.Sum256(gz.Bytes())
	return hex.EncodeToString(gs[:]), b
}

// imageSize is the raw image's length.
const imageSize = imagePartStart + imagePartSize + 1<<20

func outsidePartition(b []byte) string {
	h := sha256.New()
	h.Write(b[:446])          // the MBR's boot code
	h.Write(b[1024 : 34*512]) // the primary partition entries (LBA 2–33)
	return hex.EncodeToString(h.Sum(nil))
}

// checkDisk inspects a provisioned disk on the host: the written region's
// checksum, the partition table, the image's file and the cloud-init seed.
func checkDisk(t *testing.T, path, rawSHA string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if outsidePartition(b) != rawSHA {
		t.Errorf("%s: the written region's sha256 (outside the partition) is not the image's", path)
	}
	// The backup GPT moved to the disk's end: nothing for sfdisk to fix.
	if out := run(t, "sfdisk", "--verify", path); !strings.Contains(out, "No errors detected") || strings.Contains(out, "not on the end") {
		t.Errorf("%s: sfdisk --verify:\n%s", path, out)
	}
	table := run(t, "sfdisk", "-d", path)
	if !strings.Contains(table, "label: gpt") || !strings.Contains(table, "start=        2048, size=       65536") {
		t.Errorf("%s: partition table:\n%s", path, table)
	}
	part := path + ".p1"
	os.WriteFile(part, b[imagePartStart:imagePartStart+imagePartSize], 0o644)
	if got := run(t, "debugfs", "-R", "cat /etc/bootops-test-image", part); !strings.Contains(got, strings.TrimSpace(imageMarker)) {
		t.Errorf("%s: /etc/bootops-test-image: %q", path, got)
	}
	seed := run(t, "debugfs", "-R", "ls -l /var/lib/cloud/seed/nocloud", part)
	for _, f := range []string{"user-data", "meta-data"} {
		if !strings.Contains(seed, f) {
			t.Errorf("%s: cloud-init seed lacks %s:\n%s", path, f, seed)
		}
	}
}

// debianImage is a real bootable Debian 12 image (BIOS and UEFI, cloud-init)
// that test/image/build-image.sh makes from Debian's packages: built once
// and kept under the user's cache directory, keyed by the script's hash
// (test/image/cached.sh). It returns the folder holding debian.raw.gz and
// that file's sha256. It is the longest step of a fresh machine's run:
// `make test` starts it before its first stage, and TestMain before any
// test (waiting for that head start when there is one); the tests that
// need no image go on beside it.
func debianImage(t *testing.T) (dir, gzSHA string) {
	t.Helper()
	img := startDebianImage()
	<-img.done
	if img.err != nil {
		t.Fatal(img.err)
	}
	if img.built > 0 {
		t.Logf("timing: the Debian test image ready after %s (built, or waited for, beside the other tests; cached in %s)", img.built.Round(time.Second), img.dir)
	}
	return img.dir, img.sha
}

// imageBuild is the Debian image's build, started once.
type imageBuild struct {
	done     chan struct{}
	dir, sha string
	built    time.Duration // 0 when it came from the cache
	err      error
}

var (
	imageOnce sync.Once
	image     *imageBuild
)

func startDebianImage() *imageBuild {
	imageOnce.Do(func() {
		image = &imageBuild{done: make(chan struct{})}
		go func() {
			defer close(image.done)
			image.dir, image.sha, image.built, image.err = buildDebianImage()
		}()
	})
	return image
}

func buildDebianImage() (dir, gzSHA string, built time.Duration, err error) {
	script, err := filepath.Abs("../image/cached.sh")
	if err != nil {
		return "", "", 0, err
	}
	start := time.Now()
	cmd := exec.Command("bash", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// Killed with this process, like every helper of the tests.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.Output()
	if err != nil {
		return "", "", 0, fmt.Errorf("build the Debian test image (%s): %v\n%s", script, err, testutil.Tail(stderr.String(), 40))
	}
	dir = strings.TrimSpace(string(out))
	if d := time.Since(start); d > 5*time.Second { // built, or waited for `make test`'s head start
		built = d
	}
	sum, err := fileDigest(filepath.Join(dir, "debian.raw.gz"))
	return dir, sum, built, err
}

// fileDigest is the sha256 of a file's bytes, in hex, read as a stream.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
