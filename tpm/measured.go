package tpm

import (
	"crypto"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-attestation/attest"
)

// requiredPCRs must be in every quote: they hold the firmware, its
// configuration, the boot applications (4) and the Secure Boot policy (7).
var requiredPCRs = []int{0, 1, 2, 3, 4, 5, 6, 7}

// The event types the checks read (TCG PC Client Platform Firmware Profile).
const (
	evSeparator          = attest.EventType(0x00000004)
	evEFIBootServicesApp = attest.EventType(0x80000003)
)

// verifyBoot verifies the quote (the AK's signature, the nonce, the digest
// of the PCR values sent), replays the event log against those PCRs and
// applies the policy to the replayed events, filling r.
func verifyBoot(exp Expected, q Quote, policy Policy, r *Result) error {
	ak, err := attest.ParseAKPublic(exp.AK)
	if err != nil {
		return fmt.Errorf("%w: attestation key: %v", ErrMalformed, err)
	}
	pcrs := make([]attest.PCR, 0, len(q.PCRs))
	for _, p := range q.PCRs {
		if len(p.SHA256) != crypto.SHA256.Size() {
			return fmt.Errorf("%w: PCR %d: %d bytes, want a SHA-256", ErrMalformed, p.Index, len(p.SHA256))
		}
		pcrs = append(pcrs, attest.PCR{Index: p.Index, Digest: p.SHA256, DigestAlg: crypto.SHA256})
	}
	// Verify checks the signature, that the quote signs exp.Nonce, and that
	// the PCRs sent are exactly those quoted, with the quoted digest.
	if err := ak.Verify(attest.Quote{Quote: q.Quote, Signature: q.Signature}, pcrs, exp.Nonce); err != nil {
		return fmt.Errorf("%w: quote: %v", ErrMeasuredBoot, err)
	}
	for _, i := range requiredPCRs {
		if !slices.ContainsFunc(pcrs, func(p attest.PCR) bool { return p.Index == i && p.QuoteVerified() }) {
			return fmt.Errorf("%w: quote: PCR %d not quoted (want %v)", ErrMeasuredBoot, i, requiredPCRs)
		}
	}
	log, err := attest.ParseEventLog(q.EventLog)
	if err != nil {
		return fmt.Errorf("%w: event log: %v", ErrMalformed, err)
	}
	events, err := log.Verify(pcrs)
	if err != nil {
		var re attest.ReplayError
		if errors.As(err, &re) {
			return fmt.Errorf("%w: the event log does not replay to the quoted PCRs %v", ErrMeasuredBoot, re.InvalidPCRs)
		}
		return fmt.Errorf("%w: event log: %v", ErrMeasuredBoot, err)
	}
	// A PCR without events replays to anything (go-attestation skips it),
	// so the PCRs the checks read must have their events in the log.
	for _, i := range []int{4, 7} {
		if !slices.ContainsFunc(events, func(e attest.Event) bool { return e.Index == i && e.Type == evSeparator }) {
			return fmt.Errorf("%w: the event log has no separator in PCR %d", ErrMeasuredBoot, i)
		}
	}
	sb, err := attest.ParseSecurebootState(events)
	if err != nil {
		return fmt.Errorf("%w: Secure Boot state (PCR 7): %v", ErrMeasuredBoot, err)
	}
	r.Attested = true
	r.SecureBoot = sb.Enabled
	for _, e := range events {
		if e.Index == 4 && e.Type == evEFIBootServicesApp {
			r.Applications = append(r.Applications, digestString(e.Digest))
		}
	}
	// Both checks, so that a refusal says everything that was wrong.
	var why []string
	if err := checkApplications(r, policy); err != nil {
		why = append(why, strings.TrimPrefix(err.Error(), ErrMeasuredBoot.Error()+": "))
	}
	if policy.SecureBoot && !sb.Enabled {
		why = append(why, "Secure Boot was off (PCR 7)")
	}
	if len(why) > 0 {
		return fmt.Errorf("%w: %s", ErrMeasuredBoot, strings.Join(why, "; "))
	}
	return nil
}

// checkApplications applies the policy's digests to the EFI applications
// measured into PCR 4: the last one started is the Micro-OS (the firmware
// or iPXE loads it last, after any loader), the earlier ones are loaders.
func checkApplications(r *Result, policy Policy) error {
	if len(policy.MicroOSDigests) == 0 {
		return nil
	}
	want := strings.Join(policy.MicroOSDigests, " or ")
	if len(r.Applications) == 0 {
		return fmt.Errorf("%w: booted a Micro-OS that is not in Git: PCR 4 has no EFI application (want %s)", ErrMeasuredBoot, want)
	}
	last := r.Applications[len(r.Applications)-1]
	if !containsDigest(policy.MicroOSDigests, last) {
		return fmt.Errorf("%w: booted a Micro-OS that is not in Git: PCR 4 has %s (want %s)", ErrMeasuredBoot, last, want)
	}
	if len(policy.LoaderDigests) > 0 {
		for _, d := range r.Applications[:len(r.Applications)-1] {
			if !containsDigest(policy.LoaderDigests, d) && !containsDigest(policy.MicroOSDigests, d) {
				return fmt.Errorf("%w: an EFI application that is not in Git ran before the Micro-OS: PCR 4 has %s (want one of %s)", ErrMeasuredBoot, d, strings.Join(policy.LoaderDigests, ", "))
			}
		}
	}
	r.MicroOS = last
	return nil
}

func containsDigest(set []string, d string) bool {
	return slices.ContainsFunc(set, func(s string) bool { return strings.EqualFold(s, d) })
}

func digestString(d []byte) string { return "sha256:" + hex.EncodeToString(d) }

// String is the identity proof in one line, for status and logs:
// "tpm: ek sha256:…, attested, secure boot, micro-os digest ok".
func (r Result) String() string {
	s := "tpm: ek " + r.EK
	if !r.Attested {
		return s + ", activated (measured boot not checked)"
	}
	s += ", attested"
	if r.SecureBoot {
		s += ", secure boot"
	} else {
		s += ", secure boot off"
	}
	if r.MicroOS != "" {
		s += ", micro-os digest ok"
	}
	return s
}
