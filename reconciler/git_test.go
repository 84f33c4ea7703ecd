package reconciler

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/test/gitserver"
)

// follow makes a Follower of url with its state in stateDir.
func follow(t *testing.T, url, stateDir string) (*Follower, *boot.Live) {
	t.Helper()
	c, err := compiler.New()
	if err != nil {
		t.Fatal(err)
	}
	live := &boot.Live{}
	r := &Reconciler{Compiler: c, Live: live, State: &State{Dir: stateDir}}
	r.SetSource(Redacted(url), "main")
	f := &Follower{Git: &Git{URL: url, Ref: "main", WorkDir: filepath.Join(stateDir, "git")}, R: r}
	f.Configure(time.Hour, "")
	return f, live
}

// running starts f.Run and stops it when the test ends.
func running(t *testing.T, f *Follower) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func served(live *boot.Live, serial string) bool {
	p := live.Current()
	if p == nil {
		return false
	}
	return len(p.Sites) > 0 && p.Site("s1") != nil && nodeBySerial(p.Site("s1").Nodes, serial)
}

func nodeBySerial(nodes []*plan.Node, serial string) bool {
	for _, n := range nodes {
		if n.Identity.Serial == serial {
			return true
		}
	}
	return false
}

func nodeYAML(name, serial string) string {
	return "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: " + name + "\nidentity: {serial: " + serial + "}\n"
}

