package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync"
)

// APIVersion is the only repository format version this Plan comes from.
const APIVersion = "bootops.dev/v1alpha1"

// TokenPlaceholder stands in rendered artifacts where the boot plane puts the
// per-node token at serve time. Tokens never appear in a compiled Plan.
const TokenPlaceholder = "@BOOTOPS_TOKEN@"

// Unknown-machine policies of a site.
const (
	PolicyProvision = "provision"
	PolicyHold      = "hold"
	PolicyIgnore    = "ignore"
)

// DHCP modes of a site.
const (
	DHCPProxy       = "proxy"
	DHCPReservation = "reservation"
	DHCPOff         = "off"
)

// When a registered node installs (install: in Git; Node.Hold).
const (
	InstallAuto = "auto"
	InstallHold = "hold"
)

// Plan is everything the boot plane serves, for every site of a repository.
type Plan struct {
	// Hash identifies the Plan's content: equal hashes, equal Plans.
	Hash     string     `json:"hash"`
	Sites    []*Site    `json:"sites"`
	Profiles []*Profile `json:"profiles"`
	MicroOS  []*MicroOS `json:"microOS"`

	once  sync.Once
	index *index
}

// Site is one L2 provisioning network and the nodes registered on it.
type Site struct {
	Name           string            `json:"name"`
	Hash           string            `json:"hash"`
	Network        Network           `json:"network"`
	DefaultProfile string            `json:"defaultProfile,omitempty"`
	UnknownNodes   string            `json:"unknownNodes"`
	Labels         map[string]string `json:"labels,omitempty"`
	// Env goes to the Micro-OS in the signed site overlay.
	Env map[string]string `json:"env,omitempty"`
	// Power is the site's power policy: PowerAuto, or "" for manual.
	Power string `json:"power,omitempty"`
	// Peers, when set, has the site's machines fetch images from each
	// other (imageDelivery: peers).
	Peers *Peers `json:"peers,omitempty"`
	// Unknown is what an unregistered machine boots under the provision or
	// hold policy; nil under ignore.
	Unknown      *Artifacts    `json:"unknown,omitempty"`
	Reservations []Reservation `json:"reservations,omitempty"`
	// TPM is what the site trusts of machines' TPMs; nil when it says
	// nothing.
	TPM *SiteTPM `json:"tpm,omitempty"`
	// Rollouts are the site's rollout policies by profile, for the
	// profiles its nodes install whose policy is not the default
	// (manual); nil when none is.
	Rollouts map[string]*Rollout `json:"rollouts,omitempty"`
	// Remote is set when the site's machines come over the Internet: nil
	// for a LAN site.
	Remote *Remote `json:"remote,omitempty"`
	Nodes  []*Node `json:"nodes"`
}

// Remote is how a site's machines reach the server over the Internet.
type Remote struct {
	// URL is the server's https base URL as the machines reach it.
	URL string `json:"url"`
}

// NodeNetwork is a node's static IPv4 network, for a link with no DHCP.
type NodeNetwork struct {
	// Address is the node's address and prefix length (203.0.113.10/24).
	Address string   `json:"address"`
	Gateway string   `json:"gateway,omitempty"`
	DNS     []string `json:"dns,omitempty"`
	// VLAN is the 802.1Q tag (0: untagged).
	VLAN int `json:"vlan,omitempty"`
	// Interface is the NIC's MAC ("": the node's first MAC, else the
	// first interface with a link).
	Interface string `json:"interface,omitempty"`
}

// Rollout is the rollout policy of profile's nodes at s: manual unless
// Git says otherwise.
func (s *Site) Rollout(profile string) Rollout {
	if r := s.Rollouts[profile]; r != nil {
		return *r
	}
	return Rollout{Strategy: RolloutManual, MaxUnavailable: DefaultMaxUnavailable, HealthTimeout: DefaultHealthTimeout}
}

// HostPort joins an address (IPv4, IPv6 or a host name) and a port as a
// URL's host part: an IPv6 address gets brackets ("[2001:db8::1]:8080").
func HostPort(addr string, port int) string {
	return net.JoinHostPort(addr, strconv.Itoa(port))
}

