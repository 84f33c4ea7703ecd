// Package dhcp6 answers network-boot clients over DHCPv6 (RFC 8415, boot
// options of RFC 5970): UEFI PXE gets a tftp://[addr]/ URL, UEFI HTTP boot
// an http://[addr]:port/ URL, iPXE its script URL (option 59). In
// reservation mode it is the link's DHCPv6 server (IA_NA addresses from
// reservations and a pool); in proxy mode the site's own DHCPv6 server gives
// the addresses and this one answers boot clients with boot options only,
// no address (DHCPv6 has no proxyDHCP: see docs in Reply). Reply is a pure
// function from packet to answer; Server moves the packets.
package dhcp6

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/plan"
)

// Config is what replies are made of: the site's IPv6 network as the
// daemon maps it from the plan.
type Config struct {
	// ServerIP is this server's global (or ULA) address on the link: the
	// host of the boot URLs. Not link-local: firmware cannot use a zone.
	ServerIP netip.Addr
	// ServerID is the Server Identifier (option 2): the DUID-LL of the
	// interface (NewServerID).
	ServerID dhcpv6.DUID
	// Prefix is the link's on-link prefix: a Confirm for an address
	// outside it is told NotOnLink.
	Prefix netip.Prefix
	// PoolFirst and PoolLast bound the addresses handed to machines without
	// a reservation (reservation mode); invalid: no pool.
	PoolFirst, PoolLast netip.Addr
	// LeaseTime is the valid and preferred lifetime of an address (0: an
	// hour); T1 and T2 are half and 0.8 of it.
	LeaseTime time.Duration
	// Mode is plan.DHCPProxy or plan.DHCPReservation.
	Mode     string
	HTTPPort int
	// HTTPSPort is the site's HTTPS port, for a UKI fetched by HTTPS boot
	// (0: none).
	HTTPSPort int
	// TFTP says TFTP is served on ServerIP: without it, PXE clients (which
	// read TFTP only) get no boot file.
	TFTP bool
	// DNS servers told to every client that asks (option 23).
	DNS []netip.Addr
	// Leases keeps the pool's leases (nil: no pool), keyed by MAC (or
	// "duid:…" for a client with none): a *Pool.
	Leases Leaser
	// Reservation is a MAC's fixed IPv6 address on the site in the plan
	// (nil: none has one).
	Reservation func(p *plan.Plan, site, mac string) (Reservation, bool)
	// Reserved says a is some machine's fixed address on the site, so the
	// pool never hands it to another (nil: none is).
	Reserved func(p *plan.Plan, site string, a netip.Addr) bool
	// DualStack says the site boots machines over IPv4 too. Its iPXE then
	// gets a DHCPv6 boot URL only when Firmware saw the machine's
	// firmware boot over IPv6 (nil Firmware: always).
	DualStack bool
	Firmware  *Firmware
}

// Reservation is a machine's fixed IPv6 address, and whose it is.
type Reservation struct {
	Addr netip.Addr
	Node string
}

// NewServerID is the DUID-LL of an interface's hardware address.
func NewServerID(hw net.HardwareAddr) dhcpv6.DUID {
	return &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: hw}
}

// Answer is a reply and what it means, for events and logs.
type Answer struct {
	Reply  dhcpv6.DHCPv6 // nil: say nothing
	Client Client
	Node   *plan.Node // the node the MAC or UUID belongs to, if any
	UUID   string     // the UUID the node was found by, if any
	Addr   netip.Addr // the address given, if any
	Boot   string     // the boot URL offered
	Type   dhcpv6.MessageType
	Why    string
	// Dropped is why the packet was refused as invalid, one of the Drop*
	// reasons (a metric label); "" for a packet that was understood.
	Dropped string
	// Exhausted says a machine got no address: the pool is full.
	Exhausted bool
	// Refused: a registered node's firmware announces another processor
	// family than its profile is for (boot.ArchRefusal, in Why): no boot
	// URL, and its timeline says why.
	Refused bool
}

