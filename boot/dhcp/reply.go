// Package dhcp answers PXE and UEFI HTTP-boot clients: as a proxyDHCP
// server beside the site's own DHCP server (proxy mode), or as the LAN's
// DHCP server for registered static addresses (reservation mode). Reply is
// a pure function from request to answer; Server moves the packets.
package dhcp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/lease"
	"github.com/bootops/bootops/plan"
)

// Config is what replies are made of.
type Config struct {
	// ServerIP is this server's address on the provisioning LAN: siaddr,
	// option 54, and the host of the HTTP URLs.
	ServerIP netip.Addr
	HTTPPort int
	// Mode is plan.DHCPProxy or plan.DHCPReservation.
	Mode string
	// Leases hands out the site's pool to unknown machines in reservation
	// mode (nil: no pool).
	Leases Leaser
}

// Answer is a reply and what it means, for events and logs.
type Answer struct {
	Reply *dhcpv4.DHCPv4 // nil: say nothing
	Node  *plan.Node     // the node the MAC or UUID belongs to, if any
	Boot  string         // the boot file or URL offered
	Why   string
	// Dropped is why the packet was refused as invalid, one of the Drop*
	// reasons (a metric label); "" for a packet that was understood.
	Dropped string
	// Exhausted says an unknown machine got no address: the pool is full.
	Exhausted bool
	// Refused: a registered node's firmware announces another processor
	// family than its profile is for (boot.ArchRefusal, in Why): it is
	// not booted, and its timeline says why.
	Refused bool
}

// Reasons a packet is dropped unanswered as invalid.
const (
	DropHardware        = "bad_hardware"     // htype not Ethernet or hlen not 6
	DropZeroMAC         = "zero_mac"         // 00:00:00:00:00:00
	DropBroadcastMAC    = "broadcast_mac"    // ff:ff:ff:ff:ff:ff
	DropMulticastMAC    = "multicast_mac"    // group bit set, e.g. 01:00:5e:00:00:01
	DropMalformedOption = "malformed_option" // an option of the wrong length
)

// DropReasons lists every Drop* reason.
func DropReasons() []string {
	return []string{DropHardware, DropZeroMAC, DropBroadcastMAC, DropMulticastMAC, DropMalformedOption}
}

// fixedLength are options whose length RFC 2132 fixes; the library's
// getters read a wrong length as "absent", which would turn a REQUEST
// for a garbled address into one for no address in particular.
var fixedLength = [...]struct {
	code dhcpv4.OptionCode
	n    int
}{
	{dhcpv4.OptionDHCPMessageType, 1},
	{dhcpv4.OptionRequestedIPAddress, 4},
	{dhcpv4.OptionServerIdentifier, 4},
	{dhcpv4.OptionMaximumDHCPMessageSize, 2},
}

// invalid says why req must not be answered at all: a hardware address no
// Ethernet interface has, or an option of an impossible length. "" when
// it is fine.
func invalid(req *dhcpv4.DHCPv4) (reason, why string) {
	if req.HWType != iana.HWTypeEthernet || len(req.ClientHWAddr) != 6 {
		return DropHardware, fmt.Sprintf("hardware type %d, address length %d: not Ethernet", req.HWType, len(req.ClientHWAddr))
	}
	hw := req.ClientHWAddr
	switch {
	case bytes.Count(hw, []byte{0}) == 6:
		return DropZeroMAC, "client hardware address is all zeros"
	case bytes.Count(hw, []byte{0xff}) == 6:
		return DropBroadcastMAC, "client hardware address is the broadcast address"
	case hw[0]&1 != 0:
		return DropMulticastMAC, "client hardware address " + hw.String() + " is a multicast address"
	}
	for _, f := range fixedLength {
		if v, ok := req.Options[f.code.Code()]; ok && len(v) != f.n {
			return DropMalformedOption, fmt.Sprintf("option %d has length %d, want %d", f.code.Code(), len(v), f.n)
		}
	}
	return "", ""
}

func (a Answer) nodeName() string {
	if a.Node == nil {
		return ""
	}
	return a.Node.Name
}

