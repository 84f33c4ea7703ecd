package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/bootops/bootops/microos"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

func microosCmd() *command {
	c := &command{
		name:    "microos",
		summary: "Build the Micro-OS a node boots into: the kernel and a reproducible initramfs around bootops-agent.",
		usage: "build --kernel PATH [--arch x86_64|arm64 [--root DIR]] [--modules DIR] [--busybox PATH] [--agent PATH] [--load LIST]\n" +
			"       [--server URL --site NAME --ca FILE] [--overlay-key FILE]\n" +
			"       [--uki [--cmdline ARGS] [--stub PATH] [--sign-key KEY --sign-cert CERT]] -o OUT",
		example: "  bootops microos build --kernel /boot/vmlinuz-$(uname -r) -o myrepo/microos\n" +
			"  # writes myrepo/microos/{vmlinuz,initrd.img} and prints the MicroOS object to commit;\n" +
			"  # `make microos` builds bootops-agent first, then this, into sites/microos\n\n" +
			"  bootops microos build --kernel /boot/vmlinuz-$(uname -r) --uki \\\n" +
			"      --server https://198.18.0.1:8443 --site lab --ca /var/lib/bootops/tls/ca.pem \\\n" +
			"      --sign-key db.key --sign-cert db.pem -o myrepo/microos\n" +
			"  # also writes myrepo/microos/bootops.efi: kernel, initramfs and command line in one\n" +
			"  # PE signed for Secure Boot, the agent's server and site CA inside it (keys stay out of Git)\n\n" +
			"  bash test/arm64/root.sh /var/tmp/arm64     # Debian's arm64 packages, unpacked\n" +
			"  GOARCH=arm64 CGO_ENABLED=0 go build -o bootops-agent-arm64 ./cmd/bootops-agent\n" +
			"  bootops microos build --arch arm64 --root /var/tmp/arm64/root \\\n" +
			"      --kernel /var/tmp/arm64/root/boot/vmlinuz-6.1.0-57-arm64 --agent bootops-agent-arm64 -o myrepo/microos/arm64\n" +
			"  # an arm64 Micro-OS: kernel, modules, busybox and tools read under --root (docs/arm64.md)",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		var m microosSettings
		m.addFlags(fs)
		pos, err := parse(fs, e, args)
		if err != nil {
			return err
		}
		if err := m.check(pos); err != nil {
			return err
		}
		opt, err := m.options()
		if err != nil {
			return err
		}
		r, err := microos.Build(opt, m.out)
		if err != nil {
			return err
		}
		if m.uki {
			if err := m.buildUKI(e, &r); err != nil {
				return err
			}
		}
		printMicroOS(e.stdout, r, m.out, m.arch)
		return nil
	}
	return c
}

// microosSettings are microos build's flags.
type microosSettings struct {
	kernel, modules, busybox, agent, load, out string
	arch, root                                 string
	server, site, ca, overlayKey               string
	cmdline, stub, signKey, signCert           string
	uki                                        bool
}

