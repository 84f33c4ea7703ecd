package plan

import (
	"time"

	"github.com/bootops/bootops/tpm"
)

// The agent API: what bootops-agent, in the Micro-OS, and the boot server
// say to each other. Every request carries a credential in the
// Authorization header ("Bearer <credential>"): the check-in, the boot
// token from the machine's kernel command line (bootops.token=…, minted
// when its script was served, good for one check-in); the events, the
// session credential the check-in returned (CheckInReply.Session).
//
//	POST /api/v1/agent/checkin   CheckIn → CheckInReply
//	POST /api/v1/agent/events    EventBatch → EventAck (sent once stored durably)
//
// An agent fetching its image with its peers (CheckInReply.Peers) asks,
// with the session credential and ?site=…&node=…&machine=…, for the
// image's manifest (503 with Retry-After while the server prepares it)
// and reports to the swarm's scheduler (package swarm):
//
//	GET  /api/v1/agent/swarm/{sha256}/manifest   → swarm.Manifest
//	POST /api/v1/agent/swarm/{sha256}            swarm.Report → swarm.Reply
const (
	AgentCheckInPath = "/api/v1/agent/checkin"
	AgentEventsPath  = "/api/v1/agent/events"
	AgentSwarmPath   = "/api/v1/agent/swarm/"
)

// Kernel command line keys the rendered iPXE script sets.
const (
	CmdlineServer  = "bootops.server"
	CmdlineNode    = "bootops.node"
	CmdlineSite    = "bootops.site"
	CmdlineToken   = "bootops.token"
	CmdlineMachine = "bootops.machine" // an unknown machine's key, set by the server
	CmdlineChain   = "bootops.chain"   // how it booted, when not through iPXE (shim)
)

// CheckIn is the agent's first request: who the machine is and what it has.
type CheckIn struct {
	Site string `json:"site"`
	Node string `json:"node"` // from the kernel command line; "" for an unknown machine
	// Machine is what an unknown machine booted as (bootops.machine=, set
	// by the server: "mac:…", else "uuid:…" or "serial:…"): its token is
	// bound to it.
	Machine string `json:"machine,omitempty"`
	// Identity as the machine reads it: every NIC's MAC, the SMBIOS UUID
	// and serial.
	Identity Identity `json:"identity"`
	Arch     string   `json:"arch"`
	Disks    []Disk   `json:"disks"`
	Agent    string   `json:"agent"` // the agent's version
	// Boot is how the machine booted, as the agent reads it.
	Boot BootInfo `json:"boot,omitzero"`
	// Inventory is the machine's hardware (nil: an agent that sends none).
	Inventory *Inventory `json:"inventory,omitempty"`
	// TPM is the machine's TPM identity (its endorsement key, and an
	// attestation key it made), when it has a TPM. The server answers a
	// check-in that carries one, and no Proof, with a Challenge only.
	TPM *tpm.Identity `json:"tpm,omitempty"`
	// Proof answers that challenge: the check-in again, with the secret
	// only that TPM could unwrap (and a quote, when asked).
	Proof *TPMProof `json:"proof,omitempty"`
}

// TPMChallenge is the server's answer to a check-in with a TPM identity
// and no proof: a credential for the machine's TPM to activate, good for
// one check-in within agentapi.ChallengeTTL (boot/agentapi).
type TPMChallenge struct {
	ID string `json:"id"`
	tpm.Challenge
	// Quote asks for a quote of the boot PCRs with the firmware's event
	// log (the node's attestation requires it).
	Quote bool `json:"quote,omitempty"`
}

// TPMProof is the machine's answer to the challenge ID.
type TPMProof struct {
	Challenge string `json:"challenge"`
	tpm.Proof
}

// BootInfo is how a machine booted: its firmware, whether UEFI Secure
// Boot was on (the SecureBoot EFI variable), the chain that loaded the
// Micro-OS (ChainIPXE, ChainShim, ChainUKI) and whether the agent talks
// to the server over TLS.
type BootInfo struct {
	Firmware   string `json:"firmware,omitempty"` // "uefi" or "bios"
	SecureBoot bool   `json:"secureBoot,omitempty"`
	Chain      string `json:"chain,omitempty"`
	TLS        bool   `json:"tls,omitempty"`
}

