package agentapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bootops/bootops/plan"
)

// fakeClevis is a clevis for the report script's sealing: its LUKS
// slots are lines of a file, its calls go to a log.
const fakeClevis = `#!/bin/sh
echo "$*" >> "$FAKE/calls"
case "$1 $2" in
"luks list") cat "$FAKE/slots" ;;
"luks pass") [ -e "$FAKE/pass-fails" ] && { echo "cannot decrypt" >&2; exit 1; }; printf FIRSTBOOTKEY ;;
"luks bind") key=$(cat); [ "$key" = FIRSTBOOTKEY ] || { echo "wrong key $key" >&2; exit 1; }
	eval cfg=\${$#}; echo "2: tpm2 '$cfg'" >> "$FAKE/slots" ;;
"luks unbind") grep -v '^1:' "$FAKE/slots" > "$FAKE/s"; mv "$FAKE/s" "$FAKE/slots" ;;
esac
`

// The report script seals the root to this boot's PCRs once, drops the
// first-boot key, and says so in every report; a failure is reported,
// not hidden.
func TestReportScriptSealsAtFirstBoot(t *testing.T) {
	var mu sync.Mutex
	var reports []plan.OSReport
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var rep plan.OSReport
		json.Unmarshal(b, &rep)
		mu.Lock()
		reports = append(reports, rep)
		mu.Unlock()
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake")
	bin := filepath.Join(dir, "bin")
	for _, d := range []string{fake, bin, filepath.Join(dir, "run")} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(bin, "clevis"), []byte(fakeClevis), 0o755)
	os.WriteFile(filepath.Join(dir, "run", "result.json"), []byte(`{"v1": {"errors": []}}`), 0o644)
	os.WriteFile(filepath.Join(fake, "slots"), []byte("1: tpm2 '{\"hash\":\"sha256\",\"key\":\"ecc\"}'\n"), 0o644)
	state := filepath.Join(dir, "encryption.json")
	os.WriteFile(state, []byte(`{"device": "/dev/disk/by-partuuid/abc", "pcrs": [7, 11], "firstBootSlot": 1}`), 0o600)
	script := filepath.Join(dir, "bootops-report")
	os.WriteFile(script, []byte(fmt.Sprintf(reportScript, srv.URL+plan.ReportPath, "tok", "lab", "a", "", "digest")), 0o700)
	run := func() (string, plan.OSReport) {
		t.Helper()
		cmd := exec.Command("sh", script)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "FAKE="+fake, "BOOTOPS_REPORT_FOREGROUND=1",
			"BOOTOPS_CLOUD_INIT_RUN="+filepath.Join(dir, "run"), "BOOTOPS_REPORT_STATE="+filepath.Join(dir, "state"), "BOOTOPS_ENCRYPTION_STATE="+state)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the script: %v\n%s", err, out)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(reports) == 0 {
			t.Fatalf("no report:\n%s", out)
		}
		return string(out), reports[len(reports)-1]
	}
	calls := func() []string {
		b, _ := os.ReadFile(filepath.Join(fake, "calls"))
		os.Remove(filepath.Join(fake, "calls"))
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}

	out, rep := run()
	want := []string{
		"luks list -d /dev/disk/by-partuuid/abc",
		"luks pass -d /dev/disk/by-partuuid/abc -s 1",
		`luks bind -y -d /dev/disk/by-partuuid/abc -k - tpm2 {"pcr_bank": "sha256", "pcr_ids": "7,11"}`,
		"luks unbind -f -d /dev/disk/by-partuuid/abc -s 1",
	}
	if got := calls(); !slices.Equal(got, want) {
		t.Errorf("first boot: clevis %q\nwant %q\n%s", got, want, out)
	}
	if e := rep.Encryption; e == nil || !e.Sealed || !slices.Equal(e.PCRs, []int{7, 11}) || e.Error != "" {
		t.Errorf("first boot's report: %+v", rep.Encryption)
	}
	// The next boots: sealed already, nothing changes.
	_, rep = run()
	if got := calls(); !slices.Equal(got, want[:1]) {
		t.Errorf("second boot: clevis %q, want only the listing", got)
	}
	if e := rep.Encryption; e == nil || !e.Sealed {
		t.Errorf("second boot's report: %+v", rep.Encryption)
	}
	// A first boot whose key cannot be read says why.
	os.WriteFile(filepath.Join(fake, "slots"), []byte("1: tpm2 '{\"hash\":\"sha256\",\"key\":\"ecc\"}'\n"), 0o644)
	os.WriteFile(filepath.Join(fake, "pass-fails"), nil, 0o644)
	_, rep = run()
	if e := rep.Encryption; e == nil || e.Sealed || !strings.Contains(e.Error, "cannot decrypt") {
		t.Errorf("a failed seal's report: %+v", rep.Encryption)
	}
	// Without the state file (an install in the clear) the report says
	// nothing of encryption.
	os.Remove(state)
	calls()
	if _, rep = run(); rep.Encryption != nil || len(calls()) > 1 {
		t.Errorf("a clear install's report: %+v", rep.Encryption)
	}
}
