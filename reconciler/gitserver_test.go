package reconciler

import (
	"errors"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// remote is a real Git server on loopback: Debian's git http-backend
// behind net/http, serving a bare repository that the test pushes to from
// a working clone with the git command.
type remote struct {
	t    *testing.T
	bare string
	work string
	URL  string

	mu   sync.Mutex
	addr string
	srv  *http.Server
	// User and Password, when set, are required (basic auth).
	User, Password string
}

func gitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRemote makes the bare repository and a working clone holding the
// test repository of repo(t), committed and pushed to main.
func newRemote(t *testing.T) *remote {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (Debian package git): ", err)
	}
	root := t.TempDir()
	r := &remote{t: t, bare: filepath.Join(root, "repo.git"), work: repo(t)}
	gitCmd(t, root, "init", "-q", "--bare", "-b", "main", r.bare)
	gitCmd(t, r.bare, "config", "http.receivepack", "true")
	gitCmd(t, r.work, "init", "-q", "-b", "main")
	gitCmd(t, r.work, "remote", "add", "origin", r.bare)
	r.commitAll("first")
	r.start("127.0.0.1:0")
	t.Cleanup(r.stop)
	return r
}

// commitAll commits the working tree and pushes it; it returns the SHA.
func (r *remote) commitAll(msg string) string {
	gitCmd(r.t, r.work, "add", "-A")
	gitCmd(r.t, r.work, "commit", "-q", "--allow-empty", "-m", msg)
	gitCmd(r.t, r.work, "push", "-q", "-f", "origin", "HEAD:main")
	return gitCmd(r.t, r.work, "rev-parse", "HEAD")
}

// commit writes files (an empty body removes the file) and pushes.
func (r *remote) commit(msg string, files map[string]string) string {
	for name, body := range files {
		if body == "" {
			os.Remove(filepath.Join(r.work, name))
			continue
		}
		write(r.t, r.work, name, body)
	}
	return r.commitAll(msg)
}

func (r *remote) start(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		r.t.Fatal(err)
	}
	backend := &cgi.Handler{
		Path: "/usr/lib/git-core/git-http-backend",
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(r.bare), "GIT_HTTP_EXPORT_ALL=1"},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.Password != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != r.User || p != r.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		backend.ServeHTTP(w, req)
	})
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	r.mu.Lock()
	r.addr, r.srv = ln.Addr().String(), srv
	r.URL = "http://" + r.addr + "/repo.git"
	r.mu.Unlock()
}

// stop takes the server down: connections are refused.
func (r *remote) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv != nil {
		r.srv.Close()
		r.srv = nil
	}
}

// restart brings the server back on the same address.
func (r *remote) restart() {
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			ln.Close()
			r.start(r.addr)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Fatal(errors.Join(errors.New("cannot listen again on "+r.addr), err))
}