// Reasons a packet is dropped unanswered as invalid.
const (
	DropMalformed     = "malformed"          // not a DHCPv6 message the library can read
	DropNotClient     = "not_client_message" // Advertise, Reply, Reconfigure… sent to a server
	DropNoClientID    = "no_client_id"       // a message that must name its client does not
	DropServerID      = "server_id"          // a Server ID where RFC 8415 §16 forbids one, or none where it needs one
	DropLinkAddress   = "bad_link_address"   // a DUID or option 79 with a zero, broadcast or multicast MAC
	DropIAInformation = "ia_in_information"  // an Information-Request with an IA (RFC 8415 §16.12)
)

// DropReasons lists every Drop* reason.
func DropReasons() []string {
	return []string{DropMalformed, DropNotClient, DropNoClientID, DropServerID, DropLinkAddress, DropIAInformation}
}

// Handle parses pkt, received from peer, and answers it: the path every
// packet takes, and the one the fuzz test drives.
func Handle(p *plan.Plan, site *plan.Site, cfg Config, pkt []byte, peer netip.Addr) Answer {
	d, err := dhcpv6.FromBytes(pkt)
	if err != nil {
		return Answer{Dropped: DropMalformed, Why: err.Error()}
	}
	return Reply(p, site, cfg, d, peer)
}

// Reply answers d, a client message or a Relay-Forward, from peer, for
// site. It never panics and answers nothing it does not understand.
//
// What DHCPv6 allows in place of proxyDHCP (proxy mode): an Advertise with
// the boot options and no IA, and a Reply to an Information-Request.
// RFC 8415 §18.2.9 has clients ignore an Advertise without addresses, and
// ISC dhclient does (tested); iPXE's DHCPv6 client, from its source, too.
// EDK2's drivers (OVMF) keep it as a "proxy" offer (their source, and
// TestIPv6Proxy with OVMF 2022.11)
// beside the site server's address offer: UEFI HTTP boot takes the URL
// from it (vendor class "HTTPClient", an IP-literal URL); UEFI PXE, with
// vendor class "PXEClient", sends its Request again, unicast, to the URL's
// host port 4011 and boots the URL of that Reply (Server listens on 4011
// in proxy mode). A client in a stateless network (SLAAC, O flag), iPXE
// included, sends an Information-Request, which is answered with the boot
// options.
func Reply(p *plan.Plan, site *plan.Site, cfg Config, d dhcpv6.DHCPv6, peer netip.Addr) Answer {
	msg, relay, outer, err := unwrap(d)
	if err != nil {
		return Answer{Dropped: DropMalformed, Why: err.Error()}
	}
	a := Answer{Type: msg.Type()}
	if cfg.Mode != plan.DHCPProxy && cfg.Mode != plan.DHCPReservation {
		a.Why = fmt.Sprintf("DHCPv6 mode %q answers nothing", cfg.Mode)
		return a
	}
	if reason, why := invalid(msg, relay); reason != "" {
		a.Dropped, a.Why = reason, why
		return a
	}
	mt := msg.Type()
	if sid := msg.Options.ServerID(); sid != nil && cfg.ServerID != nil && !sid.Equal(cfg.ServerID) {
		a.Why = fmt.Sprintf("%s for another server (%s)", mt, sid)
		return a
	}
	a.Client = identify(msg, relay, peer)
	b := bootRequest(msg)
	if cfg.Mode == plan.DHCPProxy && !b.boot() {
		a.Why = "not a PXE, HTTP-boot or iPXE client"
		return a
	}
	dec, uuid := decide(p, site.Name, a.Client)
	a.Node, a.UUID = dec.Node, uuid
	if b.boot() && b.hasArch {
		b.refusal = boot.ArchRefusal(p, dec, b.arch)
	}
	if dec.Outcome == plan.Unknown && site.UnknownNodes == plan.PolicyIgnore && !p.HasSerialOnlyNodes(site.Name) && cfg.Mode == plan.DHCPProxy {
		a.Why = "unknown machine and site ignores unknown machines"
		return a
	}

	var reply *dhcpv6.Message
	if cfg.Mode == plan.DHCPProxy {
		reply, err = proxy(msg, cfg, &a)
	} else {
		reply, err = reservation(p, site, cfg, msg, dec, &a, withServerID(cfg))
	}
	if err != nil {
		a.Why = err.Error()
		return a
	}
	if reply == nil || !finish(reply, msg, cfg, site, p.MicroOSOf(dec), b, &a) {
		return a
	}
	a.Reply = reply
	if outer != nil {
		if a.Reply, err = dhcpv6.NewRelayReplFromRelayForw(outer, reply); err != nil {
			a.Reply, a.Why = nil, err.Error()
		}
	}
	return a
}