// String is the one-line summary status shows: "uefi, secure boot, uki, tls".
func (b BootInfo) String() string {
	if b == (BootInfo{}) {
		return ""
	}
	parts := []string{b.Firmware}
	if b.Firmware == "uefi" {
		if b.SecureBoot {
			parts = append(parts, "secure boot")
		} else {
			parts = append(parts, "secure boot off")
		}
	}
	parts = append(parts, b.Chain)
	if b.TLS {
		parts = append(parts, "tls")
	} else {
		parts = append(parts, "plain http")
	}
	out := ""
	for _, p := range parts {
		if p == "" {
			continue
		}
		if out != "" {
			out += ", "
		}
		out += p
	}
	return out
}

// Disk is one block device the agent found.
type Disk struct {
	Name      string `json:"name"` // vda, sda, nvme0n1
	Size      int64  `json:"size"` // bytes
	Model     string `json:"model,omitempty"`
	Serial    string `json:"serial,omitempty"`
	Removable bool   `json:"removable,omitempty"`
}

// CheckInReply tells the agent what to do.
type CheckInReply struct {
	// Workflow is set when the machine is to be provisioned.
	Workflow *Workflow `json:"workflow,omitempty"`
	// Generation is the node's reprovision generation this workflow
	// installs: the "provisioned" event carries it back.
	Generation int `json:"generation"`
	// CloudInit is the NoCloud seed the cloud-init action writes.
	CloudInit *CloudInitSeed `json:"cloudInit,omitempty"`
	// Hold, when set, says why the machine waits (an unknown machine under
	// the hold policy): the agent checks in again every RetrySeconds.
	Hold         string `json:"hold,omitempty"`
	RetrySeconds int    `json:"retrySeconds,omitempty"`
	// Session is the credential of this workflow's events (and of a held
	// machine's next check-in): the boot token is spent.
	Session string `json:"session,omitempty"`
	// Node is the node the server found by the machine's identity, for an
	// agent that checked in without one (a UKI, TLS mode): its events
	// name it.
	Node string `json:"node,omitempty"`
	// Machine is, likewise, the unknown machine's key its events name.
	Machine string `json:"machine,omitempty"`
	// Peers, when set, has the agent fetch the image from the other
	// machines installing it (the site's imageDelivery: peers), through
	// AgentSwarmPath.
	Peers *Peers `json:"peers,omitempty"`
	// Challenge, when set, is all the reply holds: the machine proves its
	// TPM (CheckIn.Proof) and checks in again.
	Challenge *TPMChallenge `json:"challenge,omitempty"`
}

// IsPowerAction reports the actions that leave the Micro-OS: the
// provisioned event goes before the first of them, and nothing runs after
// it.
func IsPowerAction(action string) bool {
	return action == "reboot" || action == "poweroff" || action == "kexec"
}

// CloudInitSeed is a node's rendered cloud-init.
type CloudInitSeed struct {
	UserData      string `json:"userData"`
	MetaData      string `json:"metaData"`
	NetworkConfig string `json:"networkConfig,omitempty"`
	// Report is the script the installed OS runs at every boot (cloud-init
	// runs /var/lib/cloud/scripts/per-boot/) to report it is up, with the
	// node's report credential in it.
	Report string `json:"report,omitempty"`
}

// NetworkMatchAny is the match of a node's network-config when Git knows
// no MAC for it (a node registered by serial or UUID): any Ethernet
// interface. At check-in the boot server puts the MAC the machine reports
// in its place, as cloud-init's ifupdown renderer matches no name pattern.
const NetworkMatchAny = "    match:\n      name: \"e*\"\n"

// ReportPath is where the installed OS posts its report (OSReport, the
// report credential as the bearer).
const ReportPath = "/api/v1/report"

// OSReport is the installed OS's report of a boot.
type OSReport struct {
	Site       string   `json:"site"`
	Node       string   `json:"node"`
	InstanceID string   `json:"instanceId"`
	Hostname   string   `json:"hostname"`
	Kernel     string   `json:"kernel"`
	Addresses  []string `json:"addresses,omitempty"`
	// Install is the digest of the install the report script was written
	// with (plan.Install.Digest); CloudInit is cloud-init's result on this
	// boot: "done", "error: …", or "" when it gave none in time.
	Install   string `json:"install,omitempty"`
	CloudInit string `json:"cloudInit,omitempty"`
	// Encryption is the installed OS's word on its encrypted root, when
	// the install encrypted it.
	Encryption *EncryptionReport `json:"encryption,omitempty"`
}

