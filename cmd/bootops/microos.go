package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/bootops/bootops/microos"
)

func microosCmd() *command {
	c := &command{
		name:    "microos",
		summary: "Build the Micro-OS a node boots into: the kernel and a reproducible initramfs around bootops-agent.",
		usage:   "build --kernel PATH [--modules DIR] [--busybox PATH] [--agent PATH] [--load LIST] -o OUT",
		example: "  bootops microos build --kernel /boot/vmlinuz-$(uname -r) -o myrepo/microos\n" +
			"  # writes myrepo/microos/{vmlinuz,initrd.img} and prints the MicroOS object to commit;\n" +
			"  # `make microos` builds bootops-agent first, then this, into sites/microos",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		kernel := fs.String("kernel", "", "kernel image, e.g. /boot/vmlinuz-<version> (Debian package linux-image-amd64)")
		modules := fs.String("modules", "", "the kernel's modules folder (default /lib/modules/<version>, from the kernel's file name)")
		busybox := fs.String("busybox", microos.DefaultBusybox, "static busybox (Debian package busybox-static)")
		agent := fs.String("agent", "", "static bootops-agent binary (default bootops-agent next to this program)")
		load := fs.String("load", "", "comma-separated modules to load instead of the default list:\n"+strings.Join(microos.DefaultModules, ","))
		out := fs.String("o", "", "output folder for vmlinuz and initrd.img (created if needed)")
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		switch {
		case len(pos) == 0:
			return usagef("missing subcommand: want 'bootops microos build'")
		case pos[0] != "build":
			return usagef("unknown subcommand %q: want 'build'", pos[0])
		case len(pos) > 1:
			return usagef("unexpected arguments: %s", strings.Join(pos[1:], " "))
		case *kernel == "":
			return usagef("--kernel PATH is required (e.g. /boot/vmlinuz-<version>)")
		case *out == "":
			return usagef("-o OUT is required")
		}
		opt := microos.Options{Kernel: *kernel, Modules: *modules, Busybox: *busybox, Agent: *agent}
		if *load != "" {
			opt.Load = strings.Split(*load, ",")
		}
		if opt.Agent == "" {
			if opt.Agent, err = agentBesideMe(); err != nil {
				return err
			}
		}
		r, err := microos.Build(opt, *out)
		if err != nil {
			return err
		}
		printMicroOS(e.stdout, r, *out)
		return nil
	}
	return c
}

// agentBesideMe finds bootops-agent in the folder of the running program,
// where `make microos` puts it.
func agentBesideMe() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return "", fmt.Errorf("find bootops-agent: %w; give --agent PATH", err)
	}
	p := filepath.Join(filepath.Dir(exe), "bootops-agent")
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("no bootops-agent next to %s: build it with 'make microos', or give --agent PATH to a static build (CGO_ENABLED=0 go build ./cmd/bootops-agent)", exe)
		}
		return "", err
	}
	return p, nil
}

// printMicroOS shows the files with their sha256s and the MicroOS object
// that names them, with paths relative to the repository holding out when
// there is one.
func printMicroOS(w io.Writer, r microos.Result, out string) {
	size := ""
	if st, err := os.Stat(r.Initrd); err == nil {
		size = fmt.Sprintf(", %.1f MiB", float64(st.Size())/(1<<20))
	}
	fmt.Fprintf(w, "kernel  %s  sha256:%s\n", r.Kernel, r.KernelSHA256)
	fmt.Fprintf(w, "initrd  %s  sha256:%s  (%d modules%s)\n", r.Initrd, r.InitrdSHA256, len(r.Modules), size)
	fmt.Fprintf(w, "modules, in load order: %s\n\n", strings.Join(r.Modules, " "))

	kernel, initrd := "microos/vmlinuz", "microos/initrd.img"
	if root, rel, ok := repoOf(out); ok {
		kernel, initrd = filepath.ToSlash(filepath.Join(rel, "vmlinuz")), filepath.ToSlash(filepath.Join(rel, "initrd.img"))
		fmt.Fprintf(w, "# A MicroOS object for the repository %s (e.g. microos/default.yaml):\n", root)
	} else {
		fmt.Fprintf(w, "# Copy vmlinuz and initrd.img into microos/ of your repository and commit\n# this MicroOS object beside them (e.g. microos/default.yaml):\n")
	}
	fmt.Fprintf(w, `apiVersion: bootops.dev/v1alpha1
kind: MicroOS
name: default
kernel: {path: %s, sha256: %s}
initrd: {path: %s, sha256: %s}
# The last console= is /dev/console, where /init and the agent print.
cmdline: console=tty0 console=ttyS0,115200
`, kernel, r.KernelSHA256, initrd, r.InitrdSHA256)
}

// repoOf finds the repository holding dir, the nearest folder up from it
// with a sites/ folder or a .git, and gives dir relative to it.
func repoOf(dir string) (root, rel string, ok bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", "", false
	}
	for d := abs; ; d = filepath.Dir(d) {
		for _, mark := range []string{"sites", ".git"} {
			if _, err := os.Stat(filepath.Join(d, mark)); err == nil {
				rel, err := filepath.Rel(d, abs)
				return d, rel, err == nil
			}
		}
		if filepath.Dir(d) == d {
			return "", "", false
		}
	}
}
