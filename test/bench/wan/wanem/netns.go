package wanem

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on an OS thread of its own inside network namespace ns (a
// name `ip netns add` made): what fn opens there (a socket, a TUN device)
// stays in ns, wherever it is used afterwards. fn must not hand work to
// other goroutines and expect them in ns.
func Do(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only once back home: a thread whose way back failed
		// ends with this goroutine instead of running others in ns.
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns %s: %w", ns, err)
			return
		}
		defer home.Close()
		target, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns %s: %w", ns, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("leave netns %s: %w", ns, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