func TestGitPushTriggerPollBrokenRewind(t *testing.T) {
	rem := gitserver.New(t, repo(t))
	f, live := follow(t, rem.URL, t.TempDir())
	running(t, f)
	testutil.WaitFor(t, "the first revision", 10*time.Second, func() bool { return served(live, "S1") })
	first := f.R.Status().Applied.Revision
	if first != gitserver.Git(t, rem.Work, "rev-parse", "HEAD") {
		t.Fatalf("applied %s", first)
	}

	// Push → live through a webhook.
	sha := rem.Commit("add n2", map[string]string{"sites/s1/nodes/n2.yaml": nodeYAML("n2", "S2")})
	hook := &Webhook{Secret: func() []byte { return []byte("s3cret") }, Ref: func() string { return "refs/heads/main" }, Trigger: f.Trigger}
	body := []byte(`{"ref":"refs/heads/main","after":"` + sha + `"}`)
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write(body)
	req := httptest.NewRequest("POST", "/hooks/git", bytes.NewReader(body))
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	rec := httptest.NewRecorder()
	posted := time.Now()
	hook.ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("webhook: %d %s", rec.Code, rec.Body)
	}
	testutil.WaitFor(t, "the pushed node", 10*time.Second, func() bool { return served(live, "S2") })
	if st := f.R.Status(); st.Applied.Revision != sha || st.Applied.Message != "add n2" || st.Stale {
		t.Errorf("status after push: %+v", st)
	}
	// Where its time went: the look's stages, each measured (the fetch
	// talks to a server: never 0; a webhook's push is fetched into the
	// kept clone without listing the remote first), within what the daemon
	// took from the webhook's trigger.
	if sg := f.R.Status().Applied.Stages; sg == nil || sg.ListMS != 0 || sg.FetchMS <= 0 || sg.CompileMS <= 0 || sg.QueuedMS < 0 {
		t.Errorf("stages of the pushed revision: %+v", sg)
	} else if sum := sg.QueuedMS + sg.ListMS + sg.FetchMS + sg.ReadMS + sg.CompileMS + sg.SwapMS; sum > ms(time.Since(posted)) {
		t.Errorf("stages %+v add up to %.1f ms, more than the %s since the webhook", sg, sum, time.Since(posted))
	}

	// A broken commit: the old Plan stays; status names the file and line
	// for the attempted SHA.
	good := live.Current()
	bad := rem.Commit("broken", map[string]string{"sites/s1/nodes/n3.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n3\nidentity: {serial: S3}\nprofle: base\n"})
	f.Trigger("test")
	testutil.WaitFor(t, "the refused attempt", 10*time.Second, func() bool { return f.R.Status().Attempted.Revision == bad })
	st := f.R.Status()
	if live.Current() != good || st.Applied.Revision != sha || st.Attempted.Result != ResultRefused || !st.Stale {
		t.Fatalf("after a broken commit: %+v", st)
	}
	if len(st.Attempted.Errors) != 1 || !strings.HasPrefix(st.Attempted.Errors[0], "sites/s1/nodes/n3.yaml:5:1: ") || !strings.Contains(st.Reason, "refused") {
		t.Errorf("errors of the attempt: %q (reason %q)", st.Attempted.Errors, st.Reason)
	}

	// Push → live through polling.
	configured := time.Now()
	f.Configure(150*time.Millisecond, "")
	testutil.WaitFor(t, "a look after the new interval", 10*time.Second, func() bool { return f.R.Status().LastCheck.At.After(configured) })
	fixed := rem.Commit("fix", map[string]string{"sites/s1/nodes/n3.yaml": nodeYAML("n3", "S3")})
	testutil.WaitFor(t, "the fix by polling", 10*time.Second, func() bool { return f.R.Status().Applied.Revision == fixed })
	if !served(live, "S3") || f.R.Status().Stale {
		t.Errorf("fix not served: %+v", f.R.Status())
	}

	// Force-push a rewind to the first commit.
	gitserver.Git(t, rem.Work, "reset", "-q", "--hard", first)
	gitserver.Git(t, rem.Work, "push", "-q", "-f", "origin", "HEAD:main")
	testutil.WaitFor(t, "the rewind", 10*time.Second, func() bool { return f.R.Status().Applied.Revision == first })
	if served(live, "S2") || !served(live, "S1") {
		t.Error("the rewind is not what is served")
	}

	// Two pushes in quick succession end at the last.
	f.Configure(time.Hour, "")
	rem.Commit("a", map[string]string{"sites/s1/nodes/n4.yaml": nodeYAML("n4", "S4")})
	f.Trigger("a")
	last := rem.Commit("b", map[string]string{"sites/s1/nodes/n5.yaml": nodeYAML("n5", "S5")})
	f.Trigger("b")
	testutil.WaitFor(t, "the last of two pushes", 10*time.Second, func() bool { return f.R.Status().Applied.Revision == last })
	if !served(live, "S4") || !served(live, "S5") {
		t.Error("the last push is not served whole")
	}
	if h := f.R.Status().History; len(h) > historyLen || len(h) < 5 {
		t.Errorf("history has %d entries", len(h))
	}
	// After the first clone every push was fetched into the kept clone
	// (a rewind too): one clone on disk, not one per push.
	if f.Git.kept == nil || f.Git.keptFresh < 5 {
		t.Errorf("fetches into the kept clone: %d", f.Git.keptFresh)
	}
	if dirs, _ := filepath.Glob(filepath.Join(f.Git.WorkDir, "fetch-*")); len(dirs) != 1 {
		t.Errorf("clones on disk: %v", dirs)
	}
	// A kept clone that cannot fetch any more (here: its remote gone):
	// the next push comes through a fresh clone.
	if err := f.Git.kept.repo.DeleteRemote("origin"); err != nil {
		t.Fatal(err)
	}
	healed := rem.Commit("c", map[string]string{"sites/s1/nodes/n6.yaml": nodeYAML("n6", "S6")})
	f.Trigger(HookReason + " test push refs/heads/main") // the kept clone first, then a listing and a fresh clone
	testutil.WaitFor(t, "the push after the kept clone broke", 10*time.Second, func() bool { return f.R.Status().Applied.Revision == healed })
	if !served(live, "S6") || f.Git.keptFresh != 0 {
		t.Errorf("after a broken kept clone: served %v, fetches into the new one %d", served(live, "S6"), f.Git.keptFresh)
	}
	if sg := f.R.Status().Applied.Stages; sg == nil || sg.ListMS <= 0 {
		t.Errorf("the push after the kept clone broke was not listed before its fresh clone: %+v", sg)
	}
	if dirs, _ := filepath.Glob(filepath.Join(f.Git.WorkDir, "fetch-*")); len(dirs) != 1 {
		t.Errorf("clones on disk after the fresh clone: %v", dirs)
	}
}

