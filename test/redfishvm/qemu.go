package redfishvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The CD drive the BMC adds to the VM: its drive (block backend) and its
// device, as QMP's query-block and qom-get name them.
const (
	CDDrive  = "bmc-cd"
	CDDevice = "bmc-cd0"
)

// VM is a QEMU virtual machine as the BMC's caller defines it: QEMU's
// command line without what the BMC adds itself (-S, the QMP socket, the
// CD drive).
type VM struct {
	// Binary is QEMU; default qemu-system-x86_64.
	Binary string
	// Args are QEMU's arguments: machine, memory, firmware, disks, NICs,
	// -nographic. A device a boot target names (BootDevices) has a
	// bootindex of 1 or more: 0 is kept for the device booted first.
	Args []string
	// Dir holds the QMP socket (a unix socket's path is at most 107
	// bytes). It must exist.
	Dir string
	// CDDevice is the CD drive's device model; default "ide-cd" (on the
	// machine's IDE or AHCI bus).
	CDDevice string
	// CDBootIndex is the CD's place in the boot order when no override
	// puts it first; default 100, after the VM's own devices.
	CDBootIndex int
	// BootDevices are the devices (their -device id=) the boot targets
	// "Pxe" and "Hdd" put first; "Cd" is the BMC's CD drive. A target
	// without one leaves the firmware's order.
	BootDevices map[string]string
	// Output gets QEMU's standard output and error (the serial console,
	// with -nographic); nil discards it.
	Output io.Writer
	// QuitTimeout is how long a power-off waits for QEMU to quit before
	// it is killed; default 10 s.
	QuitTimeout time.Duration
}

// QEMU is a Machine: a VM run by QEMU, whose process the BMC owns. On
// starts it, ForceOff ends it, everything else goes through QMP.
//
// A boot override is taken at a power-on: QEMU starts paused (-S), the
// device booted first gets bootindex 0 (qom-set), the machine is reset
// (system_reset, still paused), its old bootindex is set back, and it
// runs. QEMU builds the firmware's "bootorder" (fw_cfg) from the
// bootindexes at each reset, so that boot has the device first, and
// the next one, the guest's own reboot included, has the VM's own order
// again: SeaBIOS boots in bootorder's order, and OVMF sorts its boot
// options by it on every boot. A restart with an override starts QEMU
// again the same way (a cold reset): SeaBIOS answers a warm system_reset
// with a reboot of its own, which would build the bootorder again after
// the override was taken back. A restart without one is a system_reset.
// (QEMU's -boot once= works only for SeaBIOS without bootindexes; OVMF
// ignores it.)
type QEMU struct {
	vm VM
	// op orders the orders; mu guards the state below, read by On at
	// any time.
	op     sync.Mutex
	mu     sync.Mutex
	proc   *exec.Cmd
	qmp    *QMP
	exited chan struct{}
	media  string
	tail   *tailBuffer
}

// NewQEMU is vm, powered off, with an empty CD drive.
func NewQEMU(vm VM) *QEMU {
	if vm.Binary == "" {
		vm.Binary = "qemu-system-x86_64"
	}
	if vm.CDDevice == "" {
		vm.CDDevice = "ide-cd"
	}
	if vm.CDBootIndex <= 0 {
		vm.CDBootIndex = 100
	}
	if vm.QuitTimeout <= 0 {
		vm.QuitTimeout = 10 * time.Second
	}
	return &QEMU{vm: vm}
}

// running is the QMP connection of a running VM, nil when it is off.
func (m *QEMU) running() (*QMP, chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return nil, nil
	}
	select {
	case <-m.exited:
		return nil, nil // the guest powered off, or QEMU died
	default:
		return m.qmp, m.exited
	}
}

func (m *QEMU) On() bool {
	q, _ := m.running()
	return q != nil
}

// args is QEMU's command line: the VM's, and the BMC's additions.
func (m *QEMU) args(sock string) []string {
	return append(slices.Clone(m.vm.Args),
		"-S", // paused, until the boot order is set
		"-qmp", "unix:"+sock+",server=on,wait=off",
		"-drive", "if=none,id="+CDDrive+",media=cdrom",
		"-device", fmt.Sprintf("%s,drive=%s,id=%s,bootindex=%d", m.vm.CDDevice, CDDrive, CDDevice, m.vm.CDBootIndex))
}

