//go:build e2e

package redfishvm

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/power"
)

// bootSector is a CD's El Torito boot image (no emulation) that writes
// cdBooted to QEMU's debug console (port 0x402) and halts: the proof
// that the firmware booted the BMC's CD.
//
//	cli; cld; push cs; pop ds; call next; next: pop si; add si, msg-next
//	mov dx, 0x402; loop: lodsb; test al, al; jz done; out dx, al; jmp loop
//	done: hlt; jmp done; msg: db cdBooted, 0
var bootSector = []byte{
	0xFA, 0xFC, 0x0E, 0x1F, 0xE8, 0x00, 0x00, 0x5E, 0x83, 0xC6, 0x12,
	0xBA, 0x02, 0x04, 0xAC, 0x84, 0xC0, 0x74, 0x03, 0xEE, 0xEB, 0xF8,
	0xF4, 0xEB, 0xFD,
}

const cdBooted = "BOOTED FROM THE BMC CD"

// makeISO writes a bootable ISO (xorriso) whose boot image is bootSector.
func makeISO(t *testing.T, dir string) string {
	t.Helper()
	root := filepath.Join(dir, "iso")
	os.MkdirAll(root, 0o755)
	image := make([]byte, 2048)
	copy(image, append(append(bootSector, cdBooted...), '\n', 0))
	testutil.WriteFile(t, root, "boot.bin", string(image))
	testutil.WriteFile(t, root, "README", "a CD for the redfishvm test\n")
	iso := filepath.Join(dir, "cd.iso")
	out, err := exec.Command("xorriso", "-as", "mkisofs", "-quiet", "-V", "BMCVM",
		"-b", "boot.bin", "-no-emul-boot", "-boot-load-size", "4", "-o", iso, root).CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso: %v: %s", err, out)
	}
	return iso
}

// firstBoots reads SeaBIOS's debug log: for each boot, the device it
// tried first ("DVD/CD", "Hard Disk"). Only whole lines count: QEMU may
// be writing the last.
func firstBoots(log string) []string {
	var firsts []string
	inBoot := false
	lines := strings.Split(log, "\n")
	for _, line := range lines[:len(lines)-1] {
		switch {
		case strings.HasPrefix(line, "Running on QEMU"):
			inBoot = true
		case inBoot && strings.HasPrefix(line, "Booting from ") && !strings.HasPrefix(line, "Booting from 0000:"):
			firsts = append(firsts, strings.TrimSuffix(strings.TrimPrefix(line, "Booting from "), "..."))
			inBoot = false
		}
	}
	return firsts
}

// cdDrive is the BMC's CD drive as QMP's query-block shows it.
type cdDrive struct {
	Qdev     string `json:"qdev"`
	TrayOpen bool   `json:"tray_open"`
	Inserted *struct {
		File string `json:"file"`
		RO   bool   `json:"ro"`
	} `json:"inserted"`
}

func queryCD(t *testing.T, ctx context.Context, m *QEMU) cdDrive {
	t.Helper()
	var blocks []struct {
		Device string `json:"device"`
		cdDrive
	}
	if err := m.Execute(ctx, "query-block", nil, &blocks); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.Device == CDDrive {
			return b.cdDrive
		}
	}
	t.Fatalf("query-block has no %s: %+v", CDDrive, blocks)
	return cdDrive{}
}

func bootIndex(t *testing.T, ctx context.Context, m *QEMU) int {
	t.Helper()
	var i int
	if err := m.Execute(ctx, "qom-get", map[string]any{"path": "/machine/peripheral/" + CDDevice, "property": "bootindex"}, &i); err != nil {
		t.Fatal(err)
	}
	return i
}

// vmRig is a QEMU VM (SeaBIOS, a blank disk, TCG) behind a redfishvm BMC
// on loopback, an image server beside it, and the ISO it serves.
type vmRig struct {
	qemu     *QEMU
	bmc      *BMC
	srv      *httptest.Server
	imageURL string
	fwLog    string
}

