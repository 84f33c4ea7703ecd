// Package status records what the boot plane did, as timestamped events
// keyed by node (or by an unknown machine's identifiers), and derives each
// node's state from them. The store is an interface: this package's Memory
// store is bounded and forgets on restart; Durable keeps the same in a bbolt
// file and acknowledges the agent's events only once they are on disk.
package status

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/bootops/bootops/plan"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Kinds of events.
const (
	KindDHCP    = "dhcp"    // a DHCP/proxyDHCP reply was sent
	KindTFTP    = "tftp"    // a TFTP transfer ended
	KindScript  = "script"  // an iPXE script was served
	KindFile    = "file"    // an artifact (kernel, initrd) was served
	KindAgent   = "agent"   // the agent in the Micro-OS reported
	KindReport  = "report"  // the installed OS reported (its first boot)
	KindPower   = "power"   // the daemon (or an operator through it) used the node's BMC
	KindRollout = "rollout" // the daemon reinstalled a node for a rolling upgrade, or judged it
)

// Node states the boot plane can tell (docs/microos.md lists them in order).
const (
	StateRegistered = "registered"
	StateDiscovered = "discovered"
	StateBooting    = "booting"
	StateMismatch   = "mismatch"
	StateHeld       = "held"
	// States the agent's reports put a node in.
	StateMicroOS      = "microos"      // the agent checked in
	StateProvisioning = "provisioning" // running action i/N
	// StateCommissioning: a node Git holds runs its profile's QA while it
	// waits (plan.CommissionActions); held again once they pass.
	StateCommissioning = "commissioning"
	StateProvisioned   = "provisioned"
	StateFailed        = "failed"
	// StateRunning: the installed OS reported its first boot.
	StateRunning = "running"
	// StateRetired: Git retired the node and its agent erased every disk
	// not kept (Machine.Erasures) before it powered off.
	StateRetired = "retired"
)

// Installed reports the states of a node whose OS is on its disk:
// provisioned, or running since.
func Installed(state string) bool { return state == StateProvisioned || state == StateRunning }

// Event is one thing the boot plane did for a machine.
type Event struct {
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// Site and Node name the registered node, when the machine is one.
	Site string `json:"site,omitempty"`
	Node string `json:"node,omitempty"`
	// The machine's identifiers, as it presented them.
	MAC    string `json:"mac,omitempty"`
	UUID   string `json:"uuid,omitempty"`
	Serial string `json:"serial,omitempty"`
	// IP is the machine's address, when only that is known (TFTP).
	IP string `json:"ip,omitempty"`
	// State the event puts the node in ("" leaves it).
	State   string `json:"state,omitempty"`
	Message string `json:"message"`
	Error   bool   `json:"error,omitempty"`

	// What the agent reported (KindAgent events): the workflow action, its
	// place in the workflow, bytes done of total and the rate.
	Action string  `json:"action,omitempty"`
	Step   int     `json:"step,omitempty"`
	Steps  int     `json:"steps,omitempty"`
	Bytes  int64   `json:"bytes,omitempty"`
	Total  int64   `json:"total,omitempty"`
	Rate   float64 `json:"rate,omitempty"`
	// FromServer and FromPeers split an image's bytes by where they came
	// from, when the machine fetched it with its peers.
	FromServer int64 `json:"fromServer,omitempty"`
	FromPeers  int64 `json:"fromPeers,omitempty"`
	// Seq is the agent's sequence number of the event (duplicates from a
	// resent batch are dropped); Generation is the reprovision generation
	// a "provisioned" event installed.
	Seq        uint64 `json:"seq,omitempty"`
	Generation int    `json:"generation,omitempty"`
	// Boot is how the machine booted, as its agent read it at check-in
	// (plan.BootInfo's summary).
	Boot string `json:"boot,omitempty"`
	// Hostname and Kernel are what the installed OS reported (KindReport).
	Hostname string `json:"hostname,omitempty"`
	Kernel   string `json:"kernel,omitempty"`
	// Install is what a "provisioned" event installed (from the session
	// the install ran in), or what a "running" report says its OS was
	// installed with (its digest only: a claim checked, never taken).
	Install *plan.Install `json:"install,omitempty"`
	// InstallID names one install: the ID of the session that ran it, on
	// its "provisioned" event; on a "running" report, the install its
	// credential was minted for. A report moves a node to running only
	// when it names the install the node's record holds (see Proves).
	InstallID string `json:"installId,omitempty"`
	// CloudInit is the installed OS's cloud-init result, as its report
	// said: "done", or "error: …"; "" when it did not say.
	CloudInit string `json:"cloudInit,omitempty"`
	// Revision is the Git revision a "provisioned" event's install came
	// from.
	Revision string `json:"revision,omitempty"`
	// Held are the unmet expectations a check-in was held for, "; "
	// between them.
	Held string `json:"held,omitempty"`
	// EK is the hash of the TPM the machine proved it holds at check-in
	// (credential activation); TPM says what the proof showed: "tpm: ek
	// sha256:…, attested, secure boot, micro-os digest ok", or why not.
	EK  string `json:"ek,omitempty"`
	TPM string `json:"tpm,omitempty"`
	// ReportKey, on a "provisioned" event, is the public area
	// (TPMT_PUBLIC, base64) of the TPM key the session's check-in proved:
	// the install's reports must be quoted by it (see Proves). Quoted, on
	// a "running" report, says the server checked such a quote.
	ReportKey string `json:"reportKey,omitempty"`
	Quoted    bool   `json:"quoted,omitempty"`
	// Inventory is the machine's hardware as its agent sent it at
	// check-in (cleaned by the server).
	Inventory *plan.Inventory `json:"inventory,omitempty"`
	// Installing: the agent was handed a workflow; what the disk holds is
	// about to change.
	Installing bool `json:"installing,omitempty"`
	// Sync is the node's sync when it changed (KindRollout): views that
	// have no Plan (the hub) show it from here.
	Sync string `json:"sync,omitempty"`
	// Rollout names the rollout event's group (site/profile), for views
	// that follow rollouts (KindRollout).
	Rollout string `json:"rollout,omitempty"`
	// Retiring: the agent was handed a retirement's workflow.
	Retiring bool `json:"retiring,omitempty"`
	// Commissioned names the QA a held node passed (the session's
	// Commission), on the agent's commissioned event.
	Commissioned string `json:"commissioned,omitempty"`
	// Escrow is an encrypted install's recovery key, on the agent's
	// escrow event: the store keeps it on the machine (Machine.Escrows)
	// and forwards it whole (the outbox); timelines show it without its
	// ciphertext.
	Escrow *Escrow `json:"escrow,omitempty"`
	// Encryption is the installed OS's word on its encrypted root, on a
	// "running" report.
	Encryption *plan.EncryptionReport `json:"encryption,omitempty"`
	// Erasure is what a retirement's erase did to one disk, on the
	// agent's erased event.
	Erasure *plan.DiskErasure `json:"erasure,omitempty"`
	// Certificate is a retirement's signed erase certificate (a
	// trust.Record, JSON), on the event the server records once the node
	// is retired.
	Certificate string `json:"certificate,omitempty"`
}

