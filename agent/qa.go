package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/bootops/bootops/plan"
)

// The QA actions (qa-memory, qa-cpu, qa-disk, qa-network) measure the
// machine before anything is installed on it and fail the node when a
// limit from Git is not met. A bad result is not retried: a retry that
// passes would hide a flaky DIMM or a throttled CPU. Errors on the way
// (a download cut short, a disk that cannot be opened) are retried as any
// action's are. Throughputs are timed with the wall clock, not Runner.Now.

// qaHooks inject failures in tests: they corrupt what a check is about to
// verify.
type qaHooks struct {
	memAvailable func() (int64, error)                         // default: /proc/meminfo
	corruptMem   func(pattern string, buf []uint64)            // after a pattern is written
	corruptCPU   func(worker int, round uint64, sum *[32]byte) // after a round is computed
}

// runQA runs one attempt of a QA action.
func (r *Runner) runQA(ctx context.Context, s *step) error {
	switch s.a.Action {
	case plan.QAMemory:
		return r.qaMemory(ctx, s)
	case plan.QACPU:
		return r.qaCPU(ctx, s)
	case plan.QADisk:
		return r.qaDisk(ctx, s)
	case plan.QANetwork:
		return r.qaNetwork(ctx, s)
	}
	return permanentf("unknown action %q", s.a.Action)
}

// qaLog reports a measurement on the node's timeline.
func (s *step) qaLog(format string, args ...any) {
	s.log(s.a.Action + ": " + fmt.Sprintf(format, args...))
}

// limit says how a measured value compares with its limit (0: none).
func limit(v, floor float64) string {
	if floor <= 0 {
		return "pass"
	}
	if v < floor {
		return "FAIL"
	}
	return "pass"
}

// minText is how a log line gives a limit.
func minText(floor float64) string {
	if floor <= 0 {
		return "no limit"
	}
	return fmt.Sprintf("min %g", floor)
}

func mbps(n int64, d time.Duration) float64 {
	return float64(n) / 1e6 / max(d.Seconds(), 1e-9)
}

// --- qa-memory

// memPatterns are what qa-memory writes, word by word: alternating bits
// both ways (neighbouring cells that leak), walking ones (a stuck data
// line), and each word's own offset (a stuck address line, which makes
// two words one).
var memPatterns = []memPattern{
	{name: "0x55", block: repeatWord(0x5555555555555555)},
	{name: "0xAA", block: repeatWord(0xAAAAAAAAAAAAAAAA)},
	{name: "walking ones", block: walkingOnes()},
	{name: "address-in-address", addr: true},
}

// memPattern is a block of 64 words repeated, or (addr) each word's
// offset. Loops over blocks, not a call per word: the check runs at
// memory speed.
type memPattern struct {
	name  string
	addr  bool
	block [64]uint64
}

func repeatWord(w uint64) (b [64]uint64) {
	for i := range b {
		b[i] = w
	}
	return b
}

func walkingOnes() (b [64]uint64) {
	for i := range b {
		b[i] = 1 << i
	}
	return b
}

// fill writes the pattern over buf[lo:hi] (lo a multiple of 64).
func (p *memPattern) fill(buf []uint64, lo, hi int) {
	if p.addr {
		for i := lo; i < hi; i++ {
			buf[i] = uint64(i) * 8
		}
		return
	}
	for i := lo; i < hi; i += 64 {
		copy(buf[i:min(i+64, hi)], p.block[:])
	}
}

// verify finds the first word of buf[lo:hi] (lo a multiple of 64) that is
// not the pattern's, and counts them.
func (p *memPattern) verify(buf []uint64, lo, hi int) *memMismatch {
	var first *memMismatch
	bad := func(i int, want uint64) {
		if first == nil {
			first = &memMismatch{pattern: p.name, offset: int64(i) * 8, want: want, got: buf[i]}
		}
		first.mismatches++
	}
	if p.addr {
		for i := lo; i < hi; i++ {
			if buf[i] != uint64(i)*8 {
				bad(i, uint64(i)*8)
			}
		}
		return first
	}
	for i := lo; i < hi; i += 64 {
		for j, v := range buf[i:min(i+64, hi)] {
			if v != p.block[j] {
				bad(i+j, p.block[j])
			}
		}
	}
	return first
}

