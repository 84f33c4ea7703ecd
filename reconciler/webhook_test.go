package reconciler

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
)

const hookTestSecret = "s3cret-for-tests"

func hookSign(secret, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	return hex.EncodeToString(mac.Sum(nil))
}

// hookCalls records what the Webhook asked of its caller; the handler runs
// on the server's goroutine, hence the lock.
type hookCalls struct {
	mu       sync.Mutex
	triggers []string
	counts   []string
}

func (c *hookCalls) trigger(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.triggers = append(c.triggers, reason)
}

func (c *hookCalls) count(result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = append(c.counts, result)
}

func (c *hookCalls) get() (triggers, counts []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.triggers), slices.Clone(c.counts)
}

func newHook(secret, ref string, calls *hookCalls, log *slog.Logger) *Webhook {
	return &Webhook{
		Secret:  func() []byte { return []byte(secret) },
		Ref:     func() string { return ref },
		Trigger: calls.trigger,
		Count:   calls.count,
		Log:     log,
	}
}

// gitlabSystemPush is a GitLab system hook for a push, as GitLab sends it
// to an instance-wide hook (Admin > System hooks, "Repository update
// events" unticked, "Push events" ticked), from GitLab's system hook docs.
const gitlabSystemPush = `{
  "event_name": "push",
  "before": "95790bf891e76fee5e1747ab589903a6a1f80f22",
  "after": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
  "ref": "refs/heads/main",
  "checkout_sha": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
  "user_id": 4,
  "user_name": "John Smith",
  "user_email": "john@example.com",
  "user_avatar": "https://s.gravatar.com/avatar/d4c74594d841139328695756648b6bd6?s=80",
  "project_id": 15,
  "project": {
    "name": "Example",
    "description": "",
    "web_url": "http://example.com/jsmith/example",
    "avatar_url": null,
    "git_ssh_url": "git@example.com:jsmith/example.git",
    "git_http_url": "http://example.com/jsmith/example.git",
    "namespace": "Jsmith",
    "visibility_level": 0,
    "path_with_namespace": "jsmith/example",
    "default_branch": "main",
    "homepage": "http://example.com/jsmith/example",
    "url": "git@example.com:jsmith/example.git",
    "ssh_url": "git@example.com:jsmith/example.git",
    "http_url": "http://example.com/jsmith/example.git"
  },
  "repository": {
    "name": "Example",
    "url": "git@example.com:jsmith/example.git",
    "description": "",
    "homepage": "http://example.com/jsmith/example",
    "git_http_url": "http://example.com/jsmith/example.git",
    "git_ssh_url": "git@example.com:jsmith/example.git",
    "visibility_level": 0
  },
  "commits": [
    {
      "id": "c5feabde2d8cd023215af4d2ceeb7a64839fc428",
      "message": "Add simple search to projects in public area",
      "timestamp": "2013-05-13T18:18:08+00:00",
      "url": "https://example.com/jsmith/example/commit/c5feabde2d8cd023215af4d2ceeb7a64839fc428",
      "author": {"name": "Example User", "email": "user@example.com"}
    }
  ],
  "total_commits_count": 1
}`

// gitlabSystemProjectCreate is a system hook that is not a push.
const gitlabSystemProjectCreate = `{
  "created_at": "2012-07-21T07:30:54Z",
  "updated_at": "2012-07-21T07:38:22Z",
  "event_name": "project_create",
  "name": "StoreCloud",
  "owner_email": "johnsmith@example.com",
  "owner_name": "John Smith",
  "owners": [{"name": "John", "email": "user1@example.com"}],
  "path": "storecloud",
  "path_with_namespace": "jsmith/storecloud",
  "project_id": 74,
  "project_namespace_id": 23,
  "project_visibility": "private"
}`