// Key is what events are grouped by: site/node, or the machine's MAC (or
// UUID, or serial) for a machine that is not a registered node.
func (e Event) Key() string {
	switch {
	case e.Node != "":
		return e.Site + "/" + e.Node
	case e.MAC != "":
		return "mac:" + e.MAC
	case e.UUID != "":
		return "uuid:" + e.UUID
	case e.Serial != "":
		return "serial:" + e.Serial
	case e.IP != "":
		return "ip:" + e.IP
	}
	return "unknown"
}

// SetKey sets the identifier of e that makes e.Key() key, a machine key
// (mac:, uuid:, serial: or ip: and its value); anything else sets none.
func (e *Event) SetKey(key string) {
	kind, v, _ := strings.Cut(key, ":")
	switch kind {
	case "mac":
		e.MAC = v
	case "uuid":
		e.UUID = v
	case "serial":
		e.Serial = v
	case "ip":
		e.IP = v
	}
}

// eventOverhead is what an Event takes in memory before what its strings
// and pointers point to.
const eventOverhead = int(unsafe.Sizeof(Event{}))

// installOverhead is the same of a plan.Install.
const installOverhead = int(unsafe.Sizeof(plan.Install{}))

// Size is an estimate of the bytes e holds in memory: the struct, the
// bytes of every string it carries (its time has none), what Install
// holds, and Inventory's length as JSON (marshalled only when it has one).
// Memory bounds its events by it (MaxBytes).
func (e Event) Size() int { return e.size(inventorySize(e.Inventory)) }

// size is e's Size, inv its Inventory's (inventorySize).
func (e Event) size(inv int) int {
	return eventOverhead + len(e.Kind) + len(e.Site) + len(e.Node) + len(e.MAC) + len(e.UUID) + len(e.Serial) + len(e.IP) +
		len(e.State) + len(e.Message) + len(e.Action) + len(e.Boot) + len(e.Hostname) + len(e.Kernel) + len(e.InstallID) +
		len(e.CloudInit) + len(e.Revision) + len(e.Held) + len(e.Commissioned) + len(e.EK) + len(e.TPM) + len(e.ReportKey) + len(e.Sync) + len(e.Rollout) +
		len(e.Certificate) + installSize(e.Install) + escrowSize(e.Escrow) + sealedSize(e.Encryption) + erasureSize(e.Erasure) + inv
}

