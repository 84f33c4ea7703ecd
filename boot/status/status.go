// Package status records what the boot plane did, as timestamped events
// keyed by node (or by an unknown machine's identifiers), and derives each
// node's state from them. The store is an interface: this package's Memory
// store is bounded and forgets on restart; Durable keeps the same in a bbolt
// file and acknowledges the agent's events only once they are on disk.
package status

import (
	"fmt"

	"github.com/bootops/bootops/plan"
	"sort"
	"strings"
	"sync"
	"time"
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

// Node states (DESIGN.md §4) the boot plane can tell.
const (
	StateRegistered = "registered"
	StateDiscovered = "discovered"
	StateBooting    = "booting"
	StateMismatch   = "mismatch"
	StateHeld       = "held"
	// States the agent's reports put a node in.
	StateMicroOS      = "microos"      // the agent checked in
	StateProvisioning = "provisioning" // running action i/N
	StateProvisioned  = "provisioned"
	StateFailed       = "failed"
	// StateRunning: the installed OS reported its first boot.
	StateRunning = "running"
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
// push out a registered node.
type Memory struct {
	PerMachine int // default 200
	PerUnknown int // default PerMachine
	MaxUnknown int // default 20,000
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Changed, when set, is called after every event recorded, outside
	// the store's lock; it must not block.
	Changed func()

	mu       sync.Mutex
	machines map[string]*entry
	unknown  int // machines that are no node
}

type entry struct {
	m      Machine
	events []Event
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Time.IsZero() {
		now := time.Now
		if s.Now != nil {
			now = s.Now
		}
		e.Time = now().UTC()
	}
	if s.machines == nil {
		s.machines = map[string]*entry{}
	}
	k := e.Key()
	en := s.machines[k]
	// A machine first seen by its MAC (DHCP, before anything else is
	// known) turns out to be a node: its history joins the node's.
	if e.Node != "" && e.MAC != "" {
		if early := s.machines["mac:"+e.MAC]; early != nil {
			delete(s.machines, "mac:"+e.MAC)
			s.unknown--
			if en == nil {
				en = &entry{m: Machine{Key: k, State: early.m.State}}
				s.machines[k] = en
			}
			en.events = append(early.events, en.events...)
			en.m.Events += early.m.Events
		}
	}
	node := IsNodeKey(k)
	if en == nil {
		if !node {
			if s.unknown >= orDefault(s.MaxUnknown, 20000) {
				s.evictOldest()
			}
			s.unknown++
		}
		en = &entry{m: Machine{Key: k, State: StateRegistered}}
		s.machines[k] = en
	}
	en.m.apply(e)
	en.events = append(en.events, e)
	limit := orDefault(s.PerMachine, 200)
	if !node {
		limit = orDefault(s.PerUnknown, limit)
	}
	if len(en.events) > limit {
		en.events = append(en.events[:0:0], en.events[len(en.events)-limit:]...)
	}
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
		delete(s.machines, oldest)
		s.unknown--
	}
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
	// A change of sync is on the timeline, but the newest thing that
	// happened to the machine stays its last message.
	if e.Kind != KindRollout || e.Sync == "" {
		m.Last = e
	}
	m.Events++
}

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