// memMismatch is a word that did not read back as written.
type memMismatch struct {
	pattern    string
	offset     int64
	want, got  uint64
	mismatches int64 // in the chunk it was found in
}

func (m *memMismatch) Error() string {
	return fmt.Sprintf("memory mismatch at offset %#x (%d MiB) with pattern %s: wrote %#016x, read %#016x (bits %#016x flipped; %d bad words in its part)",
		m.offset, m.offset>>20, m.pattern, m.want, m.got, m.want^m.got, m.mismatches)
}

// checkMemory writes each pattern over buf and reads it back, in workers
// parts at once; corrupt (tests) runs between writing and reading.
func checkMemory(ctx context.Context, buf []uint64, workers int, corrupt func(string, []uint64)) error {
	workers = max(1, min(workers, len(buf)/(1<<16)))
	part := ((len(buf)+workers-1)/workers + 63) &^ 63
	each := func(f func(lo, hi int) error) error {
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			lo, hi := min(w*part, len(buf)), min((w+1)*part, len(buf))
			wg.Add(1)
			go func() { defer wg.Done(); errs[w] = f(lo, hi) }()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	for _, p := range memPatterns {
		each(func(lo, hi int) error { p.fill(buf, lo, hi); return nil })
		if corrupt != nil {
			corrupt(p.name, buf)
		}
		err := each(func(lo, hi int) error {
			if m := p.verify(buf, lo, hi); m != nil {
				return m
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (r *Runner) qaMemory(ctx context.Context, s *step) error {
	shareOf := cmpOr(s.a.Share, plan.DefaultQAShare)
	share, err := plan.ParseShare(shareOf)
	if err != nil {
		return permanentf("%v", err)
	}
	avail := r.qaHook.memAvailable
	if avail == nil {
		avail = memAvailable
	}
	free, err := avail()
	if err != nil {
		return fmt.Errorf("free memory: %w", err)
	}
	n := int64(float64(free)*share) / 8
	if n < 1 {
		return permanentf("%s of %d bytes available is nothing to test", shareOf, free)
	}
	start := time.Now()
	buf, release, err := allocWords(n)
	if err != nil {
		return err
	}
	err = checkMemory(ctx, buf, runtime.NumCPU(), r.qaHook.corruptMem)
	took := time.Since(start)
	release() // the Micro-OS needs it back for the image
	var mm *memMismatch
	if errors.As(err, &mm) {
		return permanentf("%v", err)
	}
	if err != nil {
		return err
	}
	// Each pattern is written once and read once.
	rate := mbps(n*8*int64(len(memPatterns))*2, took)
	s.qaLog("%d MiB tested (%s of %d MiB available), %d patterns in %.1fs, at %.1f MB/s: pass", n*8>>20, shareOf, free>>20, len(memPatterns), took.Seconds(), rate)
	return nil
}

// memAvailable is MemAvailable of /proc/meminfo in bytes.
func memAvailable() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: MemAvailable %q", rest)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("/proc/meminfo: no MemAvailable")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// --- qa-cpu

// A qa-cpu round is a chain of cpuChain sha256 hashes from a seed; the
// rounds cycle through cpuSeeds seeds. Every worker computes the same
// rounds: the first result of a round is compared with every other
// worker's, and round 0's with cpuRound0, computed once elsewhere.
const (
	cpuChain  = 4096
	cpuSeeds  = 64
	cpuSeed   = "bootops qa-cpu"
	cpuRound0 = "45ce7e77222044d7d3828d9e07c21c4eaf87e3c1a3760c6c213c4e2a1cb96239"
)

func cpuRound(round uint64) [32]byte {
	var in [len(cpuSeed) + 8]byte
	copy(in[:], cpuSeed)
	binary.BigEndian.PutUint64(in[len(cpuSeed):], round%cpuSeeds)
	sum := sha256.Sum256(in[:])
	for range cpuChain {
		sum = sha256.Sum256(sum[:])
	}
	return sum
}

// cpuResult is what one worker did.
type cpuResult struct {
	cpu    int // the CPU it was pinned to, -1 if none
	hashes int64
	took   time.Duration
}

// checkCPU runs workers for d, each pinned to one CPU where it can be;
// corrupt (tests) runs on each round's result.
func checkCPU(ctx context.Context, d time.Duration, workers int, corrupt func(int, uint64, *[32]byte)) ([]cpuResult, error) {
	want, _ := hex.DecodeString(cpuRound0)
	var (
		mu      sync.Mutex
		first   [cpuSeeds]*[32]byte
		firstBy [cpuSeeds]int
		bad     error
		stop    = make(chan struct{})
		once    sync.Once
	)
	halt := func() { once.Do(func() { close(stop) }) }
	cpus := pinnableCPUs(workers)
	res := make([]cpuResult, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[w].cpu = pinCPU(cpus, w)
			start := time.Now()
			deadline := start.Add(d)
			for round := uint64(0); ; round++ {
				select {
				case <-stop:
					res[w].took = time.Since(start)
					return
				default:
				}
				sum := cpuRound(round)
				if corrupt != nil {
					corrupt(w, round, &sum)
				}
				res[w].hashes += cpuChain + 1
				i := round % cpuSeeds
				mu.Lock()
				switch {
				case round == 0 && !bytes.Equal(sum[:], want):
					bad = errors.Join(bad, fmt.Errorf("worker %d (cpu %d): round 0 gave %x, the right result is %s", w, res[w].cpu, sum[:8], cpuRound0[:16]))
				case first[i] == nil:
					first[i], firstBy[i] = &sum, w
				case *first[i] != sum:
					bad = errors.Join(bad, fmt.Errorf("worker %d (cpu %d) and worker %d disagree on round %d: %x and %x", w, res[w].cpu, firstBy[i], round, sum[:8], first[i][:8]))
				}
				failed := bad != nil
				mu.Unlock()
				if failed {
					halt()
				}
				// Each worker runs its full duration from its own start:
				// one the scheduler started late is measured all the same.
				if failed || ctx.Err() != nil || time.Now().After(deadline) {
					res[w].took = time.Since(start)
					return
				}
			}
		}()
	}
	wg.Wait()
	if bad != nil {
		return res, bad
	}
	return res, ctx.Err()
}

func (r *Runner) qaCPU(ctx context.Context, s *step) error {
	d, err := time.ParseDuration(cmpOr(s.a.Duration, plan.DefaultQADuration))
	if err != nil || d <= 0 {
		return permanentf("duration %q: want a duration such as 10s", s.a.Duration)
	}
	res, err := checkCPU(ctx, d, runtime.NumCPU(), r.qaHook.corruptCPU)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return permanentf("wrong results: %v", err)
	}
	var sum float64
	slowest := 0
	per := make([]string, len(res))
	rate := func(c cpuResult) float64 { return float64(c.hashes) / max(c.took.Seconds(), 1e-9) }
	for i, c := range res {
		sum += rate(c)
		if rate(c) < rate(res[slowest]) {
			slowest = i
		}
		per[i] = fmt.Sprintf("%.2fM", rate(c)/1e6)
	}
	floor, low := s.a.MinOpsPerSec, rate(res[slowest])
	s.qaLog("%d CPUs for %s, sha256 hashes a second per CPU: %s (average %.2fM, slowest %.2fM on cpu %d, %s): %s",
		len(res), d, strings.Join(per, " "), sum/float64(len(res))/1e6, low/1e6, res[slowest].cpu, minText(floor), limit(low, floor))
	if floor > 0 && low < floor {
		return permanentf("cpu %d computed %.0f sha256 hashes a second, below minOpsPerSec %g", res[slowest].cpu, low, floor)
	}
	return nil
}

// --- qa-disk

// diskChunk is what qa-disk reads or writes at once.
const diskChunk = 4 << 20

// alignedBuffer is n bytes at a page boundary, as O_DIRECT wants them.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+4096)
	off := int(uintptr(unsafe.Pointer(&b[0])) & 4095)
	if off != 0 {
		off = 4096 - off
	}
	return b[off : off+n]
}

// diskWord is qa-disk's pattern: each word holds its offset, mixed with
// the run's seed so that a previous run's data does not pass.
func diskWord(seed uint64, off int64) uint64 {
	return bits.RotateLeft64(uint64(off)^seed, 17) * 0x9E3779B97F4A7C15
}

func fillDisk(b []byte, seed uint64, off int64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], diskWord(seed, off+int64(i)))
	}
}

