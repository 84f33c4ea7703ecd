package tpm

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"
)

// The tests run a check-in against the Microsoft reference TPM (cgo,
// go-tpm-tools' simulator). Only one simulator exists per process: each
// test opens and closes it in turn, and two "machines" are the simulator
// manufactured with two seeds, one after the other.

var (
	microOS = sha256.Sum256([]byte("the Micro-OS UKI in Git"))
	ipxe    = sha256.Sum256([]byte("ipxe.efi"))
	other   = sha256.Sum256([]byte("another Micro-OS"))
)

func digest(d [32]byte) string { return "sha256:" + hex.EncodeToString(d[:]) }

// openSim manufactures a simulated TPM from seed; cgo is required (the
// simulator is C), and without it this fails the test.
func openSim(t testing.TB, seed int64) *simulator.Simulator {
	t.Helper()
	sim, err := simulator.GetWithFixedSeedInsecure(seed)
	if err != nil {
		t.Fatalf("TPM simulator (needs cgo and a C compiler): %v", err)
	}
	t.Cleanup(func() { sim.Close() })
	return sim
}

// keepOpen lets a Machine close without closing the simulator under it.
type keepOpen struct{ io.ReadWriter }

func (keepOpen) Close() error { return nil }

func openMachine(t testing.TB, sim *simulator.Simulator) *Machine {
	t.Helper()
	m, err := Open(keepOpen{sim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// boot extends the simulator's SHA-256 PCRs with the events, as firmware
// would, and returns their log.
func boot(t testing.TB, sim io.ReadWriter, events []event) []byte {
	t.Helper()
	for _, e := range events {
		if err := tpm2.PCRExtend(sim, tpmutil.Handle(e.pcr), tpm2.AlgSHA256, e.digest[:], ""); err != nil {
			t.Fatalf("extend PCR %d: %v", e.pcr, err)
		}
	}
	return encodeLog(events)
}

// checkIn runs a whole round (Identity, NewChallenge, Prove, Verify), each
// message and the server's Expected through JSON, as they travel and are
// kept.
func checkIn(t testing.TB, m *Machine, log []byte, policy Policy) (Result, error) {
	t.Helper()
	id, err := m.Identity()
	if err != nil {
		t.Fatal(err)
	}
	ch, exp, err := NewChallenge(viaJSON(t, id), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var pcrs []int
	if policy.MeasuredBoot {
		pcrs = DefaultPCRs()
	}
	p, err := m.Prove(viaJSON(t, ch), log, pcrs)
	if err != nil {
		t.Fatal(err)
	}
	return Verify(viaJSON(t, exp), viaJSON(t, p), policy)
}

func viaJSON[T any](t testing.TB, v T) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestActivationWithTheRightEK(t *testing.T) {
	sim := openSim(t, 1)
	m := openMachine(t, sim)
	id, err := m.Identity()
	if err != nil {
		t.Fatal(err)
	}
	ch, exp, err := NewChallenge(id, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Prove(ch, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Verify(exp, p, Policy{})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	// The identifier in Git is the SHA-256 of the EK's PKIX DER.
	sum := sha256.Sum256(id.EK)
	if want := "sha256:" + hex.EncodeToString(sum[:]); r.EK != want || exp.EK != want {
		t.Errorf("Result.EK = %s, Expected.EK = %s, want %s", r.EK, exp.EK, want)
	}
	if r.Attested || p.Quote != nil {
		t.Errorf("no measured boot was asked, got Attested %v, quote %v", r.Attested, p.Quote != nil)
	}
	if got, want := r.String(), "tpm: ek "+r.EK+", activated (measured boot not checked)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// A machine that copies a registered machine's EK (it is public) but has
// another TPM cannot activate the credential sealed to it.
func TestActivationWithAWrongEKFails(t *testing.T) {
	var registered Identity
	func() {
		sim := openSim(t, 1)
		var err error
		if registered, err = openMachine(t, sim).Identity(); err != nil {
			t.Fatal(err)
		}
		sim.Close()
	}()
	sim := openSim(t, 2)
	m := openMachine(t, sim)
	own, err := m.Identity()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(own.EK, registered.EK) {
		t.Fatal("the two simulated TPMs have the same EK")
	}
	impostor := Identity{EK: registered.EK, AK: own.AK}
	ch, exp, err := NewChallenge(impostor, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// The TPM refuses: its EK cannot decrypt the seed.
	if p, err := m.Prove(ch, nil, nil); err == nil {
		t.Fatalf("a TPM activated a credential sealed to another TPM's EK (secret %x)", p.Secret)
	} else {
		t.Logf("Prove: %v", err)
	}
	// Whatever it sends instead is refused as the wrong TPM.
	guess := make([]byte, len(exp.Secret))
	if _, err := Verify(exp, Proof{Secret: guess}, Policy{}); !errors.Is(err, ErrWrongTPM) {
		t.Errorf("Verify(guessed secret) = %v, want ErrWrongTPM", err)
	}
}

// A proof for an earlier challenge does not answer a new one.
func TestReplayedProofFails(t *testing.T) {
	sim := openSim(t, 1)
	m := openMachine(t, sim)
	log := boot(t, sim, bootEvents(testCert(t), false, microOS))
	id, err := m.Identity()
	if err != nil {
		t.Fatal(err)
	}
	ch1, exp1, err := NewChallenge(id, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	old, err := m.Prove(ch1, log, DefaultPCRs())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(exp1, old, Policy{MeasuredBoot: true}); err != nil {
		t.Fatalf("the first proof: %v", err)
	}
	_, exp2, err := NewChallenge(id, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(exp2, old, Policy{MeasuredBoot: true}); !errors.Is(err, ErrWrongTPM) {
		t.Errorf("replayed proof: Verify = %v, want ErrWrongTPM", err)
	}
	// Even with the new secret, the old quote signs the old nonce.
	fresh, err := m.Prove(mustChallenge(t, id, &exp2), log, DefaultPCRs())
	if err != nil {
		t.Fatal(err)
	}
	fresh.Quote = old.Quote
	if _, err := Verify(exp2, fresh, Policy{MeasuredBoot: true}); !errors.Is(err, ErrMeasuredBoot) || !strings.Contains(err.Error(), "nonce") {
		t.Errorf("replayed quote: Verify = %v, want ErrMeasuredBoot about the nonce", err)
	}
}

// mustChallenge makes a new challenge for id and replaces *exp with it.
func mustChallenge(t testing.TB, id Identity, exp *Expected) Challenge {
	t.Helper()
	ch, e, err := NewChallenge(id, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	*exp = e
	return ch
}

func TestQuoteWithAWrongNonceFails(t *testing.T) {
	sim := openSim(t, 1)
	m := openMachine(t, sim)
	log := boot(t, sim, bootEvents(testCert(t), false, microOS))
	id, err := m.Identity()
	if err != nil {
		t.Fatal(err)
	}
	ch, exp, err := NewChallenge(id, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ch.Nonce = bytes.Repeat([]byte{7}, len(ch.Nonce))
	p, err := m.Prove(ch, log, DefaultPCRs())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(exp, p, Policy{MeasuredBoot: true}); !errors.Is(err, ErrMeasuredBoot) || !strings.Contains(err.Error(), "nonce") {
		t.Errorf("Verify = %v, want ErrMeasuredBoot about the nonce", err)
	}
}

func TestMeasuredBoot(t *testing.T) {
	for name, tc := range map[string]struct {
		secureBoot bool
		booted     [][32]byte // extended into PCR 4
		logged     [][32]byte // what the log says (nil: same)
		policy     Policy
		want       string // the error's text; "" for success
		result     string // Result.String() after "tpm: ek <hash>"
	}{
		"secure boot, the Micro-OS in Git": {
			secureBoot: true, booted: [][32]byte{ipxe, microOS},
			policy: Policy{MeasuredBoot: true, SecureBoot: true, MicroOSDigests: []string{digest(microOS)}, LoaderDigests: []string{digest(ipxe)}},
			result: ", attested, secure boot, micro-os digest ok",
		},
		"secure boot off is reported": {
			booted: [][32]byte{microOS},
			policy: Policy{MeasuredBoot: true, MicroOSDigests: []string{digest(microOS)}},
			result: ", attested, secure boot off, micro-os digest ok",
		},
		"secure boot off refused when required": {
			booted: [][32]byte{microOS},
			policy: Policy{MeasuredBoot: true, SecureBoot: true},
			want:   "tpm: measured boot refused: Secure Boot was off (PCR 7)",
		},
		"a Micro-OS not in Git": {
			secureBoot: true, booted: [][32]byte{ipxe, other},
			policy: Policy{MeasuredBoot: true, SecureBoot: true, MicroOSDigests: []string{digest(microOS)}},
			want:   "tpm: measured boot refused: booted a Micro-OS that is not in Git: PCR 4 has " + digest(other) + " (want " + digest(microOS) + ")",
		},
		"a loader not in Git": {
			secureBoot: true, booted: [][32]byte{other, microOS},
			policy: Policy{MeasuredBoot: true, MicroOSDigests: []string{digest(microOS)}, LoaderDigests: []string{digest(ipxe)}},
			want:   "tpm: measured boot refused: an EFI application that is not in Git ran before the Micro-OS: PCR 4 has " + digest(other) + " (want one of " + digest(ipxe) + ")",
		},
		"an event log that does not replay to the quote": {
			secureBoot: true, booted: [][32]byte{other}, logged: [][32]byte{microOS},
			policy: Policy{MeasuredBoot: true, MicroOSDigests: []string{digest(microOS)}},
			want:   "tpm: measured boot refused: the event log does not replay to the quoted PCRs [4]",
		},
	} {
		t.Run(name, func(t *testing.T) {
			sim := openSim(t, 1)
			m := openMachine(t, sim)
			cert := testCert(t)
			log := boot(t, sim, bootEvents(cert, tc.secureBoot, tc.booted...))
			if tc.logged != nil {
				log = encodeLog(bootEvents(cert, tc.secureBoot, tc.logged...))
			}
			r, err := checkIn(t, m, log, tc.policy)
			if tc.want != "" {
				if err == nil || err.Error() != tc.want || !errors.Is(err, ErrMeasuredBoot) {
					t.Fatalf("Verify = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got, want := r.String(), "tpm: ek "+r.EK+tc.result; got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
			var apps []string
			for _, d := range tc.booted {
				apps = append(apps, digest(d))
			}
			if strings.Join(r.Applications, " ") != strings.Join(apps, " ") {
				t.Errorf("Applications = %v, want %v", r.Applications, apps)
			}
		})
	}
}

// A quote that leaves out a PCR the checks need, or a proof without a
// quote, is refused when measured boot is required.
func TestMeasuredBootNeedsTheQuote(t *testing.T) {
	sim := openSim(t, 1)
	m := openMachine(t, sim)
	log := boot(t, sim, bootEvents(testCert(t), false, microOS))
	id, err := m.Identity()
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		pcrs []int
		want string
	}{
		"no quote":         {nil, "measured boot required but the machine sent no quote"},
		"PCRs 1–3 missing": {[]int{0, 4, 5, 6, 7, 11}, "PCR 1 not quoted"},
	} {
		var exp Expected
		p, err := m.Prove(mustChallenge(t, id, &exp), log, tc.pcrs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(exp, p, Policy{MeasuredBoot: true}); !errors.Is(err, ErrMeasuredBoot) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Verify = %v, want ErrMeasuredBoot with %q", name, err, tc.want)
		}
	}
}

func TestMalformedIdentity(t *testing.T) {
	sim := openSim(t, 1)
	id, err := openMachine(t, sim).Identity()
	if err != nil {
		t.Fatal(err)
	}
	forged := id
	forged.AK.CreateSignature = bytes.Clone(id.AK.CreateSignature)
	forged.AK.CreateSignature[len(forged.AK.CreateSignature)-1] ^= 1
	for name, id := range map[string]Identity{
		"EK not a key":           {EK: []byte("not DER"), AK: id.AK},
		"AK creation not signed": forged,
		"no AK":                  {EK: id.EK},
	} {
		if _, _, err := NewChallenge(id, rand.Reader); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: NewChallenge = %v, want ErrMalformed", name, err)
		}
	}
}

// BenchmarkCheckIn times a whole attested check-in with measured boot
// against the simulator ("round": Identity with a new ECC AK,
// NewChallenge, Prove with activation, PCR read and quote, Verify with the
// event-log replay), and the server's two steps alone.
func BenchmarkCheckIn(b *testing.B) {
	sim := openSim(b, 1)
	log := boot(b, sim, bootEvents(testCert(b), true, ipxe, microOS))
	policy := Policy{MeasuredBoot: true, SecureBoot: true, MicroOSDigests: []string{digest(microOS)}}
	b.Run("round", func(b *testing.B) {
		for b.Loop() {
			m, err := Open(keepOpen{sim})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := checkIn(b, m, log, policy); err != nil {
				b.Fatal(err)
			}
			m.Close()
		}
	})
	m := openMachine(b, sim)
	id, err := m.Identity()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("NewChallenge", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := NewChallenge(id, rand.Reader); err != nil {
				b.Fatal(err)
			}
		}
	})
	var exp Expected
	p, err := m.Prove(mustChallenge(b, id, &exp), log, DefaultPCRs())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Verify", func(b *testing.B) {
		for b.Loop() {
			if _, err := Verify(exp, p, policy); err != nil {
				b.Fatal(err)
			}
		}
	})
}
