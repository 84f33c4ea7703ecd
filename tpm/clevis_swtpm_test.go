//go:build swtpm

package tpm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootops/bootops/test/swtpmsim"
)

// TestSwtpmClevisSeal: what ClevisSeal makes, Clevis itself opens — the
// installed OS's initramfs runs clevis decrypt on the LUKS2 token — with
// the same TPM, and not with another one.
func TestSwtpmClevisSeal(t *testing.T) {
	for _, tool := range []string{"clevis", "clevis-decrypt-tpm2", "jose", "tpm2_createprimary"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (bash test/deps.sh clevis clevis-tpm2 jose tpm2-tools): %v", tool, err)
		}
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	sock, conn := swtpmsim.Start(t, state)
	secret := []byte("first-boot key: 0123456789abcdef")
	jwe, err := ClevisSeal(conn, secret)
	conn.Close() // swtpm serves one client at a time: now clevis's tools
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jwe.LUKSToken(1); err != nil {
		t.Fatal(err)
	}
	decrypt := func(tcti string) ([]byte, error) {
		cmd := exec.Command("clevis", "decrypt")
		cmd.Env = append(os.Environ(), "TPM2TOOLS_TCTI="+tcti)
		cmd.Stdin = strings.NewReader(jwe.Compact())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, &exec.ExitError{ProcessState: cmd.ProcessState, Stderr: stderr.Bytes()}
		}
		return out, nil
	}
	got, err := decrypt("swtpm:path=" + sock)
	if err != nil {
		t.Fatalf("clevis decrypt: %v: %s", err, err.(*exec.ExitError).Stderr)
	}
	if !bytes.Equal(got, secret) {
		t.Fatalf("clevis decrypt gave %q, want %q", got, secret)
	}

	// Another TPM (another owner seed) cannot load the sealed key.
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	sock2, conn2 := swtpmsim.Start(t, other)
	conn2.Close()
	got, err = decrypt("swtpm:path=" + sock2)
	if err == nil {
		t.Fatalf("another TPM decrypted the first-boot key: %q", got)
	}
	// Refused by the TPM itself: the sealed object's integrity is bound
	// to the storage key of the TPM that made it.
	if stderr := string(err.(*exec.ExitError).Stderr); !strings.Contains(stderr, "Loading jwk to TPM2 failed") {
		t.Errorf("another TPM: clevis decrypt failed otherwise than at tpm2_load:\n%s", stderr)
	}
}