// ServerURL is the base URL nodes use to reach the site's boot server
// from their firmware and boot loaders (plain HTTP): at its IPv4
// serverAddress, or at its IPv6 one on an IPv6-only site.
func (s *Site) ServerURL() string {
	return s.serverURL(s.Network.PrimaryAddress())
}

// ServerURLv6 is ServerURL over IPv6 (http://[address]:port), or "" when
// the site has no IPv6.
func (s *Site) ServerURLv6() string {
	if s.Network.IPv6 == nil {
		return ""
	}
	return s.serverURL(s.Network.IPv6.ServerAddress)
}

func (s *Site) serverURL(addr string) string {
	return "http://" + HostPort(addr, s.Network.HTTPPort)
}

// TLS says the site's agents talk to the boot server over TLS.
func (s *Site) TLS() bool { return s.Network.HTTPSPort != 0 }

// AgentURL is the base URL the Micro-OS's agent reports to: https on
// network.httpsPort when the site has one, else ServerURL; a remote
// site's remote.url.
func (s *Site) AgentURL() string {
	if s.Remote != nil && s.Remote.URL != "" {
		// The machines come over the Internet: the URL they reach.
		return strings.TrimSuffix(s.Remote.URL, "/")
	}
	if s.TLS() {
		return "https://" + HostPort(s.Network.PrimaryAddress(), s.Network.HTTPSPort)
	}
	return s.ServerURL()
}

// AgentURLv6 is AgentURL over IPv6, or "" when the site has no IPv6.
func (s *Site) AgentURLv6() string {
	switch {
	case s.Network.IPv6 == nil:
		return ""
	case s.TLS():
		return "https://" + HostPort(s.Network.IPv6.ServerAddress, s.Network.HTTPSPort)
	}
	return s.ServerURLv6()
}

// Peers is a site's limits on the machines sharing images.
type Peers struct {
	UploadMbit int    `json:"uploadMbit,omitempty"` // 0: no bound
	PerMachine int    `json:"perMachine"`
	Linger     string `json:"linger"`
}

// Power policies of a site.
const (
	PowerManual = "manual" // show the BMC's power state, act only when told (the default)
	PowerAuto   = "auto"   // PXE once and power-cycle new and reprovisioned nodes
)

// BMC protocols.
const (
	BMCRedfish = "redfish"
	BMCIPMI    = "ipmi"
)

// BMC is how the daemon reaches a machine's baseboard management
// controller. Its credentials are a reference, never the secret itself:
// Secret names a file under the daemon's secrets folder, Age is
// "username:password" encrypted to the daemon's age identity (armoured).
type BMC struct {
	Address   string `json:"address"`
	Protocol  string `json:"protocol"`
	Port      int    `json:"port,omitempty"`
	TLSVerify bool   `json:"tlsVerify,omitempty"`
	Secret    string `json:"secret,omitempty"`
	Age       string `json:"age,omitempty"`
	// BootMode is the firmware mode a boot device is set for: "" (UEFI)
	// or BootLegacy (BIOS).
	BootMode string `json:"bootMode,omitempty"`
	// Auth is how a Redfish BMC is logged in to: "" (a session) or
	// AuthBasic (HTTP Basic authentication on every request, for BMCs
	// whose session login is broken).
	Auth string `json:"auth,omitempty"`
	// Boot is how the daemon has the node boot for an install: "" (a
	// one-time network boot) or BootVirtualMedia.
	Boot string `json:"boot,omitempty"`
}

// BootVirtualMedia: the node boots its medium, inserted through its
// Redfish BMC's virtual media.
const BootVirtualMedia = "virtual-media"

// AuthBasic is a Redfish BMC reached with HTTP Basic authentication.
const AuthBasic = "basic"

// BootLegacy is a BMC's boot mode for machines that boot BIOS-style.
const BootLegacy = "legacy"

// Host is the BMC's address with its port, when it has one.
func (b *BMC) Host() string {
	if b.Port == 0 {
		return b.Address
	}
	return net.JoinHostPort(b.Address, strconv.Itoa(b.Port))
}

