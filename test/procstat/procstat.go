// Package procstat reads what the benchmarks report about a server
// process — memory and CPU from /proc — and finds free loopback ports.
package procstat

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Mem is a process's resident size and its peak, in kB (VmRSS, VmHWM).
func Mem(pid int) (rss, hwm int) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			switch f[0] {
			case "VmRSS:":
				rss, _ = strconv.Atoi(f[1])
			case "VmHWM:":
				hwm, _ = strconv.Atoi(f[1])
			}
		}
	}
	return
}

// CPU is a process's user+system time.
func CPU(pid int) time.Duration {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(u+st) * time.Second / 100
}

// FreePort is a TCP port free on 127.0.0.1 a moment ago.
func FreePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// OpenFiles counts a process's open file descriptors.
func OpenFiles(pid int) int {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(fds)
}

// Peak samples a process's resident size (kB) and open files every
// interval until stop is called, which returns the highest of each seen.
func Peak(pid int, every time.Duration) (stop func() (rssKB, files int)) {
	var rssMax, filesMax int
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			rss, _ := Mem(pid)
			rssMax, filesMax = max(rssMax, rss), max(filesMax, OpenFiles(pid))
			select {
			case <-quit:
				return
			case <-time.After(every):
			}
		}
	}()
	return func() (int, int) {
		close(quit)
		<-done
		return rssMax, filesMax
	}
}
