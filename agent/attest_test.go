package agent

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootops/bootops/tpm"
	"github.com/bootops/bootops/tpm/tpmtest"
)

// withTPM gives the agent a simulated TPM made from seed (the same seed,
// the same EK) for the test, and returns its EK hash.
func withTPM(t *testing.T, seed int64) string {
	t.Helper()
	m, id, ek, _ := tpmtest.Machine(t, seed)
	saved := openTPM
	openTPM = func(string, io.Writer) (*tpm.Machine, *tpm.Identity) { return m, &id }
	t.Cleanup(func() { openTPM = saved })
	return ek
}

// A node registered by its TPM: the agent answers the server's challenge
// with its TPM and installs; the server's timeline holds the proof.
func TestAgentProvesItsTPM(t *testing.T) {
	ek := withTPM(t, 7)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, store, image := agentServer(t, ctx, "{serial: S-N1, tpm: {ek: \""+ek+"\"}}")
	disk := filepath.Join(t.TempDir(), "vda")
	os.WriteFile(disk, make([]byte, 4<<20), 0o644)
	mnt := t.TempDir()
	var console bytes.Buffer
	args := bootArgs(t, "http://"+addr+"/ipxe?serial=S-N1&site=lab")
	err := Session(ctx, args, machineSysfs(t, "S-N1", "52:54:00:00:00:01"), &console, func(r *Runner) {
		r.ResolveDisk = func(string) (string, error) { return disk, nil }
		r.Mount = func(dev, fstype, dir string) error { return os.Symlink(mnt, filepath.Join(dir, "m")) }
		r.Unmount = func(string) error { return nil }
		r.Power = func(string) error { return nil }
	})
	if err != nil {
		t.Fatalf("agent: %v\n%s", err, console.String())
	}
	if got, _ := os.ReadFile(disk); !bytes.Equal(got[:len(image)], image) {
		t.Errorf("the disk does not hold the image\n%s", console.String())
	}
	if !strings.Contains(console.String(), "bootops-agent: tpm: credential activated") {
		t.Errorf("the console does not say the TPM proved itself:\n%s", console.String())
	}
	var proof string
	for _, e := range store.Events("lab/n1") {
		if e.TPM != "" {
			proof = e.TPM
		}
	}
	if want := "tpm: ek " + ek + ", activated"; !strings.HasPrefix(proof, want) {
		t.Errorf("the timeline's proof is %q, want %q…", proof, want)
	}
}
