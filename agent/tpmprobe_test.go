package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTPMPresence(t *testing.T) {
	root := t.TempDir()
	sysfs := filepath.Join(root, "sys")
	if got := tpmPresence(sysfs); got != "none" {
		t.Errorf("no device: %q, want none", got)
	}
	os.MkdirAll(filepath.Join(root, "dev"), 0o755)
	os.WriteFile(filepath.Join(root, "dev/tpmrm0"), nil, 0o600)
	if got := tpmPresence(sysfs); !strings.HasPrefix(got, "/dev/tpmrm0, no event log (") {
		t.Errorf("device without securityfs: %q", got)
	}
	logDir := filepath.Join(sysfs, "kernel/security/tpm0")
	os.MkdirAll(logDir, 0o755)
	os.WriteFile(filepath.Join(logDir, "binary_bios_measurements"), nil, 0o444)
	if got := tpmPresence(sysfs); got != "/dev/tpmrm0, event log empty" {
		t.Errorf("empty log: %q", got)
	}
	os.WriteFile(filepath.Join(logDir, "binary_bios_measurements"), make([]byte, 12345), 0o444)
	if got := tpmPresence(sysfs); got != "/dev/tpmrm0, event log 12345 bytes" {
		t.Errorf("a log: %q", got)
	}
}
