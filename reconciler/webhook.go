package reconciler

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// WebhookResult labels for the metric bootops_webhook_requests_total{result}.
const (
	HookAccepted     = "accepted"     // valid push for the tracked ref (or ref unknown): reconcile triggered
	HookIgnored      = "ignored"      // valid, but not a push (ping, other events) or a push to another ref
	HookUnauthorized = "unauthorized" // missing/bad signature or token: 401
	HookBadRequest   = "bad_request"  // signature ok but body unusable (not JSON, too big >5 MiB, wrong method): 400/405/413
	HookUnavailable  = "unavailable"  // no secret configured: 503
)

// hookMaxBody bounds what a sender can make us buffer and hash; GitHub
// caps its payloads at 25 MB but a push notification is a few KiB.
const hookMaxBody = 5 << 20

// HookReason begins the reason of every look a webhook's push asks for
// (Follower.Sync fetches those straight into the kept clone).
const HookReason = "webhook"

// hookAccepted names the headers a sender must sign with, for the 401
// message: a misconfigured hook should say what to fix.
const hookAccepted = "X-Hub-Signature-256 (GitHub), X-Gitlab-Token (GitLab), X-Gitea-Signature (Gitea), X-Forgejo-Signature (Forgejo) or X-Bootops-Signature-256 (generic)"

// Webhook is the http.Handler for POST /hooks/git: a Git host's push
// notification, once its signature checks out, triggers a reconcile now
// instead of at the next poll.
//
// The provider is told by its headers, and every provider is verified with
// the one secret:
//
//	GitHub           X-Hub-Signature-256: sha256=<hex HMAC-SHA256>, X-GitHub-Event
//	GitLab           X-Gitlab-Token: <secret>, X-Gitlab-Event (Push Hook,
//	                 Tag Push Hook, or System Hook with "event_name": "push"
//	                 or "tag_push" in the body)
//	Gitea            X-Gitea-Signature: <hex HMAC-SHA256>, X-Gitea-Event
//	Forgejo          X-Forgejo-Signature: <hex HMAC-SHA256>, X-Forgejo-Event
//	generic          X-Bootops-Signature-256: sha256=<hex HMAC-SHA256>
//
// Gitea and Forgejo also send GitHub's headers; their own are preferred.
// A body in application/x-www-form-urlencoded (GitHub's and Gitea's other
// content type) is read from its payload field. A generic request may have
// an empty body.
type Webhook struct {
	// Secret returns the shared secret (read from a file by the caller; it
	// may change on SIGHUP), used byte for byte: the caller trims a
	// trailing newline. nil/empty → every request 503 HookUnavailable.
	Secret func() []byte
	// Ref is the tracked ref, full name ("refs/heads/main") or "" (any ref
	// triggers).
	Ref func() string
	// Trigger asks for a reconcile now; it must not block (the caller's is
	// a non-blocking send on a chan of size 1).
	Trigger func(reason string)
	// Count is called once per request with one of the Hook* results.
	// May be nil.
	Count func(result string)
	Log   *slog.Logger // may be nil
}

var _ http.Handler = (*Webhook)(nil)

// hookReply is every response body, and what the request log line says.
type hookReply struct {
	status   int
	provider string
	event    string

	Result  string `json:"result"`
	Message string `json:"message,omitempty"`
	Ref     string `json:"ref,omitempty"`
	After   string `json:"after,omitempty"`
}

// ServeHTTP checks the method, the signature over the raw body, then the
// event and the ref, in that order: nothing of the body is parsed before
// the signature is known to be good.
func (h *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rep := h.serve(w, r)
	if h.Count != nil {
		h.Count(rep.Result)
	}
	h.logReply(r, rep)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(rep.status)
	_ = json.NewEncoder(w).Encode(rep)
}

func (h *Webhook) serve(w http.ResponseWriter, r *http.Request) hookReply {
	p, body, refused := h.authenticate(w, r)
	if refused != nil {
		return *refused
	}
	if ignored := p.notPush(body); ignored != nil {
		return *ignored
	}
	ev, err := hookParse(body, r.Header.Get("Content-Type"), p.name == "generic")
	if err != nil {
		return p.fail(http.StatusBadRequest, HookBadRequest, err.Error())
	}
	tracked := ""
	if h.Ref != nil {
		tracked = h.Ref()
	}
	if tracked != "" && ev.Ref != "" && ev.Ref != tracked {
		rep := p.fail(http.StatusAccepted, HookIgnored, "push to "+ev.Ref+", tracking "+tracked)
		rep.Ref, rep.After = ev.Ref, ev.After
		return rep
	}

	reason := strings.Join(hookNonEmpty(HookReason, p.name, "push", ev.Ref, hookShort(ev.After)), " ")
	if h.Trigger != nil {
		h.Trigger(reason)
	}
	return hookReply{
		status: http.StatusAccepted, provider: p.name, event: p.event,
		Result: HookAccepted, Message: "reconcile triggered", Ref: ev.Ref, After: ev.After,
	}
}