// erasureSize is what a disk's erase record is counted for: its length as
// JSON (0 for none).
func erasureSize(d *plan.DiskErasure) int {
	if d == nil {
		return 0
	}
	b, _ := json.Marshal(d)
	return len(b)
}

// installSize is what an Install holds in memory (0 for none).
func installSize(in *plan.Install) int {
	if in == nil {
		return 0
	}
	return installOverhead + len(in.Digest) + len(in.Image) + len(in.Workflow) + len(in.CloudInit)
}

// inventorySize is what an Inventory is counted for: its length as JSON
// (0 for none).
func inventorySize(in *plan.Inventory) int {
	if in == nil {
		return 0
	}
	b, err := json.Marshal(in)
	if err != nil {
		return 0
	}
	return len(b)
}

// IsNodeKey reports whether a machine key names a registered node
// (site/node) rather than a machine that is no node (mac:, uuid:, serial:,
// ip:, unknown).
func IsNodeKey(k string) bool {
	slash, colon := strings.IndexByte(k, '/'), strings.IndexByte(k, ':')
	return slash >= 0 && (colon < 0 || colon > slash)
}

// ImageSources splits an image's bytes by where they came from.
type ImageSources struct {
	FromServer int64 `json:"fromServer"`
	FromPeers  int64 `json:"fromPeers"`
}

// Recorder takes events.
type Recorder interface {
	Record(Event)
}

// Machine is one node or unknown machine and where it stands.
type Machine struct {
	Key    string `json:"key"`
	Site   string `json:"site,omitempty"`
	Node   string `json:"node,omitempty"`
	MAC    string `json:"mac,omitempty"`
	UUID   string `json:"uuid,omitempty"`
	Serial string `json:"serial,omitempty"`
	// EK is the hash of its TPM's endorsement key ("sha256:…", see
	// plan.TPMIdentity), when its check-in carried one.
	EK string `json:"ek,omitempty"`
	// TPM is its last check-in's identity proof (see Event.TPM).
	TPM   string `json:"tpm,omitempty"`
	State string `json:"state"`
	// Since is when the machine entered its state.
	Since time.Time `json:"since,omitzero"`
	// Last is the newest event.
	Last   Event `json:"last"`
	Events int   `json:"events"`
	// Boot is how it last booted: firmware, Secure Boot, chain, TLS.
	Boot string `json:"boot,omitempty"`
	// Hostname and Kernel: the installed OS's last report.
	Hostname string `json:"hostname,omitempty"`
	Kernel   string `json:"kernel,omitempty"`
	// Image says where the last image it fetched with its peers came
	// from; nil when it fetched none that way.
	Image *ImageSources `json:"image,omitempty"`
	// Power is the node's power as its BMC last said (on, off,
	// unreachable, unknown), and why it is unreachable; "" without a BMC.
	// The status API fills them in: the store does not keep them.
	Power      string `json:"power,omitempty"`
	PowerError string `json:"powerError,omitempty"`
	// Installed is what the node's disk was last installed with (nil:
	// unknown: never, before bootops kept it, or an install began and
	// did not finish); CloudInit is its OS's cloud-init result.
	Installed *plan.Install `json:"installed,omitempty"`
	CloudInit string        `json:"cloudInit,omitempty"`
	// InstallID names the install Installed came from (the session that
	// ran it); "" when unknown, or for an install recorded before bootops
	// kept it.
	InstallID string `json:"installId,omitempty"`
	// ReportKey is the public area (base64) of the TPM key the install's
	// reports must be quoted by (the key its check-in proved); "" when
	// the machine proved no TPM: its reports need its credential alone.
	ReportKey string `json:"reportKey,omitempty"`
	// Inventory is the hardware its agent last sent; the status API
	// leaves it out unless asked (?inventory=1).
	Inventory *plan.Inventory `json:"inventory,omitempty"`
	// Revision is the Git revision its last install came from.
	Revision string `json:"revision,omitempty"`
	// Hardware is its inventory on one line (the status API fills it in).
	Hardware string `json:"hardware,omitempty"`
	// Held says why the machine was held before any disk was touched
	// (its unmet expectations, "; " between them), while it is.
	Held string `json:"held,omitempty"`
	// Sync says whether it runs what Git says (SyncIn, "out of date: …",
	// SyncUnknown); the status API fills it in.
	Sync string `json:"sync,omitempty"`
	// Encryption says on a line where its encrypted root stands
	// (EncryptionSummary): "encrypted, sealed to PCRs 7, recovery
	// escrowed"; "" when it is not known to be encrypted. Seal is the
	// installed OS's last word on it, for the install the record holds.
	Encryption string                 `json:"encryption,omitempty"`
	Seal       *plan.EncryptionReport `json:"seal,omitempty"`
	// escrows are its newest recovery key escrows (Escrows). Unexported:
	// never in the machine's JSON, which every reader of the status API
	// gets; a pointer, so that a Machine stays comparable (the dashboard
	// sends only the machines that changed).
	escrows *[]Escrow
	// Erasures are the disks its last retirement erased (or failed to),
	// in order: what its erase certificate says. Never changed in place:
	// a new erasure makes a new record (Machines compare with ==).
	Erasures *EraseRecord `json:"erasures,omitempty"`
	// EraseCertificate is its last retirement's signed erase certificate
	// (a trust.Record, JSON; "" when none was signed).
	EraseCertificate string `json:"eraseCertificate,omitempty"`
	// Commissioned names the QA it passed while Git held it (a digest of
	// the actions); "" when none since its last workflow handed out.
	Commissioned string `json:"commissioned,omitempty"`
}

