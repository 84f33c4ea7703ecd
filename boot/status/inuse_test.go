package status

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A store another holder has open is refused as in use, naming the
// holder (here this very process, through another open of the file).
func TestOpenInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.db")
	d, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = Open(path, Options{})
	var inUse *InUseError
	if !errors.As(err, &inUse) || inUse.Path != path {
		t.Fatalf("second open: %v", err)
	}
	if _, err := os.Stat("/proc/locks"); err == nil && inUse.PID != os.Getpid() {
		t.Errorf("holder: pid %d, want %d (this process)", inUse.PID, os.Getpid())
	}
}

// /proc/locks lines: the holder of the inode's lock, not a waiter's, not
// another device's.
func TestHolderOf(t *testing.T) {
	locks := "1: FLOCK  ADVISORY  WRITE 700 fe:01:42 0 EOF\n" +
		"2: -> FLOCK  ADVISORY  WRITE 900 fe:00:42 0 EOF\n" +
		"2: FLOCK  ADVISORY  WRITE 800 fe:00:42 0 EOF\n"
	dev := uint64(0xfe << 8) // major 0xfe, minor 0
	if got := holderOf(bufio.NewScanner(strings.NewReader(locks)), dev, 42); got != 800 {
		t.Errorf("holder %d, want 800", got)
	}
	if got := holderOf(bufio.NewScanner(strings.NewReader(locks)), dev, 43); got != 0 {
		t.Errorf("no lock on the inode: holder %d, want 0", got)
	}
}
