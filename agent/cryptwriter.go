package agent

import (
	"context"
	"crypto/aes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/crypto/xts"
)

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

// abort closes what an attempt that failed left open (the partition it
// wrote), so the next attempt can make the partition table anew: the
// kernel refuses to re-read the table of a disk with an open partition.
func (w *cryptWriter) abort() {
	if w.part != nil {
		w.part.Close()
		w.part = nil
	}
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