func newVMRig(t *testing.T) *vmRig {
	for _, tool := range []string{"qemu-system-x86_64", "xorriso"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (Debian: qemu-system-x86, xorriso): %v", tool, err)
		}
	}
	dir := t.TempDir()
	iso := makeISO(t, dir)
	disk := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(disk, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &vmRig{fwLog: filepath.Join(dir, "firmware.log")}
	console := &testutil.SyncBuffer{}
	r.qemu = NewQEMU(VM{
		Dir: dir,
		Args: []string{"-machine", "pc,accel=tcg", "-m", "64", "-nographic", "-nodefaults",
			"-chardev", "file,id=fw,append=on,path=" + r.fwLog, "-device", "isa-debugcon,iobase=0x402,chardev=fw",
			"-drive", "if=none,id=d0,format=raw,file=" + disk, "-device", "ide-hd,drive=d0,id=disk0,bootindex=1"},
		BootDevices: map[string]string{"Hdd": "disk0"},
		Output:      console,
	})
	t.Cleanup(func() {
		r.qemu.PowerOff(context.Background())
		if t.Failed() {
			log, _ := os.ReadFile(r.fwLog)
			t.Logf("firmware log:\n%s\nQEMU:\n%s", testutil.Tail(string(log), 3000), console.String())
		}
	})
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.ServeFile(w, req, iso)
	}))
	t.Cleanup(images.Close)
	r.imageURL = images.URL + "/edge.iso"
	r.bmc = New(Config{Machine: r.qemu, MediaDir: dir})
	var err error
	if r.srv, err = r.bmc.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.srv.Close)
	return r
}

// plan is the BMC as Git would name it.
func (r *vmRig) plan() *plan.BMC {
	host, port, _ := strings.Cut(r.srv.Listener.Addr().String(), ":")
	p, _ := strconv.Atoi(port)
	return &plan.BMC{Address: host, Port: p, Protocol: plan.BMCRedfish, Secret: "edge"}
}

// waitBoots waits until SeaBIOS has begun n boots, and returns the
// device each tried first.
func (r *vmRig) waitBoots(t *testing.T, n int) []string {
	t.Helper()
	var firsts []string
	testutil.WaitFor(t, fmt.Sprintf("boot %d in the firmware log", n), 60*time.Second, func() bool {
		log, _ := os.ReadFile(r.fwLog)
		firsts = firstBoots(string(log))
		return len(firsts) >= n
	})
	return firsts
}

func (r *vmRig) cdBoots() int {
	log, _ := os.ReadFile(r.fwLog)
	return strings.Count(string(log), cdBooted)
}

// A real QEMU behind the BMC, driven through power's bmclib client:
// power on (the disk first), insert an ISO from a loopback server (in
// QMP's query-block), boot once from the CD (it boots it, then the disk
// first again), eject (the tray empty), power off (QEMU gone), each
// checked in QMP and in the firmware's own log.
func TestQEMUThroughBMCLib(t *testing.T) {
	start := time.Now()
	r := newVMRig(t)
	c := power.DialBMCLib(r.plan(), netip.MustParseAddr("127.0.0.1"), power.Credentials{Username: "root", Password: "calvin"}).(power.MediaController)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	state, err := c.PowerState(ctx)
	must("power status", err)
	if state != power.Off || r.qemu.On() {
		t.Fatalf("at first: %s, QEMU running %v", state, r.qemu.On())
	}
	must("power on", c.SetPower(ctx, "on"))
	var status struct{ Status string }
	must("query-status", r.qemu.Execute(ctx, "query-status", nil, &status))
	if status.Status != "running" {
		t.Errorf("after power on QEMU is %q", status.Status)
	}
	if firsts := r.waitBoots(t, 1); firsts[0] != "Hard Disk" {
		t.Errorf("the first boot tried %s first, want the disk", firsts[0])
	}

	must("insert", c.SetVirtualMedia(ctx, r.imageURL))
	cd := queryCD(t, ctx, r.qemu)
	if cd.Inserted == nil || !cd.Inserted.RO || cd.TrayOpen || cd.Qdev != CDDevice {
		t.Fatalf("after insert query-block shows %+v", cd)
	}
	if got, want := fileSize(t, cd.Inserted.File), fileSize(t, filepath.Join(filepath.Dir(r.fwLog), "cd.iso")); got != want {
		t.Errorf("the CD in QEMU (%s) has %d bytes, the ISO served %d", cd.Inserted.File, got, want)
	}

	must("boot once from the CD", c.SetBootDevice(ctx, "cdrom", true))
	if got := boot(t, r.srv); got != "On Cd Once UEFI" {
		t.Errorf("after the boot override the system is %s", got)
	}
	must("cycle", c.SetPower(ctx, "cycle"))
	if firsts := r.waitBoots(t, 2); firsts[1] != "DVD/CD" {
		t.Errorf("the boot after the override tried %s first, want the CD", firsts[1])
	}
	testutil.WaitFor(t, "the CD's boot image running", 30*time.Second, func() bool { return r.cdBoots() == 1 })
	if got, i := boot(t, r.srv), bootIndex(t, ctx, r.qemu); got != "On Cd Disabled UEFI" || i != 100 {
		t.Errorf("after the one-time boot the system is %s, the CD's bootindex %d (want Disabled, 100)", got, i)
	}
	must("cycle again", c.SetPower(ctx, "cycle"))
	if firsts := r.waitBoots(t, 3); firsts[2] != "Hard Disk" {
		t.Errorf("the boot after the one-time boot tried %s first, want the disk", firsts[2])
	}

	must("eject", c.SetVirtualMedia(ctx, ""))
	if cd := queryCD(t, ctx, r.qemu); cd.Inserted != nil || !cd.TrayOpen {
		t.Errorf("after eject query-block shows %+v", cd)
	}

	must("power off", c.SetPower(ctx, "off"))
	state, err = c.PowerState(ctx)
	must("power status", err)
	if state != power.Off || r.qemu.On() {
		t.Errorf("after power off: %s, QEMU running %v", state, r.qemu.On())
	}
	if q, err := DialQMP(ctx, filepath.Join(filepath.Dir(r.fwLog), "qmp.sock")); err == nil {
		q.Close()
		t.Error("QMP still answers after power off")
	}
	orders := strings.Join(r.bmc.Saw("POST "+resetPath), "\n")
	want := "POST " + resetPath + " On\n" +
		"POST " + resetPath + " ForceRestart (boot Cd first)\n" +
		"POST " + resetPath + " ForceRestart\n" +
		"POST " + resetPath + " ForceOff"
	if orders != want {
		t.Errorf("the BMC carried out:\n%s\nwant:\n%s", orders, want)
	}
	t.Logf("QEMU test: %s", time.Since(start).Round(100*time.Millisecond))
}

