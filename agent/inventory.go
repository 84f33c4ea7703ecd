package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jaypipes/ghw"
	"github.com/jaypipes/pcidb"

	"github.com/bootops/bootops/plan"
)

// What one inventory may hold at most, so that a check-in stays small
// whatever the machine (a JBOD, a switch-like box with many ports).
const (
	maxInvDisks = 64
	maxInvNICs  = 64
	maxInvPCI   = 256
	maxInvDIMMs = 64
	maxInvText  = 128 // bytes of any one string
	// maxInvJSON leaves room in a check-in (the boot server reads 64 KiB
	// of it) for the identity, disks and boot info.
	maxInvJSON = 48 << 10
)

// ghwUnknown is what ghw says when it cannot read a value.
const ghwUnknown = "unknown"

// Inventory reads the machine's hardware under root ("" is "/"; else a
// folder holding sys/ and proc/ like a chroot, as the tests use): SMBIOS,
// CPUs, memory, disks and NICs through ghw, what ghw does not tell (NIC
// driver and link, disk transport on SCSI, model and serial without udev,
// PCI IDs, TPM, Secure Boot) from sysfs by hand. Every part is best
// effort: one that cannot be read is left empty. The error joins the
// parts' errors, and is returned only when nothing at all could be read.
func Inventory(root string) (*plan.Inventory, error) {
	if root == "" {
		root = "/"
	}
	sysfs := filepath.Join(root, "sys")
	opts := []any{
		ghw.WithChroot(root),
		// ghw logs to stderr, which is the Micro-OS console; the parts'
		// errors are ours to report. WithDisableWarnings alone still lets
		// errors through.
		ghw.WithLogger(slog.New(slog.DiscardHandler)),
		ghw.WithDisableWarnings(),
		// No ethtool: the Micro-OS has none, and the tests' fake NICs
		// must not be looked up on the host.
		ghw.WithDisableTools(),
	}
	inv := &plan.Inventory{}
	var errs []error
	read := 0
	part := func(name string, fn func() error) {
		if err := fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			return
		}
		read++
	}
	part("system", func() error { return invSystem(inv, opts) })
	part("cpu", func() error { return invCPU(inv, opts) })
	part("memory", func() error { return invMemory(inv, opts) })
	part("disks", func() error { return invDisks(inv, sysfs, opts) })
	part("nics", func() error { return invNICs(inv, sysfs, opts) })
	part("pci", func() error { return invPCI(inv, root) })
	// No TPM and no Secure Boot are answers, but not something read.
	if err := invTPM(inv, sysfs); err != nil {
		errs = append(errs, fmt.Errorf("tpm: %w", err))
	} else if inv.TPM.Present {
		read++
	}
	if inv.SecureBoot = secureBoot(sysfs); inv.SecureBoot {
		read++
	}
	fit(inv, maxInvJSON)
	if read == 0 {
		return inv, errors.Join(errs...)
	}
	return inv, nil
}

func invSystem(inv *plan.Inventory, opts []any) error {
	s := &inv.System
	if p, err := ghw.Product(opts...); err == nil {
		s.Vendor, s.Product, s.Serial, s.Version = text(p.Vendor), text(p.Name), text(p.SerialNumber), text(p.Version)
	}
	if b, err := ghw.Baseboard(opts...); err == nil {
		s.BoardVendor, s.BoardProduct, s.BoardSerial = text(b.Vendor), text(b.Product), text(b.SerialNumber)
	}
	if b, err := ghw.BIOS(opts...); err == nil {
		s.BIOSVendor, s.BIOSVersion, s.BIOSDate = text(b.Vendor), text(b.Version), text(b.Date)
	}
	// ghw reports no error for a machine without SMBIOS, only "unknown"
	// everywhere.
	if *s == (plan.SystemInfo{}) {
		return errors.New("no SMBIOS (class/dmi/id) nor device tree")
	}
	return nil
}

func invCPU(inv *plan.Inventory, opts []any) error {
	c, err := ghw.CPU(opts...)
	if err != nil {
		return err
	}
	if len(c.Processors) == 0 {
		return errors.New("no processor in devices/system/cpu and cpuinfo")
	}
	inv.CPU = plan.CPUInfo{
		Model:   text(c.Processors[0].Model),
		Sockets: len(c.Processors),
		Cores:   int(c.TotalCores),
		Threads: int(c.TotalHardwareThreads),
	}
	return nil
}

