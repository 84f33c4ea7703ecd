package deb

import (
	"bytes"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestVersion(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 43, 11, 0, time.UTC)
	commit := "58456f1e2b3c4d5e6f708192a3b4c5d6e7f80912"
	for _, c := range []struct{ describe, want string }{
		{"v1.2.3", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"v1.2.3-4-gabc1234", "1.2.3+git4.abc1234"},
		{"v0.9.0-rc1", "0.9.0~rc1"},
		{"v0.9.0-rc1-2-gabc1234", "0.9.0~rc1+git2.abc1234"},
		{"58456f1", "0~git20261127104311.58456f1"}, // no tag: a commit starting with a digit
		{"e2864b0", ""},                            // not this commit, not a tag
		{"release", ""},
	} {
		got, err := Version(c.describe, commit, at)
		if c.want == "" {
			if err == nil {
				t.Errorf("Version(%q) = %q, want an error", c.describe, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Version(%q) = %q, %v; want %q", c.describe, got, err, c.want)
		}
	}
}

// TestWriteReproducible: the same inputs give the same bytes, and the
// package holds what it must (dpkg-deb reads it back).
func TestWriteReproducible(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Fatal("dpkg-deb is needed (Debian package dpkg)")
	}
	dir := t.TempDir()
	bin := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	o := Options{Version: "1.2.3", Commit: "abc", Bootops: bin("bootops", "#!/bin/sh\n"), Agent: bin("agent", "#!/bin/sh\n# agent\n"),
		MTime: time.Unix(1700000000, 0)}
	var sums [2][32]byte
	for i := range sums {
		var b bytes.Buffer
		if err := Write(&b, o); err != nil {
			t.Fatal(err)
		}
		sums[i] = sha256.Sum256(b.Bytes())
		if i == 0 {
			deb := filepath.Join(dir, FileName(o.Version))
			if err := os.WriteFile(deb, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			list := exec.Command("dpkg-deb", "-c", deb)
			list.Env = append(os.Environ(), "TZ=UTC")
			out, err := list.CombinedOutput()
			if err != nil {
				t.Fatalf("dpkg-deb -c: %v\n%s", err, out)
			}
			for _, want := range []string{
				"-rwxr-xr-x root/root        10 2023-11-14 22:13 ./usr/lib/bootops/bootops\n",
				"./usr/bin/bootops -> ../lib/bootops/bootops",
				"./usr/lib/bootops/bootops-agent", "./usr/lib/systemd/system/bootops.service",
				"./usr/lib/systemd/system/bootops-hub.service", "./etc/bootops/serve.yaml", "./etc/bootops/hub.env",
				"./usr/share/doc/bootops/copyright", "./usr/share/doc/bootops/changelog.gz",
			} {
				if !strings.Contains(string(out), want) {
					t.Errorf("package lacks %q:\n%s", want, out)
				}
			}
			ctl, err := exec.Command("dpkg-deb", "-f", deb, "Version", "Depends").CombinedOutput()
			if err != nil || string(ctl) != "Version: 1.2.3\nDepends: adduser, ipxe\n" {
				t.Errorf("control fields: %v\n%s", err, ctl)
			}
			conf, err := exec.Command("dpkg-deb", "--info", deb, "conffiles").CombinedOutput()
			if err != nil || string(conf) != "/etc/bootops/hub.env\n/etc/bootops/serve.yaml\n" {
				t.Errorf("conffiles: %v\n%q", err, conf)
			}
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("two builds of the same inputs differ: %x, %x", sums[0], sums[1])
	}
}