// bootFiles maps client architectures (option 93) to the iPXE build that
// runs there; Debian's ipxe package ships the x86 ones, the ARM64 one
// (boot.ARM64File) comes from docs/arm64.md's build, in --ipxe-dir.
func bootFile(arch iana.Arch) (string, bool) {
	switch arch {
	case iana.INTEL_X86PC, iana.NEC_PC98, iana.EFI_ITANIUM, iana.DEC_ALPHA, iana.ARC_X86, iana.INTEL_LEAN_CLIENT:
		return "undionly.kpxe", true
	case iana.EFI_IA32, iana.EFI_X86_64, iana.EFI_BC, iana.EFI_X86_HTTP, iana.EFI_X86_64_HTTP, iana.EFI_BC_HTTP:
		return "ipxe.efi", true
	case iana.EFI_ARM32, iana.EFI_ARM64, iana.EFI_ARM32_HTTP, iana.EFI_ARM64_HTTP:
		return boot.ARM64File, true
	}
	return "", false
}

func isHTTPArch(arch iana.Arch) bool { return boot.IsHTTPArch(arch) }

// Reply answers req, received on port 67 or 4011, for site. It never
// panics on a well-formed packet and answers nothing it does not
// understand.
func Reply(p *plan.Plan, site *plan.Site, cfg Config, req *dhcpv4.DHCPv4, port int) Answer {
	if req.OpCode != dhcpv4.OpcodeBootRequest {
		return Answer{Why: "not a BOOTREQUEST"}
	}
	if reason, why := invalid(req); reason != "" {
		return Answer{Dropped: reason, Why: why}
	}
	b := bootRequest(req)
	// Most DHCP traffic on a shared LAN is not PXE: in proxy mode it is
	// dropped before anything is looked up.
	if cfg.Mode == plan.DHCPProxy && !b.boot() {
		return Answer{Why: "not a PXE or HTTP-boot client"}
	}
	if !b.hasArch && b.boot() {
		return Answer{Why: "PXE client without an architecture (option 93)"}
	}
	d := p.Decide(site.Name, machine(req))
	if cfg.Mode == plan.DHCPProxy {
		if why := archRefusal(p, d, b); why != "" {
			return Answer{Node: d.Node, Refused: true, Why: why}
		}
		return proxy(p, site, cfg, req, port, b, d)
	}
	return reservation(p, site, cfg, req, b, d)
}

// archRefusal is boot.ArchRefusal for a boot request: "" for one that
// boots nothing or names no architecture.
func archRefusal(p *plan.Plan, d plan.Decision, b bootInfo) string {
	if !b.boot() || !b.hasArch {
		return ""
	}
	return boot.ArchRefusal(p, d, b.arch)
}

// bootInfo is what a request says of the client's boot firmware.
type bootInfo struct {
	arch    iana.Arch // the first of option 93
	hasArch bool
	pxe     bool // option 60 PXEClient…
	http    bool // option 60 HTTPClient… (UEFI HTTP boot)
	// ipxe: iPXE says so in its user class; it gets the script URL, not
	// another iPXE (the chain-load loop break).
	ipxe bool
}

func (b bootInfo) boot() bool { return b.pxe || b.http }

// bootRequest reads options 60, 93 and 77.
func bootRequest(req *dhcpv4.DHCPv4) bootInfo {
	class := string(req.GetOneOption(dhcpv4.OptionClassIdentifier))
	b := bootInfo{pxe: strings.HasPrefix(class, "PXEClient"), http: strings.HasPrefix(class, "HTTPClient"), ipxe: isIPXE(req)}
	if archs := req.ClientArch(); len(archs) > 0 {
		b.arch, b.hasArch = archs[0], true
	}
	return b
}

// proxy is the proxyDHCP answer beside the site's own DHCP server: no
// address, where to boot from, to a DISCOVER on port 67, a REQUEST on
// port 4011 and an INFORM.
func proxy(p *plan.Plan, site *plan.Site, cfg Config, req *dhcpv4.DHCPv4, port int, b bootInfo, d plan.Decision) Answer {
	a := Answer{Node: d.Node}
	if d.Outcome == plan.Unknown && site.UnknownNodes == plan.PolicyIgnore && !p.HasSerialOnlyNodes(site.Name) {
		a.Why = "unknown machine and site ignores unknown machines"
		return a
	}
	var resp dhcpv4.MessageType
	switch mt := req.MessageType(); {
	case mt == dhcpv4.MessageTypeDiscover && port != 4011:
		resp = dhcpv4.MessageTypeOffer
	case mt == dhcpv4.MessageTypeRequest && port == 4011, mt == dhcpv4.MessageTypeInform:
		resp = dhcpv4.MessageTypeAck
	default:
		a.Why = fmt.Sprintf("proxy mode does not answer %s on port %d", mt, port)
		return a
	}
	reply, boot, err := pxeReply(req, cfg, site, p.MicroOSOf(d), b, resp)
	if err != nil {
		a.Why = err.Error()
		return a
	}
	a.Reply, a.Boot, a.Why = reply, boot, fmt.Sprintf("proxy %s: %s", resp, boot)
	return a
}

