//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootops/bootops/internal/testutil"
)

// installedLogs is what an installed system logged, read from its disk
// on the host after its VM ended: why cloud-init or the report did not
// run, when a test waited for a running report in vain. The root
// (partition 2) is copied out — decrypted with the volume key
// recoveryKey opens when it is set (in Go: these hosts have no
// device-mapper) — and its journal replayed on the copy; the disk is
// not changed. What it cannot read, it says.
func installedLogs(t *testing.T, disk, recoveryKey string) string {
	t.Helper()
	var out strings.Builder
	say := func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }
	sh := func(name string, args ...string) (string, error) {
		b, err := exec.Command(name, args...).CombinedOutput()
		return strings.TrimSpace(string(b)), err
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root.img")
	start := partitionStart(t, disk, 2)
	if recoveryKey == "" {
		if o, err := sh("dd", "if="+disk, "of="+root, "bs=4M", fmt.Sprintf("skip=%d", start), "iflag=skip_bytes", "conv=sparse", "status=none"); err != nil {
			return fmt.Sprintf("installed logs: copying the root: %v %s", err, o)
		}
	} else if err := decryptRoot(t, disk, root, recoveryKey); err != nil {
		return "installed logs: " + err.Error()
	}
	// The VM was killed: what its last seconds wrote is in the journal.
	fsck := exec.Command("e2fsck", "-E", "journal_only", "-y", root)
	if o, err := fsck.CombinedOutput(); fsck.ProcessState == nil || fsck.ProcessState.ExitCode() > 2 {
		say("(e2fsck -E journal_only: %v %s)", err, o)
	}
	cat := func(file string, lines int) {
		o, err := sh("debugfs", "-R", "cat "+file, root)
		// debugfs prints its banner first; a missing file is a line of its own.
		if _, rest, ok := strings.Cut(o, "\n"); ok {
			o = rest
		}
		if err != nil || strings.Contains(o, "File not found") || strings.TrimSpace(o) == "" {
			say("---- %s: none", file)
			return
		}
		say("---- %s (its last %d lines)\n%s", file, lines, testutil.Tail(o, lines))
	}
	cat("/var/log/bootops-report.log", 20)
	cat("/var/log/cloud-init-output.log", 30)
	cat("/var/log/cloud-init.log", 40)
	// The journal: the last boot's cloud-init, generator and failures.
	jdir := filepath.Join(dir, "journal")
	if o, err := sh("debugfs", "-R", "rdump /var/log/journal "+dir, root); err != nil {
		say("---- journal: %v %s", err, o)
	} else if o, err := sh("journalctl", "-D", jdir, "-b", "--no-pager", "-o", "short-monotonic", "--grep", "cloud-init|ds-identify|generator|bootops|Failed|failed|timed out"); err != nil && o == "" {
		say("---- journal: %v", err)
	} else {
		say("---- journal of the last boot (cloud-init, bootops, failures; its last 40 lines)\n%s", testutil.Tail(o, 40))
	}
	return out.String()
}

// decryptRoot writes the plaintext of disk's LUKS2 root (partition 2, as
// the agent makes it: rootCipher) to out, sparse: a block that decrypts to
// zeros is not written.
func decryptRoot(t *testing.T, disk, out, recoveryKey string) error {
	t.Helper()
	hdr := luksHeader(t, disk)
	c, start := rootCipher(t, disk, hdr, openWithRecovery(t, hdr, recoveryKey))
	in, err := os.Open(disk)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.Create(out)
	if err != nil {
		return err
	}
	defer o.Close()
	buf, plain := make([]byte, 1<<20), make([]byte, 1<<20)
	zero := make([]byte, len(buf))
	var pos int64
	for {
		n, err := in.ReadAt(buf, start+pos)
		n -= n % 512
		for i := 0; i < n; i += 512 {
			c.Decrypt(plain[i:i+512], buf[i:i+512], uint64((pos+int64(i))/512))
		}
		if n > 0 && !bytes.Equal(plain[:n], zero[:n]) {
			if _, err := o.WriteAt(plain[:n], pos); err != nil {
				return err
			}
		}
		pos += int64(n)
		if err != nil || n == 0 {
			break
		}
	}
	return o.Truncate(pos)
}