func TestGitServerDownAndRestart(t *testing.T) {
	rem := gitserver.New(t, repo(t))
	state := t.TempDir()
	f, live := follow(t, rem.URL, state)
	f.Configure(100*time.Millisecond, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	testutil.WaitFor(t, "the first revision", 10*time.Second, func() bool { return served(live, "S1") })
	good := live.Current()

	// Down: still serving, status says stale and why.
	rem.Stop()
	testutil.WaitFor(t, "stale", 10*time.Second, func() bool { return f.R.Status().Stale })
	st := f.R.Status()
	if live.Current() != good || !strings.Contains(st.Reason, "cannot read the source") || !strings.Contains(st.LastCheck.Error, "connection refused") {
		t.Errorf("while down: %+v", st)
	}
	// Back: recovery without a restart.
	rem.Restart()
	sha := rem.Commit("n2", map[string]string{"sites/s1/nodes/n2.yaml": nodeYAML("n2", "S2")})
	testutil.WaitFor(t, "recovery", 10*time.Second, func() bool { return f.R.Status().Applied.Revision == sha })
	if f.R.Status().Stale {
		t.Errorf("still stale: %+v", f.R.Status())
	}
	cancel()
	<-done

	// Restart with the server down: the kept Plan is served at once.
	rem.Stop()
	f2, live2 := follow(t, rem.URL, state)
	saved, err := f2.R.Restore()
	if err != nil || saved == nil {
		t.Fatalf("restore: %v %v", saved, err)
	}
	if !served(live2, "S2") || live2.Current().Hash != live.Current().Hash {
		t.Fatal("the kept plan is not served")
	}
	f2.Restored(saved.Revision)
	f2.Configure(100*time.Millisecond, "")
	running(t, f2)
	testutil.WaitFor(t, "stale after restart", 10*time.Second, func() bool { return f2.R.Status().Stale })
	if st := f2.R.Status(); st.Applied.Revision != sha || !st.Restored {
		t.Errorf("after restart: %+v", st)
	}
	// The server comes back at the same commit: nothing is fetched, and
	// the kept Plan is confirmed.
	rem.Restart()
	testutil.WaitFor(t, "confirmed", 10*time.Second, func() bool { st := f2.R.Status(); return !st.Stale && !st.Restored })
	if n := len(f2.R.Status().History); n != 0 {
		t.Errorf("%d compilations for an unchanged remote", n)
	}
}

func TestGitBadInput(t *testing.T) {
	testutil.Slow(t)
	rem := gitserver.New(t, repo(t))
	f, live := follow(t, rem.URL, t.TempDir())
	ctx := context.Background()
	if err := f.Sync(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	good := live.Current()

	// A commit deleting everything is refused.
	gitserver.Git(t, rem.Work, "rm", "-q", "-r", "microos", "profiles", "sites")
	empty := rem.CommitAll("delete everything")
	f.Sync(ctx, "test")
	if st := f.R.Status(); live.Current() != good || st.Attempted.Revision != empty || !strings.Contains(st.Attempted.Error, "--allow-empty") {
		t.Errorf("empty revision: %+v", st.Attempted)
	}
	gitserver.Git(t, rem.Work, "reset", "-q", "--hard", "HEAD~1")

	// A 100 MB YAML file is refused by its size, unread; a big binary
	// is not a source file and is left alone.
	big := strings.Repeat("# padding to make a very large file\n", 3_000_000)
	bigRev := rem.Commit("big", map[string]string{"sites/s1/nodes/huge.yaml": big})
	f.Sync(ctx, "test")
	if st := f.R.Status(); live.Current() != good || st.Attempted.Revision != bigRev || len(st.Attempted.Errors) != 1 || !strings.Contains(st.Attempted.Errors[0], "huge.yaml:1:1: file is 108000000 bytes, more than the 8 MiB limit") {
		t.Errorf("100 MB file: %+v", st.Attempted)
	}

	// Wrong credentials: a clear error, the Plan untouched.
	rem.User, rem.Password = "ops", "right"
	f.Git.Username, f.Git.Password, f.Git.authResolved = "ops", "wrong", false
	rem.Commit("n9", map[string]string{"sites/s1/nodes/huge.yaml": "", "sites/s1/nodes/n9.yaml": nodeYAML("n9", "S9")})
	if err := f.Sync(ctx, "test"); err == nil || !strings.Contains(err.Error(), "authentication") {
		t.Errorf("wrong password: %v", err)
	}
	if st := f.R.Status(); !st.Stale || !strings.Contains(st.Reason, "authentication") || live.Current() != good {
		t.Errorf("wrong password status: %+v", st)
	}
	f.Git.Password, f.Git.authResolved = "right", false
	if err := f.Sync(ctx, "test"); err != nil || !served(live, "S9") {
		t.Errorf("right password: %v", err)
	}

	// Unreachable remote.
	g := &Git{URL: "http://127.0.0.1:1/nothing.git", WorkDir: t.TempDir()}
	if _, _, err := g.Head(ctx); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("unreachable: %v", err)
	}
}

func TestGitRefs(t *testing.T) {
	rem := gitserver.New(t, repo(t))
	first := gitserver.Git(t, rem.Work, "rev-parse", "HEAD")
	gitserver.Git(t, rem.Work, "tag", "-a", "-m", "release", "v1")
	gitserver.Git(t, rem.Work, "push", "-q", "origin", "v1")
	rem.Commit("n2", map[string]string{"sites/s1/nodes/n2.yaml": nodeYAML("n2", "S2")})
	for _, ref := range []string{"v1", "refs/tags/v1", first} {
		f, live := follow(t, rem.URL, t.TempDir())
		f.Git.Ref = ref
		if err := f.Sync(context.Background(), "test"); err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if st := f.R.Status(); st.Applied.Revision != first || served(live, "S2") {
			t.Errorf("ref %s: applied %s, want %s", ref, st.Applied.Revision, first)
		}
	}
	f, _ := follow(t, rem.URL, t.TempDir())
	f.Git.Ref = "nope"
	if err := f.Sync(context.Background(), "test"); err == nil || !strings.Contains(err.Error(), `no branch or tag "nope"`) {
		t.Errorf("missing ref: %v", err)
	}
	// file:// works too, with the default branch.
	f, live := follow(t, "file://"+rem.Bare, t.TempDir())
	f.Git.Ref = ""
	if err := f.Sync(context.Background(), "test"); err != nil || !served(live, "S2") {
		t.Errorf("file://: %v", err)
	}
}

func TestGitHTTPSCustomCAAndToken(t *testing.T) {
	rem := gitserver.NewTLS(t, repo(t))
	rem.User, rem.Password = "x-access-token", "tok-123"
	ctx := context.Background()
	g := &Git{URL: rem.URL, Password: "tok-123", Username: "x-access-token", WorkDir: t.TempDir()}
	if _, _, err := g.Head(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v", err)
	}
	g = &Git{URL: rem.URL, Password: "tok-123", Username: "x-access-token", CABundle: rem.CA, WorkDir: t.TempDir()}
	ref, h, err := g.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	co, err := g.Fetch(ctx, ref, h)
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if co.Commit.Hash != h || co.FS.BlobID("sites/s1/nodes/n1.yaml") == "" {
		t.Errorf("fetched %s", co.Commit.Hash)
	}
	g = &Git{URL: rem.URL, CABundle: rem.CA, WorkDir: t.TempDir()}
	if _, _, err := g.Head(ctx); err == nil || !strings.Contains(err.Error(), "authentication required") || !strings.Contains(err.Error(), "give credentials") {
		t.Errorf("no token: %v", err)
	}
}

func TestGitURLsAndCredentials(t *testing.T) {
	for _, tc := range []struct{ url, key, want string }{
		{"ssh://git@198.18.0.1/ops/fleet.git", "", "is an ssh URL: give the private key with --git-ssh-key"},
		{"git@198.18.0.1:ops/fleet.git", "", "is an ssh URL: give the private key with --git-ssh-key"},
		{"git@198.18.0.1:ops/fleet.git", "/nonexistent/key", "ssh key /nonexistent/key"},
		{"ftp://198.18.0.1/fleet.git", "", `protocol "ftp" is not supported`},
	} {
		g := &Git{URL: tc.url, SSHKeyFile: tc.key}
		if err := g.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.url, err, tc.want)
		}
	}
	for in, want := range map[string]bool{"https://h/r.git": true, "git@h:r.git": true, "ssh://h/r": true, "sites": false, "./sites": false, "/srv/fleet": false, "C:/x": false} {
		if IsGitURL(in) != want {
			t.Errorf("IsGitURL(%q) = %v", in, !want)
		}
	}
	if got := Redacted("https://ops:tok@h/r.git"); strings.Contains(got, "tok") {
		t.Errorf("redacted: %s", got)
	}
}