// diskMismatch is a word of the disk that did not read back as written.
type diskMismatch struct {
	offset    int64
	want, got uint64
}

func (m *diskMismatch) Error() string {
	return fmt.Sprintf("read back %#016x at offset %d, wrote %#016x", m.got, m.offset, m.want)
}

func verifyDisk(b []byte, seed uint64, off int64) error {
	for i := 0; i+8 <= len(b); i += 8 {
		if got, want := binary.LittleEndian.Uint64(b[i:]), diskWord(seed, off+int64(i)); got != want {
			return &diskMismatch{off + int64(i), want, got}
		}
	}
	return nil
}

// diskPass reads or writes [0, n) of f in chunks; each (when set) fills
// or checks a chunk.
func diskPass(ctx context.Context, s *step, f *os.File, n int64, write bool, each func(b []byte, off int64) error) (time.Duration, error) {
	buf := alignedBuffer(diskChunk)
	start := time.Now()
	for off := int64(0); off < n; off += diskChunk {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		b := buf[:min(diskChunk, n-off)]
		var err error
		if write {
			if each != nil {
				each(b, off)
			}
			_, err = f.WriteAt(b, off)
		} else {
			_, err = f.ReadAt(b, off)
			if err == nil && each != nil {
				err = each(b, off)
			}
		}
		if err != nil {
			return 0, err
		}
		s.progress(start, off+int64(len(b)), n, false)
	}
	if write {
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("sync: %w", err)
		}
	}
	return time.Since(start), nil
}

