package agentapi

import (
	"strings"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// Bounds of an inventory the server keeps: what a real machine has, with
// room; a machine that says more is cut, not refused (its install must
// not fail on a list of PCI bridges).
const (
	maxInventoryDisks = 64
	maxInventoryNICs  = 64
	maxInventoryPCI   = 256
	maxInventoryDIMMs = 64
	maxInventoryText  = 128
)

// cleanInventory is what the server keeps of the inventory an agent sent:
// every string printable and at most maxInventoryText bytes, every list
// bounded, no negative size. The agent is the machine's: nothing it says
// reaches a terminal, a CSV or the dashboard unescaped.
func cleanInventory(in *plan.Inventory) *plan.Inventory {
	if in == nil {
		return nil
	}
	out := *in
	t := cleanText
	sy := &out.System
	for _, f := range []*string{&sy.Vendor, &sy.Product, &sy.Serial, &sy.Version, &sy.BoardVendor, &sy.BoardProduct, &sy.BoardSerial, &sy.BIOSVendor, &sy.BIOSVersion, &sy.BIOSDate} {
		*f = t(*f)
	}
	out.CPU.Model = t(out.CPU.Model)
	out.CPU.Sockets, out.CPU.Cores, out.CPU.Threads = max(out.CPU.Sockets, 0), max(out.CPU.Cores, 0), max(out.CPU.Threads, 0)
	out.Memory.Total = max(out.Memory.Total, 0)
	out.Memory.DIMMs = bounded(out.Memory.DIMMs, maxInventoryDIMMs, func(d plan.DIMMInfo) plan.DIMMInfo {
		return plan.DIMMInfo{Locator: t(d.Locator), Size: max(d.Size, 0), Type: t(d.Type), Vendor: t(d.Vendor)}
	})
	out.Disks = bounded(out.Disks, maxInventoryDisks, func(d plan.DiskInfo) plan.DiskInfo {
		return plan.DiskInfo{Name: t(d.Name), Model: t(d.Model), Serial: t(d.Serial), Size: max(d.Size, 0), Rotational: d.Rotational, Transport: t(d.Transport)}
	})
	out.NICs = bounded(out.NICs, maxInventoryNICs, func(n plan.NICInfo) plan.NICInfo {
		mac := plan.NormalizeMAC(n.MAC)
		if mac == "" {
			mac = t(n.MAC)
		}
		return plan.NICInfo{Name: t(n.Name), MAC: mac, Driver: t(n.Driver), Link: t(n.Link), Speed: max(n.Speed, 0)}
	})
	out.PCI = bounded(out.PCI, maxInventoryPCI, func(p plan.PCIInfo) plan.PCIInfo {
		return plan.PCIInfo{Address: t(p.Address), Vendor: strings.ToLower(t(p.Vendor)), Device: strings.ToLower(t(p.Device)), Class: strings.ToLower(t(p.Class)),
			VendorName: t(p.VendorName), DeviceName: t(p.DeviceName)}
	})
	out.TPM.Version = t(out.TPM.Version)
	return &out
}

func cleanText(s string) string {
	s = status.Printable(strings.TrimSpace(s))
	if len(s) > maxInventoryText {
		s = strings.ToValidUTF8(s[:maxInventoryText], "")
	}
	return s
}

func bounded[T any](in []T, n int, f func(T) T) []T {
	if len(in) > n {
		in = in[:n]
	}
	out := make([]T, 0, len(in))
	for _, x := range in {
		out = append(out, f(x))
	}
	return out
}

// unmetExpectations are the expectations in Git node n's machine does not
// meet (none without any).
func unmetExpectations(n *plan.Node, inv *plan.Inventory) []string {
	if n.Expect == nil || n.Expect.Empty() {
		return nil
	}
	return n.Expect.Check(inv)
}
