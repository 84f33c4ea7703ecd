package agent

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// testdata/inventory is a machine as ghw and the agent see it: a QEMU
// Q35 with 4 threads on 2 cores, 1 GiB in 8 online memory blocks of
// which the OS sees 1000000 kB (MemTotal: what Total is), vda (model and serial from
// udev's database) and vdb (serial in sysfs), a loop device, a CD-ROM and
// a USB stick that are no disks, eth0 up at 1 Gb/s with a permanent
// address, eth1 down with an address ghw does not count as permanent, lo
// and a tap without a device, two PCI devices named by a small pci.ids,
// a TPM 2.0 and Secure Boot on.
func TestInventory(t *testing.T) {
	inv, err := Inventory("testdata/inventory")
	if err != nil {
		t.Fatal(err)
	}
	want := &plan.Inventory{
		System: plan.SystemInfo{
			Vendor: "QEMU", Product: "Standard PC (Q35 + ICH9, 2009)", Serial: "SER-INV-1", Version: "pc-q35-8.2",
			BoardVendor: "Canonical Ltd.", BoardProduct: "LXD", BoardSerial: "BOARD-1",
			BIOSVendor: "SeaBIOS", BIOSVersion: "1.16.3-debian-1.16.3-2", BIOSDate: "04/01/2014",
		},
		CPU:    plan.CPUInfo{Model: "Intel Xeon Processor (Icelake)", Sockets: 1, Cores: 2, Threads: 4},
		Memory: plan.MemoryInfo{Total: 1000000 << 10},
		Disks: []plan.DiskInfo{
			{Name: "vda", Model: "QEMU virtio disk", Serial: "VDA-SERIAL", Size: 3 << 30, Transport: "virtio"},
			{Name: "vdb", Serial: "VDB-SERIAL", Size: 1 << 30, Rotational: true, Transport: "virtio"},
		},
		NICs: []plan.NICInfo{
			{Name: "eth0", MAC: "52:54:00:ab:cd:01", Driver: "virtio_net", Link: "up", Speed: 1000},
			{Name: "eth1", MAC: "52:54:00:ab:cd:02", Driver: "e1000e", Link: "down"},
		},
		PCI: []plan.PCIInfo{
			{Address: "0000:00:00.0", Vendor: "8086", Device: "29c0", Class: "0600", VendorName: "Intel Corporation", DeviceName: "82G33/G31/P35/P31 Express DRAM Controller"},
			{Address: "0000:00:03.0", Vendor: "1af4", Device: "1041", Class: "0200", VendorName: "Red Hat, Inc.", DeviceName: "Virtio 1.0 network device"},
		},
		TPM:        plan.TPMInfo{Present: true, Version: "2.0"},
		SecureBoot: true,
	}
	if !reflect.DeepEqual(inv, want) {
		got, _ := json.MarshalIndent(inv, "", "  ")
		exp, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("inventory:\n%s\nwant:\n%s", got, exp)
	}
}

// A part that cannot be read is left empty; an error only when no part
// could be.
func TestInventoryPartial(t *testing.T) {
	for name, tc := range map[string]struct {
		files   map[string]string
		wantErr bool
		check   func(*plan.Inventory) string
	}{
		"nothing": {wantErr: true},
		"memory alone": {
			files: map[string]string{"proc/meminfo": "MemTotal: 2048 kB\n"},
			check: func(inv *plan.Inventory) string {
				if inv.Memory.Total != 2048<<10 || inv.CPU.Threads != 0 || inv.Disks != nil || inv.TPM.Present {
					return fmt.Sprintf("%+v", inv)
				}
				return ""
			},
		},
		"TPM 1.2": {
			files: map[string]string{"sys/class/tpm/tpm0/caps": "TCG version: 1.2\n"},
			check: func(inv *plan.Inventory) string {
				if inv.TPM != (plan.TPMInfo{Present: true, Version: "1.2"}) {
					return fmt.Sprintf("%+v", inv.TPM)
				}
				return ""
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			for p, body := range tc.files {
				testutil.WriteFile(t, root, p, body)
			}
			inv, err := Inventory(root)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if inv == nil {
				t.Fatal("no inventory")
			}
			if tc.check != nil {
				if s := tc.check(inv); s != "" {
					t.Error(s)
				}
			}
		})
	}
}

// On whatever machine the tests run: what any Linux has, the rest logged
// (no DMI in a container, no TPM in most VMs).
func TestInventoryOnThisMachine(t *testing.T) {
	inv, err := Inventory("")
	if err != nil {
		t.Fatal(err)
	}
	if inv.CPU.Threads < 1 {
		t.Errorf("CPU threads %d, want at least 1", inv.CPU.Threads)
	}
	if inv.Memory.Total <= 0 {
		t.Errorf("memory total %d, want more than 0", inv.Memory.Total)
	}
	b, _ := json.MarshalIndent(inv, "", "  ")
	t.Logf("%d bytes of JSON (indented):\n%s", len(b), b)
}

func TestInventoryText(t *testing.T) {
	for in, want := range map[string]string{
		"  Dell Inc.\n":          "Dell Inc.",
		"unknown":                "",
		strings.Repeat("a", 200): strings.Repeat("a", 128),
		// A 2-byte rune across byte 128 goes whole.
		strings.Repeat("a", 127) + "é": strings.Repeat("a", 127),
	} {
		if got := text(in); got != want {
			t.Errorf("text(%q) = %q, want %q", in, got, want)
		}
	}
}