// Network is a site's provisioning network. Its top-level fields are
// IPv4: ServerAddress is "" (and DHCP off) on an IPv6-only site. IPv6 is
// nil on an IPv4-only one.
type Network struct {
	Interface     string   `json:"interface,omitempty"`
	ServerAddress string   `json:"serverAddress"`
	HTTPPort      int      `json:"httpPort"`
	HTTPSPort     int      `json:"httpsPort,omitempty"`
	DHCP          string   `json:"dhcp"`
	Subnet        string   `json:"subnet,omitempty"`
	Gateway       string   `json:"gateway,omitempty"`
	DNS           []string `json:"dns,omitempty"`
	Pool          *Pool    `json:"pool,omitempty"`
	// LeaseSeconds is the lease time of both families (DHCPv6: the
	// valid lifetime; the preferred lifetime is the same).
	LeaseSeconds int        `json:"leaseSeconds"`
	IPv6         *NetworkV6 `json:"ipv6,omitempty"`
}

// NetworkV6 is the IPv6 side of a site's network. Addresses are in
// canonical form (netip.Addr.String), so they compare as strings.
type NetworkV6 struct {
	ServerAddress string `json:"serverAddress"`
	// Prefix is the link's on-link prefix, a /64.
	Prefix string `json:"prefix"`
	// DHCP is the DHCPv6 mode: DHCPProxy, DHCPReservation or DHCPOff.
	DHCP string   `json:"dhcp"`
	DNS  []string `json:"dns,omitempty"`
	Pool *Pool    `json:"pool,omitempty"`
}

// PrimaryAddress is the server address a single URL for the site uses: the
// IPv4 one, or the IPv6 one on an IPv6-only site.
func (n Network) PrimaryAddress() string {
	if n.ServerAddress == "" && n.IPv6 != nil {
		return n.IPv6.ServerAddress
	}
	return n.ServerAddress
}

// Pool is a range of addresses for unknown machines (reservation mode).
type Pool struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// Reservation is one node's static DHCP leases on a site: IP for DHCPv4
// (network.dhcp: reservation), IPv6 for DHCPv6 (network.ipv6.dhcp:
// reservation); either may be "" when the node has only the other.
type Reservation struct {
	Node     string   `json:"node"`
	MACs     []string `json:"macs"`
	IP       string   `json:"ip,omitempty"`
	IPv6     string   `json:"ipv6,omitempty"`
	Hostname string   `json:"hostname"`
}

// Identity is what a machine is registered (or presents itself) with.
// Values are normalised: see NormalizeMAC, NormalizeUUID, NormalizeSerial,
// NormalizeEK.
type Identity struct {
	MACs   []string `json:"macs,omitempty"`
	UUID   string   `json:"uuid,omitempty"`
	Serial string   `json:"serial,omitempty"`
	// TPM is the machine's TPM; nil when it is not registered by one.
	TPM *TPMIdentity `json:"tpm,omitempty"`
}

// TPMIdentity names a machine by its TPM's endorsement key.
type TPMIdentity struct {
	// EK is "sha256:" and the lowercase hex SHA-256 of the endorsement
	// key's public key in PKIX DER (the SubjectPublicKeyInfo).
	EK string `json:"ek"`
}

// SiteTPM is what a site trusts of machines' TPMs.
type SiteTPM struct {
	// EKCAs are the manufacturer CA certificates an EK certificate may
	// chain to, in the order Git lists their files.
	EKCAs []EKCA `json:"ekCAs"`
}

// EKCA is one file of EK CA certificates, as the repository holds it.
type EKCA struct {
	Path string `json:"path"` // relative to the repository root
	// SHA256 is the hex SHA-256 of PEM.
	SHA256 string `json:"sha256"`
	// PEM is the file: one or more CERTIFICATE blocks, each a CA.
	PEM string `json:"pem"`
}

// Attestation is what a node's check-in must prove of how it booted.
type Attestation struct {
	// Require: a TPM quote over the boot PCRs, its event log replayed,
	// Secure Boot on and PCR 4 showing the Micro-OS of the node's profile
	// (see MicroOS.PEDigest).
	Require bool `json:"require"`
}