// Retired says whether the machine is retired: its state says so, or its
// last retirement's certificate stands (no workflow handed out since) while
// a boot shows it booting again.
func (m Machine) Retired() bool { return m.State == StateRetired || m.EraseCertificate != "" }

// Escrows are the machine's newest recovery key escrows (at most
// KeptEscrows), newest first, ciphertext and all: only the recovery-keys
// route (role operate) serves them. The caller must not change them.
func (m *Machine) Escrows() []Escrow {
	if m.escrows == nil {
		return nil
	}
	return *m.escrows
}

// machineOverhead is what a Machine takes in memory before what its
// strings and pointers point to, its Last event's struct among it.
const machineOverhead = int(unsafe.Sizeof(Machine{}))

// imageOverhead is the same of an ImageSources.
const imageOverhead = int(unsafe.Sizeof(ImageSources{}))

// machineSize is an estimate of the bytes a machine's summary holds in
// memory: the struct, the bytes of every string it carries, what its Last
// event holds besides its struct (by its Size), Image, and Installed and
// Inventory (Inventory by its length as JSON, as Event.Size counts it).
// Installed or Inventory is counted once when it is Last's own (one
// allocation). Memory bounds its machines' summaries by it (MaxBytes).
func machineSize(m Machine) int {
	inv := 0
	if m.Inventory != m.Last.Inventory {
		inv = inventorySize(m.Inventory)
	}
	return m.size(m.Last.Size(), inv)
}

// size is m's machineSize, last its Last event's Size and inv its
// Inventory's (inventorySize; not counted when it is Last's).
func (m *Machine) size(last, inv int) int {
	n := machineOverhead - eventOverhead + last +
		len(m.Key) + len(m.Site) + len(m.Node) + len(m.MAC) + len(m.UUID) + len(m.Serial) + len(m.EK) + len(m.TPM) + len(m.State) +
		len(m.Boot) + len(m.Hostname) + len(m.Kernel) + len(m.Power) + len(m.PowerError) + len(m.CloudInit) + len(m.InstallID) +
		len(m.ReportKey) + len(m.Revision) + len(m.Hardware) + len(m.Held) + len(m.Commissioned) + len(m.Sync) + len(m.Encryption) +
		sealedSize(m.Seal) + escrowsSize(m.Escrows()) + len(m.EraseCertificate)
	if m.Erasures != nil {
		for i := range m.Erasures.Disks {
			n += erasureSize(&m.Erasures.Disks[i])
		}
	}
	if m.Image != nil {
		n += imageOverhead
	}
	if m.Installed != m.Last.Install {
		n += installSize(m.Installed)
	}
	if m.Inventory != m.Last.Inventory {
		n += inv
	}
	return n
}

// Sync values (an out-of-date node's says what changed).
const (
	SyncIn      = "in sync"
	SyncUnknown = "unknown"
	SyncPrefix  = "out of date: "
)

// NodeSync is a registered node's sync against want: "" for a node no
// install ever reached (nothing to say), else SyncOf what its disk holds
// (unknown after an install that began and failed).
func NodeSync(m *Machine, want plan.Install) string {
	if m.Installed == nil && !Installed(m.State) && m.State != StateFailed {
		return ""
	}
	return SyncOf(m.Installed, want)
}

// SyncOf says whether a node installed with have runs want.
func SyncOf(have *plan.Install, want plan.Install) string {
	if have == nil {
		return SyncUnknown
	}
	if c := have.Changes(want); len(c) > 0 {
		return SyncPrefix + strings.Join(c, ", ")
	}
	return SyncIn
}