// withServerID is the modifier that names this server in a reply.
func withServerID(cfg Config) []dhcpv6.Modifier {
	if cfg.ServerID == nil {
		return nil
	}
	return []dhcpv6.Modifier{dhcpv6.WithServerID(cfg.ServerID)}
}

// proxy is the proxy-mode message for msg, boot options still to add: an
// Advertise to a Solicit, a Reply to a Request (no address) or an
// Information-Request.
func proxy(msg *dhcpv6.Message, cfg Config, a *Answer) (*dhcpv6.Message, error) {
	switch mt := msg.Type(); mt {
	case dhcpv6.MessageTypeSolicit:
		// No Rapid Commit: a Reply would bind the client to a server
		// that gives it no address.
		return dhcpv6.NewAdvertiseFromSolicit(msg, withServerID(cfg)...)
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeInformationRequest:
		reply, err := dhcpv6.NewReplyFromMessage(msg, withServerID(cfg)...)
		if ia := msg.Options.OneIANA(); ia != nil && mt == dhcpv6.MessageTypeRequest {
			reply.AddOption(noAddress(ia, "proxy mode: addresses come from the site's DHCPv6 server"))
		}
		return reply, err
	default:
		a.Why = fmt.Sprintf("proxy mode does not answer %s", mt)
		return nil, nil
	}
}

// finish completes reply to msg: DNS servers and boot options when asked
// for, the Preference of the link's only server; false when, in proxy
// mode, it has no boot file, so nothing worth sending.
func finish(reply, msg *dhcpv6.Message, cfg Config, site *plan.Site, m *plan.MicroOS, b bootInfo, a *Answer) bool {
	if a.Why == "" {
		a.Why = reply.Type().String()
	}
	a.Why = "DHCPv6 " + a.Why
	if mt := msg.Type(); mt != dhcpv6.MessageTypeRelease && mt != dhcpv6.MessageTypeConfirm {
		if len(cfg.DNS) > 0 && msg.IsOptionRequested(dhcpv6.OptionDNSRecursiveNameServer) {
			ips := make([]net.IP, len(cfg.DNS))
			for i, d := range cfg.DNS {
				ips[i] = d.AsSlice()
			}
			reply.AddOption(dhcpv6.OptDNS(ips...))
		}
		if b.boot() {
			bootOptions(reply, cfg, site, m, b, a)
		}
	}
	if cfg.Mode == plan.DHCPProxy && a.Boot == "" {
		a.Why = "DHCPv6 proxy: no answer" + strings.TrimPrefix(a.Why, "DHCPv6 "+reply.Type().String())
		return false
	}
	if reply.Type() == dhcpv6.MessageTypeAdvertise && cfg.Mode == plan.DHCPReservation {
		// The link's only DHCPv6 server: the client need not wait for
		// others.
		reply.AddOption(dhcpv6.OptPreference(255))
	}
	return true
}

