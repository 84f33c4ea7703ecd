//go:build swtpm

package agentapi

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/test/swtpmsim"
	"github.com/bootops/bootops/tpm"
)

// TestSwtpmReportScript runs the report script cloud-init runs, with the
// real tpm2-tools against swtpm (the TPM of the end-to-end VMs): the node
// installed by a check-in that proved this TPM reports running, quoted by
// its TPM; the same script and credential on a machine without the key
// (a copied disk, a stolen credential) are refused. It needs the swtpm
// tag and Debian's swtpm and tpm2-tools:
//
//	go test -tags swtpm -run Swtpm ./boot/agentapi
func TestSwtpmReportScript(t *testing.T) {
	for _, tool := range []string{"swtpm", "tpm2_load", "tpm2_quote", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (make lab-deps installs swtpm, tpm2-tools, python3): %v", tool, err)
		}
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "tpm"), 0o700)
	sock, conn := swtpmsim.Start(t, filepath.Join(dir, "tpm"))
	m, err := tpm.Open(conn)
	if err != nil {
		t.Fatal(err)
	}
	id, err := m.Identity()
	if err != nil {
		t.Fatal(err)
	}
	_, ek, err := tpm.ParseEK(id.EK)
	if err != nil {
		t.Fatal(err)
	}
	_, h, mem, _, script := tpmInstalled(t, m, id, ek)
	key, err := m.ReportKey()
	if err != nil {
		t.Fatal(err)
	}
	m.Close() // the script's tpm2-tools connect next (swtpm serves one at a time)

	srv := httptest.NewServer(h)
	defer srv.Close()
	script = strings.Replace(script, `url, token, site, node, ca, install = "http://`, `url, token, site, node, ca, install = "`+srv.URL+`/api/v1/report" or "http://`, 1)
	f := filepath.Join(dir, "bootops-report")
	os.WriteFile(f, []byte(script), 0o700)
	run := filepath.Join(dir, "run")
	os.MkdirAll(run, 0o755)
	os.WriteFile(filepath.Join(run, ".instance-id"), []byte("t-0\n"), 0o644)
	os.WriteFile(filepath.Join(run, "result.json"), []byte(`{"v1": {"errors": []}}`), 0o644)
	runScript := func(state string) string {
		cmd := exec.Command("sh", f)
		cmd.Env = append(os.Environ(), "BOOTOPS_REPORT_FOREGROUND=1", "BOOTOPS_CLOUD_INIT_RUN="+run,
			"BOOTOPS_REPORT_STATE="+state, "BOOTOPS_TPM_TCTI=swtpm:path="+sock)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("the script: %v\n%s", err, out)
		}
		return string(out)
	}

	// A copy of the disk's script and credential elsewhere, without the
	// TPM's key: refused, and the node is not running.
	out := runScript(filepath.Join(dir, "elsewhere"))
	if !strings.Contains(out, "refused: 401") || !strings.Contains(out, "carries no TPM quote") {
		t.Errorf("the script without the TPM key:\n%s", out)
	}
	if rec, _ := mem.Machine("lab/t"); rec.State == status.StateRunning {
		t.Errorf("running after a report without the TPM's quote")
	}

	// The installed machine: the key the agent wrote beside the script.
	state := filepath.Join(dir, "state")
	os.MkdirAll(state, 0o700)
	os.WriteFile(filepath.Join(state, "report-key.pub"), key.Public, 0o600)
	os.WriteFile(filepath.Join(state, "report-key.priv"), key.Private, 0o600)
	start := time.Now()
	out = runScript(state)
	if !strings.Contains(out, "quoted by the TPM") || !strings.Contains(out, "reported to") {
		t.Fatalf("the script with the TPM key:\n%s", out)
	}
	t.Logf("the script quoted by swtpm and reported in %s", time.Since(start).Round(time.Millisecond))
	if rec, _ := mem.Machine("lab/t"); rec.State != status.StateRunning || !strings.Contains(rec.Last.Message, "quoted by its TPM") {
		t.Errorf("after the quoted report: %s, %q", rec.State, rec.Last.Message)
	}
	// Its next boot: the renewed credential, quoted again. In between,
	// the test does what the kernel's resource manager (/dev/tpmrm0, the
	// script's TPM on a real machine) does when a process closes it:
	// flush the transient objects it loaded.
	if b, err := exec.Command("tpm2_flushcontext", "-t", "-T", "swtpm:path="+sock).CombinedOutput(); err != nil {
		t.Fatalf("tpm2_flushcontext: %v\n%s", err, b)
	}
	if out = runScript(state); !strings.Contains(out, "quoted by the TPM") || !strings.Contains(out, "reported to") {
		t.Errorf("the second report, with the renewed credential:\n%s", out)
	}
}
