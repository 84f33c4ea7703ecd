package lease

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Record is one lease as a lease file keeps it: the address and when it
// expires (zero: a file of the days before expiry, so expired).
type Record struct {
	IP      netip.Addr
	Expires time.Time
}

// journalHeader is the first line of a lease journal; a file without it is
// the JSON object of the days before the journal, read once and compacted.
const journalHeader = `{"bootops-leases":2}`

// journalLine is one line of the journal: a key's lease as of then.
type journalLine struct {
	Key     string     `json:"key"`
	IP      string     `json:"ip"`
	Expires *time.Time `json:"expires,omitempty"` // none: the key has no lease
}

// DefaultRetain is how long an expired lease is kept (so its machine gets
// its old address back while nobody else needed it) before a compaction
// prunes it.
const DefaultRetain = 7 * 24 * time.Hour

// Read reads a lease file: a journal (the header line, then one JSON
// line per change, the last line for a key winning) or the JSON object of
// key → {ip, expires} of the days before it. A missing file holds no
// leases; a last line cut short (a crash mid-write) is ignored. Errors name
// the file, the line and the key.
func Read(path string) (map[string]Record, error) {
	recs, _, err := readLeases(path)
	return recs, err
}

// readLeases is Read, also saying how many lines the journal has
// (-1: no journal, the file must be compacted before anything is appended).
func readLeases(path string) (map[string]Record, int, error) {
	out := map[string]Record{}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return out, -1, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("leases: %w", err)
	}
	first, rest, _ := bytes.Cut(b, []byte("\n"))
	if string(bytes.TrimSpace(first)) != journalHeader {
		out, err := readObject(path, b)
		return out, -1, err
	}
	lines := 1
	for n := 2; len(rest) > 0; n++ {
		line, more, complete := bytes.Cut(rest, []byte("\n"))
		rest = more
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		lines++
		var l journalLine
		if err := json.Unmarshal(line, &l); err != nil {
			if !complete {
				break // torn by a crash while it was written: never acknowledged
			}
			return nil, 0, fmt.Errorf("leases %s:%d: %w", path, n, err)
		}
		if l.IP == "" && l.Key != "" {
			delete(out, l.Key) // the key's lease was taken over or pruned
			continue
		}
		a, err := netip.ParseAddr(l.IP)
		if err != nil || l.Key == "" {
			return nil, 0, fmt.Errorf("leases %s:%d: key %q: bad address %q", path, n, l.Key, l.IP)
		}
		var exp time.Time
		if l.Expires != nil {
			exp = *l.Expires
		}
		out[l.Key] = Record{a, exp}
	}
	return out, lines, nil
}

// readObject reads the lease file of the days before the journal.
func readObject(path string, b []byte) (map[string]Record, error) {
	out := map[string]Record{}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("leases %s: %w", path, err)
	}
	for key, raw := range m {
		var f struct {
			IP      string    `json:"ip"`
			Expires time.Time `json:"expires"`
		}
		// Files written before leases expired map a key to its address:
		// such a lease counts as expired.
		if err := json.Unmarshal(raw, &f.IP); err != nil {
			if err := json.Unmarshal(raw, &f); err != nil {
				return nil, fmt.Errorf("leases %s: %s: %w", path, key, err)
			}
		}
		a, err := netip.ParseAddr(f.IP)
		if err != nil {
			return nil, fmt.Errorf("leases %s: %s: %w", path, key, err)
		}
		out[key] = Record{a, f.Expires}
	}
	return out, nil
}

// Journal keeps a pool's leases on disk as Kea's memfile does: each change
// is a line appended to the file; only when the lines outgrow the live
// leases is the file rewritten (compacted) from the pool's memory, and
// then leases expired longer than the pool keeps them are pruned. The pool
// hands a change to Add under its lock (memory only) and calls Sync after
// unlocking: disk I/O never holds the pool's lock, and a burst of changes
// goes to the file in one write. A change Sync could not write stays queued
// for the next one (the pool keeps it in memory meanwhile: its client gets
// no answer, the address stays held).
type Journal struct {
	Path string

	mu      sync.Mutex // pending and seq
	pending []pendingLine
	seq     uint64

	wmu      sync.Mutex // the file
	f        *os.File
	written  uint64 // every change up to it is on disk
	lines    int    // lines in the file (-1: none yet, or not a journal)
	live     int    // leases at the last compaction
	pauseFor func() // tests: called before each write, outside every lock
}

