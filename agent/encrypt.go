package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/tpm"
)

// An encrypted install (plan.Encryption, docs/security.md): the image's
// last partition is written through dm-crypt into a new LUKS2 container,
// never in the clear. Its two keys never leave the node in the clear:
//
//   - keyslot 0, the recovery key: made here, encrypted at once with age
//     to the profile's recipients, and only that ciphertext is reported
//     (the escrow event, delivered before the machine reboots);
//   - keyslot 1, the first-boot key: sealed to the TPM with no PCR
//     policy (a Clevis tpm2 token), so the installed OS's initramfs
//     unlocks its first boot with this TPM only. That boot seals a new
//     key to the PCRs of its own boot chain and removes this one (the
//     report script, boot/agentapi): PCRs read in the Micro-OS would be
//     the Micro-OS's, and the installed OS would never unlock with them.

const (
	// luksHeader is what LUKS2 puts before the data by default.
	luksHeader = 16 << 20
	// headBytes is how much of the image is held back until its GPT is
	// read (header and entries lie in its first 34 sectors).
	headBytes = 1 << 20
	// firstBootSlot is the first-boot key's keyslot.
	firstBootSlot = 1
	// luksSector is the container's encryption sector.
	luksSector = 512
)

// cryptState is what an encrypted install leaves open for the actions
// after image-to-disk: the partitions mapped, by index.
type cryptState struct {
	mapped map[int]string // partition → /dev/mapper/…
}

// mappedPartition is the device an action writing into partition n of the
// new system mounts: its dm-crypt mapping when the install encrypted it.
func (r *Runner) mappedPartition(disk string, n int) string {
	if n == 0 {
		n = 1
	}
	if r.crypt != nil {
		if dev, ok := r.crypt.mapped[n]; ok {
			return dev
		}
	}
	return plan.PartitionDevice(disk, n)
}

// cryptKeys are an encrypted install's keys and what leaves the node of
// them.
type cryptKeys struct {
	volume              []byte // the data's AES-XTS key (512 bits)
	recovery, firstBoot []byte
	token               []byte // the Clevis LUKS2 token of the first-boot key
	escrow              string // the recovery key, age-encrypted, armored
}

// newCryptKeys makes the keys, seals the first-boot key and encrypts the
// recovery key. It fails before anything is written: a node without a
// TPM, or a recipient that does not parse, installs nothing.
func (r *Runner) newCryptKeys(enc *plan.Encryption) (*cryptKeys, error) {
	if len(enc.Recipients) == 0 {
		return nil, permanentf("encryption: no recovery recipients: the recovery key would be lost")
	}
	var rcpts []age.Recipient
	for _, s := range enc.Recipients {
		rc, err := age.ParseX25519Recipient(s)
		if err != nil {
			return nil, permanentf("encryption: recipient %q: %v", s, err)
		}
		rcpts = append(rcpts, rc)
	}
	k := &cryptKeys{recovery: []byte(recoveryKey()), firstBoot: make([]byte, 32), volume: make([]byte, 64)}
	if _, err := rand.Read(k.firstBoot); err != nil {
		return nil, err
	}
	if _, err := rand.Read(k.volume); err != nil {
		return nil, err
	}
	// The first-boot key as text: it is typed into cryptsetup's prompt by
	// clevis-initramfs, which stops at a newline.
	k.firstBoot = []byte(fmt.Sprintf("%x", k.firstBoot))
	jwe, err := r.SealFirstBoot(k.firstBoot)
	if err != nil {
		return nil, permanentf("encryption needs this machine's TPM to seal the first-boot key: %v; nothing was written", err)
	}
	if k.token, err = jwe.LUKSToken(firstBootSlot); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	aw := armor.NewWriter(&buf)
	w, err := age.Encrypt(aw, rcpts...)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(k.recovery); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := aw.Close(); err != nil {
		return nil, err
	}
	k.escrow = buf.String()
	return k, nil
}

// recoveryKey is eight groups of six digits (159 bits): easy to read out
// and to type at cryptsetup's prompt on a console.
func recoveryKey() string {
	groups := make([]string, 8)
	for i := range groups {
		n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
		if err != nil {
			panic(err) // crypto/rand does not fail on Linux
		}
		groups[i] = fmt.Sprintf("%06d", n)
	}
	return strings.Join(groups, "-")
}

// defaultSealFirstBoot seals with the machine's TPM.
func defaultSealFirstBoot(secret []byte) (tpm.ClevisJWE, error) {
	ch, err := tpm.OpenChannel()
	if err != nil {
		return tpm.ClevisJWE{}, err
	}
	defer ch.Close()
	return tpm.ClevisSeal(ch, secret)
}

