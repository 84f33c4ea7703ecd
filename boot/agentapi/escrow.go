package agentapi

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"filippo.io/age/armor"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// The escrow event: an image-to-disk action that encrypted a partition
// posts its recovery key, encrypted on the node to the profile's age
// recipients (plan.Escrow). The server checks that it is what it says —
// armored age, within bounds, to someone — and keeps it as it came, in the
// same durable write as the acknowledgement: an acknowledged escrow is
// never lost. It never sees, logs or shows a plaintext: the timeline says
// what was escrowed, not the ciphertext.

// Bounds of an escrow's names, besides plan.MaxEscrow of its ciphertext:
// the whole event stays well within what a hub applies (64 KiB).
const (
	maxRecipients      = 64
	maxRecipient       = 1024 // an ssh-rsa recipient of 4096 bits is about 750
	maxRecipientsBytes = 16 << 10
	maxLUKSUUID        = 64
	maxPartition       = 128 // a GPT's entries
)

// ageMagic is the first line of every age file, under its armor.
const ageMagic = "age-encryption.org/v1\n"

// checkEscrows says why a batch's escrows cannot be kept ("" when they
// can): an escrow event must carry a valid escrow, and no other event
// may carry one.
func checkEscrows(evs []plan.AgentEvent) string {
	for _, a := range evs {
		switch {
		case a.Type == plan.AgentEscrow && a.Escrow == nil:
			return fmt.Sprintf("event %d is an escrow event without its escrow", a.Seq)
		case a.Type != plan.AgentEscrow && a.Escrow != nil:
			return fmt.Sprintf("event %d, of type %q, carries an escrow: only an escrow event does", a.Seq, status.Printable(a.Type))
		case a.Escrow != nil:
			if why := checkEscrow(*a.Escrow); why != "" {
				return fmt.Sprintf("the escrow of event %d: %s", a.Seq, why)
			}
		}
	}
	return ""
}

// checkEscrow says why e is not an escrow the server keeps ("" when it
// is). What it says never quotes the ciphertext.
func checkEscrow(e plan.Escrow) string {
	if e.Partition < 1 || e.Partition > maxPartition {
		return fmt.Sprintf("partition %d: want 1 to %d", e.Partition, maxPartition)
	}
	if e.LUKSUUID == "" || len(e.LUKSUUID) > maxLUKSUUID || strings.Trim(e.LUKSUUID, "0123456789abcdefABCDEF-") != "" {
		return fmt.Sprintf("LUKS UUID %.80q: want the container's UUID (cryptsetup luksUUID)", e.LUKSUUID)
	}
	if why := checkRecipients(e.Recipients); why != "" {
		return why
	}
	return checkCiphertext(e.Ciphertext)
}

// checkRecipients: one to maxRecipients, each printable text.
func checkRecipients(rs []string) string {
	if len(rs) == 0 {
		return "no recipients: the ciphertext must be encrypted to the profile's recipients"
	}
	if len(rs) > maxRecipients {
		return fmt.Sprintf("%d recipients, at most %d", len(rs), maxRecipients)
	}
	total := 0
	for i, r := range rs {
		total += len(r)
		if r == "" || len(r) > maxRecipient || strings.TrimFunc(r, func(c rune) bool { return c >= 0x20 && c < 0x7f }) != "" {
			return fmt.Sprintf("recipient %d: want an age or SSH public key of printable text, up to %d bytes", i+1, maxRecipient)
		}
	}
	if total > maxRecipientsBytes {
		return fmt.Sprintf("recipients of %d bytes, at most %d", total, maxRecipientsBytes)
	}
	return ""
}

// checkCiphertext: armored age within plan.MaxEscrow, whose armor holds
// an age file (its magic line). Anything else — a plaintext key above
// all — is refused.
func checkCiphertext(c string) string {
	if len(c) > plan.MaxEscrow {
		return fmt.Sprintf("a ciphertext of %d bytes, at most %d", len(c), plan.MaxEscrow)
	}
	if !strings.HasPrefix(c, armor.Header) {
		return "the ciphertext is not armored age (it must start with " + armor.Header + ")"
	}
	r := bufio.NewReader(armor.NewReader(strings.NewReader(strings.TrimSpace(c) + "\n")))
	magic := make([]byte, len(ageMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != ageMagic {
		return "the armor holds no age file (no " + strings.TrimSpace(ageMagic) + " header)"
	}
	// The rest, to the armor's end: a cut or padded armor is refused.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return "the armor is malformed: " + err.Error()
	}
	return ""
}

// escrowOf is what the store keeps of an escrow the session cur's agent
// posted: the install cur runs, and when it came.
func (s *Server) escrowOf(cur status.Session, e plan.Escrow) *status.Escrow {
	out := &status.Escrow{Generation: cur.Generation, InstallID: cur.ID, Partition: e.Partition, LUKSUUID: e.LUKSUUID,
		Recipients: e.Recipients, Ciphertext: e.Ciphertext, Time: s.now().UTC()}
	if cur.Install != nil {
		out.Install = cur.Install.Digest
	}
	return out
}

// cleanEncryption is the installed OS's word on its encrypted root as
// the store takes it: its device a word, its PCRs those a TPM has (0 to
// 23), each once; the store makes its error printable and bounds it, as
// every string it keeps.
func cleanEncryption(r *plan.EncryptionReport) *plan.EncryptionReport {
	if r == nil {
		return nil
	}
	out := &plan.EncryptionReport{Device: boot.Clean(r.Device, 128), Sealed: r.Sealed, Error: strings.TrimSpace(r.Error)}
	seen := map[int]bool{}
	for _, p := range r.PCRs {
		if p >= 0 && p < 24 && !seen[p] {
			seen[p] = true
			out.PCRs = append(out.PCRs, p)
		}
	}
	if out.Error != "" {
		out.Sealed = false
	}
	return out
}