// line is key's lease r as a line of the journal.
func line(key string, r Record) []byte {
	l := journalLine{Key: key}
	if r.IP.IsValid() {
		exp := r.Expires.UTC()
		l.IP, l.Expires = r.IP.String(), &exp
	}
	b, _ := json.Marshal(l)
	return append(b, '\n')
}

type pendingLine struct {
	seq  uint64
	line []byte
}

// Snapshot is what a pool gives a compaction: its leases (pruned of what
// it no longer keeps) and the last change they include (Journal.Seq, read
// under the pool's lock).
type Snapshot func() (map[string]Record, uint64)

// Load reads the journal's file (Read) and readies the journal to
// append to it.
func (j *Journal) Load() (map[string]Record, error) {
	recs, lines, err := readLeases(j.Path)
	if err != nil {
		return nil, err
	}
	j.wmu.Lock()
	defer j.wmu.Unlock()
	j.lines, j.live = lines, len(recs)
	return recs, nil
}

// Add queues key's lease r for the file (r without an address: key has
// none any more) and returns its change number, for Sync. It does no I/O:
// pools call it under their lock.
func (j *Journal) Add(key string, r Record) uint64 {
	b := line(key, r)
	j.mu.Lock()
	defer j.mu.Unlock()
	j.seq++
	j.pending = append(j.pending, pendingLine{j.seq, b})
	return j.seq
}

// Seq is the last change Add numbered: a pool's Snapshot reads it under its
// lock, so the leases it copies hold every change up to it.
func (j *Journal) Seq() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.seq
}

// Sync returns once change seq is on disk: it writes every queued line, and
// compacts the file from snap when it is not yet a journal or its lines
// outgrew the leases (more than twice them, plus 1,024).
func (j *Journal) Sync(seq uint64, snap Snapshot) error {
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if j.written >= seq {
		return nil // another Sync wrote it with its own
	}
	if j.pauseFor != nil {
		j.pauseFor()
	}
	if j.lines < 0 || j.lines > 2*j.live+1024 {
		if err := j.compact(snap); err != nil {
			return err
		}
	}
	return j.flush()
}

// flush appends what is queued in one write.
func (j *Journal) flush() error {
	j.mu.Lock()
	batch := j.pending
	j.pending = nil
	j.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	var buf bytes.Buffer
	for _, p := range batch {
		buf.Write(p.line)
	}
	err := j.open()
	if err == nil {
		_, err = j.f.Write(buf.Bytes())
	}
	if err != nil {
		// Queued again, in front of what came meanwhile: nothing is
		// lost, and the order of a key's changes holds.
		j.mu.Lock()
		j.pending = append(batch, j.pending...)
		j.mu.Unlock()
		// The file may end in part of a line: the next Sync rewrites
		// it whole from the pool's memory.
		j.closeFile()
		j.lines = -1
		return fmt.Errorf("leases %s: %w", j.Path, err)
	}
	j.written = batch[len(batch)-1].seq
	j.lines += len(batch)
	return nil
}

func (j *Journal) open() error {
	if j.f != nil {
		return nil
	}
	f, err := os.OpenFile(j.Path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	j.f = f
	return nil
}

func (j *Journal) closeFile() {
	if j.f != nil {
		_ = j.f.Close()
		j.f = nil
	}
}

// compact rewrites the file from the pool's memory: a temporary file,
// synced, renamed over it. Queued lines the snapshot holds are done.
func (j *Journal) compact(snap Snapshot) error {
	recs, upto := snap()
	keys := make([]string, 0, len(recs))
	for k := range recs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if err := os.MkdirAll(filepath.Dir(j.Path), 0o755); err != nil {
		return fmt.Errorf("leases %s: %w", j.Path, err)
	}
	tmp := j.Path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("leases %s: %w", j.Path, err)
	}
	w := bufio.NewWriter(f)
	w.WriteString(journalHeader + "\n")
	for _, k := range keys {
		w.Write(line(k, recs[k]))
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, j.Path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("leases %s: compact: %w", j.Path, err)
	}
	j.closeFile()
	j.lines, j.live = 1+len(keys), len(keys)
	j.mu.Lock()
	j.pending = slices.DeleteFunc(j.pending, func(p pendingLine) bool { return p.seq <= upto })
	j.mu.Unlock()
	j.written = max(j.written, upto)
	return nil
}