// luks is one container being made: its partition device, its mapping.
type luks struct {
	r      *Runner
	s      *step
	enc    *plan.Encryption
	keys   *cryptKeys
	dev    string // the partition
	uuid   string // the container's (chosen here, given to luksFormat)
	mapped string // /dev/mapper/bootops-root once open
}

// keyFile writes a key where only the Micro-OS (in RAM) sees it, for
// cryptsetup's --key-file, and gives a function that removes it.
func keyFile(key []byte) (string, func(), error) {
	f, err := os.CreateTemp("", "bootops-key-")
	if err != nil {
		return "", nil, err
	}
	_, err = f.Write(key)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", nil, err
	}
	return f.Name(), func() { os.Remove(f.Name()) }, nil
}

// format makes the container's header: the volume key the agent encrypts
// the data with, the recovery key in slot 0, the first-boot key in slot 1
// with its Clevis token; aes-xts-plain64 in 512-byte sectors from 16 MiB
// in, as cryptWriter writes them.
func (l *luks) format(ctx context.Context) error {
	l.uuid = newUUID()
	files := map[string][]byte{"volume": l.keys.volume, "recovery": l.keys.recovery, "first-boot": l.keys.firstBoot}
	path := map[string]string{}
	for name, key := range files {
		p, rm, err := keyFile(key)
		if err != nil {
			return err
		}
		defer rm()
		path[name] = p
	}
	// pbkdf2 with a short time: both keys are random and long, so a slow
	// KDF adds nothing, and Argon2's memory would not fit every Micro-OS.
	kdf := []string{"--pbkdf", "pbkdf2", "--iter-time", "500"}
	for _, args := range [][]string{
		append([]string{"luksFormat", "--batch-mode", "--type", "luks2", "--uuid", l.uuid, "--label", plan.CryptName,
			"--cipher", "aes-xts-plain64", "--key-size", "512", "--sector-size", fmt.Sprint(luksSector), "--offset", fmt.Sprint(luksHeader / 512),
			"--volume-key-file", path["volume"], "--key-slot", "0", "--key-file", path["recovery"]}, append(kdf, l.dev)...),
		append([]string{"luksAddKey", "--batch-mode", "--key-slot", fmt.Sprint(firstBootSlot), "--key-file", path["recovery"]}, append(kdf, l.dev, path["first-boot"])...),
		{"token", "import", "--json-file", "-", l.dev},
	} {
		var stdin []byte
		if args[0] == "token" {
			stdin = l.keys.token
		}
		if out, err := l.r.Cryptsetup(ctx, stdin, args...); err != nil {
			return fmt.Errorf("cryptsetup %s %s: %w: %s", args[0], l.dev, err, bytes.TrimSpace(out))
		}
	}
	l.s.log(fmt.Sprintf("made LUKS2 container %s on %s (recovery key in slot 0, first-boot key sealed to the TPM in slot %d)", l.uuid, l.dev, firstBootSlot))
	return nil
}

// open maps the container (with the first-boot key) for the actions that
// write into the new system.
func (l *luks) open(ctx context.Context) error {
	fb, rm, err := keyFile(l.keys.firstBoot)
	if err != nil {
		return err
	}
	defer rm()
	if out, err := l.r.Cryptsetup(ctx, nil, "open", "--key-file", fb, "--allow-discards", l.dev, plan.CryptName); err != nil {
		return fmt.Errorf("cryptsetup open %s: %w: %s", l.dev, err, bytes.TrimSpace(out))
	}
	l.mapped = filepath.Join(l.r.MapperDir, plan.CryptName)
	l.s.log(fmt.Sprintf("wrote partition %d encrypted into LUKS2 container %s; open as %s", l.enc.Partition, l.uuid, l.mapped))
	return nil
}

// newUUID is a random (version 4) UUID.
func newUUID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// defaultCryptsetup runs cryptsetup with stdin.
func defaultCryptsetup(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	// Its lock folder: the Micro-OS's /run is bare.
	if err := os.MkdirAll("/run/cryptsetup", 0o700); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "cryptsetup", args...)
	cmd.Stdin = bytes.NewReader(stdin)
	return cmd.CombinedOutput()
}

// waitDevice waits for a partition's node after the table was re-read
// (a regular file, in tests, is there at once).
func waitDevice(dev string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		_, err := os.Stat(dev)
		if err == nil || !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