func TestWebhook(t *testing.T) {
	const (
		push  = `{"ref":"refs/heads/main","before":"0000000000000000000000000000000000000000","after":"abc1234def5678abc1234def5678abc1234def56","repository":{"full_name":"o/r"}}`
		other = `{"ref":"refs/heads/x","after":"fff0000fff0000fff0000fff0000fff0000fff00"}`
		tag   = `{"ref":"refs/tags/v1","after":"1111111222222233333334444444555555566666"}`
	)
	good := hookSign(hookTestSecret, push)
	bad := hookSign("another secret", push)
	big := `{"ref":"refs/heads/main","pad":"` + strings.Repeat("a", hookMaxBody) + `"}`
	form := "payload=" + url.QueryEscape(push)

	type want struct {
		status  int
		result  string
		trigger string // "" means Trigger must not be called
		message string // substring of the reply's message
	}
	tests := map[string]struct {
		method  string
		secret  string
		ref     string
		headers map[string]string
		body    string
		chunked bool // hide the length, so only reading finds the body too big
		want    want
	}{
		"github push": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + good},
			body:    push,
			want:    want{202, HookAccepted, "webhook github push refs/heads/main abc1234", "reconcile triggered"},
		},
		"github push upper-case hex": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + strings.ToUpper(good)},
			body:    push,
			want:    want{202, HookAccepted, "webhook github push refs/heads/main abc1234", ""},
		},
		"github push as form": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hookSign(hookTestSecret, form), "Content-Type": "application/x-www-form-urlencoded"},
			body:    form,
			want:    want{202, HookAccepted, "webhook github push refs/heads/main abc1234", ""},
		},
		"github push any ref": {
			ref:     "-",
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hookSign(hookTestSecret, other)},
			body:    other,
			want:    want{202, HookAccepted, "webhook github push refs/heads/x fff0000", ""},
		},
		"github ping": {
			headers: map[string]string{"X-GitHub-Event": "ping", "X-Hub-Signature-256": "sha256=" + hookSign(hookTestSecret, `{"zen":"hi"}`)},
			body:    `{"zen":"hi"}`,
			want:    want{200, HookIgnored, "", "ping"},
		},
		"github pull_request": {
			headers: map[string]string{"X-GitHub-Event": "pull_request", "X-Hub-Signature-256": "sha256=" + good},
			body:    push,
			want:    want{200, HookIgnored, "", "event pull_request is not a push"},
		},
		"github no event header": {
			headers: map[string]string{"X-Hub-Signature-256": "sha256=" + good},
			body:    push,
			want:    want{200, HookIgnored, "", "no X-GitHub-Event header"},
		},
		"github push to another ref": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hookSign(hookTestSecret, other)},
			body:    other,
			want:    want{202, HookIgnored, "", "push to refs/heads/x, tracking refs/heads/main"},
		},
		"github wrong hmac": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + bad},
			body:    push,
			want:    want{401, HookUnauthorized, "", "does not match"},
		},
		"github body changed after signing": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + good},
			body:    other,
			want:    want{401, HookUnauthorized, "", "does not match"},
		},
		"github wrong prefix": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha1=" + good},
			body:    push,
			want:    want{401, HookUnauthorized, "", "must start with sha256="},
		},
		"github bare hex": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": good},
			body:    push,
			want:    want{401, HookUnauthorized, "", "must start with sha256="},
		},
		"github odd hex": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + good[:63]},
			body:    push,
			want:    want{401, HookUnauthorized, "", "64 hex digits"},
		},
		"github short hex": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + good[:62]},
			body:    push,
			want:    want{401, HookUnauthorized, "", "64 hex digits"},
		},
		"github not hex": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + strings.Repeat("zz", 32)},
			body:    push,
			want:    want{401, HookUnauthorized, "", "64 hex digits"},
		},
		"github sha1 only": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature": "sha1=0123"},
			body:    push,
			want:    want{401, HookUnauthorized, "", "X-Hub-Signature-256 (GitHub)"},
		},
		"missing signature": {
			headers: map[string]string{"X-GitHub-Event": "push"},
			body:    push,
			want:    want{401, HookUnauthorized, "", "no signature: send one of X-Hub-Signature-256"},
		},
		"bitbucket": {
			headers: map[string]string{"X-Event-Key": "repo:push", "X-Hook-UUID": "1"},
			body:    push,
			want:    want{401, HookUnauthorized, "", "X-Gitlab-Token (GitLab)"},
		},
		"garbage body with valid signature": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hookSign(hookTestSecret, "not json{")},
			body:    "not json{",
			want:    want{400, HookBadRequest, "", "body is not JSON: "},
		},
		"ref of the wrong type": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hookSign(hookTestSecret, `{"ref":1}`)},
			body:    `{"ref":1}`,
			want:    want{400, HookBadRequest, "", "body is not JSON: "},
		},
		"empty github body": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hookSign(hookTestSecret, "")},
			want:    want{400, HookBadRequest, "", "body is not JSON: "},
		},
		"form without payload": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hookSign(hookTestSecret, "a=b"), "Content-Type": "application/x-www-form-urlencoded"},
			body:    "a=b",
			want:    want{400, HookBadRequest, "", "no payload field"},
		},
		"body over 5 MiB": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hookSign(hookTestSecret, big)},
			body:    big,
			want:    want{413, HookBadRequest, "", "limit"},
		},
		"body over 5 MiB, chunked": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hookSign(hookTestSecret, big)},
			body:    big,
			chunked: true,
			want:    want{413, HookBadRequest, "", "limit"},
		},
		"body of exactly 5 MiB, chunked": {
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hookSign(hookTestSecret, big[:hookMaxBody])},
			body:    big[:hookMaxBody],
			chunked: true,
			want:    want{400, HookBadRequest, "", "body is not JSON: "},
		},
		"GET": {
			method:  http.MethodGet,
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + good},
			want:    want{405, HookBadRequest, "", "use POST"},
		},
		"no secret": {
			secret:  "-",
			headers: map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hookSign("", push)},
			body:    push,
			want:    want{503, HookUnavailable, "", "no webhook secret"},
		},
		"gitlab push": {
			headers: map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": hookTestSecret},
			body:    push,
			want:    want{202, HookAccepted, "webhook gitlab push refs/heads/main abc1234", ""},
		},
		"gitlab tag push": {
			ref:     "-",
			headers: map[string]string{"X-Gitlab-Event": "Tag Push Hook", "X-Gitlab-Token": hookTestSecret},
			body:    tag,
			want:    want{202, HookAccepted, "webhook gitlab push refs/tags/v1 1111111", ""},
		},
		"gitlab merge request": {
			headers: map[string]string{"X-Gitlab-Event": "Merge Request Hook", "X-Gitlab-Token": hookTestSecret},
			body:    push,
			want:    want{200, HookIgnored, "", "not a push"},
		},
		"gitlab system hook push": {
			headers: map[string]string{"X-Gitlab-Event": "System Hook", "X-Gitlab-Token": hookTestSecret, "X-Gitlab-Instance": "https://gitlab.example.com", "Content-Type": "application/json"},
			body:    gitlabSystemPush,
			want:    want{202, HookAccepted, "webhook gitlab push refs/heads/main da15608", "reconcile triggered"},
		},
		"gitlab system hook push to another ref": {
			headers: map[string]string{"X-Gitlab-Event": "System Hook", "X-Gitlab-Token": hookTestSecret},
			body:    strings.Replace(gitlabSystemPush, `"ref": "refs/heads/main"`, `"ref": "refs/heads/dev"`, 1),
			want:    want{202, HookIgnored, "", "push to refs/heads/dev, tracking refs/heads/main"},
		},
		"gitlab system hook tag push": {
			ref:     "-",
			headers: map[string]string{"X-Gitlab-Event": "System Hook", "X-Gitlab-Token": hookTestSecret},
			body:    strings.NewReplacer(`"event_name": "push"`, `"event_name": "tag_push"`, `"ref": "refs/heads/main"`, `"ref": "refs/tags/v1"`).Replace(gitlabSystemPush),
			want:    want{202, HookAccepted, "webhook gitlab push refs/tags/v1 da15608", ""},
		},
		"gitlab system hook project_create": {
			headers: map[string]string{"X-Gitlab-Event": "System Hook", "X-Gitlab-Token": hookTestSecret},
			body:    gitlabSystemProjectCreate,
			want:    want{200, HookIgnored, "", "event System Hook project_create is not a push"},
		},
		"gitlab system hook bad token": {
			headers: map[string]string{"X-Gitlab-Event": "System Hook", "X-Gitlab-Token": "guess"},
			body:    gitlabSystemPush,
			want:    want{401, HookUnauthorized, "", "X-Gitlab-Token does not match"},
		},
		"gitlab system hook not JSON": {
			headers: map[string]string{"X-Gitlab-Event": "System Hook", "X-Gitlab-Token": hookTestSecret},
			body:    "event_name=push",
			want:    want{400, HookBadRequest, "", "system hook body is not JSON"},
		},
		"gitlab bad token": {
			headers: map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": hookTestSecret + "x"},
			body:    push,
			want:    want{401, HookUnauthorized, "", "X-Gitlab-Token does not match"},
		},
		"gitlab token prefix": {
			headers: map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": hookTestSecret[:4]},
			body:    push,
			want:    want{401, HookUnauthorized, "", "X-Gitlab-Token does not match"},
		},
		"gitea push": {
			headers: map[string]string{"X-Gitea-Event": "push", "X-Gitea-Signature": good, "X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + bad},
			body:    push,
			want:    want{202, HookAccepted, "webhook gitea push refs/heads/main abc1234", ""},
		},
		"gitea bad signature": {
			headers: map[string]string{"X-Gitea-Event": "push", "X-Gitea-Signature": bad, "X-Hub-Signature-256": "sha256=" + good},
			body:    push,
			want:    want{401, HookUnauthorized, "", "X-Gitea-Signature does not match"},
		},
		"gitea prefixed signature": {
			headers: map[string]string{"X-Gitea-Event": "push", "X-Gitea-Signature": "sha256=" + good},
			body:    push,
			want:    want{401, HookUnauthorized, "", "64 hex digits"},
		},
		"gitea create": {
			headers: map[string]string{"X-Gitea-Event": "create", "X-Gitea-Signature": good},
			body:    push,
			want:    want{200, HookIgnored, "", "event create is not a push"},
		},
		"forgejo push": {
			headers: map[string]string{"X-Forgejo-Event": "push", "X-Forgejo-Signature": good, "X-Gitea-Event": "push", "X-Gitea-Signature": bad},
			body:    push,
			want:    want{202, HookAccepted, "webhook forgejo push refs/heads/main abc1234", ""},
		},
		"forgejo bad signature": {
			headers: map[string]string{"X-Forgejo-Event": "push", "X-Forgejo-Signature": bad, "X-Gitea-Signature": good},
			body:    push,
			want:    want{401, HookUnauthorized, "", "X-Forgejo-Signature does not match"},
		},
		"generic": {
			headers: map[string]string{"X-Bootops-Signature-256": "sha256=" + good},
			body:    push,
			want:    want{202, HookAccepted, "webhook generic push refs/heads/main abc1234", ""},
		},
		"generic empty body": {
			headers: map[string]string{"X-Bootops-Signature-256": "sha256=" + hookSign(hookTestSecret, "")},
			want:    want{202, HookAccepted, "webhook generic push", ""},
		},
		"generic bad signature": {
			headers: map[string]string{"X-Bootops-Signature-256": "sha256=" + bad},
			body:    push,
			want:    want{401, HookUnauthorized, "", "does not match"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			secret, ref := hookTestSecret, "refs/heads/main"
			if tc.secret == "-" {
				secret = ""
			}
			if tc.ref == "-" {
				ref = ""
			}
			var calls hookCalls
			var logs bytes.Buffer
			srv := httptest.NewServer(newHook(secret, ref, &calls, slog.New(slog.NewTextHandler(&logs, nil))))
			defer srv.Close()

			method := cmp.Or(tc.method, http.MethodPost)
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body)
			}
			req, err := http.NewRequest(method, srv.URL+"/hooks/git", body)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}

			if resp.StatusCode != tc.want.status {
				t.Errorf("status %d, want %d; body %s", resp.StatusCode, tc.want.status, raw)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var reply struct{ Result, Message, Ref, After string }
			if err := json.Unmarshal(raw, &reply); err != nil {
				t.Fatalf("reply is not JSON: %v: %s", err, raw)
			}
			if reply.Result != tc.want.result {
				t.Errorf("result %q, want %q", reply.Result, tc.want.result)
			}
			if !strings.Contains(reply.Message, tc.want.message) {
				t.Errorf("message %q, want it to contain %q", reply.Message, tc.want.message)
			}
			var sent hookPush
			if tc.want.result == HookAccepted && json.Unmarshal([]byte(tc.body), &sent) == nil {
				if reply.Ref != sent.Ref || reply.After != sent.After {
					t.Errorf("reply ref %q after %q, want %q %q", reply.Ref, reply.After, sent.Ref, sent.After)
				}
			}

			triggers, counts := calls.get()
			if want := []string{tc.want.result}; !slices.Equal(counts, want) {
				t.Errorf("Count calls %q, want %q", counts, want)
			}
			var wantTriggers []string
			if tc.want.trigger != "" {
				wantTriggers = []string{tc.want.trigger}
			}
			if !slices.Equal(triggers, wantTriggers) {
				t.Errorf("Trigger calls %q, want %q", triggers, wantTriggers)
			}

			line := logs.String()
			if strings.Count(line, "\n") != 1 || !strings.Contains(line, "result="+tc.want.result) {
				t.Errorf("want one log line with result=%s, got %q", tc.want.result, line)
			}
			for _, secret := range []string{hookTestSecret, good[:16], bad[:16], strings.ToUpper(good[:16])} {
				if strings.Contains(line, secret) {
					t.Errorf("log line holds a signature or the secret: %q", line)
				}
			}
		})
	}
}

