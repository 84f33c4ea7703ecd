//go:build !linux

package agent

import (
	"context"
	"errors"
	"io"
	"os"
)

// The agent runs in a Linux Micro-OS; elsewhere the package builds (for
// its tests and tools) but cannot touch the machine.
var errNotLinux = errors.New("agent: only supported on Linux")

func defaultMount(dev, fstype, dir string) error                     { return errNotLinux }
func defaultUnmount(dir string) error                                { return errNotLinux }
func defaultPower(action string) error                               { return errNotLinux }
func defaultKexecLoad(kernel, initrd, cmdline string) error          { return errNotLinux }
func rereadPartitions(f *os.File) error                              { return nil }
func defaultExec(context.Context, string, []string, io.Writer) error { return errNotLinux }

func zeroOut(*os.File, int64, int64) error { return errNotLinux }
