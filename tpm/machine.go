package tpm

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/google/go-attestation/attest"
)

// DevicePath is the Linux kernel's TPM resource manager: it flushes the
// transient objects a process leaves behind, so several users can share the
// TPM.
const DevicePath = "/dev/tpmrm0"

// EventLogPath is where Linux exposes the firmware's TCG event log (UEFI
// firmware hands it over in the TPM2 ACPI table or the EFI configuration
// table; OVMF does both).
const EventLogPath = "/sys/kernel/security/tpm0/binary_bios_measurements"

// DefaultPCRs are the PCRs a measured-boot quote covers: 0–7 (firmware,
// its configuration, option ROMs, boot loaders and Secure Boot policy) and
// 11 (where systemd-stub measures a unified kernel image's sections).
func DefaultPCRs() []int { return []int{0, 1, 2, 3, 4, 5, 6, 7, 11} }

// The storage root key the AK is created under: an ECC P-256 primary at the
// handle TCG's provisioning guidance reserves for it. ECC because creating
// an RSA key takes seconds on a real TPM.
var srk = attest.ParentKeyConfig{Algorithm: attest.ECDSA, Handle: 0x81000002}

// Machine is the machine side of an attested check-in: a TPM, its
// endorsement key and an attestation key created for this check-in.
type Machine struct {
	tpm *attest.TPM
	ek  attest.EK
	ak  *attest.AK
}

// Open uses rwc as the TPM's command channel: each Write is one command,
// each Read one response (a TPM device, or a simulator in tests). Close
// closes rwc.
func Open(rwc io.ReadWriteCloser) (*Machine, error) {
	t, err := attest.OpenTPM(&attest.OpenConfig{CommandChannel: channel{rwc}})
	if err != nil {
		rwc.Close()
		return nil, fmt.Errorf("tpm: open: %w", err)
	}
	return &Machine{tpm: t}, nil
}

// channel is a command channel whose event log comes from elsewhere (Prove
// takes it as an argument), so a simulator and a device are alike.
type channel struct{ io.ReadWriteCloser }

func (channel) MeasurementLog() ([]byte, error) {
	return nil, errors.New("tpm: the event log is passed to Prove")
}

// Close unloads the attestation key and closes the TPM.
func (m *Machine) Close() error {
	var errs []error
	if m.ak != nil {
		errs = append(errs, m.ak.Close(m.tpm))
	}
	errs = append(errs, m.tpm.Close())
	return errors.Join(errs...)
}

// Identity reads the endorsement key (and its certificate, when the
// manufacturer stored one in NV: RSA at index 0x01c00002, ECC at
// 0x01c0000a), creates an attestation key and returns both for the
// check-in. An EK with a certificate is preferred, RSA before ECC; a TPM
// without certificates gets its RSA EK from the standard template. The AK
// lives as long as the Machine: a new one per check-in, since credential
// activation binds it to the EK anew each time.
func (m *Machine) Identity() (Identity, error) {
	if m.ak != nil {
		return Identity{}, errors.New("tpm: identity: already created an attestation key on this machine")
	}
	eks, err := m.tpm.EKCertificates()
	if err != nil {
		return Identity{}, fmt.Errorf("tpm: read EK certificates: %w", err)
	}
	if len(eks) == 0 {
		if eks, err = m.tpm.EKs(); err != nil {
			return Identity{}, fmt.Errorf("tpm: read EK: %w", err)
		}
	}
	if len(eks) == 0 {
		return Identity{}, errors.New("tpm: no endorsement key")
	}
	m.ek = eks[0]
	ekDER, err := x509.MarshalPKIXPublicKey(m.ek.Public)
	if err != nil {
		return Identity{}, fmt.Errorf("tpm: EK public key: %w", err)
	}
	ak, err := m.tpm.NewAK(&attest.AKConfig{Algorithm: attest.ECDSA, Parent: &srk})
	if err != nil {
		return Identity{}, fmt.Errorf("tpm: create attestation key: %w", err)
	}
	m.ak = ak
	p := ak.AttestationParameters()
	id := Identity{
		EK: ekDER,
		AK: AKParams{
			Public:            p.Public,
			CreateData:        p.CreateData,
			CreateAttestation: p.CreateAttestation,
			CreateSignature:   p.CreateSignature,
		},
	}
	if m.ek.Certificate != nil {
		id.EKCert = m.ek.Certificate.Raw
	}
	return id, nil
}

// Prove answers a challenge: it activates the credential (which the TPM
// does only if the EK is its own and the AK is loaded in it) and, when pcrs
// is not empty, quotes those SHA-256 PCRs with the challenge's nonce and
// sends eventLog along (ReadEventLog reads it).
func (m *Machine) Prove(ch Challenge, eventLog []byte, pcrs []int) (Proof, error) {
	if m.ak == nil {
		return Proof{}, errors.New("tpm: prove: Identity was not called")
	}
	secret, err := m.ak.ActivateCredentialWithEK(m.tpm, attest.EncryptedCredential{Credential: ch.Credential, Secret: ch.EncryptedSecret}, m.ek)
	if err != nil {
		return Proof{}, fmt.Errorf("tpm: activate credential: %w", err)
	}
	p := Proof{Secret: secret}
	if len(pcrs) == 0 {
		return p, nil
	}
	// Read the PCRs before the quote: nothing extends them in between on a
	// machine at check-in, and the server finds out if something did.
	all, err := m.tpm.PCRs(attest.HashSHA256)
	if err != nil {
		return Proof{}, fmt.Errorf("tpm: read PCRs: %w", err)
	}
	q, err := m.ak.QuotePCRs(m.tpm, ch.Nonce, attest.HashSHA256, pcrs)
	if err != nil {
		return Proof{}, fmt.Errorf("tpm: quote PCRs %v: %w", pcrs, err)
	}
	p.Quote = &Quote{Quote: q.Quote, Signature: q.Signature, EventLog: eventLog}
	for _, v := range all {
		if slices.Contains(pcrs, v.Index) {
			p.Quote.PCRs = append(p.Quote.PCRs, PCR{Index: v.Index, SHA256: v.Digest})
		}
	}
	return p, nil
}

// ReadEventLog reads the firmware's event log from EventLogPath (needs
// securityfs mounted at /sys/kernel/security, and root).
func ReadEventLog() ([]byte, error) {
	b, err := os.ReadFile(EventLogPath)
	if err != nil {
		return nil, fmt.Errorf("tpm: read event log: %w", err)
	}
	return b, nil
}
