package microos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sbsign cannot ask for a pass phrase: an encrypted key is refused with
// the command that decrypts it; a key without its certificate too.
func TestUKISignKeyChecks(t *testing.T) {
	dir := t.TempDir()
	enc := filepath.Join(dir, "db.key")
	os.WriteFile(enc, []byte("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIF\n-----END ENCRYPTED PRIVATE KEY-----\n"), 0o600)
	if err := plainKey(enc); err == nil || !strings.Contains(err.Error(), "openssl pkey -in "+enc) {
		t.Errorf("encrypted key: %v", err)
	}
	plain := filepath.Join(dir, "plain.key")
	os.WriteFile(plain, []byte("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"), 0o600)
	if err := plainKey(plain); err != nil {
		t.Errorf("plain key: %v", err)
	}
	if err := BuildUKI("k", "i", UKIOptions{SignKey: plain}, filepath.Join(dir, "out.efi")); err == nil || !strings.Contains(err.Error(), "both --sign-key and --sign-cert") {
		t.Errorf("a key without its certificate: %v", err)
	}
}