// Node is one registered machine with everything rendered for it.
type Node struct {
	Name        string            `json:"name"`
	Site        string            `json:"site"`
	Profile     string            `json:"profile"`
	Hostname    string            `json:"hostname"`
	IP          string            `json:"ip,omitempty"`
	IPv6        string            `json:"ipv6,omitempty"`
	Identity    Identity          `json:"identity"`
	Labels      map[string]string `json:"labels,omitempty"`
	Reprovision int               `json:"reprovision"`
	// Hold is where Git says the node waits to be released (install:
	// hold: the node's own, else its profile's, else its site's), as
	// file:line; "" when it installs as soon as it checks in.
	Hold string `json:"hold,omitempty"`
	// Retire is set when Git takes the node out of service: it is never
	// installed, its disks are erased (plan.Retire).
	Retire *Retire `json:"retire,omitempty"`
	// BMC is the node's baseboard management controller, its site's
	// defaults merged in; nil when it has none.
	BMC *BMC `json:"bmc,omitempty"`
	// Expect is the hardware the node must have, its profile's
	// expectations with its own over them field by field; nil when
	// neither has any.
	Expect *Expect `json:"expect,omitempty"`
	// Attestation is its profile's attestation policy over its site's;
	// nil when neither requires any.
	Attestation *Attestation `json:"attestation,omitempty"`
	// Network is the node's static network (a link with no DHCP); nil
	// when it takes its address by DHCP.
	Network *NodeNetwork `json:"network,omitempty"`
	// Source is where the node is defined (file:line).
	Source    string    `json:"source"`
	Hash      string    `json:"hash"`
	Artifacts Artifacts `json:"artifacts"`
	// Install is what installing the node now consumes, by digest.
	Install Install `json:"install"`
}

// Artifacts are the files rendered for one node.
type Artifacts struct {
	IPXE string `json:"ipxe"`
	// GRUB is the GRUB config of the shim chain (UEFI Secure Boot with
	// the factory keys): "" unless the Micro-OS's chain is shim.
	GRUB          string   `json:"grub,omitempty"`
	UserData      string   `json:"userData,omitempty"`
	MetaData      string   `json:"metaData,omitempty"`
	NetworkConfig string   `json:"networkConfig,omitempty"`
	Workflow      Workflow `json:"workflow"`
}

// Workflow is the ordered list of actions the agent runs, every parameter
// resolved.
type Workflow struct {
	Node    string   `json:"node,omitempty"`
	Profile string   `json:"profile"`
	Actions []Action `json:"actions"`
	// Retire: the workflow takes the node out of service (erase-disks,
	// then poweroff): the agent reports it retired, not provisioned.
	Retire bool `json:"retire,omitempty"`
	// Commission: a held node's QA (CommissionActions of its workflow),
	// run while it waits for Git: the agent reports it commissioned, not
	// provisioned, writes no disk, and checks in again.
	Commission bool `json:"commission,omitempty"`
}

// Action is one workflow step with its parameters resolved.
type Action struct {
	Action  string `json:"action"`
	Name    string `json:"name"`
	Timeout string `json:"timeout"`
	Retries int    `json:"retries"`

	Disk        string   `json:"disk,omitempty"`
	URL         string   `json:"url,omitempty"`
	SHA256      string   `json:"sha256,omitempty"`
	Compression string   `json:"compression,omitempty"`
	Partition   int      `json:"partition,omitempty"`
	FSType      string   `json:"fsType,omitempty"`
	Path        string   `json:"path,omitempty"`
	Content     string   `json:"content,omitempty"`
	Mode        string   `json:"mode,omitempty"`
	Command     []string `json:"command,omitempty"`
	Chroot      bool     `json:"chroot,omitempty"`

	// The QA actions' parameters (qa-memory, qa-cpu, qa-disk,
	// qa-network): how much to test and the limits to pass. Sizes and
	// durations are the source's text (256Mi, 10s), as Timeout is; a
	// limit of 0 is none.
	Share        string  `json:"share,omitempty"`    // qa-memory: of MemAvailable, "10%"
	Duration     string  `json:"duration,omitempty"` // qa-cpu
	Size         string  `json:"size,omitempty"`     // qa-disk, qa-network: 256Mi
	Write        bool    `json:"write,omitempty"`    // qa-disk: write-read-verify too
	MinReadMBps  float64 `json:"minReadMBps,omitempty"`
	MinWriteMBps float64 `json:"minWriteMBps,omitempty"`
	MinMbps      float64 `json:"minMbps,omitempty"`
	MinOpsPerSec float64 `json:"minOpsPerSec,omitempty"`

	// Encrypt (image-to-disk, from the profile's encryption): the
	// partition of the image put in LUKS2 as it is written.
	Encrypt *Encryption `json:"encrypt,omitempty"`

	// erase-disks (a retirement's): the class to erase with (ErasePurge,
	// EraseClear), the serials of the disks kept, and the disks to erase
	// as the node's inventory on record has them: the machine must have
	// exactly these besides the kept ones, or nothing is erased.
	Erase string     `json:"erase,omitempty"`
	Keep  []string   `json:"keep,omitempty"`
	Disks []DiskInfo `json:"disks,omitempty"`
}

