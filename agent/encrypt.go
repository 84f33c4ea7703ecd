package agent

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
	"golang.org/x/crypto/xts"

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

// cryptWriter takes an image's bytes in order and routes them: before the
// encrypted partition to the disk (the GPT in them grown first), inside
// it encrypted here (AES-XTS, as dm-crypt's aes-xts-plain64 would, with
// the container's volume key) into the container's data area, after it
// (the image's backup GPT) nowhere. The container's header is made when
// the first byte of the partition arrives.
//
// Encrypting here rather than through dm-crypt: the writes to the disk are
// the plain install's (large, through the page cache), and dm-crypt's
// write thread stalled for good in a 512 MiB VM under QEMU (its requests
// never completed); the mapping is opened afterwards only for the actions
// that write a few files into the new system.
type cryptWriter struct {
	ctx          context.Context
	l            *luks
	disk         *os.File
	diskPath     string
	size, sector int64

	off        int64  // the image's bytes taken so far
	head       []byte // held back until the GPT is read
	table      *gptTable
	start, end int64 // the partition's bytes in the image
	part       *offsetFile
	xts        *xts.Cipher
	carry      []byte // the start of a sector not whole yet
	buf        []byte
	dropped    int64
}

func (w *cryptWriter) Write(p []byte) (int, error) {
	n := len(p)
	if w.table == nil {
		w.head = append(w.head, p...)
		if len(w.head) < headBytes {
			return n, nil
		}
		if err := w.readTable(); err != nil {
			return 0, err
		}
		p, w.head = w.head, nil // routed from the image's start (w.off is 0)
	}
	if err := w.route(p); err != nil {
		return 0, err
	}
	return n, nil
}

// readTable reads the image's GPT from the bytes held back, checks the
// partition to encrypt is its last and fits, grows it in those bytes and
// writes the backup table at the disk's end.
func (w *cryptWriter) readTable() error {
	t, err := readGPT(w.head, w.sector)
	if err != nil {
		return permanentf("%v", err)
	}
	idx := w.l.enc.Partition
	p, ok := t.part(idx)
	if !ok {
		return permanentf("encryption: the image has no partition %d", idx)
	}
	if t.lastPartition != idx {
		return permanentf("encryption: partition %d is not the image's last (partition %d is): only the last can grow to make room for the LUKS2 header", idx, t.lastPartition)
	}
	w.start, w.end = int64(p.First)*w.sector, int64(p.Last+1)*w.sector
	if w.start%luksSector != 0 || (w.end-w.start)%luksSector != 0 {
		return permanentf("encryption: partition %d is not made of whole 512-byte sectors", idx)
	}
	backup, at, err := t.growToEnd(idx, w.size)
	if err != nil {
		return permanentf("encryption: %v", err)
	}
	if room := at - w.start - luksHeader; room < w.end-w.start {
		return permanentf("encryption: partition %d holds %d MiB of the image and LUKS2 needs %d MiB before it: the disk leaves %d MiB", idx, (w.end-w.start)>>20, luksHeader>>20, (at-w.start)>>20)
	}
	if _, err := w.disk.WriteAt(backup, at); err != nil {
		return fmt.Errorf("write the GPT's backup: %w", err)
	}
	w.table = t
	return nil
}

// route writes p, the image's bytes from w.off on, where they belong.
func (w *cryptWriter) route(p []byte) error {
	for len(p) > 0 {
		var k int
		var err error
		switch {
		case w.off < w.start:
			k = int(min(int64(len(p)), w.start-w.off))
			_, err = w.disk.WriteAt(p[:k], w.off)
		case w.off < w.end:
			if w.part == nil {
				if err := w.format(); err != nil {
					return err
				}
			}
			k = int(min(int64(len(p)), w.end-w.off))
			err = w.encrypt(p[:k])
		default:
			k = len(p)
			w.dropped += int64(k)
		}
		if err != nil {
			return err
		}
		w.off += int64(k)
		p = p[k:]
	}
	return nil
}

// encrypt writes the partition's bytes p (which end at w.off+len(p))
// encrypted into the data area, whole sectors at a time, keeping a
// sector's start for the next call.
func (w *cryptWriter) encrypt(p []byte) error {
	first := w.off - w.start - int64(len(w.carry)) // the data's offset of what is written now
	data := p
	if len(w.carry) > 0 {
		data = append(w.carry, p...)
	}
	whole := len(data) / luksSector * luksSector
	if whole > 0 {
		if cap(w.buf) < whole {
			w.buf = make([]byte, whole)
		}
		ct := w.buf[:whole]
		for i := 0; i < whole; i += luksSector {
			w.xts.Encrypt(ct[i:i+luksSector], data[i:i+luksSector], uint64((first+int64(i))/luksSector))
		}
		if _, err := w.part.WriteAt(ct, luksHeader+first); err != nil {
			return fmt.Errorf("write %s: %w", w.l.dev, err)
		}
	}
	w.carry = append(w.carry[:0], data[whole:]...)
	return nil
}

// format makes the kernel read the grown table, then the container's
// header, and opens the partition for the data.
func (w *cryptWriter) format() error {
	if err := w.disk.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	if err := rereadPartitions(w.disk); err != nil {
		return fmt.Errorf("re-read the partition table of %s: %w", w.diskPath, err)
	}
	// A disk that is a file (the tests') has no partition nodes: the
	// container goes into the file at the partition's offset.
	dev, base := w.l.dev, int64(0)
	if fi, err := w.disk.Stat(); err == nil && fi.Mode()&os.ModeDevice != 0 {
		if err := waitDevice(dev, 10*time.Second); err != nil {
			return fmt.Errorf("partition %s: %w", dev, err)
		}
	} else {
		dev, base = w.diskPath, w.start
	}
	c, err := xts.NewCipher(aes.NewCipher, w.l.keys.volume)
	if err != nil {
		return err
	}
	if err := w.l.format(w.ctx); err != nil {
		return err
	}
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	w.xts, w.part = c, &offsetFile{f, base}
	return nil
}

// Close ends the stream: an image shorter than its head is read now; the
// data is synced, then the container opened for the next actions.
func (w *cryptWriter) Close() error {
	if w.table == nil {
		if err := w.readTable(); err != nil {
			return err
		}
		p := w.head
		w.head, w.off = nil, 0
		if err := w.route(p); err != nil {
			return err
		}
	}
	if w.part == nil {
		return permanentf("encryption: the image ended before partition %d began", w.l.enc.Partition)
	}
	if len(w.carry) > 0 {
		return permanentf("encryption: partition %d ends inside a sector", w.l.enc.Partition)
	}
	err := w.part.Sync()
	if cerr := w.part.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("sync %s: %w", w.l.dev, err)
	}
	return w.l.open(w.ctx)
}

// offsetFile is a partition inside a file (a test's disk) or the
// partition's device itself (base 0).
type offsetFile struct {
	*os.File
	base int64
}

func (f *offsetFile) WriteAt(p []byte, off int64) (int, error) { return f.File.WriteAt(p, f.base+off) }
