package tpm

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// OpenDevice opens the machine's TPM through the kernel's resource manager.
//
// The file is opened blocking, on purpose: the kernel's TPM device then
// runs each command in write() and read() returns its response. os.OpenFile
// would make it non-blocking (the runtime's poller takes character
// devices), and then write() only queues the command and a read() before
// it is done returns 0 bytes: a slow command (creating a key) fails with
// EOF.
func OpenDevice() (*Machine, error) {
	f, err := OpenChannel()
	if err != nil {
		return nil, err
	}
	return Open(f)
}

// OpenChannel opens the TPM's command channel alone (for ClevisSeal),
// blocking as OpenDevice explains.
func OpenChannel() (io.ReadWriteCloser, error) {
	fd, err := syscall.Open(DevicePath, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tpm: open %s: %w", DevicePath, err)
	}
	return os.NewFile(uintptr(fd), DevicePath), nil
}
