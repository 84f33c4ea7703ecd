package redfishvm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Machine is what the BMC powers: a QEMU VM (QEMU), or a FakeMachine for
// tests that need no VM. A boot target is a Redfish one ("Cd", "Pxe",
// "Hdd"); "" leaves the machine's own boot order.
type Machine interface {
	// PowerOn starts the machine, booting first from first this time.
	PowerOn(ctx context.Context, first string) error
	// PowerOff cuts the power at once.
	PowerOff(ctx context.Context) error
	// Shutdown presses the power button: a guest that listens (ACPI)
	// shuts down, and the machine is off when it has.
	Shutdown(ctx context.Context) error
	// Reset resets the running machine, booting first from first this
	// time.
	Reset(ctx context.Context, first string) error
	// On says whether the machine runs.
	On() bool
	// Insert puts the image file at path into the CD drive (replacing
	// what is there); Eject empties the drive. Both work on or off.
	Insert(ctx context.Context, path string) error
	Eject(ctx context.Context) error
}

// FakeMachine is a Machine in memory that logs what it was told.
type FakeMachine struct {
	mu    sync.Mutex
	on    bool
	media string
	calls []string
	fail  error
}

// SetFail makes every order from now on fail with err (nil: none).
func (f *FakeMachine) SetFail(err error) {
	f.mu.Lock()
	f.fail = err
	f.mu.Unlock()
}

func (f *FakeMachine) do(call string, change func()) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if f.fail != nil {
		return f.fail
	}
	change()
	return nil
}

func (f *FakeMachine) PowerOn(_ context.Context, first string) error {
	return f.do(strings.TrimSpace("on "+first), func() { f.on = true })
}

func (f *FakeMachine) PowerOff(context.Context) error {
	return f.do("off", func() { f.on = false })
}

// Shutdown is taken at once, as by a guest that listens.
func (f *FakeMachine) Shutdown(context.Context) error {
	return f.do("shutdown", func() { f.on = false })
}

func (f *FakeMachine) Reset(_ context.Context, first string) error {
	f.mu.Lock()
	on := f.on
	f.mu.Unlock()
	if !on {
		return errors.New("reset of a machine that is off")
	}
	return f.do(strings.TrimSpace("reset "+first), func() {})
}

func (f *FakeMachine) On() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.on
}

func (f *FakeMachine) Insert(_ context.Context, path string) error {
	return f.do(fmt.Sprintf("insert %s", path), func() { f.media = path })
}

func (f *FakeMachine) Eject(context.Context) error {
	return f.do("eject", func() { f.media = "" })
}

// Media is the image file in the drive ("" when empty).
func (f *FakeMachine) Media() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.media
}

// Calls are the orders given so far: "on Cd", "off", "shutdown",
// "reset", "insert /path", "eject".
func (f *FakeMachine) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}
