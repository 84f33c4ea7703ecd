// Package gitserver is a real Git server on loopback for tests: Debian's
// git http-backend behind net/http, serving a bare repository that the
// test pushes to from a working clone with the git command.
package gitserver

import (
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Remote is the server, its bare repository and the working clone.
type Remote struct {
	t    testing.TB
	Bare string // the bare repository served
	Work string // the working clone the test commits in
	URL  string

	mu   sync.Mutex
	addr string
	srv  *http.Server
	// User and Password, when set, are required (basic auth).
	User, Password string
	// CA is the PEM certificate of an https server (NewTLS); nil for http.
	CA  []byte
	tls bool
}

// Git runs the git command in dir and returns its trimmed output.
func Git(t testing.TB, dir string, args ...string) string {
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

// NewTLS is New over https, with a certificate of its own (r.CA).
func NewTLS(t testing.TB, work string) *Remote { return newRemote(t, work, true) }

// New makes a bare repository, turns the folder work into its working
// clone, commits and pushes what work holds to main, and serves it.
func New(t testing.TB, work string) *Remote { return newRemote(t, work, false) }

func newRemote(t testing.TB, work string, tls bool) *Remote {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (Debian package git): ", err)
	}
	root := t.TempDir()
	r := &Remote{t: t, Bare: filepath.Join(root, "repo.git"), Work: work, tls: tls}
	Git(t, root, "init", "-q", "--bare", "-b", "main", r.Bare)
	Git(t, r.Bare, "config", "http.receivepack", "true")
	Git(t, r.Work, "init", "-q", "-b", "main")
	Git(t, r.Work, "remote", "add", "origin", r.Bare)
	r.CommitAll("first")
	r.start("127.0.0.1:0")
	t.Cleanup(r.Stop)
	return r
}

// CommitAll commits the working tree and pushes it; it returns the SHA.
func (r *Remote) CommitAll(msg string) string {
	Git(r.t, r.Work, "add", "-A")
	Git(r.t, r.Work, "commit", "-q", "--allow-empty", "-m", msg)
	Git(r.t, r.Work, "push", "-q", "-f", "origin", "HEAD:main")
	return Git(r.t, r.Work, "rev-parse", "HEAD")
}

// Commit writes files (an empty body removes the file) and pushes.
func (r *Remote) Commit(msg string, files map[string]string) string {
	for name, body := range files {
		if body == "" {
			os.Remove(filepath.Join(r.Work, name))
			continue
		}
		p := filepath.Join(r.Work, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	return r.CommitAll(msg)
}

func (r *Remote) start(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		r.t.Fatal(err)
	}
	backend := &cgi.Handler{
		Path: "/usr/lib/git-core/git-http-backend",
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(r.Bare), "GIT_HTTP_EXPORT_ALL=1"},
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
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addr = ln.Addr().String()
	if r.tls {
		ts := httptest.NewUnstartedServer(h)
		ts.Listener.Close()
		ts.Listener = ln
		ts.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes the tests make fail
		ts.StartTLS()
		r.srv = ts.Config
		r.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
		r.URL = "https://" + r.addr + "/repo.git"
		return
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	r.srv = srv
	r.URL = "http://" + r.addr + "/repo.git"
}

// Stop takes the server down: connections are refused.
func (r *Remote) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv != nil {
		r.srv.Close()
		r.srv = nil
	}
}

// Restart brings the server back on the same address.
func (r *Remote) Restart() {
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