// Memory keeps the newest events of each machine in memory: at most
// PerMachine events per registered node, PerUnknown per unknown machine, and
// MaxUnknown unknown machines (the least recently seen go first), so 10,000
// different identities from one client cannot grow it without bound, nor
// push out a registered node. MaxBytes bounds the events of all machines
// together and the machines' summaries, so a few machines with large
// events cannot either, nor many machines with large summaries.
type Memory struct {
	PerMachine int // default 200
	PerUnknown int // default PerMachine
	MaxUnknown int // default 20,000
	// MaxBytes bounds the bytes the store keeps: its events and its
	// machines' summaries (Bytes); past it the oldest events go, then the
	// machines seen longest ago. Events go by their Size, the oldest
	// recorded first, whatever machines they are of; a machine keeps its
	// summary (Machines) when its last event goes. When the summaries
	// and the one event left are still past it, whole machines go (the
	// least recently seen by their Last event's time, machines that are no
	// node before nodes; Evicted counts them). The event just recorded and
	// its machine always stay: one larger than MaxBytes alone is kept
	// until the next event recorded. 0: no bound but the counts.
	MaxBytes int64
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Changed, when set, is called after every event recorded, outside
	// the store's lock; it must not block.
	Changed func()

	mu       sync.Mutex
	machines map[string]*entry
	unknown  int // machines that are no node
	// held and bytes are the events the machines keep, and their Size;
	// sums is the size of the machines' summaries (entry.sum, all
	// entries together).
	held  int
	bytes int64
	sums  int64
	// evicted counts the machines dropped for MaxBytes.
	evicted uint64
	// order is every event kept, oldest first, by the entry it was
	// recorded into and its id. It also holds events gone since (trimmed,
	// evicted): they are skipped when met, and dropped when they outnumber
	// the rest (compact).
	order  []ref
	nextID uint64
}

type entry struct {
	m Machine
	// sum is m's size as last counted in Memory.sums (summarySize);
	// last and inv are its Last event's Size and its Inventory's
	// (inventorySize), kept so that counting it marshals nothing again.
	sum       int64
	last, inv int
	// node: its key names a registered node (IsNodeKey).
	node   bool
	events []Event
	// stamps are the events' ids and Sizes, one for each; ids ascend (the
	// order the events were recorded in).
	stamps []stamp
	// dead is how many slots before events its array has: the events
	// dropped from its front since it was made.
	dead int
	// into is the entry the machine's history joined (a machine first
	// seen by its MAC that turned out to be a node); gone: the machine
	// was evicted.
	into *entry
	gone bool
}

// entryOverhead is what a machine's entry adds to its summary: the rest of
// the entry's struct, and its place in the map (the key's header, the
// pointer, the map's own bookkeeping and slack, estimated).
const entryOverhead = int(unsafe.Sizeof(entry{})-unsafe.Sizeof(Machine{})) + 48

// summarySize is what en's machine is counted for in Memory.sums: its
// summary (machineSize, from the sizes en keeps) and its entry.
func (en *entry) summarySize() int64 {
	return int64(entryOverhead + en.m.size(en.last, en.inv))
}

// stamp is an event's id and Size.
type stamp struct {
	id   uint64
	size int64
}

// ref is an event in Memory.order: the entry it was recorded into (or
// one its history joined since), and its id.
type ref struct {
	en *entry
	id uint64
}

// holder is the entry that holds r's event if any is kept: where r's
// entry's history went, nil when that machine was evicted.
func (r ref) holder() *entry {
	en := r.en
	for en.into != nil {
		en = en.into
	}
	if en.gone {
		return nil
	}
	return en
}

var _ Recorder = (*Memory)(nil)

// Record stores e, stamping its time when it has none.
func (s *Memory) Record(e Event) {
	s.record(e)
	if s.Changed != nil {
		s.Changed()
	}
}

func (s *Memory) record(e Event) {
	e = e.printable()
	inv := inventorySize(e.Inventory)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Time.IsZero() {
		now := time.Now
		if s.Now != nil {
			now = s.Now
		}
		e.Time = now().UTC()
	}
	k := e.Key()
	node := IsNodeKey(k)
	en := s.entryFor(k, e.Node, e.MAC)
	en.m.apply(e)
	// The machine keeps the escrow's ciphertext (Escrows); its timeline
	// keeps the rest.
	e.Escrow = e.Escrow.withoutCiphertext()
	size := int64(e.size(inv)) // its time, stamped above, is not counted
	if e.isLast() {
		en.last = int(size)
	}
	if e.Inventory != nil {
		en.inv = inv
	}
	sum := en.summarySize()
	s.sums += sum - en.sum
	en.sum = sum
	id := s.add(en, e, size)
	s.bound(en, id, node)
}

// entryFor is the machine k's entry, made (an unknown machine evicting
// the oldest past MaxUnknown) when it has none. A machine first seen by
// its MAC (DHCP, before anything else is known) that turns out to be a
// node joins the node's entry here. The lock is held.
func (s *Memory) entryFor(k, node, mac string) *entry {
	if s.machines == nil {
		s.machines = map[string]*entry{}
	}
	en := s.machines[k]
	if node != "" && mac != "" {
		if early := s.machines["mac:"+mac]; early != nil {
			delete(s.machines, "mac:"+mac)
			s.unknown--
			// Its summary goes; its events are the node's now.
			s.sums -= early.sum
			early.sum = 0
			if en == nil {
				en = newEntry(Machine{Key: k, State: early.m.State})
				s.machines[k] = en
			}
			en.join(early)
			en.m.Events += early.m.Events
		}
	}
	if en == nil {
		if !IsNodeKey(k) {
			if s.unknown >= orDefault(s.MaxUnknown, 20000) {
				s.evictOldest()
			}
			s.unknown++
		}
		en = newEntry(Machine{Key: k, State: StateRegistered})
		s.machines[k] = en
	}
	return en
}

