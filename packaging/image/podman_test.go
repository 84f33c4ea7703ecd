//go:build image

package image

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/bootops/bootops/internal/testutil"
)

// podman runs Debian's podman as root with all its state in dir: vfs
// storage (no overlay mounts to leave behind), runc (this machine's
// hybrid cgroup v1 mounts make crun refuse: "cgroups in hybrid mode not
// supported"), and no event log.
type podman struct {
	t    *testing.T
	args []string
}

func newPodman(t *testing.T, dir string) *podman {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("podman: %v (make image-test installs it: bash test/deps.sh podman runc)", err)
	}
	return &podman{t: t, args: []string{
		"--runtime", "runc", "--storage-driver", "vfs", "--events-backend", "none",
		"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"), "--tmpdir", filepath.Join(dir, "tmp"),
	}}
}

func (p *podman) cmd(args ...string) (string, error) {
	out, err := exec.Command("podman", append(slices.Clone(p.args), args...)...).CombinedOutput()
	return string(out), err
}

func (p *podman) must(args ...string) string {
	p.t.Helper()
	out, err := p.cmd(args...)
	if err != nil {
		p.t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// limits: the shell here lacks CAP_SYS_RESOURCE, and podman's default
// limits, even limits equal to the shell's own, were refused by the
// runtime ("setrlimit `RLIMIT_NOFILE`: Operation not permitted"); lower
// ones always can be set.
var limits = []string{"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"}

func runPodman(t *testing.T, tmp, archive, configHex string) {
	p := newPodman(t, filepath.Join(tmp, "podman"))
	// podman keeps a blob cache in /var/lib/containers/cache whatever
	// --root says; what this test made there goes with it.
	_, err := os.Stat("/var/lib/containers")
	made := errors.Is(err, fs.ErrNotExist)
	var names []string
	t.Cleanup(func() {
		for _, n := range names {
			p.cmd("rm", "-f", "-t", "0", n)
		}
		p.cmd("rmi", "-a", "-f")
		if made {
			os.RemoveAll("/var/lib/containers")
		}
	})

	start := time.Now()
	p.must("load", "-q", "-i", archive)
	t.Logf("podman load: %v", time.Since(start).Round(time.Millisecond))
	if id := strings.TrimSpace(p.must("image", "inspect", "--format", "{{.Id}}", "localhost/bootops:test")); id != configHex {
		t.Errorf("podman's image id %s, want the config's digest %s", id, configHex)
	}

	// The demo repository, with stand-ins for the Micro-OS files that make
	// microos builds (the daemon checks they exist, not what they are).
	repo := filepath.Join(tmp, "repo")
	if err := os.CopyFS(repo, os.DirFS(filepath.Join(repoRoot, "sites"))); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"microos/vmlinuz", "microos/initrd.img"} {
		if err := os.WriteFile(filepath.Join(repo, f), []byte("stand-in\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	// An operator with the read role, by --operators-file: the status
	// API answers it (and nobody without a credential).
	ops := t.TempDir()
	const reader = "image-test-reader-token-0123456789"
	if err := os.WriteFile(filepath.Join(ops, "operators"), []byte("read "+reader+" image-test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ops, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreePort(t)
	name := fmt.Sprintf("bootops-image-test-%d", os.Getpid())
	names = append(names, name)
	start = time.Now()
	args := append([]string{"run", "-d", "--name", name, "--network", "host"}, limits...)
	p.must(append(args, "-v", repo+":/srv/bootops:ro", "-v", ops+":/etc/bootops/operators:ro", "localhost/bootops:test",
		"serve", "--config", "/etc/bootops/serve.yaml", "--http-addr", addr, "--dhcp", "off", "--tftp-addr", "",
		"--operators-file", "/etc/bootops/operators/operators")...)
	st := status(t, p, name, "http://"+addr+"/api/v1/status", reader)
	if resp, err := http.Get("http://" + addr + "/api/v1/status"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the status API without a credential: %v %v, want 401", resp, err)
	}
	t.Logf("status API answered %v after podman run", time.Since(start).Round(time.Millisecond))
	var keys []string
	for _, n := range st.Nodes {
		keys = append(keys, n.Key)
	}
	slices.Sort(keys)
	if want := []string{"lab/vm-mac", "lab/vm-serial", "lab/vm-uuid"}; !slices.Equal(keys, want) {
		t.Errorf("status names nodes %q, want %q", keys, want)
	}
	if st.Source.URL != "dir:/srv/bootops" {
		t.Errorf("status source %q, want dir:/srv/bootops (the image's serve.yaml)", st.Source.URL)
	}
	pid := strings.TrimSpace(p.must("inspect", "--format", "{{.State.Pid}}", name))
	if s, err := os.ReadFile("/proc/" + pid + "/status"); err != nil || !strings.Contains(string(s), "\nUid:\t65532\t65532\t65532\t65532\n") {
		t.Errorf("the daemon (pid %s) does not run as 65532: %v\n%s", pid, err, s)
	}

	// TFTP's port 69 needs CAP_NET_BIND_SERVICE and nothing else; in a
	// network namespace of podman's own, so port 69 on this machine is
	// left alone.
	tftp := func(caps ...string) string {
		n := fmt.Sprintf("%s-tftp%d", name, len(caps))
		names = append(names, n)
		args := append([]string{"run", "-d", "--name", n, "--network", "none"}, limits...)
		args = append(append(args, caps...), "-v", repo+":/srv/bootops:ro", "localhost/bootops:test",
			"serve", "--config", "/etc/bootops/serve.yaml", "--http-addr", "127.0.0.1:8080", "--dhcp", "off", "--tftp-addr", "127.0.0.1:69")
		p.must(args...)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			logs, _ := p.cmd("logs", n)
			if strings.Contains(logs, `"msg":"serving"`) || strings.Contains(logs, "bootops serve:") {
				return logs
			}
		}
		logs, _ := p.cmd("logs", n)
		t.Fatalf("%s: neither serving nor an error in 30 s:\n%s", n, logs)
		return ""
	}
	if logs := tftp(); !strings.Contains(logs, "listen on 127.0.0.1:69 (--tftp-addr or BOOTOPS_TFTP_ADDR): permission denied") {
		t.Errorf("without CAP_NET_BIND_SERVICE, want TFTP on 69 refused:\n%s", logs)
	}
	if logs := tftp("--cap-add", "NET_BIND_SERVICE"); !strings.Contains(logs, `"tftp":"127.0.0.1:69"`) {
		t.Errorf("with CAP_NET_BIND_SERVICE, want TFTP served on 69:\n%s", logs)
	}
}

type statusDoc struct {
	Source struct {
		URL string `json:"url"`
	} `json:"source"`
	Nodes []struct {
		Key string `json:"key"`
	} `json:"nodes"`
}

// status polls url until it answers 200 with JSON, for a minute at most.
func status(t *testing.T, p *podman, name, url, token string) statusDoc {
	t.Helper()
	var last error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		var st statusDoc
		if err == nil {
			err = json.Unmarshal(body, &st)
		}
		if err == nil {
			return st
		}
		last = err
	}
	logs, _ := p.cmd("logs", name)
	t.Fatalf("GET %s: %v\ncontainer's logs:\n%s", url, last, logs)
	return statusDoc{}
}

// readFile is a file's contents in the image's flattened filesystem.
func readFile(t *testing.T, img v1.Image, path string) string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s: not in the image", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if "/"+strings.TrimPrefix(h.Name, "/") == path {
			var b bytes.Buffer
			if _, err := io.Copy(&b, tr); err != nil {
				t.Fatal(err)
			}
			return b.String()
		}
	}
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	return runEnv(t, dir, nil, name, args...)
}

func runEnv(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}