func (m *QEMU) PowerOn(ctx context.Context, first string) error {
	m.op.Lock()
	defer m.op.Unlock()
	if q, _ := m.running(); q != nil {
		return nil
	}
	return m.powerOn(ctx, first)
}

// powerOn starts QEMU and boots it with first first; m.op is held.
func (m *QEMU) powerOn(ctx context.Context, first string) error {
	m.reap()
	q, err := m.start(ctx)
	if err != nil {
		return err
	}
	if err := m.boot(ctx, q, first); err != nil {
		m.kill()
		return fmt.Errorf("qemu power on: %w", err)
	}
	return nil
}

// start runs QEMU, paused, and connects to its QMP socket.
func (m *QEMU) start(ctx context.Context) (*QMP, error) {
	sock := filepath.Join(m.vm.Dir, "qmp.sock")
	os.Remove(sock)
	tail := &tailBuffer{max: 4096, w: m.vm.Output}
	cmd := exec.Command(m.vm.Binary, m.args(sock)...)
	cmd.Stdout, cmd.Stderr = tail, tail
	// Its own process group, to kill it whole; killed with the test
	// process too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu power on: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	m.mu.Lock()
	m.proc, m.exited, m.tail = cmd, exited, tail
	m.mu.Unlock()
	q, err := dialWhileRunning(ctx, sock, exited)
	if err != nil {
		m.kill()
		return nil, fmt.Errorf("qemu power on: %w; qemu said: %s", err, strings.TrimSpace(tail.String()))
	}
	m.mu.Lock()
	m.qmp = q
	media := m.media
	m.mu.Unlock()
	if media != "" {
		if err := changeMedium(ctx, q, media); err != nil {
			m.kill()
			return nil, fmt.Errorf("qemu power on: %w", err)
		}
	}
	return q, nil
}

