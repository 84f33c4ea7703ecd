package microos

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bootops/bootops/internal/testutil"
)

// debianKernel finds the newest kernel in /boot that has its modules in
// /lib/modules, and fails the test, not skips it, when there is none: the
// Micro-OS is built from those files, so their absence is a broken setup.
func debianKernel(t *testing.T) (kernel, modules string) {
	t.Helper()
	deps, _ := filepath.Glob("/lib/modules/*/modules.dep")
	slices.Sort(deps)
	for _, d := range slices.Backward(deps) {
		dir := filepath.Dir(d)
		k := "/boot/vmlinuz-" + filepath.Base(dir)
		if _, err := os.Stat(k); err == nil {
			return k, dir
		}
	}
	t.Fatalf("no kernel with modules (/boot/vmlinuz-<version> and /lib/modules/<version>/modules.dep): install the Debian package linux-image-amd64 (make test installs it)")
	return "", ""
}

func TestDebianKernel(t *testing.T) {
	testutil.Slow(t)
	kernel, modules := debianKernel(t)
	if _, err := os.Stat(DefaultBusybox); err != nil {
		t.Fatalf("%v: install the Debian package busybox-static (make test installs it)", err)
	}
	agent := filepath.Join(t.TempDir(), "bootops-agent")
	write(t, agent, []byte("#!/bin/sh\necho fake agent\n"))

	// The defaults: modules folder from the kernel's name, busybox, module list.
	r, err := Build(Options{Kernel: kernel, Agent: agent}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(r.Initrd)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d modules, initrd %d KiB: %s", kernel, len(r.Modules), st.Size()>>10, strings.Join(r.Modules, " "))

	// Each module after everything its modules.dep line names.
	deps, err := readDepTable(modules)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range r.Modules {
		if _, dup := pos[m]; dup {
			t.Errorf("%s loaded twice", m)
		}
		pos[m] = i
	}
	for i, name := range r.Modules {
		for _, d := range deps.byName[canonical(name)].deps {
			if j, ok := pos[moduleName(d)]; !ok || j > i {
				t.Errorf("%s loads before its dependency %s", name, moduleName(d))
			}
		}
	}
	// What the lab needs is there: virtio NIC and disk, ext4, vfat.
	for _, m := range []string{"virtio_ring", "virtio", "virtio_pci", "failover", "net_failover", "virtio_net", "virtio_blk", "crc16", "mbcache", "jbd2", "ext4", "fat", "vfat", "nvme", "ahci", "e1000", "e1000e"} {
		if _, ok := pos[m]; !ok && !deps.builtin[canonical(m)] {
			t.Errorf("%s is neither loaded nor built in", m)
		}
	}
	// Everything in the image is a plain ELF module, whatever the tree's
	// compression, and busybox's shell reads both scripts.
	for _, e := range readInitrd(t, r.Initrd) {
		if strings.HasPrefix(e.name, "lib/modules/") && !strings.HasPrefix(string(e.data), string(elfMagic)) {
			t.Errorf("%s is not an ELF file", e.name)
		}
		if e.name == "init" || e.name == "etc/udhcpc.script" {
			cmd := exec.Command(DefaultBusybox, "sh", "-n")
			cmd.Stdin = bytes.NewReader(e.data)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("busybox sh -n %s: %v: %s", e.name, err, out)
			}
		}
	}

	toolsRun(t, readInitrd(t, r.Initrd))

	again, err := Build(Options{Kernel: kernel, Agent: agent}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if again.InitrdSHA256 != r.InitrdSHA256 {
		t.Errorf("two builds from the same inputs differ: %s, %s", r.InitrdSHA256, again.InitrdSHA256)
	}
}

// toolsRun unpacks the image's tools, their loader and libraries (nothing
// else) into a folder and runs each tool there as the root, so a library
// the image lacks fails the run instead of being found on the host.
func toolsRun(t *testing.T, entries []cpioEntry) {
	t.Helper()
	dir := t.TempDir()
	for _, e := range entries {
		if e.mode&0o170000 != 0o100000 || !(strings.HasPrefix(e.name, "usr/") || strings.HasPrefix(e.name, "lib64/")) {
			continue
		}
		write(t, filepath.Join(dir, e.name), e.data)
		if err := os.Chmod(filepath.Join(dir, e.name), os.FileMode(e.mode&0o777)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range DefaultTools {
		// unshare -r: a user namespace, so the chroot needs no root.
		version := tool.Version
		if version == "" {
			version = "--version"
		}
		out, err := exec.Command("unshare", "--user", "--map-root-user", "--root", dir, tool.Path, version).CombinedOutput()
		if err != nil {
			t.Errorf("%s in the image alone: %v: %s", tool.Path, err, out)
			continue
		}
		t.Logf("%s: %s", tool.Path, bytes.TrimSpace(out))
	}
}
