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
)

// Secret derives per-node tokens. It lives in the daemon's state folder,
// never in Git.
type Secret []byte

// Token is the token of a node (or, for an unknown machine, of its site and
// MAC): what the boot plane puts in place of plan.TokenPlaceholder and what
// the agent presents back.
func (s Secret) Token(site, node string) string {
	m := hmac.New(sha256.New, s)
	fmt.Fprintf(m, "bootops-node-token\x00%s\x00%s", site, node)
	return hex.EncodeToString(m.Sum(nil))[:32]
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