// add appends e, of size bytes, to en's events and to the store's order,
// and returns its id. The lock is held.
func (s *Memory) add(en *entry, e Event, size int64) (id uint64) {
	s.nextID++
	id = s.nextID
	if len(en.events) == cap(en.events) {
		en.dead = 0 // append makes a new array
	}
	en.events = append(en.events, e)
	en.stamps = append(en.stamps, stamp{id, size})
	s.order = append(s.order, ref{en, id})
	s.held++
	s.bytes += size
	return id
}

// bound keeps the store within its limits after event id was added to en
// (a node's or not): events per machine, then bytes in all. The lock is
// held.
func (s *Memory) bound(en *entry, id uint64, node bool) {
	limit := orDefault(s.PerMachine, 200)
	if !node {
		limit = orDefault(s.PerUnknown, limit)
	}
	if len(en.events) > limit {
		s.dropFront(en, len(en.events)-limit)
	}
	if s.MaxBytes > 0 {
		s.dropOldest(id)
		if s.bytes+s.sums > s.MaxBytes {
			s.evictForBytes(en)
		}
	}
	if len(s.order) > 2*s.held+1024 {
		s.compact()
	}
}

// newEntry is a new entry for m, whose Last is no event yet.
func newEntry(m Machine) *entry {
	return &entry{m: m, last: m.Last.Size(), node: IsNodeKey(m.Key)}
}

// join takes early's history (early's machine turned out to be en's) into
// en's, in the order the events were recorded.
func (en *entry) join(early *entry) {
	n := len(early.events) + len(en.events)
	events, stamps := make([]Event, 0, n), make([]stamp, 0, n)
	a, b := 0, 0
	for a < len(early.events) || b < len(en.events) {
		if b == len(en.events) || a < len(early.events) && early.stamps[a].id < en.stamps[b].id {
			events, stamps = append(events, early.events[a]), append(stamps, early.stamps[a])
			a++
		} else {
			events, stamps = append(events, en.events[b]), append(stamps, en.stamps[b])
			b++
		}
	}
	en.events, en.stamps, en.dead = events, stamps, 0
	early.events, early.stamps, early.dead, early.into = nil, nil, 0, en
}

// dropFront drops en's n oldest events. The array they leave is made
// anew when its dropped slots outnumber the events kept, so that what
// the store holds stays close to what it counts.
func (s *Memory) dropFront(en *entry, n int) {
	for _, st := range en.stamps[:n] {
		s.bytes -= st.size
	}
	s.held -= n
	clear(en.events[:n])
	en.events, en.stamps, en.dead = en.events[n:], en.stamps[n:], en.dead+n
	switch {
	case len(en.events) == 0:
		en.events, en.stamps, en.dead = nil, nil, 0
	case en.dead > len(en.events):
		en.events, en.stamps, en.dead = slices.Clone(en.events), slices.Clone(en.stamps), 0
	}
}

// dropOldest drops the oldest events recorded, whatever machine they are
// of, until the store keeps MaxBytes or less (its events and its
// machines' summaries); never newest, the event just recorded.
func (s *Memory) dropOldest(newest uint64) {
	for s.bytes+s.sums > s.MaxBytes && len(s.order) > 0 && s.order[0].id != newest {
		r := s.order[0]
		s.order[0] = ref{}
		s.order = s.order[1:]
		// Every older event was dropped already: r's, when kept, is the
		// oldest its machine keeps.
		if en := r.holder(); en != nil && len(en.stamps) > 0 && en.stamps[0].id == r.id {
			s.dropFront(en, 1)
		}
	}
}

// compact drops from order the events no longer kept.
func (s *Memory) compact() {
	order := make([]ref, 0, s.held+s.held/4)
	for _, r := range s.order {
		en := r.holder()
		if en == nil {
			continue
		}
		if _, ok := slices.BinarySearchFunc(en.stamps, r.id, func(st stamp, id uint64) int { return cmp.Compare(st.id, id) }); ok {
			order = append(order, ref{en, r.id})
		}
	}
	s.order = order
}