// authenticate checks that the request is a POST whose body (read here,
// within hookMaxBody) carries a good signature of a provider the headers
// name. It returns the provider and the body, or the reply that refuses
// the request.
func (h *Webhook) authenticate(w http.ResponseWriter, r *http.Request) (hookProvider, []byte, *hookReply) {
	refuse := func(rep hookReply) (hookProvider, []byte, *hookReply) { return hookProvider{}, nil, &rep }
	var secret []byte
	if h.Secret != nil {
		secret = h.Secret()
	}
	if len(secret) == 0 {
		return refuse(hookFail(http.StatusServiceUnavailable, HookUnavailable, "no webhook secret configured"))
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return refuse(hookFail(http.StatusMethodNotAllowed, HookBadRequest, "method "+r.Method+" not allowed: use POST"))
	}
	p := hookDetect(r.Header)
	if p.name == "" {
		return refuse(hookFail(http.StatusUnauthorized, HookUnauthorized, "no signature: send one of "+hookAccepted))
	}
	// The body has to be read to be verified, so an oversized one is
	// refused before anyone is known to have sent it.
	if r.ContentLength > hookMaxBody {
		return refuse(p.fail(http.StatusRequestEntityTooLarge, HookBadRequest, fmt.Sprintf("body of %d bytes is over the %d-byte limit", r.ContentLength, hookMaxBody)))
	}
	body, err := hookRead(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return refuse(p.fail(http.StatusRequestEntityTooLarge, HookBadRequest, fmt.Sprintf("body is over the %d-byte limit", hookMaxBody)))
		}
		return refuse(p.fail(http.StatusBadRequest, HookBadRequest, "read body: "+err.Error()))
	}
	if msg := p.verify(secret, body); msg != "" {
		return refuse(p.fail(http.StatusUnauthorized, HookUnauthorized, msg))
	}
	return p, body, nil
}

// notPush returns the reply for a verified request that is not a push
// (nil for a push). A GitLab system hook says what it is in the body only,
// which is trusted now that the token matched: p takes its event from it.
func (p *hookProvider) notPush(body []byte) *hookReply {
	if p.system {
		var sh struct {
			EventName string `json:"event_name"`
		}
		if err := json.Unmarshal(body, &sh); err != nil {
			rep := p.fail(http.StatusBadRequest, HookBadRequest, "system hook body is not JSON: "+err.Error())
			return &rep
		}
		if len(sh.EventName) > 64 {
			sh.EventName = sh.EventName[:64]
		}
		p.event += " " + sh.EventName
		p.push = sh.EventName == "push" || sh.EventName == "tag_push"
	}
	if p.push {
		return nil
	}
	var rep hookReply
	switch {
	case p.event == "":
		rep = p.fail(http.StatusOK, HookIgnored, "no "+p.eventHeader+" header: not a push")
	case p.name == "github" && p.event == "ping":
		rep = p.fail(http.StatusOK, HookIgnored, "ping: the webhook and its secret work")
	default:
		rep = p.fail(http.StatusOK, HookIgnored, "event "+p.event+" is not a push")
	}
	return &rep
}

// hookProvider is what the headers say about the sender.
type hookProvider struct {
	name        string // github, gitlab, gitea, forgejo, generic; "" when none
	sigHeader   string
	sig         string
	prefix      string // "sha256=" for GitHub and generic, "" for Gitea and Forgejo
	token       bool   // GitLab: the header carries the secret itself
	eventHeader string
	event       string
	push        bool // the event is one that should trigger
	// system: a GitLab system hook, whose event_name in the body says
	// whether it is a push (decided once the body is verified).
	system bool
}

