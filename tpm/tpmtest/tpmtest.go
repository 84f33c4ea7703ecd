// Package tpmtest gives tests a machine with a simulated TPM (go-tpm-tools'
// reference simulator, which needs cgo) and the smallest PE image
// tpm.PEDigest reads. Only tests import it: the binaries stay cgo-free.
package tpmtest

import (
	"encoding/binary"
	"io"
	"testing"

	"github.com/bootops/bootops/tpm"
	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/legacy/tpm2"
)

// keepOpen lets a tpm.Machine close without closing the simulator under it.
type keepOpen struct{ io.ReadWriter }

func (keepOpen) Close() error { return nil }

// Machine is a machine with a simulated TPM manufactured from seed (the
// same seed, the same EK), its identity made (its AK created), and the
// EK's hash; both are closed when the test ends. The simulator is one per
// process: a test that needs two machines closes the first (close) before
// it makes the second.
func Machine(t testing.TB, seed int64) (m *tpm.Machine, id tpm.Identity, ek string, close func()) {
	t.Helper()
	sim, err := simulator.GetWithFixedSeedInsecure(seed)
	if err != nil {
		t.Fatalf("TPM simulator (needs cgo and a C compiler): %v", err)
	}
	current = sim
	if m, err = tpm.Open(keepOpen{sim}); err != nil {
		sim.Close()
		t.Fatal(err)
	}
	closed := false
	close = func() {
		if !closed {
			closed = true
			m.Close()
			sim.Close()
		}
	}
	t.Cleanup(close)
	if id, err = m.Identity(); err != nil {
		t.Fatal(err)
	}
	if _, ek, err = tpm.ParseEK(id.EK); err != nil {
		t.Fatal(err)
	}
	return m, id, ek, close
}

// current is the simulator of the newest Machine.
var current *simulator.Simulator

// QuoteReport does in the newest Machine's TPM what the installed OS's
// report script does with tpm2-tools: it loads the report key under the
// storage root key and quotes PCR 0 with nonce as qualifying data. It
// returns the TPMS_ATTEST and the TPMT_SIGNATURE.
func QuoteReport(t testing.TB, key tpm.ReportKey, nonce []byte) (attest, sig []byte) {
	t.Helper()
	if current == nil || len(key.Public) < 2 || len(key.Private) < 2 {
		t.Fatal("tpmtest.QuoteReport: no Machine, or no key")
	}
	h, _, err := tpm2.Load(current, tpm.SRKHandle, "", key.Public[2:], key.Private[2:])
	if err != nil {
		t.Fatalf("load the report key: %v", err)
	}
	defer tpm2.FlushContext(current, h)
	attest, s, err := tpm2.Quote(current, h, "", "", nonce, tpm2.PCRSelection{Hash: tpm2.AlgSHA256, PCRs: []int{0}}, tpm2.AlgNull)
	if err != nil {
		t.Fatalf("quote: %v", err)
	}
	if sig, err = s.Encode(); err != nil {
		t.Fatal(err)
	}
	return attest, sig
}

// PE is the smallest PE32+ image tpm.PEDigest reads: headers, no section,
// and payload after them (two payloads, two digests).
func PE(payload string) []byte {
	b := make([]byte, 0x200, 0x200+len(payload))
	copy(b, "MZ")
	binary.LittleEndian.PutUint32(b[0x3c:], 0x40)
	copy(b[0x40:], "PE\x00\x00")
	coff := b[0x44:]
	binary.LittleEndian.PutUint16(coff[0:], 0x8664) // x86-64
	binary.LittleEndian.PutUint16(coff[16:], 240)   // SizeOfOptionalHeader
	binary.LittleEndian.PutUint16(coff[18:], 0x22)  // executable, large address aware
	opt := b[0x58:]
	binary.LittleEndian.PutUint16(opt[0:], 0x20b)   // PE32+
	binary.LittleEndian.PutUint32(opt[32:], 0x1000) // SectionAlignment
	binary.LittleEndian.PutUint32(opt[36:], 0x200)  // FileAlignment
	binary.LittleEndian.PutUint32(opt[56:], 0x1000) // SizeOfImage
	binary.LittleEndian.PutUint32(opt[60:], 0x200)  // SizeOfHeaders
	binary.LittleEndian.PutUint16(opt[68:], 10)     // Subsystem: EFI application
	binary.LittleEndian.PutUint32(opt[108:], 16)    // NumberOfRvaAndSizes
	return append(b, payload...)
}
