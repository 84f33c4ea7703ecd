// Package swtpmsim starts swtpm (Debian's swtpm, the TPM the end-to-end
// VMs get) for tests that talk to it directly: one TPM on a Unix socket,
// powered on and started up, its state in a folder the test gives.
package swtpmsim

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Start runs swtpm with its state in dir (an empty folder manufactures a
// new TPM; swtpm_setup's output an EK-certified one) and connects to it.
// It returns the data socket's path (for a TCTI, `swtpm:path=SOCK`, once
// conn is closed: swtpm serves one client at a time) and the connection.
// swtpm is killed when the test ends.
func Start(t testing.TB, dir string) (sock string, conn net.Conn) {
	t.Helper()
	sock = filepath.Join(filepath.Dir(dir), filepath.Base(dir)+".sock")
	sw := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+dir,
		"--server", "type=unixio,path="+sock, "--ctrl", "type=unixio,path="+sock+".ctrl",
		"--flags", "not-need-init,startup-clear")
	sw.Stderr = os.Stderr
	if err := sw.Start(); err != nil {
		t.Fatalf("swtpm (Debian package swtpm): %v", err)
	}
	t.Cleanup(func() { sw.Process.Kill(); sw.Wait() })
	var err error
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		if conn, err = net.Dial("unix", sock); err == nil {
			return sock, conn
		}
	}
	t.Fatalf("swtpm socket %s: %v", sock, err)
	return "", nil
}