func (m *microosSettings) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&m.kernel, "kernel", "", "kernel image, e.g. /boot/vmlinuz-<version> (Debian package linux-image-amd64)")
	fs.StringVar(&m.modules, "modules", "", "the kernel's modules folder (default /lib/modules/<version>, from the kernel's file name)")
	fs.StringVar(&m.arch, "arch", microos.ArchX86_64, "the processor family it is for: x86_64 or arm64 (the kernel, busybox, agent and tools must be built for it)")
	fs.StringVar(&m.root, "root", "/", "the root the modules, busybox and tools are read under: / for this machine's own, or another architecture's unpacked packages (test/arm64/root.sh)")
	fs.StringVar(&m.busybox, "busybox", "", "static busybox (Debian package busybox-static; default <root>"+microos.DefaultBusybox+")")
	fs.StringVar(&m.agent, "agent", "", "static bootops-agent binary (default bootops-agent next to this program)")
	fs.StringVar(&m.load, "load", "", "comma-separated modules to load instead of the default list:\n"+strings.Join(microos.DefaultModules, ","))
	fs.StringVar(&m.out, "o", "", "output folder for vmlinuz and initrd.img (created if needed)")
	fs.StringVar(&m.server, "server", "", "build in the boot server's URL the agent reports to (https://… needs --ca; HOST:PORT is http://, https:// with --ca)")
	fs.StringVar(&m.site, "site", "", "build in the site the agent reports for")
	fs.StringVar(&m.ca, "ca", "", "build in this PEM site CA: the agent trusts only servers it signed (bootops ca init writes <state-dir>/tls/ca.pem)")
	fs.StringVar(&m.overlayKey, "overlay-key", "", "file of ed25519 public keys (base64, one a line; <state-dir>/tls/overlay.pub): the Micro-OS then runs only with a site overlay signed by one of them")
	fs.BoolVar(&m.uki, "uki", false, "also write bootops.efi, a unified kernel image (needs --server and --site)")
	fs.StringVar(&m.cmdline, "cmdline", "console=tty0 console=ttyS0,115200", "the UKI's kernel command line (fixed inside it)")
	fs.StringVar(&m.stub, "stub", microos.DefaultStub, "the EFI stub of the UKI (Debian package systemd-boot-efi)")
	fs.StringVar(&m.signKey, "sign-key", "", "PEM private key (unencrypted) that signs the UKI for Secure Boot (sbsign; keep it out of Git)")
	fs.StringVar(&m.signCert, "sign-cert", "", "PEM certificate of --sign-key, the one enrolled in the machines' db")
}

// check refuses a command line that cannot build (pos: the subcommand).
func (m *microosSettings) check(pos []string) error {
	switch {
	case len(pos) == 0:
		return usagef("missing subcommand: want 'bootops microos build'")
	case pos[0] != "build":
		return usagef("unknown subcommand %q: want 'build'", pos[0])
	case len(pos) > 1:
		return usagef("unexpected arguments: %s", strings.Join(pos[1:], " "))
	case m.kernel == "":
		return usagef("--kernel PATH is required (e.g. /boot/vmlinuz-<version>)")
	case m.out == "":
		return usagef("-o OUT is required")
	case m.uki && (m.server == "" || m.site == ""):
		return usagef("--uki needs --server and --site: a UKI's agent cannot be told them on a command line of its own")
	case strings.HasPrefix(m.server, "https://") && m.ca == "" && m.overlayKey == "":
		return usagef("--server %s needs --ca: the agent must be able to verify the server", m.server)
	case (m.signKey != "" || m.signCert != "") && !m.uki:
		return usagef("--sign-key and --sign-cert sign the UKI: give --uki")
	}
	return nil
}

// options are the build's: what is built into the agent, and where the
// pieces come from.
func (m *microosSettings) options() (microos.Options, error) {
	// HOST:PORT is the server over http, or https when the agent is
	// given the site CA to check it with.
	srv, err := serverURL(m.server, m.ca != "")
	if err != nil {
		return microos.Options{}, usagef("--server %v", err)
	}
	cfg, err := agentConfig(srv, m.site, m.ca, m.overlayKey, m.uki)
	if err != nil {
		return microos.Options{}, err
	}
	opt := microos.Options{Arch: m.arch, Root: m.root, Kernel: m.kernel, Modules: m.modules, Busybox: m.busybox, Agent: m.agent, Config: cfg}
	if opt.Busybox == "" {
		opt.Busybox = filepath.Join(m.root, microos.DefaultBusybox)
	}
	if m.load != "" {
		opt.Load = strings.Split(m.load, ",")
	}
	if opt.Agent == "" {
		if opt.Agent, err = agentBesideMe(); err != nil {
			return microos.Options{}, err
		}
	}
	return opt, nil
}

