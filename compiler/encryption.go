package compiler

import (
	"fmt"
	"slices"
	"strings"

	"filippo.io/age"

	"github.com/bootops/bootops/plan"
)

// Full-disk encryption (issue 40): a profile's encryption section,
// checked with its positions, and what every image-to-disk action of its
// workflow carries into the Plan.

// defaultPCRs is what the key is sealed to when a profile's encryption
// has no tpm section (the schema fills the same into a tpm without pcrs).
var defaultPCRs = []int{7}

// encryption is a profile's encryption as the Plan carries it, nil for a
// profile without one. The PCRs are sorted, the recipients sorted and
// unique: the same section written in another order is the same install.
func encryption(o *object) *plan.Encryption {
	e := o.v.get("encryption")
	if e == nil {
		return nil
	}
	enc := &plan.Encryption{
		Partition:  encryptedPartition(o),
		PCRs:       slices.Clone(defaultPCRs),
		Recipients: e.lookup("recovery", "age").strs(),
		Unlock:     o.str("image", "unlock"),
	}
	if pcrs := e.lookup("tpm", "pcrs"); pcrs != nil {
		enc.PCRs = nil
		for _, x := range pcrs.list {
			enc.PCRs = append(enc.PCRs, x.integer())
		}
	}
	slices.Sort(enc.PCRs)
	enc.PCRs = slices.Compact(enc.PCRs)
	slices.Sort(enc.Recipients)
	enc.Recipients = slices.Compact(enc.Recipients)
	return enc
}

// encryptedPartition is the partition a profile's encryption puts in
// LUKS2: its own partition field, else its workflow's first cloud-init
// action's (whose seed must land inside the encrypted root); 0 for
// neither.
func encryptedPartition(o *object) int {
	if p := o.v.lookup("encryption", "partition"); p != nil {
		return p.integer()
	}
	for _, a := range o.v.get("workflow").list {
		if a.get("action").str == "cloud-init" {
			return cloudInitPartition(a)
		}
	}
	return 0
}

// cloudInitPartition is the partition a cloud-init action writes to (1
// unless it says).
func cloudInitPartition(a *value) int {
	if p := a.get("partition"); p != nil {
		return p.integer()
	}
	return 1
}

// checkEncryption checks a profile's encryption: only for a mutable OS,
// only with an image that says how its initramfs unlocks the root, on the
// partition its cloud-init seed is written to, sealed to PCRs that hold
// still from boot to boot, its recovery key to readable age recipients.
func (r *repo) checkEncryption(p *object) {
	e := p.v.get("encryption")
	if e == nil {
		return
	}
	if p.str("os", "type") == "immutable" {
		r.errorf(p.pos("encryption"), "encryption", "the profile's OS is immutable (os.type at %s): an immutable OS encrypts itself, with its own configuration; bootops encrypts a mutable OS's root", p.pos("os", "type"))
	}
	if p.v.lookup("image", "unlock") == nil {
		r.errorf(p.pos("encryption"), "encryption", "the image does not say how it unlocks an encrypted root: set image.unlock: clevis, for an image that carries cryptsetup-initramfs, clevis-initramfs and clevis-tpm2 and keeps its kernel and boot loader configuration outside the encrypted partition (on the ESP)")
	}
	r.checkEncryptedPartition(p, e)
	r.checkPCRs(p, e.lookup("tpm", "pcrs"))
	r.checkRecipients(p, e.lookup("recovery", "age"))
}

// checkEncryptedPartition: the encrypted partition is known, and every
// cloud-init action writes its seed inside it.
func (r *repo) checkEncryptedPartition(p *object, e *value) {
	part := e.get("partition")
	want := encryptedPartition(p)
	if want == 0 {
		r.errorf(p.pos("encryption"), "encryption.partition", "missing: the workflow has no cloud-init action to take it from; give the image's root partition (its last: the agent grows it to the disk's end)")
		return
	}
	for i, a := range p.v.get("workflow").list {
		if a.get("action").str != "cloud-init" || cloudInitPartition(a) == want {
			continue
		}
		at := p.at(a)
		if ap := a.get("partition"); ap != nil {
			at = p.at(ap)
		}
		if part != nil {
			r.errorf(p.at(part), "encryption.partition", "%d, but workflow[%d] (cloud-init, at %s) writes its seed to partition %d: the seed must land inside the encrypted root; give the cloud-init action partition: %d", want, i, at, cloudInitPartition(a), want)
			continue
		}
		r.errorf(at, indexPath("workflow", i)+".partition", "%d, but the encrypted root is partition %d (the first cloud-init action's): every cloud-init seed must land inside it", cloudInitPartition(a), want)
	}
}

