// Package boottest holds the fixtures the boot plane's HTTP packages test
// with (boot/http and boot/agentapi): one Plan and one machine's
// inventory, so both servers' tests speak of the same site. Only tests
// import it.
package boottest

import (
	"strings"

	"github.com/bootops/bootops/plan"
)

// Plan is a site "lab" with node a (by serial) and node b (by MAC, at
// generation 2), unknown machines provisioned; and a site "quiet" that
// ignores them. The Micro-OS's initrd is at kernelURL with kernelSHA.
func Plan(kernelURL, kernelSHA string) *plan.Plan {
	script := "#!ipxe\nkernel http://x/artifacts/microos/default/kernel bootops.node=%s bootops.token=" + plan.TokenPlaceholder + "\nboot\n"
	s := &plan.Site{Name: "lab", UnknownNodes: plan.PolicyProvision, DefaultProfile: "base",
		Unknown: &plan.Artifacts{IPXE: "#!ipxe\n# unknown\nkernel k bootops.token=" + plan.TokenPlaceholder + "\n"}}
	s.Nodes = []*plan.Node{
		{Name: "a", Site: "lab", Profile: "base", Source: "a.yaml:1", Identity: plan.Identity{Serial: "SER-A"}, Artifacts: plan.Artifacts{IPXE: strings.Replace(script, "%s", "a", 1)}},
		{Name: "b", Site: "lab", Profile: "base", Source: "b.yaml:1", Reprovision: 2, Identity: plan.Identity{MACs: []string{"52:54:00:00:00:0b"}}, Artifacts: plan.Artifacts{IPXE: strings.Replace(script, "%s", "b", 1)}},
	}
	quiet := &plan.Site{Name: "quiet", UnknownNodes: plan.PolicyIgnore, Nodes: []*plan.Node{}}
	return &plan.Plan{Hash: "h1", Sites: []*plan.Site{s, quiet},
		MicroOS: []*plan.MicroOS{{Name: "default", Kernel: plan.Artifact{Path: "microos/vmlinuz"}, Initrd: plan.Artifact{URL: kernelURL, SHA256: kernelSHA}}}}
}

// Inventory is machine SER-A's hardware with mem bytes of memory.
func Inventory(mem int64) *plan.Inventory {
	return &plan.Inventory{
		System: plan.SystemInfo{Vendor: "QEMU", Product: "Standard PC", Serial: "SER-A"},
		CPU:    plan.CPUInfo{Threads: 2},
		Memory: plan.MemoryInfo{Total: mem},
		Disks:  []plan.DiskInfo{{Name: "vda", Size: 3 << 30}, {Name: "vdb", Size: 1 << 30}},
		NICs:   []plan.NICInfo{{Name: "eth0", MAC: "52:54:00:00:00:0A"}, {Name: "eth1", MAC: "52:54:00:00:00:0c"}},
	}
}