// TestWebhookSecretChanges checks the secret is read per request, so a
// SIGHUP's new secret applies at once.
func TestWebhookSecretChanges(t *testing.T) {
	secret := "old"
	var calls hookCalls
	h := &Webhook{Secret: func() []byte { return []byte(secret) }, Trigger: calls.trigger, Count: calls.count}
	send := func(signedWith string) int {
		body := `{"ref":"refs/heads/main"}`
		r := httptest.NewRequest(http.MethodPost, "/hooks/git", strings.NewReader(body))
		r.Header.Set("X-Bootops-Signature-256", "sha256="+hookSign(signedWith, body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if got := send("old"); got != http.StatusAccepted {
		t.Fatalf("old secret: status %d", got)
	}
	secret = "new"
	if got := send("old"); got != http.StatusUnauthorized {
		t.Errorf("old secret after change: status %d, want 401", got)
	}
	if got := send("new"); got != http.StatusAccepted {
		t.Errorf("new secret: status %d, want 202", got)
	}
	triggers, counts := calls.get()
	if len(triggers) != 2 || !slices.Equal(counts, []string{HookAccepted, HookUnauthorized, HookAccepted}) {
		t.Errorf("triggers %q counts %q", triggers, counts)
	}
}

// TestWebhookNilFields checks the optional fields may be left out.
func TestWebhookNilFields(t *testing.T) {
	for name, h := range map[string]*Webhook{
		"zero":   {},
		"secret": {Secret: func() []byte { return []byte("k") }},
	} {
		t.Run(name, func(t *testing.T) {
			body := `{}`
			r := httptest.NewRequest(http.MethodPost, "/hooks/git", strings.NewReader(body))
			r.Header.Set("X-Bootops-Signature-256", "sha256="+hookSign("k", body))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusAccepted && w.Code != http.StatusServiceUnavailable {
				t.Errorf("status %d", w.Code)
			}
		})
	}
}

func FuzzWebhook(f *testing.F) {
	// A fresh secret per run: the fuzzer cannot find it in the binary.
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		f.Fatal(err)
	}
	body := `{"ref":"refs/heads/main","after":"abc"}`
	sig := hookSign("guess", body)
	f.Add("POST", "X-Hub-Signature-256", "sha256="+sig, "push", "", []byte(body))
	f.Add("POST", "X-Gitlab-Token", "guess", "Push Hook", "", []byte(body))
	f.Add("POST", "X-Gitea-Signature", sig, "push", "", []byte(body))
	f.Add("POST", "X-Forgejo-Signature", sig, "push", "", []byte(body))
	f.Add("POST", "X-Bootops-Signature-256", "sha256=", "", "", []byte(""))
	f.Add("POST", "X-Hub-Signature-256", "sha256=zz", "ping", "application/x-www-form-urlencoded", []byte("payload=%7B%7D"))
	f.Add("GET", "X-Event-Key", "repo:push", "", "text/plain; charset=\xff", []byte{0xff, 0})

	f.Fuzz(func(t *testing.T, method, header, value, event, contentType string, body []byte) {
		var calls hookCalls
		h := &Webhook{
			Secret:  func() []byte { return secret },
			Ref:     func() string { return "refs/heads/main" },
			Trigger: calls.trigger,
			Count:   calls.count,
			Log:     slog.New(slog.DiscardHandler),
		}
		r := httptest.NewRequest(http.MethodPost, "/hooks/git", bytes.NewReader(body))
		r.Method = method
		// Set the map directly: the fuzzer's names need not be canonical
		// or even valid, and the handler must cope with what a proxy lets by.
		r.Header = http.Header{}
		r.Header[http.CanonicalHeaderKey(header)] = []string{value}
		for _, k := range []string{"X-GitHub-Event", "X-Gitlab-Event", "X-Gitea-Event", "X-Forgejo-Event"} {
			r.Header.Set(k, event)
		}
		r.Header.Set("Content-Type", contentType)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)

		triggers, counts := calls.get()
		if len(triggers) != 0 {
			t.Fatalf("triggered without the secret: %q", triggers)
		}
		if len(counts) != 1 {
			t.Fatalf("Count called %d times", len(counts))
		}
		switch counts[0] {
		case HookUnauthorized, HookBadRequest:
		default:
			t.Fatalf("result %q without the secret", counts[0])
		}
		var reply struct{ Result string }
		if err := json.Unmarshal(w.Body.Bytes(), &reply); err != nil || reply.Result != counts[0] {
			t.Fatalf("reply %q (%v), counted %q", w.Body.Bytes(), err, counts[0])
		}
	})
}