// checkPCRs: at least one PCR, none twice, none that moves under a
// running OS or that anyone may reset.
func (r *repo) checkPCRs(p *object, pcrs *value) {
	if pcrs == nil {
		return // PCR 7, the default
	}
	if len(pcrs.list) == 0 {
		r.errorf(p.at(pcrs), "encryption.tpm.pcrs", "empty: a key sealed to no PCR unseals under any boot (any OS, any boot loader); give at least one (7: Secure Boot's state, the default)")
		return
	}
	seen := map[int]int{}
	for i, x := range pcrs.list {
		path := indexPath("encryption.tpm.pcrs", i)
		n := x.integer()
		if why := pcrRefusal(n); why != "" {
			r.errorf(p.at(x), path, "%s", why)
		}
		if j, dup := seen[n]; dup {
			r.errorf(p.at(x), path, "PCR %d is also encryption.tpm.pcrs[%d]", n, j)
			continue
		}
		seen[n] = i
	}
}

// pcrRefusal says why a key cannot be sealed to PCR n ("" when it can).
func pcrRefusal(n int) string {
	switch {
	case n == 10:
		return "PCR 10 is IMA's: it changes while the OS runs, so a key sealed to it would not unseal at the next boot"
	case n == 16:
		return "PCR 16 is the debug PCR: anyone may extend or reset it"
	case n >= 17 && n <= 22:
		return fmt.Sprintf("PCR %d belongs to the dynamic root of trust: it is reset at a late launch (TXT, SKINIT), not by a boot", n)
	case n == 23:
		return "PCR 23 is the application PCR: any process may reset it"
	}
	return ""
}

// checkRecipients: at least one recipient, each an age X25519 recipient,
// none twice.
func (r *repo) checkRecipients(p *object, list *value) {
	if list == nil {
		return // the schema said it is missing
	}
	if len(list.list) == 0 {
		r.errorf(p.at(list), "encryption.recovery.age", "empty: give at least one operator's age recipient (age1…, as age-keygen -y prints it): without one the recovery key would be lost")
		return
	}
	seen := map[string]int{}
	for i, x := range list.list {
		path := indexPath("encryption.recovery.age", i)
		if why := recipientProblem(x.str); why != "" {
			r.errorf(p.at(x), path, "%s", why)
			continue
		}
		if j, dup := seen[x.str]; dup {
			r.errorf(p.at(x), path, "also encryption.recovery.age[%d]", j)
			continue
		}
		seen[x.str] = i
	}
}

// recipientProblem says what is wrong with an age recipient ("" when
// nothing is).
func recipientProblem(s string) string {
	const want = "an age X25519 recipient (age1…, as age-keygen -y prints it)"
	switch t := strings.TrimSpace(s); {
	case strings.HasPrefix(strings.ToUpper(t), "AGE-SECRET-KEY-"):
		return "an age identity (a secret key), not its recipient: give age-keygen -y's output, and treat the key as leaked (it is in Git)"
	case strings.HasPrefix(t, "ssh-"), strings.HasPrefix(t, "ecdsa-"):
		return "an SSH key, not " + want + ": the recovery key is encrypted to X25519 recipients only"
	}
	if _, err := age.ParseX25519Recipient(s); err == nil {
		return ""
	}
	why := ""
	if strings.HasPrefix(s, "age1") {
		why = ": it does not decode (a typo, or cut short?)"
	}
	return fmt.Sprintf("%s is not %s%s", describe(&value{kind: kString, str: s}), want, why)
}

// cloneEncryption is a copy of e for one action: the Plan's actions share
// no slice with its profiles.
func cloneEncryption(e *plan.Encryption) *plan.Encryption {
	if e == nil {
		return nil
	}
	c := *e
	c.PCRs = slices.Clone(e.PCRs)
	c.Recipients = slices.Clone(e.Recipients)
	return &c
}
