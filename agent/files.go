package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bootops/bootops/plan"
)

// onPartition mounts the action's partition (default 1, ext4) on a fresh
// directory, runs fn with that directory and unmounts it, also when fn
// fails.
func (r *Runner) onPartition(a plan.Action, fn func(dir, dev string) error) error {
	disk, err := r.ResolveDisk(a.Disk)
	if err != nil {
		return fmt.Errorf("disk %q: %w", a.Disk, err)
	}
	fstype := a.FSType
	if fstype == "" {
		fstype = "ext4"
	}
	dev := r.mappedPartition(disk, a.Partition)
	return r.onDevice(dev, fstype, func(dir string) error { return fn(dir, dev) })
}

// writeFile writes content to path on a partition of the new system.
func (r *Runner) writeFile(_ context.Context, s *step) error {
	a := s.a
	if !strings.HasPrefix(a.Path, "/") {
		return permanentf("path %q: want an absolute path", a.Path)
	}
	mode, err := parseMode(a.Mode)
	if err != nil {
		return err
	}
	return r.onPartition(a, func(dir, dev string) error {
		if err := writeIn(dir, a.Path, []byte(a.Content), mode); err != nil {
			return err
		}
		s.log(fmt.Sprintf("wrote %s on %s (%d bytes, mode %#o)", a.Path, dev, len(a.Content), mode))
		return nil
	})
}

// parseMode reads an octal file mode such as 0644 ("" is 0644).
func parseMode(m string) (fs.FileMode, error) {
	if m == "" {
		return 0o644, nil
	}
	v, err := strconv.ParseUint(m, 8, 32)
	if err != nil || v > 0o777 {
		return 0, permanentf("mode %q: want an octal mode such as 0644", m)
	}
	return fs.FileMode(v), nil
}

// writeIn writes name (absolute inside the mounted system at dir), creating
// its parent directories, and syncs it. Symlinks out of dir are refused
// (os.Root), so an absolute link in the new system cannot make the agent
// write into the Micro-OS.
func writeIn(dir, name string, data []byte, mode fs.FileMode) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	rel := strings.TrimPrefix(path.Clean("/"+name), "/")
	if rel == "" {
		return permanentf("path %q: names no file", name)
	}
	parent := path.Dir(rel)
	if err := root.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", "/"+parent, err)
	}
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode) // the umask, or an existing file's mode
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if d, err := root.Open(parent); err == nil {
		d.Sync() // the new entry; best effort, the unmount syncs too
		d.Close()
	}
	return nil
}

// cloudInit writes the node's NoCloud seed (user-data, meta-data and, when
// there is one, network-config) into the directory path (default
// /var/lib/cloud/seed/nocloud) of the new system. The compiler renders the
// seed beside the workflow, not in it; Runner.CloudInit supplies it. The
// action's content, when set, replaces the user-data.
func (r *Runner) cloudInit(ctx context.Context, s *step) error {
	var seed Seed
	if r.CloudInit != nil {
		var err error
		if seed, err = r.CloudInit(ctx); err != nil {
			return fmt.Errorf("cloud-init seed: %w", err)
		}
	}
	if s.a.Content != "" {
		seed.UserData = s.a.Content
	}
	if seed == (Seed{}) {
		s.log("no cloud-init seed for this machine: writing an empty one")
	}
	dir := s.a.Path
	if dir == "" {
		dir = DefaultSeedPath
	}
	if !strings.HasPrefix(dir, "/") {
		return permanentf("path %q: want an absolute path", dir)
	}
	files := []struct{ name, data string }{
		{"user-data", seed.UserData},
		{"meta-data", seed.MetaData},
	}
	if seed.NetworkConfig != "" {
		files = append(files, struct{ name, data string }{"network-config", seed.NetworkConfig})
	}
	return r.onPartition(s.a, func(mnt, dev string) error {
		for _, f := range files {
			// user-data may hold secrets: root reads the seed.
			if err := writeIn(mnt, path.Join(dir, f.name), []byte(f.data), 0o600); err != nil {
				return err
			}
		}
		s.log(fmt.Sprintf("wrote the NoCloud seed to %s on %s (%d files)", dir, dev, len(files)))
		if seed.Report != "" {
			// It holds the node's report credential: root only.
			if err := writeIn(mnt, ReportScriptPath, []byte(seed.Report), 0o700); err != nil {
				return err
			}
			s.log("wrote the first-boot report script to " + ReportScriptPath)
		}
		if k := seed.ReportKey; k != nil && seed.Report != "" {
			// Wrapped by the TPM's storage root key: only that TPM can
			// load it. Root reads it all the same.
			for _, f := range []struct {
				ext  string
				data []byte
			}{{".pub", k.Public}, {".priv", k.Private}} {
				if err := writeIn(mnt, ReportKeyPath+f.ext, f.data, 0o600); err != nil {
					return err
				}
			}
			s.log("wrote the TPM key the reports are quoted with to " + ReportKeyPath + ".{pub,priv}")
		}
		return nil
	})
}

