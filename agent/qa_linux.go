package agent

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openDirect opens a disk for qa-disk with O_DIRECT, so that what it
// measures is the disk and not the page cache; where O_DIRECT is refused
// (tmpfs, some file systems) without it (direct false).
func openDirect(path string, write bool) (f *os.File, direct bool, err error) {
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	if f, err := os.OpenFile(path, flag|syscall.O_DIRECT, 0); err == nil {
		return f, true, nil
	}
	f, err = os.OpenFile(path, flag, 0)
	return f, false, err
}

// dropCache asks the kernel to forget the cached pages of f's first n
// bytes, so that reading them goes to the disk.
func dropCache(f *os.File, n int64) {
	_ = unix.Fadvise(int(f.Fd()), 0, n, unix.FADV_DONTNEED)
}

// pinnableCPUs lists the CPUs the agent may run on, at most n.
func pinnableCPUs(n int) []int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return nil
	}
	var cpus []int
	for i := 0; i < len(set)*64 && len(cpus) < n; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus
}

// pinCPU binds the calling goroutine's thread to cpus[w] (the thread
// ends with the goroutine: it is never unlocked); -1 when it cannot.
func pinCPU(cpus []int, w int) int {
	if w >= len(cpus) {
		return -1
	}
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpus[w])
	if unix.SchedSetaffinity(0, &set) != nil {
		runtime.UnlockOSThread()
		return -1
	}
	return cpus[w]
}

// allocWords maps n words for qa-memory outside the Go heap, asking for
// huge pages (faulting gigabytes in 4 KiB pages takes longer than testing
// them); free gives them back to the Micro-OS at once. Too little memory
// is an error here, not the runtime's fatal one.
func allocWords(n int64) (words []uint64, free func(), err error) {
	b, err := unix.Mmap(-1, 0, int(n*8), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("map %d MiB: %w", n*8>>20, err)
	}
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n), func() { unix.Munmap(b) }, nil
}
