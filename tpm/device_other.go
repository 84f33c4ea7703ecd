//go:build !linux

package tpm

import (
	"errors"
	"io"
)

// OpenDevice is Linux's only (the agent runs in a Linux Micro-OS).
func OpenDevice() (*Machine, error) {
	return nil, errors.New("tpm: " + DevicePath + " is Linux's")
}

// OpenChannel is Linux's only.
func OpenChannel() (io.ReadWriteCloser, error) {
	return nil, errors.New("tpm: " + DevicePath + " is Linux's")
}