func invMemory(inv *plan.Inventory, opts []any) error {
	m, err := ghw.Memory(opts...)
	if err != nil {
		return err
	}
	// What the OS sees (MemTotal), as expectations compare it (plan.Expect):
	// not ghw's physical total, which counts the memory blocks where there
	// are some and reads syslog where there are none.
	inv.Memory.Total = m.TotalUsableBytes
	// ghw lists modules on Windows only (v0.27.0); kept for when it does
	// on Linux.
	for _, d := range m.Modules {
		if len(inv.Memory.DIMMs) == maxInvDIMMs {
			break
		}
		inv.Memory.DIMMs = append(inv.Memory.DIMMs, plan.DIMMInfo{
			Locator: text(d.Location), Size: d.SizeBytes, Vendor: text(d.Vendor),
		})
	}
	return nil
}

func invDisks(inv *plan.Inventory, sysfs string, opts []any) error {
	b, err := ghw.Block(opts...)
	if err != nil {
		return err
	}
	if b.Disks == nil {
		// ghw's answer when it cannot list block/.
		_, err := os.ReadDir(filepath.Join(sysfs, "block"))
		return err
	}
	for _, d := range b.Disks {
		if skipDisk(d.Name) || d.IsRemovable {
			continue
		}
		if len(inv.Disks) == maxInvDisks {
			break
		}
		dir := filepath.Join(sysfs, "block", d.Name)
		// ghw has the model and serial from udev's database only; the
		// Micro-OS runs no udev, and sysfs has them too (as Disks reads).
		model, serial := text(d.Model), diskSerial(dir, d.SerialNumber)
		if model == "" {
			model = readText(dir, "device", "model")
		}
		inv.Disks = append(inv.Disks, plan.DiskInfo{
			Name:       text(d.Name),
			Model:      model,
			Serial:     serial,
			Size:       int64(d.SizeBytes),
			Rotational: d.DriveType == ghw.DriveTypeHDD,
			Transport:  transport(dir, d.StorageController),
		})
	}
	return nil
}

// diskSerial is the serial of the disk at dir (its sysfs folder): udev's
// (fromUdev), else sysfs's: device/serial (NVMe), serial (virtio-blk), or
// the unit serial number page of the SCSI VPD (device/vpd_pg80: an ATA or
// SAS disk, whose serial the kernel has nowhere else): a 4-byte header,
// then the serial, padded with spaces.
func diskSerial(dir, fromUdev string) string {
	if s := text(fromUdev); s != "" {
		return s
	}
	if s := readText(dir, "device", "serial"); s != "" {
		return s
	}
	if s := readText(dir, "serial"); s != "" {
		return s
	}
	b, err := os.ReadFile(filepath.Join(dir, "device", "vpd_pg80"))
	if err != nil || len(b) < 4 || b[1] != 0x80 {
		return ""
	}
	n := min(int(b[2])<<8|int(b[3]), len(b)-4)
	return text(strings.Trim(string(b[4:4+n]), " \x00"))
}

// transport names the bus of a disk: ghw's controller, told from the
// name alone, so "scsi" for every sd*; which of SATA, SAS or USB it is,
// the device's path in sysfs says.
func transport(dir string, sc ghw.StorageController) string {
	if sc == ghw.StorageControllerUnknown {
		return ""
	}
	t := strings.ToLower(sc.String())
	if sc != ghw.StorageControllerSCSI {
		return t
	}
	p, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return t
	}
	switch {
	case strings.Contains(p, "/usb"):
		return "usb"
	case strings.Contains(p, "/end_device-"):
		return "sas"
	case strings.Contains(p, "/ata"):
		return "sata"
	}
	return t
}

func invNICs(inv *plan.Inventory, sysfs string, opts []any) error {
	n, err := ghw.Network(opts...)
	if err != nil {
		return err
	}
	if len(n.NICs) == 0 {
		if _, err := os.ReadDir(filepath.Join(sysfs, "class", "net")); err != nil {
			return err
		}
	}
	for _, nic := range n.NICs {
		if nic.IsVirtual {
			continue
		}
		dir := filepath.Join(sysfs, "class", "net", nic.Name)
		_, err := os.Stat(filepath.Join(dir, "device"))
		hasDevice := err == nil
		// ghw gives only a permanent address (addr_assign_type 0); a NIC
		// without one in its EEPROM has a random one, which Identity
		// reports all the same: so does the inventory.
		mac := nic.MACAddress
		if mac == "" && hasDevice {
			mac = readText(dir, "address")
		}
		mac = plan.NormalizeMAC(mac)
		if mac == "" || mac == "00:00:00:00:00:00" {
			continue
		}
		if len(inv.NICs) == maxInvNICs {
			break
		}
		c := plan.NICInfo{Name: text(nic.Name), MAC: mac}
		if l, err := os.Readlink(filepath.Join(dir, "device", "driver")); err == nil {
			c.Driver = text(filepath.Base(l))
		}
		switch readText(dir, "operstate") {
		case "up":
			c.Link = "up"
		case "down", "lowerlayerdown", "dormant", "notpresent":
			c.Link = "down"
		}
		// Without ethtool, ghw's speed is sysfs's: Mb/s, -1 or unreadable
		// when the link is down.
		if s, err := strconv.Atoi(nic.Speed); err == nil && s > 0 {
			c.Speed = s
		}
		inv.NICs = append(inv.NICs, c)
	}
	return nil
}