// buildUKI writes bootops.efi beside the kernel and initramfs of r.
func (m *microosSettings) buildUKI(e *env, r *microos.Result) error {
	r.UKI = filepath.Join(m.out, "bootops.efi")
	fmt.Fprintf(e.stderr, "building the UKI %s%s\n", r.UKI, map[bool]string{true: " (signing it)", false: " (unsigned: give --sign-key/--sign-cert for Secure Boot)"}[m.signKey != ""])
	if err := microos.BuildUKI(r.Kernel, r.Initrd, microos.UKIOptions{Stub: m.stub, Cmdline: m.cmdline, SignKey: m.signKey, SignCert: m.signCert}, r.UKI); err != nil {
		return err
	}
	b, err := os.ReadFile(r.UKI)
	if err != nil {
		return err
	}
	r.UKISHA256 = microos.SHA256(b)
	return nil
}

// agentConfig is what the Micro-OS's agent gets built in; nil when none
// of it was asked for.
func agentConfig(server, site, caFile, overlayFile string, uki bool) (*trust.Config, error) {
	if server == "" && site == "" && caFile == "" && overlayFile == "" && !uki {
		return nil, nil
	}
	cfg := &trust.Config{Server: server, Site: site}
	if uki {
		cfg.Chain = plan.ChainUKI
	}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		if _, err := trust.PoolFromPEM(string(b)); err != nil {
			return nil, fmt.Errorf("--ca %s: %w", caFile, err)
		}
		cfg.CA = string(b)
	}
	if overlayFile != "" {
		b, err := os.ReadFile(overlayFile)
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Fields(string(b)) {
			if _, err := trust.ParsePublicKey(l); err != nil {
				return nil, fmt.Errorf("--overlay-key %s: %w", overlayFile, err)
			}
			cfg.OverlayKeys = append(cfg.OverlayKeys, l)
		}
		if len(cfg.OverlayKeys) == 0 {
			return nil, fmt.Errorf("--overlay-key %s: no key in it", overlayFile)
		}
	}
	return cfg, nil
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
func printMicroOS(w io.Writer, r microos.Result, out, arch string) {
	size := ""
	if st, err := os.Stat(r.Initrd); err == nil {
		size = fmt.Sprintf(", %.1f MiB", float64(st.Size())/(1<<20))
	}
	fmt.Fprintf(w, "kernel  %s  sha256:%s\n", r.Kernel, r.KernelSHA256)
	fmt.Fprintf(w, "initrd  %s  sha256:%s  (%d modules%s)\n", r.Initrd, r.InitrdSHA256, len(r.Modules), size)
	fmt.Fprintf(w, "modules, in load order: %s\n\n", strings.Join(r.Modules, " "))

	name, archLine, console := "default", "", "console=tty0 console=ttyS0,115200"
	if arch == microos.ArchARM64 {
		// The PL011 UART of ARM servers and QEMU's virt machine.
		name, archLine, console = "arm64", "arch: arm64\n", "console=tty0 console=ttyAMA0,115200"
	}
	kernel, initrd := "microos/vmlinuz", "microos/initrd.img"
	if root, rel, ok := repoOf(out); ok {
		kernel, initrd = filepath.ToSlash(filepath.Join(rel, "vmlinuz")), filepath.ToSlash(filepath.Join(rel, "initrd.img"))
		fmt.Fprintf(w, "# A MicroOS object for the repository %s (e.g. microos/%s.yaml):\n", root, name)
	} else {
		fmt.Fprintf(w, "# Copy vmlinuz and initrd.img into microos/ of your repository and commit\n# this MicroOS object beside them (e.g. microos/%s.yaml):\n", name)
	}
	fmt.Fprintf(w, `apiVersion: bootops.dev/v1alpha1
kind: MicroOS
name: %s
%skernel: {path: %s, sha256: %s}
initrd: {path: %s, sha256: %s}
# The last console= is /dev/console, where /init and the agent print.
cmdline: %s
`, name, archLine, kernel, r.KernelSHA256, initrd, r.InitrdSHA256, console)
	if r.UKI != "" {
		uki := "microos/bootops.efi"
		if _, rel, ok := repoOf(out); ok {
			uki = filepath.ToSlash(filepath.Join(rel, "bootops.efi"))
		}
		fmt.Fprintf(w, "# UEFI machines load the UKI itself (Secure Boot checks its signature):\nuki: {path: %s, sha256: %s}\nchain: uki\n", uki, r.UKISHA256)
	}
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
