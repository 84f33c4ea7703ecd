package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/tpm/tpmtest"
)

// An unknown machine whose check-in carried its TPM's EK hash is enrolled
// by it; the written Node validates, and explain shows what the node's
// check-in must prove. A broken EK hash is a positioned error.
func TestEnrollTPMExplain(t *testing.T) {
	const ek = "sha256:ee08903b864743955c122523cfc868b09e2cd9d67e6d629130e8cb55aa11f7ca"
	repo := t.TempDir()
	files := map[string]string{
		"sites/lab/site.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: lab\nnetwork: {serverAddress: 198.18.0.1}\ndefaultProfile: p\nunknownNodes: hold\n",
		"profiles/p.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: p\nos: {type: immutable}\n" +
			"image: {url: http://198.18.0.1/i.raw, sha256: 3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c}\nattestation: {require: true}\n",
		"microos/default.yaml": "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\nkernel: {path: microos/vmlinuz}\ninitrd: {path: microos/initrd}\n",
		"microos/vmlinuz":      string(tpmtest.PE("kernel")),
		"microos/initrd":       "initrd\n",
	}
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(repo, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc := statusDoc{Machines: []status.Machine{
		{Key: "mac:52:54:00:ab:cd:ef", Site: "lab", MAC: "52:54:00:ab:cd:ef", EK: strings.ToUpper(ek), State: "held"},
		{Key: "mac:52:54:00:ab:cd:01", Site: "lab", MAC: "52:54:00:ab:cd:01", State: "held"},
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/status" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(doc)
	}))
	defer srv.Close()

	nodes := filepath.Join(repo, "sites/lab/nodes")
	code, out, errs := bootops(t, nil, "enroll", ek, "--server", srv.URL, "-o", nodes)
	if code != 0 {
		t.Fatalf("enroll by EK: %d %s %s", code, out, errs)
	}
	written, err := os.ReadFile(filepath.Join(nodes, "525400abcdef.yaml"))
	want := "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: 525400abcdef\nsite: lab\nidentity:\n  mac: 52:54:00:ab:cd:ef\n  tpm:\n    ek: " + ek + "\n"
	if err != nil || string(written) != want {
		t.Fatalf("enroll wrote (%v):\n%s\nwant:\n%s", err, written, want)
	}
	if code, out, errs := bootops(t, nil, "validate", repo); code != 0 {
		t.Fatalf("validate the enrolled node: %d %s %s", code, out, errs)
	}
	code, out, errs = bootops(t, nil, "explain", repo, "--mac", "52:54:00:ab:cd:ef")
	for _, line := range []string{
		"match: node 525400abcdef (site lab) installs profile p with micro-os default\n",
		"  tpm: ek " + ek + ": served only to the machine holding this TPM\n",
		"  attestation: required: secure boot on, PCR 4 shows micro-os default (PE digest sha256:",
	} {
		if code != 0 || !strings.Contains(out, line) {
			t.Errorf("explain lacks %q: %d %s\n%s", line, code, errs, out)
		}
	}
	// A machine without an EK is enrolled without a tpm, and explain says
	// nothing of one.
	if code, _, errs := bootops(t, nil, "enroll", "mac:52:54:00:ab:cd:01", "--server", srv.URL, "-o", nodes); code != 0 {
		t.Fatalf("enroll without EK: %d %s", code, errs)
	}
	if b, _ := os.ReadFile(filepath.Join(nodes, "525400abcd01.yaml")); strings.Contains(string(b), "tpm") {
		t.Errorf("a machine without an EK enrolled with one:\n%s", b)
	}
	if _, out, _ := bootops(t, nil, "explain", repo, "--mac", "52:54:00:ab:cd:01"); strings.Contains(out, "tpm:") || !strings.Contains(out, "attestation: required") {
		t.Errorf("explain of the node without a TPM:\n%s", out)
	}

	bad := strings.Replace(string(written), "ek: sha256:", "ek: sha1:", 1)
	if err := os.WriteFile(filepath.Join(nodes, "525400abcdef.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = bootops(t, nil, "validate", repo)
	if code != 1 || !strings.Contains(errs, "sites/lab/nodes/525400abcdef.yaml:8:5: identity.tpm.ek: \"sha1:") {
		t.Errorf("validate a bad EK hash: %d %s", code, errs)
	}
}