// invPCI reads the IDs from sysfs by hand: ghw's PCI fails outright
// without a pci.ids database (the Micro-OS has none), looks for it outside
// its chroot, and wants each device's modalias. The names come from the
// database when root has one.
func invPCI(inv *plan.Inventory, root string) error {
	dir := filepath.Join(root, "sys", "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	db := pciDB(root)
	for _, e := range entries {
		if len(inv.PCI) == maxInvPCI {
			break
		}
		p := plan.PCIInfo{
			Address: text(e.Name()),
			Vendor:  hexID(readText(dir, e.Name(), "vendor"), 4),
			Device:  hexID(readText(dir, e.Name(), "device"), 4),
			Class:   hexID(readText(dir, e.Name(), "class"), 6),
		}
		if p.Vendor == "" || p.Device == "" {
			continue
		}
		if len(p.Class) == 6 {
			p.Class = p.Class[:4] // class and subclass, not the interface
		}
		if db != nil {
			if v := db.Vendors[p.Vendor]; v != nil {
				p.VendorName = text(v.Name)
			}
			if d := db.Products[p.Vendor+p.Device]; d != nil {
				p.DeviceName = text(d.Name)
			}
		}
		inv.PCI = append(inv.PCI, p)
	}
	return nil
}

// pciDB loads the PCI IDs database of root, nil when it has none.
func pciDB(root string) *pcidb.PCIDB {
	for _, p := range []string{"usr/share/hwdata/pci.ids", "usr/share/misc/pci.ids", "usr/share/hwdata/pci.ids.gz", "usr/share/misc/pci.ids.gz"} {
		p = filepath.Join(root, p)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if db, err := pcidb.New(pcidb.WithPath(p)); err == nil {
			return db
		}
	}
	return nil
}

// hexID turns sysfs's "0x8086" into "8086", zero-padded to n digits; ""
// if it is no hex number.
func hexID(s string, n int) string {
	s = strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X"))
	if s == "" || len(s) > n {
		return ""
	}
	if _, err := strconv.ParseUint(s, 16, 32); err != nil {
		return ""
	}
	return strings.Repeat("0", n-len(s)) + s
}

func invTPM(inv *plan.Inventory, sysfs string) error {
	dir := filepath.Join(sysfs, "class", "tpm", "tpm0")
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // no TPM is an answer
		}
		return err
	}
	inv.TPM.Present = true
	inv.TPM.Version = "1.2" // which has no tpm_version_major
	if readText(dir, "tpm_version_major") == "2" {
		inv.TPM.Version = "2.0"
	}
	return nil
}

// fit shrinks inv until its JSON is at most max bytes: the counts are
// bounded, but 256 PCI devices with long names go past what a check-in
// may carry. The PCI names go first, then half the lists in turn, longest
// first; what a warehouse checks (system, CPU, memory, first disks and
// NICs) last.
func fit(inv *plan.Inventory, max int) {
	size := func() int {
		b, _ := json.Marshal(inv)
		return len(b)
	}
	if size() <= max {
		return
	}
	for i := range inv.PCI {
		inv.PCI[i].VendorName, inv.PCI[i].DeviceName = "", ""
	}
	for size() > max {
		switch {
		case len(inv.PCI) > 0:
			inv.PCI = inv.PCI[:len(inv.PCI)/2]
		case len(inv.Memory.DIMMs) > 0:
			inv.Memory.DIMMs = inv.Memory.DIMMs[:len(inv.Memory.DIMMs)/2]
		case len(inv.NICs) > 1:
			inv.NICs = inv.NICs[:len(inv.NICs)/2]
		case len(inv.Disks) > 1:
			inv.Disks = inv.Disks[:len(inv.Disks)/2]
		default:
			return // 64 strings of 128 bytes at most: never past max
		}
	}
}

// readText reads a sysfs file as text ("" if it cannot).
func readText(p ...string) string {
	b, err := os.ReadFile(filepath.Join(p...))
	if err != nil {
		return ""
	}
	return text(string(b))
}

// text trims s and cuts it to maxInvText bytes, on a rune boundary; ghw's
// "unknown" is "".
func text(s string) string {
	s = strings.TrimSpace(s)
	if s == ghwUnknown {
		return ""
	}
	if len(s) <= maxInvText {
		return s
	}
	n := maxInvText
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.TrimSpace(s[:n])
}