// exec runs the action's command, in the Micro-OS or, with chroot, in the
// new system with /dev, /proc and /sys bound into it. Its output becomes
// log events, line by line.
func (r *Runner) exec(ctx context.Context, s *step) error {
	argv := s.a.Command
	if len(argv) == 0 || argv[0] == "" {
		return permanentf("no command")
	}
	out := &lineWriter{s: s}
	run := func(root string) error {
		err := r.Exec(ctx, root, argv, out)
		out.Flush()
		if err != nil {
			return fmt.Errorf("%s: %w", argv[0], err)
		}
		return nil
	}
	if !s.a.Chroot {
		return run("")
	}
	return r.onPartition(s.a, func(dir, _ string) (err error) {
		for _, fsys := range []string{"/dev", "/proc", "/sys"} {
			target := filepath.Join(dir, fsys)
			if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
				continue
			}
			if err := r.Mount(fsys, "bind", target); err != nil {
				return fmt.Errorf("bind %s: %w", fsys, err)
			}
			defer func() {
				if uerr := r.Unmount(target); uerr != nil {
					err = errors.Join(err, fmt.Errorf("unmount %s: %w", target, uerr))
				}
			}()
		}
		return run(dir)
	})
}

// kexec loads the new system's kernel from its partition and boots it
// without going through the firmware. path names the kernel (default
// /boot/vmlinuz or /vmlinuz), content the kernel command line (default the
// new system's /etc/kernel/cmdline, else root=<partition> ro).
func (r *Runner) kexec(ctx context.Context, s *step) error {
	kernelPaths := []string{"/boot/vmlinuz", "/vmlinuz"}
	initrdPaths := []string{"/boot/initrd.img", "/initrd.img", "/boot/initramfs.img"}
	err := r.onPartition(s.a, func(dir, dev string) error {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return err
		}
		defer root.Close()
		find := func(paths []string) string {
			for _, p := range paths {
				if fi, err := root.Stat(strings.TrimPrefix(p, "/")); err == nil && fi.Mode().IsRegular() {
					return p
				}
			}
			return ""
		}
		kernel := s.a.Path
		if kernel == "" {
			if kernel = find(kernelPaths); kernel == "" {
				return fmt.Errorf("no kernel on %s (looked for %s)", dev, strings.Join(kernelPaths, ", "))
			}
		}
		initrd := find(initrdPaths)
		cmdline := s.a.Content
		if cmdline == "" {
			b, _ := root.ReadFile("etc/kernel/cmdline")
			cmdline = strings.TrimSpace(string(b))
		}
		if cmdline == "" {
			cmdline = "root=" + dev + " ro"
		}
		host := func(p string) string {
			if p == "" {
				return ""
			}
			return filepath.Join(dir, p)
		}
		if err := r.KexecLoad(host(kernel), host(initrd), cmdline); err != nil {
			return fmt.Errorf("load %s: %w", kernel, err)
		}
		s.log(fmt.Sprintf("loaded %s (initrd %q) from %s: %s", kernel, initrd, dev, cmdline))
		return nil
	})
	if err != nil {
		return err
	}
	return r.power(ctx, s)
}
