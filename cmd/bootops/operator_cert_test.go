package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/trust"
)

// Operators' client certificates of the site CA, as the README's commands
// make and use them: a reader reads and may not power a node, an operator
// may; a revoked certificate, none, or a machine's handshake reads
// nothing; the boot paths stay open over HTTPS to a machine without a
// certificate.
func TestOperatorCertificates(t *testing.T) {
	state, certs := t.TempDir(), t.TempDir()
	if code, _, errs := bootops(t, nil, "ca", "init", "--host", "127.0.0.1", "--state-dir", state); code != 0 {
		t.Fatalf("ca init: %s", errs)
	}
	serials := map[string]string{}
	for name, role := range map[string]string{"alice": "read", "bob": "operate", "carol": "operate"} {
		code, out, errs := bootops(t, nil, "ca", "operator", name, "--role", role, "--days", "7", "--out", certs, "--state-dir", state)
		m := regexp.MustCompile(`serial ([0-9a-f]+)`).FindStringSubmatch(out)
		if code != 0 || m == nil {
			t.Fatalf("ca operator %s: %d %s %s", name, code, out, errs)
		}
		serials[name] = m[1]
	}
	if code, _, errs := bootops(t, nil, "ca", "operator", "alice", "--role", "read", "--out", certs, "--state-dir", state); code == 0 || !strings.Contains(errs, "already exists") {
		t.Errorf("a second alice replaced the first: %d %s", code, errs)
	}
	ops := filepath.Join(t.TempDir(), "operators")
	if err := os.WriteFile(ops, []byte("revoked "+serials["carol"]+" carol\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := runServe(t, nil, "--source", demoRepo(t), "--state-dir", state, "--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0",
		"--dhcp", "off", "--tftp-addr", "", "--operators-file", ops)
	var addr string
	for i := 0; i < 400 && addr == ""; i++ {
		addr = d.logged("https", "addr")
		time.Sleep(25 * time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("serve did not start HTTPS:\n%s", d.stderr.String())
	}
	server := "https://" + addr
	ca := filepath.Join(state, "tls", trust.CAFile)
	// A token nobody gave: what counts is the certificate (and the
	// machine's own operator token, if any, is not read).
	bogus := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(bogus, []byte("not-an-operator-token-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	as := func(name string) map[string]string {
		if name == "" {
			return map[string]string{"BOOTOPS_CA": ca, "BOOTOPS_TOKEN_FILE": bogus}
		}
		return map[string]string{"BOOTOPS_CA": ca, "BOOTOPS_TOKEN_FILE": bogus,
			"BOOTOPS_CERT": filepath.Join(certs, name+".pem"), "BOOTOPS_KEY": filepath.Join(certs, name+"-key.pem")}
	}
	var code int
	var out, errs string
	for i := 0; i < 100 && !strings.Contains(out, "vm-serial"); i++ {
		code, out, errs = bootops(t, as("alice"), "status", "--server", server)
		time.Sleep(20 * time.Millisecond)
	}
	if code != 0 || !strings.Contains(out, "vm-serial") {
		t.Fatalf("alice (read) reads status: %d %s\n%s", code, errs, out)
	}
	for _, who := range []string{"", "carol"} {
		code, out, errs = bootops(t, as(who), "status", "--server", server)
		if code == 0 || strings.Contains(out, "vm-serial") || !strings.Contains(errs, "operator credential") {
			t.Errorf("%q read the status: %d %s\n%s", who, code, errs, out)
		}
	}
	code, _, errs = bootops(t, as("alice"), "power", "vm-serial", "on", "--server", server)
	if code == 0 || !strings.Contains(errs, "operate role") {
		t.Errorf("alice (read) powered a node: %d %s", code, errs)
	}
	code, _, errs = bootops(t, as("bob"), "power", "vm-serial", "on", "--server", server)
	t.Logf("bob (operate), power on: exit %d: %s", code, strings.TrimSpace(errs))
	if strings.Contains(errs, "operate role") || strings.Contains(errs, "operator credential") {
		t.Errorf("bob (operate) was refused: %d %s", code, errs)
	}
	// A machine over HTTPS: no certificate asked for, its script served.
	cfg, err := trust.ClientTLS("", "", ca)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := client.Get(server + "/ipxe?serial=demo-0001&mac=52:54:00:12:34:56")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "bootops.node=vm-serial") {
		t.Errorf("a machine's script over HTTPS: %s\n%s", resp.Status, b)
	}
}