// unwrap takes the client's message out of any relays: msg, the relay
// closest to the client and the outermost one (nil, nil when not relayed).
func unwrap(d dhcpv6.DHCPv6) (msg *dhcpv6.Message, inner, outer *dhcpv6.RelayMessage, err error) {
	if r, ok := d.(*dhcpv6.RelayMessage); ok {
		if r.Type() != dhcpv6.MessageTypeRelayForward {
			return nil, nil, nil, fmt.Errorf("%s sent to a server", r.Type())
		}
		outer = r
	}
	for hops := 0; d != nil && d.IsRelay(); hops++ {
		r, ok := d.(*dhcpv6.RelayMessage)
		if !ok || hops > 32 || r.Type() != dhcpv6.MessageTypeRelayForward {
			return nil, nil, nil, errors.New("relay chain too deep or not all Relay-Forward")
		}
		inner = r
		if d, err = dhcpv6.DecapsulateRelay(r); err != nil {
			return nil, nil, nil, err
		}
	}
	msg, ok := d.(*dhcpv6.Message)
	if !ok || msg == nil {
		return nil, nil, nil, errors.New("no client message")
	}
	return msg, inner, outer, nil
}

// invalid says why msg must not be answered at all (RFC 8415 §16): ""
// when it is fine.
func invalid(msg *dhcpv6.Message, relay *dhcpv6.RelayMessage) (reason, why string) {
	mt := msg.Type()
	cid, sid := msg.Options.ClientID(), msg.Options.ServerID()
	switch mt {
	case dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeConfirm, dhcpv6.MessageTypeRebind:
		if sid != nil {
			return DropServerID, mt.String() + " with a Server Identifier"
		}
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
		if sid == nil {
			return DropServerID, mt.String() + " without a Server Identifier"
		}
	case dhcpv6.MessageTypeInformationRequest:
		if msg.GetOneOption(dhcpv6.OptionIANA) != nil || msg.GetOneOption(dhcpv6.OptionIATA) != nil || msg.GetOneOption(dhcpv6.OptionIAPD) != nil {
			return DropIAInformation, "Information-Request with an IA option"
		}
	default:
		return DropNotClient, mt.String() + " is not a client message"
	}
	if cid == nil && mt != dhcpv6.MessageTypeInformationRequest {
		return DropNoClientID, mt.String() + " without a Client Identifier"
	}
	if cid != nil && (cid.DUIDType() == dhcpv6.DUID_LL || cid.DUIDType() == dhcpv6.DUID_LLT) {
		if _, ok := MACFromDUID(cid); !ok && duidEthernet(cid) {
			return DropLinkAddress, "client DUID " + cid.String() + " has no usable Ethernet address"
		}
	}
	if relay != nil {
		if ht, hw := relay.Options.ClientLinkLayerAddress(); ht == iana.HWTypeEthernet {
			if _, ok := ethernet(hw); !ok {
				return DropLinkAddress, "relay's client link-layer address " + hw.String() + " is no usable Ethernet address"
			}
		}
	}
	return "", ""
}

// duidEthernet says a DUID-LL/LLT claims to be of Ethernet.
func duidEthernet(d dhcpv6.DUID) bool {
	switch d := d.(type) {
	case *dhcpv6.DUIDLL:
		return d.HWType == iana.HWTypeEthernet
	case *dhcpv6.DUIDLLT:
		return d.HWType == iana.HWTypeEthernet
	}
	return false
}

// bootInfo is what a message says of the client's boot firmware.
type bootInfo struct {
	arch     iana.Arch
	hasArch  bool
	pxe      bool   // vendor class PXEClient…
	http     bool   // vendor class HTTPClient…
	ipxe     bool   // user class iPXE
	vendorEN uint32 // the enterprise number of its boot vendor class
	// refusal: why it is not booted (another processor family than its
	// node's profile), "" when it is.
	refusal string
}

func (b bootInfo) boot() bool { return b.pxe || b.http || b.ipxe }