// power.Manager's InsertMedia on a node that is off: the ISO in QEMU's
// CD, the CD booted first by the power-on, the override then cleared;
// EjectMedia empties the drive.
func TestQEMUManagerInsertMedia(t *testing.T) {
	start := time.Now()
	r := newVMRig(t)
	secrets := t.TempDir()
	testutil.WriteFile(t, secrets, "edge", "root:calvin\nallow: 127.0.0.1/32\n")
	os.Chmod(filepath.Join(secrets, "edge"), 0o600)
	bmc := r.plan()
	var mu sync.Mutex
	var timeline []string
	m := &power.Manager{
		Plan: func() *plan.Plan {
			return &plan.Plan{Sites: []*plan.Site{{Name: "edge", Nodes: []*plan.Node{{Name: "n1", BMC: bmc}}}}}
		},
		Record: func(_, _, msg string, _ bool, _ int) {
			mu.Lock()
			timeline = append(timeline, msg)
			mu.Unlock()
		},
		Secrets:     &power.Secrets{Dir: secrets},
		InsecureTLS: true,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, err := m.InsertMedia(ctx, "edge/n1", r.imageURL)
	if err != nil {
		t.Fatal(err)
	}
	if st.Power != power.On || !r.qemu.On() {
		t.Errorf("after InsertMedia: %+v, QEMU running %v", st, r.qemu.On())
	}
	if cd := queryCD(t, ctx, r.qemu); cd.Inserted == nil {
		t.Errorf("after InsertMedia query-block shows %+v", cd)
	}
	if firsts := r.waitBoots(t, 1); firsts[0] != "DVD/CD" {
		t.Errorf("the power-on tried %s first, want the CD", firsts[0])
	}
	testutil.WaitFor(t, "the CD's boot image running", 30*time.Second, func() bool { return r.cdBoots() == 1 })
	if got := boot(t, r.srv); got != "On Cd Disabled UEFI" {
		t.Errorf("after the boot the system is %s", got)
	}
	if err := m.EjectMedia(ctx, "edge/n1"); err != nil {
		t.Fatal(err)
	}
	if cd := queryCD(t, ctx, r.qemu); cd.Inserted != nil {
		t.Errorf("after EjectMedia query-block shows %+v", cd)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(timeline, "\n"); !strings.Contains(got, "power: powered on to boot the virtual CD (it was off)") || !strings.Contains(got, "power: virtual CD ejected") {
		t.Errorf("timeline:\n%s", got)
	}
	t.Logf("QEMU test: %s", time.Since(start).Round(100*time.Millisecond))
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