// Encryption is a profile's full-disk encryption as an image-to-disk
// action carries it (docs/security.md, "Full-disk encryption").
//
// The agent writes the image's partition Partition (its last: it is
// grown to the end of the disk to make room for the LUKS2 header) into a
// LUKS2 container instead of in the clear. The container has two keys: a
// recovery key the agent makes and encrypts at once to Recipients (age;
// only that ciphertext leaves the node, as the escrow), and a first-boot
// key sealed to the node's TPM with no PCR policy (a Clevis tpm2 token).
// The installed OS's first boot replaces the first-boot key by one sealed
// to PCRs, read there: the values of its own boot chain.
type Encryption struct {
	Partition  int      `json:"partition"`
	PCRs       []int    `json:"pcrs"`
	Recipients []string `json:"recipients"`
	// Unlock is how the image's initramfs unlocks it: "clevis"
	// (cryptsetup-initramfs and clevis-initramfs, from the kernel command
	// line's cryptopts=, which the agent sets).
	Unlock string `json:"unlock"`
}

// CryptName is the device-mapper name of an encrypted root, in the
// Micro-OS and in the installed OS (/dev/mapper/bootops-root).
const CryptName = "bootops-root"

// PartitionDevice names partition n of disk the way the kernel does (n 0
// is an action's default, partition 1): a "p" goes between a disk name
// ending in a digit and the number (nvme0n1p1, mmcblk0p1, loop0p1), not
// otherwise (sda1, vda1). The agent mounts it; exports name it.
func PartitionDevice(disk string, n int) string {
	if n == 0 {
		n = 1
	}
	if disk != "" && disk[len(disk)-1] >= '0' && disk[len(disk)-1] <= '9' {
		return disk + "p" + strconv.Itoa(n)
	}
	return disk + strconv.Itoa(n)
}

// Profile is an OS to install.
type Profile struct {
	Name        string   `json:"name"`
	Hash        string   `json:"hash"`
	Description string   `json:"description,omitempty"`
	OS          OS       `json:"os"`
	Image       Image    `json:"image"`
	MicroOS     string   `json:"microOS"`
	KernelArgs  []string `json:"kernelArgs,omitempty"`
	Disk        string   `json:"disk"`
	// Encryption is the profile's full-disk encryption, as each of its
	// workflow's image-to-disk actions carries it; nil for none.
	Encryption *Encryption `json:"encryption,omitempty"`
}

// Processor families: what a profile's os.arch installs for and a
// MicroOS's arch runs on.
const (
	ArchX86_64 = "x86_64"
	ArchARM64  = "arm64"
)

// ArchOr is a processor family as Git gives it: x86_64 when it gives none.
func ArchOr(a string) string {
	if a == "" {
		return ArchX86_64
	}
	return a
}

// OS describes the operating system a profile installs.
type OS struct {
	Type    string `json:"type"`
	Arch    string `json:"arch"`
	Version string `json:"version,omitempty"`
}

// Image is the OS image a profile streams to disk.
type Image struct {
	URL         string `json:"url"`
	SHA256      string `json:"sha256"`
	Compression string `json:"compression"`
}