// bigInventory has disks, nics and pci devices, with names and models
// as long as real ones, or every string long bytes if long is not 0.
func bigInventory(disks, nics, pci, long int) *plan.Inventory {
	s := func(real string) string {
		if long == 0 {
			return real
		}
		return strings.Repeat("x", long)
	}
	inv := &plan.Inventory{
		System: plan.SystemInfo{
			Vendor: s("Dell Inc."), Product: s("PowerEdge R760"), Serial: s("7XK2QV3"), Version: s("1.0"),
			BoardVendor: s("Dell Inc."), BoardProduct: s("0NH8MJ"), BoardSerial: s(".7XK2QV3.CNFCP0034A00B1."),
			BIOSVendor: s("Dell Inc."), BIOSVersion: s("2.3.5"), BIOSDate: s("09/12/2025"),
		},
		CPU:    plan.CPUInfo{Model: s("Intel(R) Xeon(R) Gold 6430"), Sockets: 2, Cores: 64, Threads: 128},
		Memory: plan.MemoryInfo{Total: 512 << 30},
		TPM:    plan.TPMInfo{Present: true, Version: "2.0"},
	}
	for i := range disks {
		inv.Disks = append(inv.Disks, plan.DiskInfo{Name: fmt.Sprintf("nvme%dn1", i), Model: s("SAMSUNG MZQL23T8HCLS-00A07"), Serial: s(fmt.Sprintf("S64HNE0T%06d", i)), Size: 3840755982336, Transport: "nvme"})
	}
	for i := range nics {
		inv.NICs = append(inv.NICs, plan.NICInfo{Name: s(fmt.Sprintf("enp%ds0f%d", 100+i/4, i%4)), MAC: fmt.Sprintf("b4:96:91:00:%02x:%02x", i>>8, i&255), Driver: "i40e", Link: "up", Speed: 25000})
	}
	for i := range pci {
		inv.PCI = append(inv.PCI, plan.PCIInfo{
			Address: fmt.Sprintf("0000:%02x:%02x.%d", i/32, i%32, i%8), Vendor: "8086", Device: "1572", Class: "0200",
			VendorName: s("Intel Corporation"), DeviceName: s("Ethernet Controller X710 for 10GbE SFP+"),
		})
	}
	return inv
}

func jsonSize(t *testing.T, inv *plan.Inventory) int {
	t.Helper()
	b, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// What a check-in carries: the boot server reads 64 KiB of it.
func TestInventoryJSONSize(t *testing.T) {
	typical := bigInventory(2, 2, 20, 0)
	t.Logf("typical inventory (2 disks, 2 NICs, 20 PCI devices): %d bytes of JSON", jsonSize(t, typical))

	big := bigInventory(maxInvDisks, maxInvNICs, maxInvPCI, 0)
	n := jsonSize(t, big)
	t.Logf("big inventory (%d disks, %d NICs, %d PCI devices): %d bytes of JSON", maxInvDisks, maxInvNICs, maxInvPCI, n)
	if n >= 64<<10 {
		t.Errorf("big inventory: %d bytes of JSON, want under 64 KiB", n)
	}
	// With the identity and disks beside it, that is about all a check-in
	// may carry: fit drops the PCI names, keeps every device.
	fit(big, maxInvJSON)
	n = jsonSize(t, big)
	t.Logf("big inventory after fit: %d bytes of JSON", n)
	if n > maxInvJSON || len(big.PCI) != maxInvPCI || len(big.Disks) != maxInvDisks || len(big.NICs) != maxInvNICs {
		t.Errorf("big inventory after fit: %d bytes, %d PCI devices, %d disks, %d NICs", n, len(big.PCI), len(big.Disks), len(big.NICs))
	}

	// Every string at its 128 bytes goes past: fit takes the PCI names,
	// then PCI devices, and keeps disks and NICs.
	worst := bigInventory(maxInvDisks, maxInvNICs, maxInvPCI, maxInvText)
	before := jsonSize(t, worst)
	fit(worst, maxInvJSON)
	after := jsonSize(t, worst)
	t.Logf("worst inventory (every string %d bytes): %d bytes of JSON, %d after fit (%d PCI devices kept, no names)", maxInvText, before, after, len(worst.PCI))
	if after > maxInvJSON {
		t.Errorf("worst inventory after fit: %d bytes of JSON, want at most %d", after, maxInvJSON)
	}
	if len(worst.Disks) != maxInvDisks || len(worst.NICs) != maxInvNICs {
		t.Errorf("fit cut disks or NICs: %d disks, %d NICs", len(worst.Disks), len(worst.NICs))
	}
}

// A disk's serial: udev's, else sysfs's device/serial (NVMe), serial
// (virtio-blk), or an ATA disk's SCSI VPD page 0x80.
func TestDiskSerial(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{
		"nvme0n1/device/serial": "NVME-SER-1   \n",
		"vda/serial":            "VDA-1",
		"sda/device/vpd_pg80":   "\x00\x80\x00\x0c  SATA-SER-1",
		"sdb/device/vpd_pg80":   "\x00\x83\x00\x04junk",
		"sdc/device/model":      "no serial anywhere",
	})
	for disk, want := range map[string]string{"nvme0n1": "NVME-SER-1", "vda": "VDA-1", "sda": "SATA-SER-1", "sdb": "", "sdc": ""} {
		if got := diskSerial(dir+"/"+disk, ""); got != want {
			t.Errorf("%s: %q, want %q", disk, got, want)
		}
	}
	if got := diskSerial(dir+"/sda", "FROM-UDEV"); got != "FROM-UDEV" {
		t.Errorf("udev's serial: %q", got)
	}
}
