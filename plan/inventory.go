package plan

import (
	"fmt"
	"strings"
)

// Inventory is a machine's hardware as its agent reads it in the
// Micro-OS, sent at check-in: what the warehouse checks against the order
// (expectations) and ships in the delivery record. Sizes are in bytes,
// speeds in megabits per second; a field the machine does not tell is
// left empty.
type Inventory struct {
	System SystemInfo `json:"system"`
	CPU    CPUInfo    `json:"cpu"`
	Memory MemoryInfo `json:"memory"`
	Disks  []DiskInfo `json:"disks,omitempty"`
	NICs   []NICInfo  `json:"nics,omitempty"`
	PCI    []PCIInfo  `json:"pci,omitempty"`
	TPM    TPMInfo    `json:"tpm"`
	// SecureBoot: UEFI Secure Boot was on (the SecureBoot EFI variable).
	SecureBoot bool `json:"secureBoot,omitempty"`
}

// SystemInfo is what SMBIOS says of the system, its board and its
// firmware.
type SystemInfo struct {
	Vendor       string `json:"vendor,omitempty"`
	Product      string `json:"product,omitempty"`
	Serial       string `json:"serial,omitempty"`
	Version      string `json:"version,omitempty"`
	BoardVendor  string `json:"boardVendor,omitempty"`
	BoardProduct string `json:"boardProduct,omitempty"`
	BoardSerial  string `json:"boardSerial,omitempty"`
	BIOSVendor   string `json:"biosVendor,omitempty"`
	BIOSVersion  string `json:"biosVersion,omitempty"`
	BIOSDate     string `json:"biosDate,omitempty"`
}

// CPUInfo counts the processors: sockets, physical cores and hardware
// threads (logical CPUs), all sockets together.
type CPUInfo struct {
	Model   string `json:"model,omitempty"`
	Sockets int    `json:"sockets,omitempty"`
	Cores   int    `json:"cores,omitempty"`
	Threads int    `json:"threads,omitempty"`
}

// MemoryInfo is the memory the OS sees (Total) and, when SMBIOS lists
// them, the modules.
type MemoryInfo struct {
	Total int64      `json:"total,omitempty"`
	DIMMs []DIMMInfo `json:"dimms,omitempty"`
}

// DIMMInfo is one memory module.
type DIMMInfo struct {
	Locator string `json:"locator,omitempty"`
	Size    int64  `json:"size,omitempty"`
	Type    string `json:"type,omitempty"`
	Vendor  string `json:"vendor,omitempty"`
}

// DiskInfo is one block device (not removable media, not a RAM disk).
type DiskInfo struct {
	Name       string `json:"name"`
	Model      string `json:"model,omitempty"`
	Serial     string `json:"serial,omitempty"`
	Size       int64  `json:"size"`
	Rotational bool   `json:"rotational,omitempty"`
	// Transport: sata, sas, nvme, virtio, usb, scsi, … ("" unknown).
	Transport string `json:"transport,omitempty"`
}

// NICInfo is one network interface with a hardware address.
type NICInfo struct {
	Name   string `json:"name"`
	MAC    string `json:"mac"`
	Driver string `json:"driver,omitempty"`
	// Link: "up" or "down" ("" unknown); Speed in Mb/s (0 unknown).
	Link  string `json:"link,omitempty"`
	Speed int    `json:"speed,omitempty"`
}

// PCIInfo is one PCI device: vendor and device IDs and the class and
// subclass, four hex digits each ("8086", "1572", "0200"), and their
// names when the PCI IDs database has them.
type PCIInfo struct {
	Address    string `json:"address"`
	Vendor     string `json:"vendor"`
	Device     string `json:"device"`
	Class      string `json:"class"`
	VendorName string `json:"vendorName,omitempty"`
	DeviceName string `json:"deviceName,omitempty"`
}

// TPMInfo says whether the machine has a TPM, and which ("2.0", "1.2").
type TPMInfo struct {
	Present bool   `json:"present,omitempty"`
	Version string `json:"version,omitempty"`
}

// Summary is the inventory on one line: "QEMU Standard PC (i440FX + PIIX,
// 1996), 2 threads, 1.0 GiB, disks vda 3.2 GB + vdb 1.1 GB, 2 NICs".
func (in *Inventory) Summary() string {
	if in == nil {
		return ""
	}
	var parts []string
	if s := strings.TrimSpace(in.System.Vendor + " " + in.System.Product); s != "" {
		parts = append(parts, s)
	}
	if in.CPU.Threads > 0 {
		parts = append(parts, fmt.Sprintf("%d threads", in.CPU.Threads))
	}
	if in.Memory.Total > 0 {
		parts = append(parts, fmt.Sprintf("%.1f GiB", float64(in.Memory.Total)/(1<<30)))
	}
	var disks []string
	for _, d := range in.Disks {
		disks = append(disks, fmt.Sprintf("%s %.1f GB", d.Name, float64(d.Size)/1e9))
	}
	if len(disks) > 0 {
		parts = append(parts, "disks "+strings.Join(disks, " + "))
	}
	if len(in.NICs) > 0 {
		parts = append(parts, fmt.Sprintf("%d NICs", len(in.NICs)))
	}
	if in.TPM.Present {
		parts = append(parts, "TPM "+in.TPM.Version)
	}
	return strings.Join(parts, ", ")
}
