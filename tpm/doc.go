// Package tpm proves which machine is checking in, with its TPM 2.0, and
// what it booted.
//
// The protocol, two round trips over the check-in's HTTPS:
//
//  1. The machine sends an Identity: its endorsement key (EK, created from a
//     seed burnt into the TPM; its hash is what Git registers, see EKHash),
//     the EK certificate if the manufacturer stored one, and a new
//     attestation key (AK) with the TPM's signed statement that the AK is a
//     restricted signing key that never leaves the TPM.
//  2. The server checks that statement and answers a Challenge (NewChallenge):
//     a random secret encrypted to the EK and bound to the AK's name
//     (TPM2_MakeCredential), and a nonce.
//  3. The machine returns a Proof (Machine.Prove): the TPM decrypts the
//     secret only if it holds the EK's private key *and* has the named AK
//     loaded (TPM2_ActivateCredential), so a correct secret proves this AK
//     lives in the TPM that owns the registered EK. With measured boot, the
//     AK also signs a quote of PCRs 0–7 and 11 over the nonce, sent with
//     the firmware's event log.
//  4. The server verifies (Verify): the secret, then the quote's signature
//     and nonce (fresh, so not replayed), replays the event log to the
//     quoted PCRs and reads from it whether Secure Boot was on and which EFI
//     applications ran (PCR 4), against the Micro-OS digests in Git.
//
// What it does not prove: that the TPM is in the machine it was registered
// for, if the owner moved it; anything, if a TPM's owner clears it (a new
// EK seed: the machine becomes unknown and must be enrolled again); or
// that the firmware measured honestly (the core root of trust is the
// firmware itself). A machine without a TPM cannot use it and stays
// identified by serial, UUID and MAC.
package tpm