func (r *Runner) qaDisk(ctx context.Context, s *step) error {
	want, err := plan.ParseSize(cmpOr(s.a.Size, plan.DefaultQADiskSize))
	if err != nil {
		return permanentf("%v", err)
	}
	disk, err := r.ResolveDisk(s.a.Disk)
	if err != nil {
		return fmt.Errorf("disk %q: %w", s.a.Disk, err)
	}
	f, direct, err := openDirect(disk, s.a.Write)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("size of %s: %w", disk, err)
	}
	n := min(want, size) &^ 4095 // whole pages: O_DIRECT's unit
	if n == 0 {
		return permanentf("%s is smaller than 4 KiB (%d bytes)", disk, size)
	}
	how := "O_DIRECT"
	if !direct {
		how = "page cache dropped"
	}
	if n < want {
		s.qaLog("%s has %d MiB: testing all of it", disk, size>>20)
	}
	dropCache(f, n)
	took, err := diskPass(ctx, s, f, n, false, nil)
	if err != nil {
		return fmt.Errorf("read %s: %w", disk, err)
	}
	read := mbps(n, took)
	s.qaLog("read %d MiB of %s at %.1f MB/s (%s, %s): %s", n>>20, disk, read, how, minText(s.a.MinReadMBps), limit(read, s.a.MinReadMBps))
	if s.a.MinReadMBps > 0 && read < s.a.MinReadMBps {
		return permanentf("read %d MiB at %.1f MB/s, below minReadMBps %g", n>>20, read, s.a.MinReadMBps)
	}
	if !s.a.Write {
		return nil
	}
	seed := uint64(time.Now().UnixNano()) | 1
	took, err = diskPass(ctx, s, f, n, true, func(b []byte, off int64) error { fillDisk(b, seed, off); return nil })
	if err != nil {
		return fmt.Errorf("write %s: %w", disk, err)
	}
	written := mbps(n, took)
	dropCache(f, n)
	if _, err := diskPass(ctx, s, f, n, false, func(b []byte, off int64) error { return verifyDisk(b, seed, off) }); err != nil {
		var dm *diskMismatch
		if errors.As(err, &dm) {
			return permanentf("wrote %d MiB of %s at %.1f MB/s, then %v", n>>20, disk, written, err)
		}
		return fmt.Errorf("read back %s: %w", disk, err)
	}
	s.qaLog("wrote %d MiB of %s at %.1f MB/s (%s, %s), read it back intact: %s", n>>20, disk, written, how, minText(s.a.MinWriteMBps), limit(written, s.a.MinWriteMBps))
	if s.a.MinWriteMBps > 0 && written < s.a.MinWriteMBps {
		return permanentf("wrote %d MiB at %.1f MB/s, below minWriteMBps %g", n>>20, written, s.a.MinWriteMBps)
	}
	return nil
}