// evictOldest drops the least recently seen unknown machine: a scan, as
// this store is for tests and the hub's view (the daemon's is Durable).
func (s *Memory) evictOldest() {
	var oldest string
	var t time.Time
	for k, en := range s.machines {
		if !IsNodeKey(k) && (oldest == "" || en.m.Last.Time.Before(t)) {
			oldest, t = k, en.m.Last.Time
		}
	}
	if oldest != "" {
		s.remove(oldest)
	}
}

// evictForBytes drops whole machines, the least recently seen first (by
// their Last event's time; machines that are no node before nodes; by key
// when seen at once), until the store keeps MaxBytes or less; never keep,
// the machine just recorded. Each is a scan of the machines: it is called
// only when dropping events was not enough, when the summaries alone
// fill the bound.
func (s *Memory) evictForBytes(keep *entry) {
	for s.bytes+s.sums > s.MaxBytes {
		var oldest string
		var o *entry
		for k, en := range s.machines {
			if en != keep && (o == nil || evictsBefore(k, en, oldest, o)) {
				oldest, o = k, en
			}
		}
		if o == nil {
			return
		}
		s.remove(oldest)
		s.evicted++
	}
}

// evictsBefore says whether machine a (under key ka) goes before b for
// the byte bound: a machine that is no node before a node, then the one
// seen longest ago, then by key.
func evictsBefore(ka string, a *entry, kb string, b *entry) bool {
	if a.node != b.node {
		return b.node
	}
	if c := a.m.Last.Time.Compare(b.m.Last.Time); c != 0 {
		return c < 0
	}
	return ka < kb
}

// remove drops the machine under k, its events and its summary.
func (s *Memory) remove(k string) {
	en := s.machines[k]
	delete(s.machines, k)
	if !en.node {
		s.unknown--
	}
	s.dropFront(en, len(en.events))
	s.sums -= en.sum
	en.sum = 0
	en.gone = true
}

// Bytes is what the store keeps now, all machines together: the Size of
// its events and the size of its machines' summaries (what bounds it,
// MaxBytes).
func (s *Memory) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes + s.sums
}

// Evicted is how many machines the store has dropped for MaxBytes (not
// those dropped for MaxUnknown).
func (s *Memory) Evicted() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evicted
}

// Holds says whether the store holds a machine under key (or, for a node
// with mac, the machine first seen by that MAC, whose history joins the
// node's), and how many machines it holds now.
func (s *Memory) Holds(key, mac string) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.machines[key]
	if !ok && mac != "" && IsNodeKey(key) {
		_, ok = s.machines["mac:"+mac]
	}
	return ok, len(s.machines)
}

// Machines lists every machine seen, registered nodes first, by key.
func (s *Memory) Machines() []Machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Machine, 0, len(s.machines))
	for _, en := range s.machines {
		out = append(out, en.m)
	}
	sortMachines(out)
	return out
}

// apply takes e into the machine's summary: the identifiers it names, the
// state it puts the machine in, and the newest event.
func (m *Machine) apply(e Event) {
	m.Site, m.Node = or(e.Site, m.Site), or(e.Node, m.Node)
	m.MAC, m.UUID, m.Serial = or(e.MAC, m.MAC), or(e.UUID, m.UUID), or(e.Serial, m.Serial)
	m.Boot = or(e.Boot, m.Boot)
	m.EK, m.TPM = or(e.EK, m.EK), or(e.TPM, m.TPM)
	m.Hostname, m.Kernel = or(e.Hostname, m.Hostname), or(e.Kernel, m.Kernel)
	if e.FromServer > 0 || e.FromPeers > 0 {
		m.Image = &ImageSources{FromServer: e.FromServer, FromPeers: e.FromPeers}
	}
	m.applyInstall(e)
	m.applyEncryption(e)
	m.applyErasure(e)
	if e.Installing || e.Retiring {
		m.Commissioned = ""
	}
	m.Commissioned = or(e.Commissioned, m.Commissioned)
	m.Sync = or(e.Sync, m.Sync)
	if e.Inventory != nil {
		m.Inventory = e.Inventory
	}
	if e.State != "" {
		m.Held = e.Held
	}
	if e.State != "" && !m.keepsState(e) {
		if e.State != m.State || m.Since.IsZero() {
			m.Since = e.Time
		}
		m.State = e.State
	}
	if e.isLast() {
		m.Last = e
		m.Last.Escrow = m.Last.Escrow.withoutCiphertext()
	}
	m.Events++
}

// applyErasure keeps a retirement's record: a workflow handed out starts
// a new one (a retirement's, or an install that makes the last one
// moot), each erased event adds its disk.
func (m *Machine) applyErasure(e Event) {
	if e.Installing || e.Retiring {
		m.Erasures, m.EraseCertificate = nil, ""
	}
	if e.Certificate != "" {
		m.EraseCertificate = e.Certificate
	}
	if e.Erasure == nil {
		return
	}
	var disks []plan.DiskErasure
	if m.Erasures != nil {
		disks = m.Erasures.Disks
	}
	if len(disks) < maxErasures {
		m.Erasures = &EraseRecord{Disks: append(slices.Clip(disks), *e.Erasure)}
	}
}