// reservation is the answer of the LAN's DHCP server: the registered
// address; for an unknown machine an address of the site's pool, unless
// the site ignores unknown machines; and, to a boot client, where to boot
// from.
func reservation(p *plan.Plan, site *plan.Site, cfg Config, req *dhcpv4.DHCPv4, b bootInfo, d plan.Decision) Answer {
	a := Answer{Node: d.Node}
	resp, why := reservationType(req, cfg)
	if why != "" {
		a.Why = why
		return a
	}
	res, nak, err := address(p, site, cfg, req, d, resp)
	switch {
	case nak != "":
		a.Reply, _ = dhcpv4.NewReplyFromRequest(req, dhcpv4.WithMessageType(dhcpv4.MessageTypeNak), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(cfg.ServerIP.AsSlice())))
		a.Why = nak
		return a
	case err != nil:
		a.Exhausted = errors.Is(err, lease.ErrPoolFull)
		a.Why = err.Error()
		return a
	}
	reply, err := addressReply(req, cfg, site, res, resp)
	if err != nil {
		a.Why = err.Error()
		return a
	}
	a.Reply, a.Why = reply, fmt.Sprintf("%s %s to %s", resp, res.IP, res.Node)
	if !b.boot() {
		return a
	}
	if why := archRefusal(p, d, b); why != "" {
		// Its address, as registered; nothing to boot.
		a.Refused, a.Why = true, a.Why+"; "+why
		return a
	}
	if file, ok := bootTarget(cfg, site, p.MicroOSOf(d), b); ok {
		reply.BootFileName = file
		a.Boot = file
		if b.http {
			reply.UpdateOption(dhcpv4.OptClassIdentifier("HTTPClient"))
		}
	}
	return a
}

// reservationType is the message reservation mode answers req with: an
// OFFER to a DISCOVER, an ACK (or NAK) to a REQUEST; otherwise why none.
func reservationType(req *dhcpv4.DHCPv4, cfg Config) (dhcpv4.MessageType, string) {
	switch mt := req.MessageType(); mt {
	case dhcpv4.MessageTypeDiscover:
		return dhcpv4.MessageTypeOffer, ""
	case dhcpv4.MessageTypeRequest:
		// Checked first: a REQUEST for another server's offer must leave
		// the pool alone.
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(cfg.ServerIP.AsSlice()) {
			return 0, "REQUEST for another server"
		}
		return dhcpv4.MessageTypeAck, ""
	default:
		return 0, fmt.Sprintf("reservation mode does not answer %s", mt)
	}
}

// address is the machine's address: its reservation, else one of the
// site's pool (offered for a DISCOVER, leased for a REQUEST). nak, when
// not "", says why a REQUEST is refused with a NAK; err why the machine
// gets no answer.
func address(p *plan.Plan, site *plan.Site, cfg Config, req *dhcpv4.DHCPv4, d plan.Decision, resp dhcpv4.MessageType) (res plan.Reservation, nak string, err error) {
	mac := plan.NormalizeMAC(req.ClientHWAddr.String())
	if res, ok := p.Reservation(site.Name, mac); ok {
		if want := req.RequestedIPAddress(); resp == dhcpv4.MessageTypeAck && want != nil && !want.Equal(net.ParseIP(res.IP)) {
			return res, "NAK: requested " + want.String() + ", reserved " + res.IP, nil
		}
		return res, "", nil
	}
	a, err := poolLease(p, site, cfg, req, d, resp)
	switch {
	case errors.Is(err, lease.ErrUnavailable):
		return res, fmt.Sprintf("NAK: requested %s: %v", requested(req), err), nil
	case err != nil:
		return res, "", err
	}
	return plan.Reservation{IP: a.String(), Node: "unknown machine " + mac}, "", nil
}

