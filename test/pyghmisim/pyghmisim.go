// Package pyghmisim runs an IPMI BMC of pyghmi's for tests: the server
// side of Debian's python3-pyghmi (fakebmc.py beside this file), on
// 127.0.0.1 at a free UDP port, with faults a test sets while it runs —
// slow answers, dropped answers, a hang, a power state that shows late —
// and a log of every power and boot-device order it was given. A wrong
// password is refused as a real BMC refuses it (RAKP); it speaks cipher
// suite 3 only, as many older BMCs do.
package pyghmisim

import (
	_ "embed"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

//go:embed fakebmc.py
var script []byte

// Python is Debian's interpreter, the one python3-pyghmi is installed for
// (a python3 earlier on the PATH may be another).
const Python = "/usr/bin/python3"

// Faults are what the BMC does wrong (zero: nothing).
type Faults struct {
	Latency   time.Duration // before each answer
	DropEvery int           // the n-th, 2n-th … request gets no answer
	Hang      bool          // no request gets an answer
	LateState time.Duration // a power change shows this much later
}

// BMC is one running simulator.
type BMC struct {
	Port int
	dir  string
}

// Start runs a BMC that lets user in with password; it stops when the
// test ends. The test fails (it does not skip) without pyghmi: make test
// installs it.
func Start(t testing.TB, user, password string) *BMC {
	t.Helper()
	if out, err := exec.Command(Python, "-c", "import pyghmi.ipmi.bmc").CombinedOutput(); err != nil {
		t.Fatalf("pyghmi is missing (Debian package python3-pyghmi; make test installs it): %v %s", err, out)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "fakebmc.py")
	if err := os.WriteFile(path, script, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &BMC{Port: c.LocalAddr().(*net.UDPAddr).Port, dir: dir}
	c.Close()
	cmd := exec.Command(Python, path, "--port", strconv.Itoa(b.Port), "--user", user, "--password", password, "--state", dir)
	log, _ := os.Create(filepath.Join(dir, "bmc.log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); log.Close() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			return b
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(dir, "bmc.log"))
			t.Fatalf("pyghmi's BMC did not start in 20 s:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SetFaults makes the BMC do f from its next request on.
func (b *BMC) SetFaults(f Faults) error {
	v, _ := json.Marshal(map[string]any{"latency": f.Latency.Seconds(), "drop_every": f.DropEvery, "hang": f.Hang, "late_state": f.LateState.Seconds()})
	tmp := filepath.Join(b.dir, "faults.json.tmp")
	if err := os.WriteFile(tmp, v, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(b.dir, "faults.json"))
}

// Told is every order the BMC took, oldest first: "boot network", "power
// cycle", "power off", "power on", "power reset", "power soft".
func (b *BMC) Told() []string {
	out, _ := os.ReadFile(filepath.Join(b.dir, "told.log"))
	if len(out) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