// signedCommit commits the working tree with go-git, signed by key (nil:
// unsigned), and pushes it.
func signedCommit(t *testing.T, rem *gitserver.Remote, msg string, key *openpgp.Entity) string {
	t.Helper()
	repo, err := git.PlainOpen(rem.Work)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		t.Fatal(err)
	}
	h, err := wt.Commit(msg, &git.CommitOptions{AllowEmptyCommits: true, SignKey: key,
		Author: &object.Signature{Name: "t", Email: "t@example.invalid", When: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	gitserver.Git(t, rem.Work, "push", "-q", "-f", "origin", "HEAD:main")
	return h.String()
}

func armored(t *testing.T, e *openpgp.Entity) string {
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return buf.String()
}

func TestVerifyCommits(t *testing.T) {
	trusted, err := openpgp.NewEntity("ops", "", "ops@example.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := openpgp.NewEntity("mallory", "", "m@example.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	rem := gitserver.New(t, repo(t))
	f, live := follow(t, rem.URL, t.TempDir())
	f.Configure(time.Hour, armored(t, trusted))
	ctx := context.Background()

	// The first commit (made by the git command) is unsigned: refused,
	// nothing served.
	f.Sync(ctx, "test")
	if st := f.R.Status(); live.Current() != nil || !strings.Contains(st.Attempted.Error, "is not signed") {
		t.Fatalf("unsigned: %+v", st.Attempted)
	}
	signed := signedCommit(t, rem, "signed", trusted)
	f.Sync(ctx, "test")
	if st := f.R.Status(); st.Applied.Revision != signed || live.Current() == nil {
		t.Fatalf("signed: %+v", st.Attempted)
	}
	good := live.Current()
	testutil.WriteFile(t, rem.Work, "sites/s1/nodes/n2.yaml", nodeYAML("n2", "S2"))
	wrong := signedCommit(t, rem, "by a stranger", stranger)
	f.Sync(ctx, "test")
	if st := f.R.Status(); live.Current() != good || st.Attempted.Revision != wrong || !strings.Contains(st.Attempted.Error, "signature not verified") {
		t.Errorf("wrongly signed: %+v", st.Attempted)
	}
	unsigned := signedCommit(t, rem, "unsigned", nil)
	f.Sync(ctx, "test")
	if st := f.R.Status(); live.Current() != good || st.Attempted.Revision != unsigned || !strings.Contains(st.Attempted.Error, "is not signed") {
		t.Errorf("unsigned: %+v", st.Attempted)
	}
	// Without verification the same commit is served.
	f.Configure(time.Hour, "")
	f.Sync(ctx, "test")
	if !served(live, "S2") {
		t.Error("not served once verification is off")
	}
}