// hookDetect picks the provider from the headers. Forgejo sends Gitea's
// and GitHub's headers too, Gitea sends GitHub's, so the most specific
// goes first.
func hookDetect(hd http.Header) hookProvider {
	var p hookProvider
	switch {
	case hd.Get("X-Forgejo-Signature") != "":
		p = hookProvider{name: "forgejo", sigHeader: "X-Forgejo-Signature", eventHeader: "X-Forgejo-Event"}
		p.event = hd.Get(p.eventHeader)
		if p.event == "" {
			p.event = hd.Get("X-Gitea-Event")
		}
		p.push = p.event == "push"
	case hd.Get("X-Gitea-Signature") != "":
		p = hookProvider{name: "gitea", sigHeader: "X-Gitea-Signature", eventHeader: "X-Gitea-Event"}
		p.event = hd.Get(p.eventHeader)
		p.push = p.event == "push"
	case hd.Get("X-Gitlab-Token") != "":
		p = hookProvider{name: "gitlab", sigHeader: "X-Gitlab-Token", token: true, eventHeader: "X-Gitlab-Event"}
		p.event = hd.Get(p.eventHeader)
		p.push = p.event == "Push Hook" || p.event == "Tag Push Hook"
		p.system = p.event == "System Hook"
	case hd.Get("X-Hub-Signature-256") != "":
		p = hookProvider{name: "github", sigHeader: "X-Hub-Signature-256", prefix: "sha256=", eventHeader: "X-GitHub-Event"}
		p.event = hd.Get(p.eventHeader)
		p.push = p.event == "push"
	case hd.Get("X-Bootops-Signature-256") != "":
		p = hookProvider{name: "generic", sigHeader: "X-Bootops-Signature-256", prefix: "sha256=", push: true}
	default:
		return p
	}
	p.sig = hd.Get(p.sigHeader)
	// Headers are the sender's until verified; keep the log line short.
	if len(p.event) > 64 {
		p.event = p.event[:64]
	}
	return p
}

// verify returns "" when the request is signed with secret, else why not.
// The messages say what is malformed but never what was expected.
func (p hookProvider) verify(secret, body []byte) string {
	if p.token {
		// Hash both sides so the comparison takes the same time whatever
		// the token's length.
		got, want := sha256.Sum256([]byte(p.sig)), sha256.Sum256(secret)
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			return p.sigHeader + " does not match the secret"
		}
		return ""
	}
	hexSig, ok := strings.CutPrefix(p.sig, p.prefix)
	if !ok {
		return p.sigHeader + " must start with " + p.prefix
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return p.sigHeader + " must be " + p.prefix + "<64 hex digits of HMAC-SHA256>"
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return p.sigHeader + " does not match the body signed with the secret"
	}
	return ""
}

func (p hookProvider) fail(status int, result, msg string) hookReply {
	return hookReply{status: status, provider: p.name, event: p.event, Result: result, Message: msg}
}

func hookFail(status int, result, msg string) hookReply {
	return hookReply{status: status, Result: result, Message: msg}
}

// hookRead reads at most hookMaxBody bytes; MaxBytesReader also tells the
// server to close the connection rather than drain the rest.
func hookRead(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, hookMaxBody))
	return buf.Bytes(), err
}

// hookPush is the little of a push payload we need; GitHub, GitLab, Gitea
// and Forgejo all put the full ref and the new commit there.
type hookPush struct {
	Ref   string `json:"ref"`
	After string `json:"after"`
}

// hookParse reads ref and after from a verified body.
func hookParse(body []byte, contentType string, emptyOK bool) (hookPush, error) {
	var ev hookPush
	if mt, _, _ := mime.ParseMediaType(contentType); mt == "application/x-www-form-urlencoded" {
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return ev, fmt.Errorf("body is not a form: %w", err)
		}
		if !form.Has("payload") {
			return ev, errors.New("form body has no payload field")
		}
		body = []byte(form.Get("payload"))
	}
	if emptyOK && len(bytes.TrimSpace(body)) == 0 {
		return ev, nil
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		return ev, fmt.Errorf("body is not JSON: %w", err)
	}
	return ev, nil
}

// hookShort shortens a commit id for the reason, as git log --oneline does.
func hookShort(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

func hookNonEmpty(ss ...string) []string {
	out := ss[:0]
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// logReply writes the request's one log line. The signature and the
// secret are never logged; ref and after come from a verified body only.
func (h *Webhook) logReply(r *http.Request, rep hookReply) {
	log := h.Log
	if log == nil {
		return
	}
	level := slog.LevelInfo
	switch rep.Result {
	case HookUnauthorized, HookBadRequest, HookUnavailable:
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.String("provider", rep.provider),
		slog.String("event", rep.event),
		slog.String("result", rep.Result),
		slog.Int("status", rep.status),
		slog.String("remote_addr", r.RemoteAddr),
	}
	if rep.Ref != "" {
		attrs = append(attrs, slog.String("ref", rep.Ref))
	}
	if rep.After != "" {
		attrs = append(attrs, slog.String("after", rep.After))
	}
	if rep.Result != HookAccepted {
		attrs = append(attrs, slog.String("message", rep.Message))
	}
	log.LogAttrs(r.Context(), level, "webhook", attrs...)
}