// bootRequest reads options 61 (architecture), 16 (vendor class: EDK2
// sends enterprise 343 and "PXEClient:Arch:00007:UNDI:003016" or
// "HTTPClient:Arch:00016:…") and 15 (user class: iPXE sends "iPXE").
func bootRequest(msg *dhcpv6.Message) bootInfo {
	var b bootInfo
	if archs := msg.Options.ArchTypes(); len(archs) > 0 {
		b.arch, b.hasArch = archs[0], true
	}
	for _, vc := range msg.Options.VendorClasses() {
		for _, d := range vc.Data {
			switch {
			case bytes.HasPrefix(d, []byte("PXEClient")):
				b.pxe, b.vendorEN = true, vc.EnterpriseNumber
			case bytes.HasPrefix(d, []byte("HTTPClient")):
				b.http, b.vendorEN = true, vc.EnterpriseNumber
			}
		}
	}
	for _, uc := range msg.Options.UserClasses() {
		if string(uc) == "iPXE" {
			b.ipxe = true
		}
	}
	return b
}

// bootOptions adds the boot file URL (59) and, for UEFI HTTP boot, the
// vendor class echoed (EDK2 takes an offer as an HTTP one only with
// "HTTPClient" in it).
func bootOptions(reply *dhcpv6.Message, cfg Config, site *plan.Site, m *plan.MicroOS, b bootInfo, a *Answer) {
	if b.refusal != "" {
		a.Refused, a.Why = true, a.Why+": "+b.refusal
		return
	}
	mac := a.Client.MAC
	if b.ipxe && cfg.DualStack && cfg.Firmware != nil && mac != "" && !cfg.Firmware.BootedV6(mac) {
		a.Why += ": no boot URL: dual-stack site, and this machine's firmware did not boot over IPv6 (its iPXE boots over IPv4)"
		return
	}
	url, why := bootURL(cfg, site, m, b)
	if url == "" {
		a.Why += ": " + why
		return
	}
	if !b.ipxe && cfg.Firmware != nil && mac != "" {
		cfg.Firmware.Booted(mac)
	}
	reply.AddOption(dhcpv6.OptBootFileURL(url))
	// What EDK2 (NetworkPkg PxeBcDhcp6.c, HttpBootDhcp6.c) does with the
	// vendor class: "HTTPClient" makes an offer an HTTP-boot one, needed
	// with or without an address. "PXEClient" (enterprise 343) makes it a
	// BINL offer, after which the firmware asks again, unicast, at the
	// URL's host port 4011: needed for an offer without an address (proxy
	// mode, where Server answers on 4011), and left out beside an address,
	// where the URL alone boots.
	switch {
	case b.http || isHTTPArch(b.arch):
		reply.AddOption(&dhcpv6.OptVendorClass{EnterpriseNumber: b.vendorEN, Data: [][]byte{[]byte("HTTPClient")}})
	case b.pxe && cfg.Mode == plan.DHCPProxy:
		reply.AddOption(&dhcpv6.OptVendorClass{EnterpriseNumber: b.vendorEN, Data: [][]byte{[]byte("PXEClient")}})
	}
	a.Boot = url
	a.Why += ": " + url
}

