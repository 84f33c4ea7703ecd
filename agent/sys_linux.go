//go:build linux

package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// defaultMount mounts dev on dir, or binds dev (a directory) there when
// fstype is "bind".
func defaultMount(dev, fstype, dir string) error {
	if fstype == "bind" {
		return unix.Mount(dev, dir, "", unix.MS_BIND|unix.MS_REC, "")
	}
	// The kernel adds partition nodes to devtmpfs shortly after a partition
	// table is re-read: give a fresh partition a moment to appear (mount
	// says what is wrong if it does not).
	waitDevice(dev, 10*time.Second)
	return unix.Mount(dev, dir, fstype, 0, "")
}

func defaultUnmount(dir string) error {
	return unix.Unmount(dir, 0)
}

// defaultPower syncs the disks and reboots, powers off or boots the kernel
// kexec loaded.
func defaultPower(action string) error {
	unix.Sync()
	switch action {
	case "reboot":
		return unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	case "poweroff":
		return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	case "kexec":
		return unix.Reboot(unix.LINUX_REBOOT_CMD_KEXEC)
	}
	return fmt.Errorf("unknown power action %q", action)
}

// defaultKexecLoad loads kernel and initrd with kexec_file_load(2), which
// also works with kernels that only boot signed ones.
func defaultKexecLoad(kernel, initrd, cmdline string) error {
	k, err := os.Open(kernel)
	if err != nil {
		return err
	}
	defer k.Close()
	initrdFd, flags := -1, 0
	if initrd != "" {
		i, err := os.Open(initrd)
		if err != nil {
			return err
		}
		defer i.Close()
		initrdFd = int(i.Fd())
	} else {
		flags |= unix.KEXEC_FILE_NO_INITRAMFS
	}
	return unix.KexecFileLoad(int(k.Fd()), initrdFd, cmdline, flags)
}

// rereadPartitions tells the kernel a block device's partition table
// changed; a regular file (in tests) has none.
func rereadPartitions(f *os.File) error {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeDevice == 0 {
		return err
	}
	return unix.IoctlSetInt(int(f.Fd()), unix.BLKRRPART, 0)
}

// chrootPath is the PATH of commands run in the new system.
const chrootPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// defaultExec runs argv with os/exec. In a chroot a bare command name is
// looked up in the new system's PATH, not the Micro-OS's.
func defaultExec(ctx context.Context, chroot string, argv []string, out io.Writer) error {
	name := argv[0]
	if chroot != "" && !strings.Contains(name, "/") {
		p, err := lookPathIn(chroot, name)
		if err != nil {
			return err
		}
		name = p
	}
	cmd := exec.CommandContext(ctx, name, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdout, cmd.Stderr = out, out
	// A daemon the command leaves behind keeps the output pipe open.
	cmd.WaitDelay = 5 * time.Second
	if chroot != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: chroot}
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=" + chrootPath, "HOME=/root", "LANG=C.UTF-8"}
	}
	return cmd.Run()
}

// lookPathIn finds an executable name in chrootPath inside root.
func lookPathIn(root, name string) (string, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", err
	}
	defer r.Close()
	for _, dir := range strings.Split(chrootPath, ":") {
		p := dir + "/" + name
		// Lstat: a link (often absolute, as Debian's alternatives) is
		// resolved by the kernel inside the chroot.
		fi, err := r.Lstat(strings.TrimPrefix(p, "/"))
		if err == nil && (fi.Mode()&os.ModeSymlink != 0 || fi.Mode().IsRegular() && fi.Mode()&0o111 != 0) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in the new system's %s", name, chrootPath)
}

// blkZeroOut is BLKZEROOUT (linux/fs.h: _IO(0x12, 127)): the kernel writes
// zeroes over a range of a block device, with the device's own write
// zeroes or unmap where it has them.
const blkZeroOut = 0x127f

// zeroOut writes zeroes over [off, off+n) of block device f; an error for
// anything else (a regular file: ENOTTY).
func zeroOut(f *os.File, off, n int64) error {
	r := [2]uint64{uint64(off), uint64(n)}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), blkZeroOut, uintptr(unsafe.Pointer(&r))); errno != 0 {
		return fmt.Errorf("BLKZEROOUT: %w", errno)
	}
	return nil
}
