package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExportTinkerbell(t *testing.T) {
	out := filepath.Join(t.TempDir(), "new", "tink") // created, parents too
	code, stdout, stderr := bootops(t, nil, "export", "tinkerbell", "../../examples/warehouse",
		"--site", "warehouse", "--auto-disk", "/dev/sda", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	want := "wrote " + out + ": 10 Hardware, 2 Template, 10 Workflow (site warehouse, 10 of 20 nodes, namespace tink-system)\n"
	if stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	// Nodes registered by serial number only are named on stderr, with
	// where they are and why; none dropped silently.
	for _, n := range []string{"01", "02", "05", "06", "09", "10", "13", "14", "17", "18"} {
		line := "skipped rack1-" + n + " (sites/warehouse/nodes/rack1-" + n + ".yaml:1): no MAC address: Tinkerbell finds a machine's Hardware by the MAC it DHCPs with (add identity.mac)\n"
		if !strings.Contains(stderr, line) {
			t.Errorf("stderr lacks %q:\n%s", line, stderr)
		}
	}
	if !strings.HasSuffix(stderr, "10 of 20 nodes skipped: no Tinkerbell Hardware for them\n") {
		t.Errorf("stderr does not end with the count:\n%s", stderr)
	}
	first := map[string][]byte{}
	for _, f := range []string{"hardware.yaml", "templates.yaml", "workflows.yaml"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\nkind: ")); f != "templates.yaml" && n != 10 || f == "templates.yaml" && n != 2 {
			t.Errorf("%s: %d objects", f, n)
		}
		first[f] = b
	}
	if !bytes.Contains(first["hardware.yaml"], []byte("mac: \"52:54:00:00:01:04\"")) {
		t.Errorf("hardware.yaml lacks rack1-04's MAC")
	}

	// Again, with the flags from the environment: the same bytes.
	code, _, stderr = bootops(t, map[string]string{"BOOTOPS_SITE": "warehouse", "BOOTOPS_AUTO_DISK": "/dev/sda", "BOOTOPS_O": out},
		"export", "tinkerbell", "../../examples/warehouse")
	if code != 0 {
		t.Fatalf("from the environment: exit %d, stderr %s", code, stderr)
	}
	for f, b := range first {
		again, _ := os.ReadFile(filepath.Join(out, f))
		if !bytes.Equal(again, b) {
			t.Errorf("%s differs on a second export", f)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(out, "*.tmp")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}

	// Without --auto-disk the nodes whose disk is auto are skipped too, and
	// say how to export them.
	code, stdout, stderr = bootops(t, nil, "export", "tinkerbell", "../../examples/warehouse", "--site", "warehouse", "-o", t.TempDir())
	if code != 0 || !strings.Contains(stdout, ": 0 Hardware") ||
		!strings.Contains(stderr, `skipped rack1-03 (sites/warehouse/nodes/rack1-03.yaml:1): disk "auto": a Tinkerbell action needs a device path (set disk: on the profile or node, or pass --auto-disk /dev/sda)`) {
		t.Errorf("no --auto-disk: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}

	// The demo repository's node with a MAC installs on /dev/vda.
	code, _, stderr = bootops(t, nil, "export", "tinkerbell", demoRepo(t), "--site", "lab", "-o", out)
	hw, _ := os.ReadFile(filepath.Join(out, "hardware.yaml"))
	if code != 0 || !bytes.Contains(hw, []byte("name: vm-mac")) || !bytes.Contains(hw, []byte("device: /dev/vda")) ||
		!strings.Contains(stderr, "skipped vm-serial") || !strings.Contains(stderr, "skipped vm-uuid") {
		t.Errorf("demo: exit %d, stderr %s\n%s", code, stderr, hw)
	}
}

func TestExportTinkerbellErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	bad := t.TempDir()
	write(t, bad, "n.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n\nidenity: {}\n")
	tests := map[string]struct {
		args   []string
		code   int
		stderr string
	}{
		"unknown site": {[]string{"tinkerbell", "../../examples/warehouse", "--site", "wharehouse", "-o", out}, 1,
			"bootops export: no site \"wharehouse\" (sites: warehouse) (did you mean \"warehouse\"?)\n"},
		"invalid repository": {[]string{"tinkerbell", bad, "--site", "s", "-o", out}, 1,
			"n.yaml:4:1: idenity: unknown field (did you mean \"identity\"?)"},
		"missing repository": {[]string{"tinkerbell", filepath.Join(bad, "nope"), "--site", "s", "-o", out}, 1, "no such file or directory"},
		"no target":          {[]string{"--site", "warehouse"}, 2, "want a target first: bootops export tinkerbell"},
		"nothing":            {nil, 2, "want a target first"},
		"unknown target": {[]string{"tinkerbel", "../../examples/warehouse"}, 2,
			"unknown target \"tinkerbel\": want tinkerbell (did you mean \"tinkerbell\"?)"},
		"no site":       {[]string{"tinkerbell", "../../examples/warehouse", "-o", out}, 2, "want --site SITE and -o OUT"},
		"no output":     {[]string{"tinkerbell", "../../examples/warehouse", "--site", "warehouse"}, 2, "want --site SITE and -o OUT"},
		"two dirs":      {[]string{"tinkerbell", "a", "b", "--site", "s", "-o", out}, 2, "want at most one directory"},
		"bad auto-disk": {[]string{"tinkerbell", "--site", "s", "-o", out, "--auto-disk", "sda"}, 2, "--auto-disk \"sda\": want a device path"},
		"unknown flag":  {[]string{"tinkerbell", "--sight", "s"}, 2, "flag provided but not defined: -sight"},
		// Kubernetes would refuse every object: a usage error, before the
		// repository is read.
		"namespace Tink_System": {[]string{"tinkerbell", "../../examples/warehouse", "--site", "warehouse", "-o", out, "--namespace", "Tink_System"}, 2,
			"bootops export: --namespace \"Tink_System\": not a Kubernetes namespace: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"},
		"namespace of 70 characters": {[]string{"tinkerbell", "../../examples/warehouse", "--site", "warehouse", "-o", out, "--namespace", strings.Repeat("tink", 17) + "ns"}, 2,
			"bootops export: --namespace \"" + strings.Repeat("tink", 17) + "ns\": not a Kubernetes namespace: must be no more than 63 bytes\n"},
		"empty namespace": {[]string{"tinkerbell", "../../examples/warehouse", "--site", "warehouse", "-o", out, "--namespace", ""}, 2,
			"bootops export: --namespace \"\": not a Kubernetes namespace"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := bootops(t, nil, append([]string{"export"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, stdout, stderr, tc.code, tc.stderr)
			}
		})
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s written by a failed export", out)
	}
}

func TestExportTinkerbellHelp(t *testing.T) {
	for _, args := range [][]string{{"export", "--help"}, {"export", "tinkerbell", "--help"}, {"help", "export"}} {
		code, stdout, _ := bootops(t, nil, args...)
		if code != 0 || !strings.Contains(stdout, "\nExample:\n  bootops export tinkerbell examples/warehouse --site warehouse --auto-disk /dev/sda -o out/tink\n") {
			t.Errorf("%v: exit %d, stdout:\n%s", args, code, stdout)
		}
		for _, s := range []string{"No equivalent:", "hardware.yaml", "without a MAC", "-auto-disk", "-namespace"} {
			if !strings.Contains(stdout, s) {
				t.Errorf("%v: help lacks %q", args, s)
			}
		}
	}
	// The example runs as printed.
	dir := t.TempDir()
	wd, _ := os.Getwd()
	if err := os.CopyFS(filepath.Join(dir, "examples", "warehouse"), os.DirFS(filepath.Join(wd, "../../examples/warehouse"))); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	code, stdout, stderr := bootops(t, nil, strings.Fields("export tinkerbell examples/warehouse --site warehouse --auto-disk /dev/sda -o out/tink")...)
	if code != 0 || !strings.HasPrefix(stdout, "wrote out/tink: 10 Hardware") {
		t.Errorf("the example: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
}