// bootURL is what the client is told to boot, the same choices as the
// DHCPv4 server's with IPv6 URLs: the script URL for iPXE, an http:// URL
// for UEFI HTTP boot, a tftp://[addr]/ URL for PXE. "" and why when there
// is none.
func bootURL(cfg Config, site *plan.Site, m *plan.MicroOS, b bootInfo) (string, string) {
	base := "http://" + netip.AddrPortFrom(cfg.ServerIP, uint16(cfg.HTTPPort)).String()
	if b.ipxe {
		return base + "/boot.ipxe?site=" + site.Name, ""
	}
	if !b.hasArch {
		return "", "no client architecture (option 61)"
	}
	file, ok := bootFile(b.arch)
	if !ok {
		return "", fmt.Sprintf("no boot file for architecture %s", b.arch)
	}
	httpBoot := b.http || isHTTPArch(b.arch)
	if b.arch == iana.EFI_X86_64 || b.arch == iana.EFI_BC || b.arch == iana.EFI_X86_64_HTTP || b.arch == iana.EFI_ARM64 || b.arch == iana.EFI_ARM64_HTTP {
		switch m.UEFIChain() {
		case plan.ChainShim:
			// GRUB's config names the server's IPv4 address, and GRUB
			// over IPv6 was never tried: better no offer (the firmware
			// goes on to PXE over IPv4, where there is one) and a reason
			// on the timeline than a machine stuck in GRUB.
			return "", "micro-os " + m.Name + " boots through shim and GRUB, which bootops serves over IPv4 only: use chain uki (UEFI HTTP boot) on IPv6"
		case plan.ChainUKI:
			if !httpBoot {
				return "", "micro-os " + m.Name + " boots as a UKI by UEFI HTTP boot only"
			}
			if m.HTTPSBoot && cfg.HTTPSPort != 0 {
				return "https://" + netip.AddrPortFrom(cfg.ServerIP, uint16(cfg.HTTPSPort)).String() + "/artifacts/microos/" + m.Name + "/uki", ""
			}
			return base + "/artifacts/microos/" + m.Name + "/uki", ""
		}
	}
	if httpBoot {
		return base + "/tftp/" + file, ""
	}
	if !cfg.TFTP {
		return "", "PXE reads TFTP, and no TFTP is served over IPv6"
	}
	return "tftp://[" + cfg.ServerIP.String() + "]/" + file, ""
}

// UEFIFile is the iPXE build x86 UEFI machines are offered over IPv6
// (bootFile says why): --ipxe-dir must hold it.
const UEFIFile = "snponly.efi"

// bootFile maps client architectures (option 61, the registry RFC 5970
// shares with DHCPv4's option 93) to the iPXE build that runs there. BIOS
// has no IPv6 PXE: only UEFI types are answered. x86 UEFI gets
// snponly.efi, not the DHCPv4 server's ipxe.efi: iPXE on the firmware's
// own network interface (SNP) hands back cleanly when the local-disk
// script exits, and the firmware goes on to the disk; ipxe.efi, which
// replaces the firmware's network drivers with its own, left OVMF hung
// (or reset) after that exit when it had been loaded by PXE over IPv6
// (TestIPv6Running boots the network first).
func bootFile(arch iana.Arch) (string, bool) {
	switch arch {
	case iana.EFI_IA32, iana.EFI_X86_64, iana.EFI_BC, iana.EFI_X86_HTTP, iana.EFI_X86_64_HTTP, iana.EFI_BC_HTTP:
		return UEFIFile, true
	case iana.EFI_ARM32, iana.EFI_ARM64, iana.EFI_ARM32_HTTP, iana.EFI_ARM64_HTTP:
		return boot.ARM64File, true
	}
	return "", false
}

// isHTTPArch: the DHCPv4 server's list less type 20 (x86 BIOS HTTP), which
// has no IPv6 boot.
func isHTTPArch(arch iana.Arch) bool { return arch != iana.INTEL_X86PC_HTTP && boot.IsHTTPArch(arch) }

// noAddress is an IA_NA that says no address is given.
func noAddress(ia *dhcpv6.OptIANA, why string) *dhcpv6.OptIANA {
	out := &dhcpv6.OptIANA{IaId: ia.IaId}
	out.Options.Add(&dhcpv6.OptStatusCode{StatusCode: iana.StatusNoAddrsAvail, StatusMessage: why})
	return out
}

// String names a client for logs: its MAC or lease key.
func (c Client) String() string {
	if c.MAC != "" {
		return c.MAC
	}
	return strings.TrimPrefix(c.Key, "duid:")
}