// dialWhileRunning connects to QMP at sock once QEMU listens there,
// giving up when QEMU exits or ctx ends. The socket's file is there from
// QEMU's bind, a moment before its listen: a connection refused in
// between is tried again (a loaded host made that moment 0.4 s long).
func dialWhileRunning(ctx context.Context, sock string, exited chan struct{}) (*QMP, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(sock); err == nil {
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			q, err := DialQMP(dctx, sock)
			cancel()
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return q, err
			}
		}
		select {
		case <-exited:
			return nil, errors.New("qemu exited at once")
		case <-ctx.Done():
			return nil, fmt.Errorf("no QMP socket: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// boot takes q's machine, just started and paused, through a reset with
// first booted first (when first names a device), and resumes it.
func (m *QEMU) boot(ctx context.Context, q *QMP, first string) error {
	restore, err := m.putFirst(ctx, q, first)
	if err != nil {
		return err
	}
	if restore != nil {
		if err := reset(ctx, q); err != nil {
			return err
		}
		if err := restore(ctx); err != nil {
			return err
		}
	}
	return q.Execute(ctx, "cont", nil, nil)
}

// reset resets q's machine and waits until QEMU says it is done (the
// bootorder built).
func reset(ctx context.Context, q *QMP) error {
	since := len(q.Events())
	if err := q.Execute(ctx, "system_reset", nil, nil); err != nil {
		return err
	}
	_, _, err := q.WaitEvent(ctx, "RESET", since)
	return err
}

// device is the device (its id) that the boot target first puts first,
// "" for none.
func (m *QEMU) device(first string) string {
	if first == "Cd" {
		return CDDevice
	}
	return m.vm.BootDevices[first]
}

// putFirst gives the device that first names bootindex 0, and returns
// what sets its own back (nil when nothing changed).
func (m *QEMU) putFirst(ctx context.Context, q *QMP, first string) (func(context.Context) error, error) {
	dev := m.device(first)
	if dev == "" {
		return nil, nil
	}
	path := "/machine/peripheral/" + dev
	var was int
	if err := q.Execute(ctx, "qom-get", map[string]any{"path": path, "property": "bootindex"}, &was); err != nil {
		return nil, fmt.Errorf("boot %s first (device %s): %w", first, dev, err)
	}
	if was == 0 {
		return nil, nil
	}
	if err := q.Execute(ctx, "qom-set", map[string]any{"path": path, "property": "bootindex", "value": 0}, nil); err != nil {
		return nil, fmt.Errorf("boot %s first (device %s): %w", first, dev, err)
	}
	return func(ctx context.Context) error {
		return q.Execute(ctx, "qom-set", map[string]any{"path": path, "property": "bootindex", "value": was}, nil)
	}, nil
}

// Reset is a system_reset, or with a first device a cold restart (see
// QEMU).
func (m *QEMU) Reset(ctx context.Context, first string) error {
	m.op.Lock()
	defer m.op.Unlock()
	q, exited := m.running()
	if q == nil {
		return errors.New("qemu reset: the machine is off")
	}
	if m.device(first) == "" {
		if err := reset(ctx, q); err != nil {
			return fmt.Errorf("qemu reset: %w", err)
		}
		return nil
	}
	m.quit(ctx, q, exited)
	return m.powerOn(ctx, first)
}

func (m *QEMU) Shutdown(ctx context.Context) error {
	m.op.Lock()
	defer m.op.Unlock()
	q, _ := m.running()
	if q == nil {
		return nil
	}
	return q.Execute(ctx, "system_powerdown", nil, nil)
}

// PowerOff asks QEMU to quit and kills it when it has not after
// QuitTimeout.
func (m *QEMU) PowerOff(ctx context.Context) error {
	m.op.Lock()
	defer m.op.Unlock()
	q, exited := m.running()
	m.quit(ctx, q, exited)
	return nil
}

// quit asks QEMU to quit (q nil: it is off), kills it when it has not
// after QuitTimeout, and forgets it; m.op is held.
func (m *QEMU) quit(ctx context.Context, q *QMP, exited chan struct{}) {
	if q != nil {
		qctx, cancel := context.WithTimeout(ctx, m.vm.QuitTimeout)
		q.Execute(qctx, "quit", nil, nil) // the answer may be lost as it exits
		select {
		case <-exited:
		case <-qctx.Done():
		}
		cancel()
	}
	m.kill()
}

// kill ends QEMU's process group, if it runs, and forgets it.
func (m *QEMU) kill() {
	m.mu.Lock()
	proc, exited := m.proc, m.exited
	m.mu.Unlock()
	if proc == nil {
		return
	}
	select {
	case <-exited:
	default:
		syscall.Kill(-proc.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	m.reap()
}

// reap forgets a QEMU that exited (the guest powered off).
func (m *QEMU) reap() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.qmp != nil {
		m.qmp.Close()
	}
	m.proc, m.qmp, m.exited = nil, nil, nil
}

func (m *QEMU) Insert(ctx context.Context, path string) error {
	m.op.Lock()
	defer m.op.Unlock()
	if q, _ := m.running(); q != nil {
		if err := changeMedium(ctx, q, path); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.media = path
	m.mu.Unlock()
	return nil
}

// changeMedium puts the image at path into the CD drive, the tray
// opened and closed whatever the guest locked.
func changeMedium(ctx context.Context, q *QMP, path string) error {
	return q.Execute(ctx, "blockdev-change-medium", map[string]any{
		"id": CDDevice, "filename": path, "format": "raw", "read-only-mode": "read-only", "force": true,
	}, nil)
}

func (m *QEMU) Eject(ctx context.Context) error {
	m.op.Lock()
	defer m.op.Unlock()
	if q, _ := m.running(); q != nil {
		if err := q.Execute(ctx, "eject", map[string]any{"id": CDDevice, "force": true}, nil); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.media = ""
	m.mu.Unlock()
	return nil
}

// Execute runs a QMP command on the running VM (query-block,
// query-status: what a test checks); an error when it is off.
func (m *QEMU) Execute(ctx context.Context, cmd string, args, out any) error {
	q, _ := m.running()
	if q == nil {
		return fmt.Errorf("qmp %s: the machine is off", cmd)
	}
	return q.Execute(ctx, cmd, args, out)
}

// Events are the QMP events of the VM's current run.
func (m *QEMU) Events() []Event {
	q, _ := m.running()
	if q == nil {
		return nil
	}
	return q.Events()
}

// Output is the end of what QEMU wrote in its last run.
func (m *QEMU) Output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tail == nil {
		return ""
	}
	return m.tail.String()
}

// tailBuffer passes what it is written on to w and keeps its last max
// bytes.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
	w   io.Writer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	if t.w != nil {
		t.w.Write(p)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