// --- qa-network

func (r *Runner) qaNetwork(ctx context.Context, s *step) error {
	n, err := plan.ParseSize(cmpOr(s.a.Size, plan.DefaultQANetworkSize))
	if err != nil || n > plan.MaxQAStream {
		return permanentf("size %q: want at most 1Gi", s.a.Size)
	}
	if r.QAStream == nil {
		return permanentf("no boot server to download from")
	}
	start := time.Now()
	body, err := r.QAStream(ctx, n)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer body.Close()
	buf := make([]byte, 256<<10)
	var got int64
	for {
		k, err := body.Read(buf)
		got += int64(k)
		s.progress(start, got, n, false)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("download: %d of %d bytes: %w", got, n, err)
		}
	}
	took := time.Since(start)
	if got != n {
		return fmt.Errorf("download: %d bytes, asked for %d", got, n)
	}
	rate := float64(n) * 8 / 1e6 / max(took.Seconds(), 1e-9)
	s.qaLog("downloaded %d MiB from the boot server at %.1f Mb/s (%s): %s", n>>20, rate, minText(s.a.MinMbps), limit(rate, s.a.MinMbps))
	if s.a.MinMbps > 0 && rate < s.a.MinMbps {
		return permanentf("downloaded %d MiB at %.1f Mb/s, below minMbps %g", n>>20, rate, s.a.MinMbps)
	}
	return nil
}

// qaStream is Runner.QAStream over the uplink: plan.QAStreamPath with the
// session credential, through client (no overall timeout: the action's
// own bounds the download).
func (u *uplink) qaStream(client *http.Client) func(ctx context.Context, n int64) (io.ReadCloser, error) {
	return func(ctx context.Context, n int64) (io.ReadCloser, error) {
		u.mu.Lock()
		q := url.Values{"bytes": {strconv.FormatInt(n, 10)}, "site": {u.site}, "node": {u.node}, "machine": {u.machine}}
		token := u.token
		u.mu.Unlock()
		path := plan.QAStreamPath + "?" + q.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.server+path, nil)
		if err != nil {
			return nil, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return nil, &httpError{path: path, status: resp.Status, code: resp.StatusCode, body: strings.TrimSpace(string(body))}
		}
		return resp.Body, nil
	}
}