// addressReply is the OFFER or ACK of res and the site's network: mask,
// lease time, host name, router, DNS.
func addressReply(req *dhcpv4.DHCPv4, cfg Config, site *plan.Site, res plan.Reservation, resp dhcpv4.MessageType) (*dhcpv4.DHCPv4, error) {
	prefix, err := netip.ParsePrefix(site.Network.Subnet)
	if err != nil {
		return nil, errors.New("site has no subnet")
	}
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(resp),
		dhcpv4.WithYourIP(net.ParseIP(res.IP)),
		dhcpv4.WithServerIP(cfg.ServerIP.AsSlice()),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(cfg.ServerIP.AsSlice())),
		dhcpv4.WithNetmask(net.CIDRMask(prefix.Bits(), 32)),
		dhcpv4.WithLeaseTime(uint32(site.Network.LeaseSeconds)),
	}
	if res.Hostname != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(res.Hostname)))
	}
	if gw, err := netip.ParseAddr(site.Network.Gateway); err == nil {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptRouter(gw.AsSlice())))
	}
	var dns []net.IP
	for _, s := range site.Network.DNS {
		if ip, err := netip.ParseAddr(s); err == nil {
			dns = append(dns, ip.AsSlice())
		}
	}
	if len(dns) > 0 {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptDNS(dns...)))
	}
	return dhcpv4.NewReplyFromRequest(req, mods...)
}

// pxeReply is the proxyDHCP answer: no address, just where to boot from.
func pxeReply(req *dhcpv4.DHCPv4, cfg Config, site *plan.Site, m *plan.MicroOS, b bootInfo, mt dhcpv4.MessageType) (*dhcpv4.DHCPv4, string, error) {
	file, ok := bootTarget(cfg, site, m, b)
	if !ok {
		if m.UEFIChain() == plan.ChainUKI && !b.http {
			return nil, "", fmt.Errorf("micro-os %s boots as a UKI by UEFI HTTP boot: its PXE request is not answered, so the firmware moves on to HTTP boot", m.Name)
		}
		if m.UEFIChain() == plan.ChainShim && b.http {
			return nil, "", fmt.Errorf("micro-os %s boots through shim and GRUB, which read TFTP only: its HTTP-boot request is not answered", m.Name)
		}
		return nil, "", fmt.Errorf("no boot file for architecture %s", b.arch)
	}
	class := "PXEClient"
	if b.http {
		class = "HTTPClient"
	}
	reply, err := dhcpv4.NewReplyFromRequest(req,
		dhcpv4.WithMessageType(mt),
		dhcpv4.WithServerIP(cfg.ServerIP.AsSlice()),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(cfg.ServerIP.AsSlice())),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier(class)),
		// Option 43, sub-option 6 = 8: boot the file in the header, skip
		// boot server discovery (what PXE ROMs expect from a proxy).
		dhcpv4.WithGeneric(dhcpv4.OptionVendorSpecificInformation, []byte{6, 1, 8, 255}),
	)
	if err != nil {
		return nil, "", err
	}
	reply.YourIPAddr = net.IPv4zero
	reply.ServerHostName = cfg.ServerIP.String()
	reply.BootFileName = file
	// Some ROMs want the client's UUID echoed.
	if uuid := req.GetOneOption(dhcpv4.OptionClientMachineIdentifier); len(uuid) > 0 {
		reply.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionClientMachineIdentifier, uuid))
	}
	return reply, file, nil
}

// bootTarget is what the client is told to boot: the script URL for iPXE,
// an http:// URL for UEFI HTTP boot, a TFTP file name otherwise. A 64-bit
// UEFI machine whose Micro-OS boots by another chain gets that chain's
// first stage: Debian's signed shim (which loads grubx64.efi beside it), or
// the signed UKI itself (by HTTP boot only: 16 MB is not for TFTP).
func bootTarget(cfg Config, site *plan.Site, m *plan.MicroOS, b bootInfo) (string, bool) {
	base := "http://" + netip.AddrPortFrom(cfg.ServerIP, uint16(cfg.HTTPPort)).String()
	if b.ipxe {
		return base + "/boot.ipxe?site=" + site.Name, true
	}
	file, ok := bootFile(b.arch)
	if !ok {
		return "", false
	}
	httpBoot := b.http || isHTTPArch(b.arch)
	x64 := b.arch == iana.EFI_X86_64 || b.arch == iana.EFI_BC || b.arch == iana.EFI_X86_64_HTTP
	arm64 := b.arch == iana.EFI_ARM64 || b.arch == iana.EFI_ARM64_HTTP
	if x64 || arm64 {
		switch m.UEFIChain() {
		case plan.ChainShim:
			// Debian's signed GRUB reads only TFTP: a shim loaded by
			// HTTP boot would find no GRUB config.
			if httpBoot {
				return "", false
			}
			file = ShimFile
			if arm64 {
				file = ShimARM64File
			}
		case plan.ChainUKI:
			if !httpBoot {
				return "", false
			}
			if m.HTTPSBoot && site.Network.HTTPSPort != 0 {
				// The firmware checks the server against the site CA
				// it was given: the UKI's bytes cross the LAN encrypted.
				return "https://" + netip.AddrPortFrom(cfg.ServerIP, uint16(site.Network.HTTPSPort)).String() + "/artifacts/microos/" + m.Name + "/uki", true
			}
			return base + "/artifacts/microos/" + m.Name + "/uki", true
		}
	}
	if httpBoot {
		return base + "/tftp/" + file, true
	}
	return file, true
}

