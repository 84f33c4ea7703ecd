package boot

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Secret signs the agent's credentials. It lives in the daemon's state
// folder, never in Git.
type Secret []byte

// Kinds of credentials.
const (
	// KindBoot is minted each time a machine's iPXE script is served and
	// put on its kernel command line: it is good for one check-in.
	KindBoot = "b"
	// KindSession is what a check-in returns: it is good for the events
	// of that check-in's workflow (and a held machine's next check-ins).
	KindSession = "s"
	// KindReport is written into a node's seed at check-in: the installed
	// OS reports its boots with it (to that node and generation only).
	KindReport = "r"
	// KindMedia is a media credential: an operator asks the server for
	// one (POST /api/v1/media-credentials) and writes it beside a boot
	// medium's files; good for one check-in of one node, like a boot
	// token, but for days rather than minutes.
	KindMedia = "m"
)

// Errors of Verify, tested with errors.Is.
var (
	ErrBadCredential = errors.New("boot: credential not valid for this machine")
	ErrExpired       = errors.New("boot: credential expired")
	ErrWrongKind     = errors.New("boot: wrong kind of credential")
)

// Grant is what a credential binds: who it is for (a site and a subject,
// the node's name or "unknown-" and an unknown machine's key), the node's
// reprovision generation when it was minted, a random ID (the boot token's
// one-use nonce, or the session's ID) and an expiry.
type Grant struct {
	Kind       string
	Site       string
	Subject    string
	Generation int
	ID         string
	Expires    time.Time
}

// Subject is who an agent's credential is for: the node, or "unknown-"
// and an unknown machine's key ("" for neither).
func Subject(node, machine string) string {
	if node != "" {
		return node
	}
	if machine == "" {
		return ""
	}
	return "unknown-" + machine
}

// NewID returns 16 random hex digits.
func NewID() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// Mint writes g as a credential: KIND1.GEN.EXPIRY.ID.TAG, where TAG is
// an HMAC over every field and the site and subject, which the bearer
// names beside it. Only [A-Za-z0-9.] is used: it is safe on a kernel
// command line and in an iPXE script.
func (s Secret) Mint(g Grant) string {
	body := fmt.Sprintf("%s1.%d.%d.%s", g.Kind, g.Generation, g.Expires.Unix(), g.ID)
	return body + "." + s.tag(body, g.Site, g.Subject)
}

func (s Secret) tag(body, site, subject string) string {
	m := hmac.New(sha256.New, s)
	fmt.Fprintf(m, "bootops-credential\x00%s\x00%s\x00%s", body, site, subject)
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// Verify checks that tok is a credential of kind for site and subject,
// not expired at now, and returns what it grants.
func (s Secret) Verify(tok, kind, site, subject string, now time.Time) (Grant, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 5 || len(parts[0]) != 2 || parts[0][1] != '1' {
		return Grant{}, ErrBadCredential
	}
	body := strings.Join(parts[:4], ".")
	if !hmac.Equal([]byte(parts[4]), []byte(s.tag(body, site, subject))) {
		return Grant{}, ErrBadCredential
	}
	gen, err1 := strconv.Atoi(parts[1])
	exp, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return Grant{}, ErrBadCredential
	}
	g := Grant{Kind: parts[0][:1], Site: site, Subject: subject, Generation: gen, ID: parts[3], Expires: time.Unix(exp, 0)}
	if g.Kind != kind {
		return g, ErrWrongKind
	}
	if !now.Before(g.Expires) {
		return g, ErrExpired
	}
	return g, nil
}

// Peek reads what a credential says of itself, without the site and
// subject its tag binds: its kind and whether it is past its expiry. A
// request whose credential is malformed, of none of the kinds wanted, or
// expired is refused before its body is read; Verify checks the tag once
// the body names the site and subject.
func Peek(tok string, now time.Time, kinds ...string) error {
	parts := strings.Split(tok, ".")
	if len(tok) > 256 || len(parts) != 5 || len(parts[0]) != 2 || parts[0][1] != '1' {
		return ErrBadCredential
	}
	exp, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return ErrBadCredential
	}
	found := false
	for _, k := range kinds {
		found = found || parts[0][:1] == k
	}
	switch {
	case !found:
		return ErrWrongKind
	case !now.Before(time.Unix(exp, 0)):
		return ErrExpired
	}
	return nil
}

// LoadSecret reads dir/secret, creating it (32 random bytes, mode 0600)
// when it does not exist.
func LoadSecret(dir string) (Secret, error) {
	p := filepath.Join(dir, "secret")
	b, err := os.ReadFile(p)
	if err == nil {
		if len(b) < 32 {
			return nil, fmt.Errorf("secret %s: %d bytes, want at least 32", p, len(b))
		}
		return Secret(b), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("secret: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("secret: %w", err)
	}
	return Secret(b), f.Close()
}
