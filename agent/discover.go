package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bootops/bootops/plan"
)

// Identity reads what the machine is registered by from sysfs (normally
// "/sys"): the SMBIOS UUID and serial, and the MAC of every physical NIC.
// Values firmwares report when nobody set one (an all-zero UUID, "To Be
// Filled By O.E.M.") are left out, never guessed at, like the boot server
// does with what iPXE reports. Unreadable files are reported in the error,
// with whatever could be read.
func Identity(sysfs string) (plan.Identity, error) {
	var id plan.Identity
	var errs []error
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	dmi := filepath.Join(sysfs, "class", "dmi", "id")
	if u := plan.NormalizeUUID(read(filepath.Join(dmi, "product_uuid"))); strings.Trim(u, "0-") != "" && strings.Trim(u, "f-") != "" {
		id.UUID = u
	}
	if s := read(filepath.Join(dmi, "product_serial")); usableSerial(s) {
		id.Serial = plan.NormalizeSerial(s)
	}

	netDir := filepath.Join(sysfs, "class", "net")
	ifaces, err := os.ReadDir(netDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for _, e := range ifaces {
		dir := filepath.Join(netDir, e.Name())
		if e.Name() == "lo" {
			continue
		}
		// Bridges, bonds, VLANs, veths and tunnels have no device: their
		// MACs are borrowed or random.
		if _, err := os.Stat(filepath.Join(dir, "device")); err != nil {
			continue
		}
		mac := plan.NormalizeMAC(read(filepath.Join(dir, "address")))
		if mac == "" || mac == "00:00:00:00:00:00" || seen[mac] {
			continue
		}
		seen[mac] = true
		id.MACs = append(id.MACs, mac)
	}
	return id, errors.Join(errs...)
}

// usableSerial reports whether s can be a node's serial: the schema's
// serials have no spaces, and firmwares fill in placeholders.
func usableSerial(s string) bool {
	if s == "" || len(s) > 64 || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return false
	}
	switch strings.ToLower(s) {
	case "none", "default", "unknown", "n/a", "na", "0123456789", "not-specified", "system-serial-number", "to-be-filled-by-o.e.m.":
		return false
	}
	return strings.Trim(s, "0") != ""
}

// Disks lists the block devices of sysfs (normally "/sys") an image can go
// to, by name: loop, RAM, zram, optical and device-mapper devices are left
// out.
func Disks(sysfs string) ([]plan.Disk, error) {
	dir := filepath.Join(sysfs, "block")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list disks: %w", err)
	}
	var disks []plan.Disk
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if skipDisk(name) {
			continue
		}
		read := func(p ...string) string {
			b, err := os.ReadFile(filepath.Join(append([]string{dir, name}, p...)...))
			if err != nil {
				return ""
			}
			return strings.TrimSpace(string(b))
		}
		sectors, err := strconv.ParseInt(read("size"), 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("disk %s: size: %w", name, err))
			continue
		}
		d := plan.Disk{
			Name:      name,
			Size:      sectors * 512, // sysfs counts 512-byte sectors whatever the disk's
			Model:     read("device", "model"),
			Serial:    read("device", "serial"),
			Removable: read("removable") == "1",
		}
		if d.Serial == "" {
			d.Serial = read("serial") // virtio-blk keeps it here
		}
		disks = append(disks, d)
	}
	return disks, errors.Join(errs...)
}

func skipDisk(name string) bool {
	for _, p := range []string{"loop", "ram", "zram", "sr", "dm-", "nbd", "fd"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// resolveDisk turns an action's disk into a device: "" and "auto" are the
// first non-removable disk of sysfs with a size, a /dev/disk/by-* link the
// device it points to (partitions are named after it), anything else
// itself.
func resolveDisk(sysfs, name string) (string, error) {
	switch name {
	case "", "auto":
		disks, err := Disks(sysfs)
		for _, d := range disks {
			if !d.Removable && d.Size > 0 {
				return "/dev/" + d.Name, nil
			}
		}
		if err != nil {
			return "", err
		}
		return "", errors.New("no non-removable disk found")
	}
	if strings.HasPrefix(name, "/dev/disk/") {
		p, err := filepath.EvalSymlinks(name)
		if err != nil {
			return "", err
		}
		return p, nil
	}
	return name, nil
}
