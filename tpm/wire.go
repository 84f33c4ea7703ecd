package tpm

// The wire types: what the machine and the server send each other during an
// attested check-in, and what the server keeps between the two requests.
// All []byte fields are base64 in JSON (encoding/json's default); the TPM
// structures inside them are in the TPM 2.0 Part 2 wire format, untouched,
// so that the server verifies exactly what the TPM produced.

// Identity is what the machine sends at check-in: who its TPM is (the
// endorsement key) and a fresh attestation key created in that TPM.
type Identity struct {
	// EK is the endorsement key's public key, PKIX (SubjectPublicKeyInfo)
	// DER. EKHash of it is the identifier registered in Git.
	EK []byte `json:"ek"`
	// EKCert is the EK certificate from the TPM's NV storage (DER), when the
	// manufacturer provisioned one; nil otherwise.
	EKCert []byte `json:"ekCert,omitempty"`
	// AK describes the attestation key, as the TPM certified its creation.
	AK AKParams `json:"ak"`
}

// AKParams are the attestation key's public area and the TPM's own
// statement that it created the key (TPM2_CertifyCreation), from which the
// server checks that the key is restricted, fixed to the TPM and
// TPM-generated before it challenges it.
type AKParams struct {
	Public            []byte `json:"public"`            // TPMT_PUBLIC
	CreateData        []byte `json:"createData"`        // TPMS_CREATION_DATA
	CreateAttestation []byte `json:"createAttestation"` // TPMS_ATTEST
	CreateSignature   []byte `json:"createSignature"`   // TPMT_SIGNATURE
}

// Challenge is the server's answer to an Identity: a secret sealed by
// TPM2_MakeCredential to the EK and the AK's name, which only
// TPM2_ActivateCredential in the TPM holding both can open, and a nonce for
// the quote.
type Challenge struct {
	Credential      []byte `json:"credential"`      // TPM2B_ID_OBJECT: the secret, wrapped with a key from the seed
	EncryptedSecret []byte `json:"encryptedSecret"` // TPM2B_ENCRYPTED_SECRET: the seed, encrypted to the EK
	Nonce           []byte `json:"nonce"`           // the quote's qualifying data
}

// Proof is the machine's reply to a Challenge.
type Proof struct {
	// Secret is the activated credential: the server's secret, decrypted.
	Secret []byte `json:"secret"`
	// Quote, when the machine was asked for measured boot, signs the PCRs
	// and the challenge's nonce with the AK.
	Quote *Quote `json:"quote,omitempty"`
}

// Quote is a TPM2_Quote over SHA-256 PCRs, with the values it covers and the
// firmware's event log that should replay to them.
type Quote struct {
	Quote     []byte `json:"quote"`     // TPMS_ATTEST (TPM_ST_ATTEST_QUOTE)
	Signature []byte `json:"signature"` // TPMT_SIGNATURE by the AK
	PCRs      []PCR  `json:"pcrs"`      // SHA-256 bank
	// EventLog is the TCG crypto-agile firmware event log, as Linux exposes
	// it in /sys/kernel/security/tpm0/binary_bios_measurements.
	EventLog []byte `json:"eventLog"`
}

// PCR is one SHA-256 PCR value.
type PCR struct {
	Index  int    `json:"index"`
	SHA256 []byte `json:"sha256"`
}

// Expected is what the server keeps between NewChallenge and Verify. It
// holds the challenge's secret: keep it on the server, never send it, and
// use it once.
type Expected struct {
	EK     string `json:"ek"`     // EKHash of the identity's EK
	AK     []byte `json:"ak"`     // the AK's TPMT_PUBLIC, to verify the quote
	Secret []byte `json:"secret"` // what the activation must return
	Nonce  []byte `json:"nonce"`  // what the quote must sign
}

// Policy is what the server requires of a check-in beyond the activation.
type Policy struct {
	// MeasuredBoot requires a quote whose event log replays to it. Without
	// it, a quote in the Proof is ignored.
	MeasuredBoot bool `json:"measuredBoot,omitempty"`
	// SecureBoot requires the event log to show UEFI Secure Boot enabled
	// (PCR 7). Only with MeasuredBoot.
	SecureBoot bool `json:"secureBoot,omitempty"`
	// MicroOSDigests are the Authenticode SHA-256 digests ("sha256:<hex>",
	// see PEDigest) of the Micro-OS images in Git: the last EFI application
	// measured into PCR 4 must be one of them. Empty: not checked.
	MicroOSDigests []string `json:"microOSDigests,omitempty"`
	// LoaderDigests, when not empty, are the digests allowed for the EFI
	// applications measured into PCR 4 before the Micro-OS (iPXE, shim, a
	// boot loader): any other one refuses the check-in. Without it, a
	// loader that measured the Micro-OS but never started it would pass.
	LoaderDigests []string `json:"loaderDigests,omitempty"`
}

// Result is what a successful Verify established, for the node's status.
type Result struct {
	EK         string `json:"ek"`                   // EKHash of the activated TPM
	Attested   bool   `json:"attested"`             // a quote verified and its event log replayed
	SecureBoot bool   `json:"secureBoot,omitempty"` // Secure Boot was on (only when Attested)
	// Applications are the Authenticode digests of the EFI applications
	// measured into PCR 4, in boot order (only when Attested).
	Applications []string `json:"applications,omitempty"`
	// MicroOS is the PCR 4 digest that matched Policy.MicroOSDigests.
	MicroOS string `json:"microOS,omitempty"`
}