// MicroOS is the in-memory installer a node boots into.
type MicroOS struct {
	Name    string   `json:"name"`
	Hash    string   `json:"hash"`
	Kernel  Artifact `json:"kernel"`
	Initrd  Artifact `json:"initrd"`
	Cmdline string   `json:"cmdline"`
	// Arch is the processor family it runs on: "" for x86_64, or "arm64".
	Arch string `json:"arch,omitempty"`
	// UKI is the signed unified kernel image (kernel, initramfs and
	// command line in one PE), for the uki chain.
	UKI *Artifact `json:"uki,omitempty"`
	// Chain is how UEFI machines boot it: ChainIPXE, ChainShim or ChainUKI.
	Chain string `json:"chain,omitempty"`
	// Overlay: machines get the signed site overlay as a second initrd.
	Overlay bool `json:"overlay,omitempty"`
	// HTTPSBoot: the firmware fetches the UKI over HTTPS (it trusts the
	// site CA).
	HTTPSBoot bool `json:"httpsBoot,omitempty"`
	// PEDigest is the Authenticode SHA-256 ("sha256:<hex>", see
	// tpm.PEDigest) of the PE image UEFI firmware measures into PCR 4
	// when it boots this Micro-OS (the UKI under chain uki, else the
	// kernel): set only for a Micro-OS some site and profile require
	// attestation of.
	PEDigest string `json:"peDigest,omitempty"`
}

// Boot chains of UEFI machines (MicroOS.Chain).
const (
	ChainIPXE = "ipxe"
	ChainShim = "shim"
	ChainUKI  = "uki"
	// ChainMedia is boot media made by bootops media (a USB stick, an
	// ISO, virtual media): the Micro-OS straight from the medium.
	ChainMedia = "media"
)

// Artifact is a file fetched from URL or read from Path in the repository.
type Artifact struct {
	URL    string `json:"url,omitempty"`
	Path   string `json:"path,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// Site returns the named site, or nil.
func (p *Plan) Site(name string) *Site {
	return p.idx().sites[name]
}

// Node returns the named node of a site, or nil.
func (p *Plan) Node(site, name string) *Node {
	return p.idx().nodes[site+"/"+name]
}

// FindNode returns every node called name, in any site.
func (p *Plan) FindNode(name string) []*Node {
	var out []*Node
	for _, s := range p.Sites {
		for _, n := range s.Nodes {
			if n.Name == name {
				out = append(out, n)
			}
		}
	}
	return out
}

// MicroOSNamed returns the named Micro-OS, or nil.
func (p *Plan) MicroOSNamed(name string) *MicroOS {
	for _, m := range p.MicroOS {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// MicroOSOf is the Micro-OS a decision boots: its profile's, else the
// site's default profile's, else the one named "default". Nil when neither exists.
func (p *Plan) MicroOSOf(d Decision) *MicroOS {
	name := d.Profile
	if name == "" && d.Site != nil {
		// DHCP cannot tell a serial-only node from an unknown machine:
		// both boot the chain of the site's default profile.
		name = d.Site.DefaultProfile
	}
	if pr := p.Profile(name); pr != nil {
		return p.MicroOSNamed(pr.MicroOS)
	}
	return p.MicroOSNamed("default")
}

// UEFIChain is how UEFI machines boot m: ChainIPXE unless it says otherwise.
func (m *MicroOS) UEFIChain() string {
	if m == nil || m.Chain == "" {
		return ChainIPXE
	}
	return m.Chain
}

// Profile returns the named profile, or nil.
func (p *Plan) Profile(name string) *Profile {
	return p.idx().profiles[name]
}

// Hash returns the hex sha256 of v's JSON encoding: the content hash used
// for nodes, sites and the Plan itself.
func Hash(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Plan types only hold strings, numbers, slices and maps.
		panic("plan: hash: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// SiteHash hashes a site's own fields and its nodes' hashes, so a site's
// hash changes when any of its nodes does without hashing them twice.
func SiteHash(s *Site) string {
	head := *s
	head.Hash, head.Nodes = "", nil
	h := sha256.New()
	b, _ := json.Marshal(&head)
	h.Write(b)
	for _, n := range s.Nodes {
		h.Write([]byte(n.Hash))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// PlanHash hashes the sites' hashes, the profiles and the Micro-OSes.
func PlanHash(p *Plan) string {
	h := sha256.New()
	for _, s := range p.Sites {
		h.Write([]byte("site " + s.Hash + "\n"))
	}
	for _, pr := range p.Profiles {
		h.Write([]byte("profile " + pr.Hash + "\n"))
	}
	for _, m := range p.MicroOS {
		h.Write([]byte("microos " + m.Hash + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}