// EraseRecord is what a retirement's erase did, disk by disk.
type EraseRecord struct {
	Disks []plan.DiskErasure `json:"disks"`
}

// maxErasures bounds a machine's erase record (a machine has a few
// disks; an agent that says more is cut off).
const maxErasures = 64

// isLast says whether e becomes its machine's Last event: a change of
// sync is on the timeline, but the newest thing that happened to the
// machine stays its last message.
func (e Event) isLast() bool { return e.Kind != KindRollout || e.Sync == "" }

// applyInstall keeps what the node's disk holds. Only the install path
// writes it: an install that starts (a workflow handed out) or fails
// leaves it unknown, and "provisioned" names the session's install and
// its ID. A report never changes it (whatever install it claims): it
// adds cloud-init's result, and only when it proves the install the
// record holds (Proves).
func (m *Machine) applyInstall(e Event) {
	if e.Installing {
		m.Installed, m.InstallID, m.CloudInit, m.ReportKey = nil, "", "", ""
	}
	switch e.State {
	case StateFailed:
		m.Installed, m.InstallID, m.CloudInit, m.ReportKey = nil, "", "", ""
	case StateProvisioned:
		m.Installed, m.InstallID, m.CloudInit, m.Revision, m.ReportKey = e.Install, e.InstallID, "", e.Revision, e.ReportKey
	case StateRunning:
		if m.Proves(e) == "" {
			m.CloudInit = or(e.CloudInit, m.CloudInit)
		}
	}
}

// Proves says why a "running" report does not prove the install the
// node's record holds ("" when it does): the node must be installed (by
// bootops' own install path), the report's credential minted for that
// very install, and the digest it claims, if any, the one recorded. An
// install recorded before installs had IDs (InstallID "") is proved by
// its digest alone. An install whose check-in proved a TPM is proved only
// by a report quoted by that TPM's key (the handler checks the quote,
// tpm.VerifyReport, and sets Quoted).
func (m *Machine) Proves(e Event) string {
	switch {
	case !Installed(m.State) || m.Installed == nil:
		return fmt.Sprintf("bootops records no finished install for this node (it is %s)", m.State)
	case m.InstallID != "" && e.InstallID != m.InstallID:
		return "the credential is of another install than the one bootops recorded (the node was installed again since, or that install never finished)"
	case e.Install != nil && e.Install.Digest != m.Installed.Digest:
		return fmt.Sprintf("it claims install %s; bootops recorded install %s", plan.Short(e.Install.Digest), plan.Short(m.Installed.Digest))
	case m.InstallID == "" && e.Install == nil:
		return "it names no install, and bootops recorded this one without an ID"
	case len(m.ReportKey) > 0 && !e.Quoted:
		return fmt.Sprintf("the install is bound to the TPM that proved itself at its check-in (ek %s), and the report carries no quote by that TPM's key", m.EK)
	}
	return ""
}

// keepsState says e leaves a machine in state cur although it names a
// state of its own: an installed node's reboot (its DHCP request, and the
// local-disk script, which names no state) never moves it back. What does
// move it on is a reinstall (the Micro-OS script, served only when Git
// raised its generation: booting), the agent, and the installed OS's
// report (running).
//
// Nor does a request that names an installed node with identifiers that
// contradict it (mismatch): it is on the node's timeline as an error, but
// the node stays installed — a copied serial must not change its state.
//
// A "running" report that does not prove the recorded install (Proves)
// leaves the state too: only bootops' own install path says what a disk
// holds, and a report may only say that install booted.
func (m *Machine) keepsState(e Event) bool {
	if e.State == StateRunning && m.Proves(e) != "" {
		return true
	}
	return Installed(m.State) && (e.State == StateDiscovered || e.State == StateMismatch)
}

// sortMachines puts registered nodes first, then by key.
func sortMachines(ms []Machine) {
	sort.Slice(ms, func(i, j int) bool {
		if (ms[i].Node == "") != (ms[j].Node == "") {
			return ms[i].Node != ""
		}
		return ms[i].Key < ms[j].Key
	})
}

// Machine returns what the store holds of one machine.
func (s *Memory) Machine(key string) (Machine, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if en := s.machines[key]; en != nil {
		return en.m, true
	}
	return Machine{}, false
}

// Known reports whether the store keeps the machine.
func (s *Memory) Known(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.machines[key] != nil
}

// Events returns a machine's events, oldest first.
func (s *Memory) Events(key string) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	if en := s.machines[key]; en != nil {
		return append([]Event(nil), en.events...)
	}
	return nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func orDefault[T int | int64 | time.Duration](n, d T) T {
	if n > 0 {
		return n
	}
	return d
}
