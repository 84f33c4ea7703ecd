package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/tpm"
)

// openTPM opens the machine's TPM, when the root sysfs belongs to has one
// (/dev/tpmrm0), and makes its attestation key: the identity its check-in
// carries. Nil when it has none; a TPM that fails is said on the console,
// and the check-in goes on without it (the server decides whether the
// node may). The tests replace it with a simulated TPM.
var openTPM = func(sysfs string, console io.Writer) (*tpm.Machine, *tpm.Identity) {
	if _, err := os.Stat(filepath.Join(filepath.Dir(sysfs), "dev/tpmrm0")); err != nil {
		return nil, nil
	}
	m, err := tpm.OpenDevice()
	if err != nil {
		fmt.Fprintf(console, "bootops-agent: %v\n", err)
		return nil, nil
	}
	id, err := m.Identity()
	if err != nil {
		m.Close()
		fmt.Fprintf(console, "bootops-agent: %v\n", err)
		return nil, nil
	}
	return m, &id
}

// checkInProved checks in; when the server answers with a TPM challenge,
// the machine's TPM activates its credential (and quotes the boot PCRs
// with the firmware's event log, when asked) and the agent checks in again
// with the proof.
func checkInProved(ctx context.Context, up *uplink, c plan.CheckIn, m *tpm.Machine, sysfs string, console io.Writer) (plan.CheckInReply, error) {
	reply, err := up.checkIn(ctx, c)
	if err != nil || reply.Challenge == nil {
		return reply, err
	}
	if m == nil {
		return reply, fmt.Errorf("the server sent a TPM challenge, and this machine has no TPM")
	}
	var log []byte
	var pcrs []int
	if reply.Challenge.Quote {
		if log, err = os.ReadFile(filepath.Join(sysfs, "kernel/security/tpm0/binary_bios_measurements")); err != nil {
			return reply, fmt.Errorf("tpm: the firmware's event log: %w", err)
		}
		pcrs = tpm.DefaultPCRs()
	}
	proof, err := m.Prove(reply.Challenge.Challenge, log, pcrs)
	if err != nil {
		return reply, err
	}
	what := "credential activated"
	if proof.Quote != nil {
		what += fmt.Sprintf(", PCRs quoted with an event log of %d bytes", len(log))
	}
	fmt.Fprintf(console, "bootops-agent: tpm: %s\n", what)
	c.Proof = &plan.TPMProof{Challenge: reply.Challenge.ID, Proof: proof}
	return up.checkIn(ctx, c)
}
