package testutil

import (
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// EnterNetns moves the calling goroutine's thread into network namespace
// ns (ip netns add's /run/netns/<ns>) for good: the thread is locked to
// the goroutine and ends with it, never used again outside ns. Call it
// first thing in a goroutine of its own.
func EnterNetns(ns string) error {
	runtime.LockOSThread()
	f, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}
