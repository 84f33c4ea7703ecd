package status

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/bootops/bootops/plan"
)

// Escrow is an encrypted install's recovery key as the store keeps it:
// the agent's plan.Escrow (the ciphertext as it came, armored age to the
// profile's recipients) and what the server knew of the install it was
// made for. No plaintext ever reaches the server: only an operator
// holding one of the recipients' identities reads it (bootops
// recovery-key).
type Escrow struct {
	Site string `json:"site"`
	Node string `json:"node"`
	// Generation, Install (its digest) and InstallID name the install the
	// session that posted it ran (Install "" when the session had none).
	Generation int      `json:"generation"`
	Install    string   `json:"install,omitempty"`
	InstallID  string   `json:"installId,omitempty"`
	Partition  int      `json:"partition"`
	LUKSUUID   string   `json:"luksUUID"`
	Recipients []string `json:"recipients"`
	// Ciphertext is the armored age file, byte for byte as the agent sent
	// it. Timelines (Events, Machine.Last) never carry it: only the
	// machine's Escrows do, which only the recovery-keys route serves.
	Ciphertext string `json:"ciphertext,omitempty"`
	// Time is when the server stored it.
	Time time.Time `json:"time"`
}

// KeptEscrows is how many escrows a node keeps, newest first: a reinstall
// that failed before it wrote the disk leaves the previous install there,
// and its recovery key must still be had.
const KeptEscrows = 2

// withoutCiphertext is e as a timeline shows it (nil for nil).
func (e *Escrow) withoutCiphertext() *Escrow {
	if e == nil {
		return nil
	}
	c := *e
	c.Ciphertext = ""
	return &c
}

// escrowOverhead is what an Escrow takes in memory before what its
// strings point to.
const escrowOverhead = int(unsafe.Sizeof(Escrow{}))

// escrowSize is what e holds in memory (0 for none).
func escrowSize(e *Escrow) int {
	if e == nil {
		return 0
	}
	n := escrowOverhead + len(e.Site) + len(e.Node) + len(e.Install) + len(e.InstallID) + len(e.LUKSUUID) + len(e.Ciphertext)
	for _, r := range e.Recipients {
		n += 16 + len(r)
	}
	return n
}

// escrowsSize is what a machine's escrows hold in memory.
func escrowsSize(es []Escrow) int {
	n := 0
	for i := range es {
		n += escrowSize(&es[i])
	}
	return n
}

// keepEscrow is kept with e first: the same LUKS container's earlier
// escrow goes, and at most KeptEscrows stay. It makes a new slice: kept
// may be a committed record's, which readers hold.
func keepEscrow(kept []Escrow, e Escrow) []Escrow {
	out := make([]Escrow, 0, KeptEscrows)
	out = append(out, e)
	for _, k := range kept {
		if len(out) == KeptEscrows {
			break
		}
		if k.LUKSUUID != e.LUKSUUID || k.Partition != e.Partition {
			out = append(out, k)
		}
	}
	return out
}

// applyEncryption takes e into the machine's encryption: an escrow it
// carries joins the kept ones (named by the event's site and node, not by
// what it says of itself); an install that starts, fails or finishes
// drops the OS's last word on its seal, which only a report that proves
// the recorded install gives again. Run after applyInstall, before the
// state moves (as Proves needs).
func (m *Machine) applyEncryption(e Event) {
	if e.Escrow != nil {
		esc := *e.Escrow
		esc.Site, esc.Node = e.Site, e.Node
		kept := keepEscrow(m.Escrows(), esc)
		m.escrows = &kept
	}
	if e.Installing || e.State == StateFailed || e.State == StateProvisioned {
		m.Seal = nil
	}
	if e.State == StateRunning && e.Encryption != nil && m.Proves(e) == "" {
		r := *e.Encryption
		m.Seal = &r
	}
	m.Encryption = EncryptionSummary(m.Seal, m.Escrowed(), m.State == StateRunning || e.State == StateRunning && m.Proves(e) == "")
}

// Escrowed says whether the machine keeps an escrow of the install its
// record holds.
func (m *Machine) Escrowed() bool {
	return m.InstallID != "" && slices.ContainsFunc(m.Escrows(), func(e Escrow) bool { return e.InstallID == m.InstallID })
}

// EncryptionSummary says on a line where a node's encrypted root stands:
// the installed OS's last word on its seal (nil: none yet), whether the
// recovery key of that install is escrowed, and whether its OS has
// booted. "" for a node that is not known to be encrypted.
func EncryptionSummary(sealed *plan.EncryptionReport, escrowed, booted bool) string {
	if sealed == nil && !escrowed {
		return ""
	}
	escrow := "recovery escrowed"
	if !escrowed {
		escrow = "no recovery key escrowed"
	}
	var seal string
	switch {
	case sealed == nil && booted:
		seal = "its OS has not said whether it is sealed"
	case sealed == nil:
		seal = "not sealed yet (first boot pending)"
	case sealed.Error != "":
		// The error last: it may hold commas of its own.
		return "encrypted, " + escrow + ", seal failed: " + sealed.Error
	case sealed.Sealed && len(sealed.PCRs) > 0:
		seal = "sealed to PCRs " + pcrList(sealed.PCRs)
	case sealed.Sealed:
		seal = "sealed to the TPM"
	default:
		seal = "not sealed to PCRs yet"
	}
	return "encrypted, " + seal + ", " + escrow
}

func pcrList(pcrs []int) string {
	s := make([]string, len(pcrs))
	for i, p := range pcrs {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// EscrowMessage is the timeline's line for an escrow: what was escrowed,
// never the ciphertext.
func EscrowMessage(e plan.Escrow) string {
	to := fmt.Sprintf("%d recipients", len(e.Recipients))
	if len(e.Recipients) == 1 {
		to = "1 recipient"
	}
	return fmt.Sprintf("recovery key escrowed (partition %d, LUKS %s, to %s)", e.Partition, e.LUKSUUID, to)
}

// sealedSize is what an EncryptionReport holds in memory (0 for none).
func sealedSize(r *plan.EncryptionReport) int {
	if r == nil {
		return 0
	}
	return int(unsafe.Sizeof(plan.EncryptionReport{})) + len(r.Device) + len(r.Error) + 8*len(r.PCRs)
}

// printableEscrow is e as the store keeps it: its names Printable and
// bounded (the ciphertext is kept as it came: armored age is ASCII lines,
// which Printable would escape).
func printableEscrow(e *Escrow) *Escrow {
	if e == nil {
		return nil
	}
	c := *e
	for _, f := range []*string{&c.Site, &c.Node, &c.Install, &c.InstallID, &c.LUKSUUID} {
		*f = cutString(Printable(*f), MaxField)
	}
	c.Recipients = make([]string, len(e.Recipients))
	for i, r := range e.Recipients {
		c.Recipients[i] = cutString(Printable(r), MaxField)
	}
	return &c
}

// maxPCRs bounds the PCRs a seal is kept with (a TPM has 24).
const maxPCRs = 24

// printableSealed is r as the store keeps it.
func printableSealed(r *plan.EncryptionReport) *plan.EncryptionReport {
	if r == nil {
		return nil
	}
	c := *r
	c.Device, c.Error = cutString(Printable(c.Device), MaxField), cutString(Printable(c.Error), MaxField)
	c.PCRs = slices.Clone(r.PCRs[:min(len(r.PCRs), maxPCRs)])
	return &c
}
