package status

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// InUseError is a store another process holds open (its file is locked):
// a second daemon on the same state folder.
type InUseError struct {
	Path string
	PID  int // the holder's process, 0 when unknown
}

func (e *InUseError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("status: %s is in use by another process (pid %d)", e.Path, e.PID)
	}
	return fmt.Sprintf("status: %s is in use by another process", e.Path)
}

// lockHolder is the process that holds a lock on the file at path, from
// /proc/locks (Linux), matched by device and inode; 0 when not known.
func lockHolder(path string) int {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer f.Close()
	return holderOf(bufio.NewScanner(f), uint64(st.Dev), st.Ino)
}

// holderOf reads /proc/locks lines ("1: FLOCK  ADVISORY  WRITE 1234
// fe:00:10330930 0 EOF") for the first lock on inode ino of device dev.
func holderOf(sc *bufio.Scanner, dev, ino uint64) int {
	// The kernel writes the device as MAJOR:MINOR in hex, the Linux way
	// of splitting dev_t.
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, ino)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// "1:" TYPE MODE ACCESS PID DEV:INODE START END; a lock waiting
		// for another has "->" after the number.
		if len(f) >= 6 && f[1] == "->" {
			continue
		}
		if len(f) >= 6 && f[5] == want {
			if pid, err := strconv.Atoi(f[4]); err == nil {
				return pid
			}
		}
	}
	return 0
}
