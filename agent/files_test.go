package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/tpm"
)

// withTarget gives r a fake /dev/vda whose partition 2 is root.
func withTarget(t *testing.T, r *Runner) (root string, fm *fakeMounts) {
	t.Helper()
	root = t.TempDir()
	fm = &fakeMounts{roots: map[string]string{"/dev/vda2": root}}
	r.Mount, r.Unmount = fm.mount, fm.unmount
	return root, fm
}

func TestWriteFile(t *testing.T) {
	r, rec := newRunner(t)
	root, fm := withTarget(t, r)
	err := r.Run(t.Context(), wf(
		plan.Action{Action: "write-file", Name: "motd", Disk: "/dev/vda", Partition: 2, FSType: "vfat",
			Path: "/etc/bootops/motd", Content: "hello n1\n", Mode: "0600"},
		plan.Action{Action: "write-file", Name: "plain", Disk: "/dev/vda", Partition: 2, Path: "/../etc/plain", Content: "x"},
	))
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]struct {
		content string
		mode    os.FileMode
	}{
		"etc/bootops/motd": {"hello n1\n", 0o600},
		"etc/plain":        {"x", 0o644},
	} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || string(b) != want.content {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want.content)
			continue
		}
		if fi, _ := os.Stat(filepath.Join(root, p)); fi.Mode().Perm() != want.mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want.mode)
		}
	}
	if len(fm.calls) != 4 || !strings.HasPrefix(fm.calls[0], "mount /dev/vda2 vfat ") || !strings.HasPrefix(fm.calls[2], "mount /dev/vda2 ext4 ") {
		t.Errorf("mounts %q: want /dev/vda2 as vfat, then as ext4 (the default)", fm.calls)
	}
	for _, c := range fm.calls {
		if dir, ok := strings.CutPrefix(c, "unmount "); ok {
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("mount point %s left behind", dir)
			}
		}
	}
	if got := rec.types(); !slices.Equal(got, []string{"started", "done", "started", "done", "provisioned"}) {
		t.Errorf("events %v", got)
	}
}

func TestWriteFileUnmountsOnError(t *testing.T) {
	r, rec := newRunner(t)
	root, fm := withTarget(t, r)
	os.WriteFile(filepath.Join(root, "etc"), []byte("a file, not a directory"), 0o644)
	err := r.Run(t.Context(), wf(plan.Action{Action: "write-file", Disk: "/dev/vda", Partition: 2, Path: "/etc/motd", Content: "x"}))
	if err == nil {
		t.Fatal("Run succeeded")
	}
	if len(fm.calls) != 2 || !strings.HasPrefix(fm.calls[1], "unmount ") {
		t.Errorf("mounts %q: want a mount and its unmount", fm.calls)
	}
	if msg := rec.of(plan.AgentFailed)[0].Message; !strings.Contains(msg, "write-file") || !strings.Contains(msg, "/etc") {
		t.Errorf("failed event %q does not name the action and the path", msg)
	}
}

func TestWriteFileStaysInTheNewSystem(t *testing.T) {
	r, _ := newRunner(t)
	root, _ := withTarget(t, r)
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(root, "etc")) // an absolute link in the new system
	err := r.Run(t.Context(), wf(plan.Action{Action: "write-file", Disk: "/dev/vda", Partition: 2, Path: "/etc/motd", Content: "x"}))
	if err == nil {
		t.Error("Run followed a link out of the new system")
	}
	if _, err := os.Stat(filepath.Join(outside, "motd")); err == nil {
		t.Error("a file was written outside the new system")
	}
}

func TestCloudInit(t *testing.T) {
	seed := Seed{UserData: "#cloud-config\nhostname: n1\n", MetaData: "instance-id: n1-0\n", NetworkConfig: "version: 2\n"}
	for name, c := range map[string]struct {
		seed    *Seed
		action  plan.Action
		dir     string
		want    map[string]string
		wantLog string
	}{
		"seed": {
			seed:   &seed,
			action: plan.Action{Path: DefaultSeedPath},
			dir:    "var/lib/cloud/seed/nocloud",
			want:   map[string]string{"user-data": seed.UserData, "meta-data": seed.MetaData, "network-config": seed.NetworkConfig},
		},
		"content replaces user-data": {
			seed:   &Seed{UserData: "ignored", MetaData: "instance-id: x\n"},
			action: plan.Action{Path: "/seed", Content: "#cloud-config\n"},
			dir:    "seed",
			want:   map[string]string{"user-data": "#cloud-config\n", "meta-data": "instance-id: x\n"},
		},
		"the TPM key the reports are quoted with": {
			seed:    &Seed{MetaData: "instance-id: n1-0\n", Report: "#!/bin/sh\n", ReportKey: &tpm.ReportKey{Public: []byte("\x00\x02pk"), Private: []byte("\x00\x03prv")}},
			action:  plan.Action{Path: DefaultSeedPath},
			dir:     "var/lib/bootops",
			want:    map[string]string{"report-key.pub": "\x00\x02pk", "report-key.priv": "\x00\x03prv"},
			wantLog: "wrote the TPM key the reports are quoted with to /var/lib/bootops/report-key.{pub,priv}",
		},
		"no seed": {
			dir:     "var/lib/cloud/seed/nocloud",
			want:    map[string]string{"user-data": "", "meta-data": ""},
			wantLog: "no cloud-init seed",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r, rec := newRunner(t)
			root, _ := withTarget(t, r)
			if c.seed != nil {
				r.CloudInit = func(context.Context) (Seed, error) { return *c.seed, nil }
			}
			a := c.action
			a.Action, a.Disk, a.Partition = "cloud-init", "/dev/vda", 2
			if err := r.Run(t.Context(), wf(a)); err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(filepath.Join(root, c.dir))
			if len(entries) != len(c.want) {
				t.Errorf("%d files in %s, want %d", len(entries), c.dir, len(c.want))
			}
			for f, want := range c.want {
				p := filepath.Join(root, c.dir, f)
				b, err := os.ReadFile(p)
				if err != nil || string(b) != want {
					t.Errorf("%s: %q, %v; want %q", f, b, err, want)
				}
				if fi, err := os.Stat(p); err == nil && fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
				}
			}
			if logs := strings.Join(rec.logs(), "\n"); c.wantLog != "" && !strings.Contains(logs, c.wantLog) {
				t.Errorf("logs %q do not say %q", logs, c.wantLog)
			}
		})
	}
}

func TestCloudInitSeedError(t *testing.T) {
	r, _ := newRunner(t)
	withTarget(t, r)
	r.CloudInit = func(context.Context) (Seed, error) { return Seed{}, errors.New("server said 404") }
	err := r.Run(t.Context(), wf(plan.Action{Action: "cloud-init", Disk: "/dev/vda", Partition: 2}))
	if err == nil || !strings.Contains(err.Error(), "cloud-init seed: server said 404") {
		t.Errorf("Run: %v, want the seed's error", err)
	}
}