// EncryptionReport is what the installed OS says of its encrypted root:
// the PCRs its unlock key is sealed to (after its first boot re-sealed it
// to its own boot chain), or why it is not.
type EncryptionReport struct {
	Device string `json:"device"`
	// Sealed is true when the only TPM key left is sealed to PCRs.
	Sealed bool   `json:"sealed"`
	PCRs   []int  `json:"pcrs,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Agent event kinds.
const (
	AgentStarted     = "started"     // an action started
	AgentProgress    = "progress"    // bytes of an action
	AgentLog         = "log"         // a line of output
	AgentActionDone  = "done"        // an action succeeded
	AgentFailed      = "failed"      // an action failed for good (after its retries)
	AgentRetry       = "retry"       // an action failed and will be retried
	AgentProvisioned = "provisioned" // every action succeeded
	AgentEscrow      = "escrow"      // an encrypted partition's recovery key, as ciphertext (Escrow)
	AgentErased      = "erased"      // a disk erased, or its erase failed (Erasure)
	AgentRetired     = "retired"     // a retirement's actions before its poweroff succeeded
	// AgentCommissioned: every action of a held node's commissioning
	// (Workflow.Commission) passed.
	AgentCommissioned = "commissioned"
)

// AgentEvent is one thing the agent reports.
type AgentEvent struct {
	// Seq numbers the agent's events, increasing, and unique to the node
	// across its boots (the agent starts from its clock in microseconds):
	// a batch resent after a lost acknowledgement is not stored twice.
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	Type   string    `json:"type"`
	Action string    `json:"action,omitempty"` // the action's name
	Step   int       `json:"step,omitempty"`   // 1-based
	Steps  int       `json:"steps,omitempty"`
	Bytes  int64     `json:"bytes,omitempty"`
	Total  int64     `json:"total,omitempty"` // 0 when unknown
	Rate   float64   `json:"rate,omitempty"`  // bytes per second
	// FromServer and FromPeers split an image's bytes by where they came
	// from, when the machine fetched it with its peers (progress).
	FromServer int64  `json:"fromServer,omitempty"`
	FromPeers  int64  `json:"fromPeers,omitempty"`
	Message    string `json:"message,omitempty"`
	// Generation is set on the provisioned event.
	Generation int `json:"generation,omitempty"`
	// Escrow is set on the escrow event: the recovery key of the
	// partition an image-to-disk action encrypted, as ciphertext only.
	Escrow *Escrow `json:"escrow,omitempty"`
	// Erasure is set on the erased event: what erase-disks did to one disk.
	Erasure *DiskErasure `json:"erasure,omitempty"`
}

// Escrow is an encrypted install's recovery key as it leaves the node:
// encrypted there to the profile's age recipients (armored age). The
// server keeps it as it came; only an operator holding one of the
// recipients' identities reads it (bootops recovery-key).
type Escrow struct {
	Partition int `json:"partition"`
	// LUKSUUID is the container's UUID (cryptsetup luksUUID).
	LUKSUUID   string   `json:"luksUUID"`
	Recipients []string `json:"recipients"`
	Ciphertext string   `json:"ciphertext"`
}

// MaxEscrow bounds an escrow's ciphertext (a recovery key to a few
// dozen recipients is a few KiB).
const MaxEscrow = 32 << 10

// Bounds of what an agent posts: the server refuses a batch of more than
// MaxEventBatch events or MaxEventBatchBytes of JSON (with room to spare
// for the agent's estimate), and keeps at most MaxEventMessage bytes of a
// message. The agent cuts its messages and batches to fit.
const (
	MaxEventBatch      = 500
	MaxEventBatchBytes = 256 << 10
	MaxEventMessage    = 8 << 10
)

// EventBatch is a POST to AgentEventsPath.
type EventBatch struct {
	Site    string       `json:"site"`
	Node    string       `json:"node"`
	Machine string       `json:"machine,omitempty"` // an unknown machine's (see CheckIn)
	Events  []AgentEvent `json:"events"`
}

// EventAck says up to which Seq the server has stored the events durably.
type EventAck struct {
	Acked uint64 `json:"acked"`
}

// MachineKey names an unknown machine by what it booted with: its MAC,
// else its UUID, else its serial ("" if none; the boot server then keys it
// by the address it asked from, "ip:…").
func MachineKey(m Machine) string {
	m = m.normalize()
	switch {
	case m.MAC != "":
		return "mac:" + m.MAC
	case m.UUID != "":
		return "uuid:" + m.UUID
	case m.Serial != "":
		return "serial:" + m.Serial
	}
	return ""
}
