package boot

import (
	"fmt"

	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/plan"
)

// Processor families, as Git names them (a profile's os.arch) and as the
// boot plane reads a firmware's architecture type.
const (
	ArchX86_64 = plan.ArchX86_64
	ArchARM64  = plan.ArchARM64
	ArchARM32  = "arm32" // announced by some firmware; no profile is for it
)

// ClientArch is the processor family of a firmware's architecture type
// (DHCPv4 option 93 and DHCPv6 option 61 share IANA's registry, RFC 4578
// and RFC 5970): "" for a type bootops has no boot file for. BIOS PXE
// (type 0) says nothing of 32 or 64 bits: it counts as x86_64, the only
// x86 family a profile is for.
func ClientArch(a iana.Arch) string {
	switch a {
	case iana.INTEL_X86PC, iana.EFI_IA32, iana.EFI_X86_64, iana.EFI_BC, iana.EFI_X86_HTTP, iana.EFI_X86_64_HTTP, iana.EFI_BC_HTTP, iana.INTEL_X86PC_HTTP:
		return ArchX86_64
	case iana.EFI_ARM64, iana.EFI_ARM64_HTTP:
		return ArchARM64
	case iana.EFI_ARM32, iana.EFI_ARM32_HTTP:
		return ArchARM32
	}
	return ""
}

// IsHTTPArch says whether the type is a UEFI HTTP-boot client's.
func IsHTTPArch(a iana.Arch) bool {
	switch a {
	case iana.EFI_X86_HTTP, iana.EFI_X86_64_HTTP, iana.EFI_BC_HTTP, iana.EFI_ARM32_HTTP, iana.EFI_ARM64_HTTP, iana.INTEL_X86PC_HTTP:
		return true
	}
	return false
}

// ARM64File is the iPXE build 64-bit ARM UEFI machines are offered, over
// TFTP or HTTP, from --ipxe-dir (Debian ships none: see docs/arm64.md).
const ARM64File = "snp.efi"

// ProfileArch is the processor family a profile installs for (its
// os.arch; x86_64 when it says none).
func ProfileArch(pr *plan.Profile) string {
	if pr == nil {
		return ArchX86_64
	}
	return plan.ArchOr(pr.OS.Arch)
}

// ArchRefusal says why a registered node's firmware gets no answer: it
// announces another processor family than the node's profile is for (a
// machine registered in the wrong place, or a firmware that says the
// wrong thing); its Micro-OS would not run there. "" when they agree, or
// when the machine is no registered node or its type names no family.
func ArchRefusal(p *plan.Plan, d plan.Decision, a iana.Arch) string {
	if d.Node == nil {
		return ""
	}
	got := ClientArch(a)
	want := ProfileArch(p.Profile(d.Node.Profile))
	if got == "" || got == want {
		return ""
	}
	return fmt.Sprintf("refused: the firmware announces %s (architecture type %d, %s) and node %s is registered %s (profile %s, os.arch): not booted",
		got, uint16(a), a, d.Node.Name, want, d.Node.Profile)
}

// AgentArch is the processor family of an agent's check-in (its Go
// architecture, plan.CheckIn.Arch): "" for none, or one no profile is for.
func AgentArch(goarch string) string {
	switch goarch {
	case "amd64":
		return ArchX86_64
	case "arm64":
		return ArchARM64
	case "arm":
		return ArchARM32
	}
	return ""
}
