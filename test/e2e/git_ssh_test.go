//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// TestGitOverSSH follows a repository over ssh: OpenSSH's sshd listens on
// 127.0.0.1:22 inside a namespace of the test's own (so scp-style URLs,
// which cannot name a port, work), and `bootops serve` runs there too.
func TestGitOverSSH(t *testing.T) {
	t.Parallel()
	l := newLabNS(t, false)
	for _, bin := range []string{"/usr/sbin/sshd", "ssh-keygen", "git"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing: run `make e2e`, which installs it", bin)
		}
	}
	dir := l.dir
	keygen := func(name string) {
		run(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", filepath.Join(dir, name))
	}
	keygen("host")
	keygen("other-host")
	keygen("client")
	keygen("stranger")
	pub := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name+".pub"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("authorized_keys", pub("client")+"\n")
	knownHosts := write("known_hosts", "127.0.0.1 "+pub("host")+"\n")
	wrongHosts := write("wrong_hosts", "127.0.0.1 "+pub("other-host")+"\n")
	cfg := write("sshd_config", strings.Join([]string{
		"ListenAddress 127.0.0.1:22",
		"HostKey " + filepath.Join(dir, "host"),
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"StrictModes no",
		"UsePAM no",
	}, "\n")+"\n")
	os.MkdirAll("/run/sshd", 0o755) // sshd's privilege separation folder
	l.start("sshd", "ip", "netns", "exec", l.lan, "/usr/sbin/sshd", "-D", "-e", "-f", cfg)

	// The repository: a bare one on disk, served by sshd's git-upload-pack.
	work := testRepo(t, "git-ssh")
	bare := filepath.Join(dir, "fleet.git")
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("-C", work, "init", "-q", "-b", "main")
	git("-C", work, "add", "-A")
	git("-C", work, "commit", "-q", "-m", "over ssh")
	git("init", "-q", "--bare", "-b", "main", bare)
	git("-C", work, "push", "-q", bare, "main")
	sha := git("-C", work, "rev-parse", "HEAD")
	waitListening(t, l.lan, "127.0.0.1:22")

	for i, tc := range []struct {
		url, key, hosts string
		want            string // "" → served
	}{
		{"ssh://root@127.0.0.1/" + strings.TrimPrefix(bare, "/"), "client", knownHosts, ""},
		{"root@127.0.0.1:" + bare, "client", knownHosts, ""},
		{"root@127.0.0.1:" + bare, "client", wrongHosts, "key mismatch"},
		{"root@127.0.0.1:" + bare, "stranger", knownHosts, "unable to authenticate"},
	} {
		addr := "127.0.0.1:" + string(rune('0'+i)) + "081"
		name := "bootops-ssh-" + string(rune('0'+i))
		cmd := l.start(name, "ip", "netns", "exec", l.lan, bootops, "serve", "--open-reads", "--source", tc.url, "--git-ssh-key", filepath.Join(dir, tc.key),
			"--git-known-hosts", tc.hosts, "--state-dir", filepath.Join(dir, name), "--http-addr", addr, "--dhcp", "off", "--tftp-addr", "", "--interval", "500ms")
		timeout := "30s"
		if tc.want != "" {
			timeout = "3s" // it will not be served: wait for a few tries
		}
		out, err := exec.Command("ip", "netns", "exec", l.lan, bootops, "status", "--server", "http://"+addr, "--wait", sha, "--timeout", timeout).CombinedOutput()
		if tc.want == "" {
			if err != nil || !strings.Contains(string(out), "serving:  "+sha+` "over ssh"`) {
				t.Errorf("%s: %v\n%s\n%s", tc.url, err, out, testutil.Tail(l.log(name), 20))
			}
		} else {
			status, _ := exec.Command("ip", "netns", "exec", l.lan, bootops, "status", "--server", "http://"+addr).CombinedOutput()
			if err == nil || !strings.Contains(string(status), "STALE:    cannot read the source") || !strings.Contains(string(status), tc.want) {
				t.Errorf("%s with key %s and %s: want a stale status naming %q, got:\n%s", tc.url, tc.key, filepath.Base(tc.hosts), tc.want, status)
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// waitListening waits until something accepts TCP connections on addr in
// namespace ns.
func waitListening(t *testing.T, ns, addr string) {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	for range 100 {
		if exec.Command("ip", "netns", "exec", ns, "bash", "-c", "exec 3<>/dev/tcp/"+host+"/"+port).Run() == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s in %s", addr, ns)
}