// The shim chain's files, served over TFTP and HTTP under these names:
// shim loads GRUB from its own folder as grubx64.efi, or on 64-bit ARM as
// grubaa64.efi (Debian's shim-signed and grub-efi-arm64-signed for arm64).
const (
	ShimFile      = "shimx64.efi"
	GRUBFile      = "grubx64.efi"
	ShimARM64File = "shimaa64.efi"
	GRUBARM64File = "grubaa64.efi"
)

func isIPXE(req *dhcpv4.DHCPv4) bool {
	uc := req.GetOneOption(dhcpv4.OptionUserClassInformation)
	if bytes.Equal(uc, []byte("iPXE")) {
		return true
	}
	// RFC 3004 form: length-prefixed.
	return len(uc) == 5 && uc[0] == 4 && string(uc[1:]) == "iPXE"
}

// machine is what the packet says of the client: its MAC, and its SMBIOS
// UUID from option 97 (type 0 + 16 bytes). Firmware sends the UUID as
// SMBIOS stores it, the first three fields little-endian (captured from
// OVMF and iPXE: 01020304-0506-… arrives as 04 03 02 01 06 05 …), so they
// are swapped back; an all-zero or all-ones UUID means none.
func machine(req *dhcpv4.DHCPv4) plan.Machine {
	m := plan.Machine{MAC: plan.NormalizeMAC(req.ClientHWAddr.String())}
	g := req.GetOneOption(dhcpv4.OptionClientMachineIdentifier)
	if len(g) != 17 || g[0] != 0 {
		return m
	}
	u := g[1:]
	if bytes.Count(u, []byte{0}) == 16 || bytes.Count(u, []byte{0xff}) == 16 {
		return m
	}
	b := []byte{u[3], u[2], u[1], u[0], u[5], u[4], u[7], u[6]}
	b = append(b, u[8:]...)
	m.UUID = plan.NormalizeUUID(fmt.Sprintf("%x", b))
	return m
}

// errNoPool says an unknown machine gets no address from this site.
type errNoPool string

func (e errNoPool) Error() string { return string(e) }

// poolLease is an unknown machine's address from the site's pool: offered
// for a DISCOVER, leased for a REQUEST.
func poolLease(p *plan.Plan, site *plan.Site, cfg Config, req *dhcpv4.DHCPv4, d plan.Decision, resp dhcpv4.MessageType) (netip.Addr, error) {
	mac := plan.NormalizeMAC(req.ClientHWAddr.String())
	switch {
	case site.Network.Pool == nil || cfg.Leases == nil:
		return netip.Addr{}, errNoPool("no reservation for " + mac + " and no pool")
	case d.Outcome == plan.Mismatch:
		return netip.Addr{}, errNoPool("no reservation for " + mac + ": " + d.Reason)
	case d.Outcome == plan.Unknown && site.UnknownNodes == plan.PolicyIgnore:
		return netip.Addr{}, errNoPool("unknown machine " + mac + " and site ignores unknown machines")
	}
	start, err1 := netip.ParseAddr(site.Network.Pool.Start)
	end, err2 := netip.ParseAddr(site.Network.Pool.End)
	if err1 != nil || err2 != nil {
		return netip.Addr{}, errNoPool("bad pool")
	}
	r := lease.Range{First: start, Last: end, Taken: func(a netip.Addr) bool {
		return a == cfg.ServerIP || p.Reserved(site.Name, a.String())
	}}
	if resp == dhcpv4.MessageTypeOffer {
		return cfg.Leases.Offer(mac, r)
	}
	return cfg.Leases.Confirm(mac, requested(req), r, time.Duration(site.Network.LeaseSeconds)*time.Second)
}

// requested is the address a REQUEST asks for: option 50 when selecting
// or rebooting, the client's own address when renewing.
func requested(req *dhcpv4.DHCPv4) netip.Addr {
	if a, ok := netip.AddrFromSlice(req.RequestedIPAddress().To4()); ok {
		return a
	}
	if a, ok := netip.AddrFromSlice(req.ClientIPAddr.To4()); ok && !a.IsUnspecified() {
		return a
	}
	return netip.Addr{}
}
