// Package wanem emulates a WAN link in user space: one-way delay, random
// loss and a rate limit on each direction of what a network namespace
// routes between two of its interfaces, and a cut of the link.
//
// It does what `tc qdisc add … netem delay 50ms loss 1% rate 20mbit` would
// do on both interfaces, for kernels without netem (this project's test
// machines have no sch_netem and no modules). The namespace's forwarding
// is turned through TUN devices the link reads and writes: packets that
// arrive on interface A are routed (a policy rule, iif A) into TUN wem-a,
// those from B into wem-b; the link reads them, drops or delays them, and
// writes them into TUN wem-o, whose packets the namespace routes on by its
// main table as if they had just arrived. The test LAN labs (test/e2e's
// wanLab) and the WAN benchmark (test/bench/wan) share it.
//
// Rate: a packet leaves when the link has sent those before it, at Rate
// bits per second counting IP bytes; at most Queue packets' worth
// (1500-byte packets) wait for it, the rest are dropped, as netem's limit
// does. Delay is added after the rate, so a queue adds to it. Loss is drawn
// per packet before the queue. While the link is down every packet is
// dropped, those already in flight too.
package wanem

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Shape is one direction's impairment; both directions get the same.
type Shape struct {
	Delay time.Duration // one way
	Loss  float64       // the fraction of packets dropped: 0.01 is 1 %
	Rate  int64         // bits per second; 0 is no limit
	Queue int           // packets waiting for the rate at most; 0 is 1000 (netem's default limit)
}

func (s Shape) String() string {
	rate := "unlimited"
	if s.Rate > 0 {
		rate = fmt.Sprintf("%g Mbit/s", float64(s.Rate)/1e6)
	}
	return fmt.Sprintf("delay %s, loss %g %%, rate %s each way", s.Delay, s.Loss*100, rate)
}

// queueTime is how long the packets waiting for the rate may take to
// leave, at most.
func (s Shape) queueTime() time.Duration {
	q := s.Queue
	if q <= 0 {
		q = 1000
	}
	return txTime(q*1500, s.Rate)
}

func txTime(bytes int, rate int64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(int64(bytes) * 8 * int64(time.Second) / rate)
}

// Counters are one direction's packets.
type Counters struct {
	Packets, Bytes uint64 // passed
	Lost           uint64 // dropped at random (Loss)
	Overflow       uint64 // dropped with the queue full
	Cut            uint64 // dropped while the link was down
}

type counters struct {
	packets, bytes, lost, overflow, cut atomic.Uint64
}

// packet is one IP packet in flight and when it leaves the link.
type packet struct {
	b  []byte
	at time.Time
}

// direction is the packets that arrive on one interface: read from their
// TUN, delayed in line, written out.
type direction struct {
	from string // the interface they arrive on
	tun  *os.File
	line chan packet
	next time.Time // when the rate has sent everything admitted so far (under Link.mu)
	n    counters
}

// Link is a running emulated link in a namespace.
type Link struct {
	ns   string
	out  *os.File
	dirs [2]*direction
	wg   sync.WaitGroup

	mu    sync.Mutex
	shape Shape
	down  bool
}

// the TUN devices' names, and the routing tables and rule preferences
// sending each interface's arrivals into its TUN.
const (
	tunA, tunB, tunOut = "wem-a", "wem-b", "wem-o"
	tableA, tableB     = "6001", "6002"
)

// Start shapes everything namespace ns routes between its interfaces a and
// b (both there, with their addresses and routes; Start turns forwarding
// on). Close undoes it.
func Start(ns, a, b string, s Shape) (*Link, error) {
	l := &Link{ns: ns, shape: s}
	var files [3]*os.File
	err := Do(ns, func() error {
		for i, name := range []string{tunA, tunB, tunOut} {
			f, err := openTUN(name)
			if err != nil {
				return err
			}
			files[i] = f
		}
		return nil
	})
	if err != nil {
		closeAll(files[:])
		return nil, fmt.Errorf("wanem in %s: %w", ns, err)
	}
	l.dirs = [2]*direction{{from: a, tun: files[0]}, {from: b, tun: files[1]}}
	l.out = files[2]
	if err := l.route(); err != nil {
		l.Close()
		return nil, fmt.Errorf("wanem in %s: %w", ns, err)
	}
	for _, d := range l.dirs {
		// Room for a second's packets at 1 Gbit/s: what does not fit is
		// counted as overflow, never blocks the reader.
		d.line = make(chan packet, 1<<16)
		l.wg.Add(2)
		go l.read(d)
		go l.write(d)
	}
	return l, nil
}

// openTUN creates TUN device name (IP packets, no header before them) in
// the calling thread's namespace; the device lives while the file is open.
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create TUN %s: %w", name, err)
	}
	// Non-blocking, so the runtime's poller reads it and Close ends a read.
	return os.NewFile(uintptr(fd), name), nil
}

// route turns the namespace's forwarding through the TUNs.
func (l *Link) route() error {
	a, b := l.dirs[0].from, l.dirs[1].from
	steps := [][]string{
		{"link", "set", tunA, "up"}, {"link", "set", tunB, "up"}, {"link", "set", tunOut, "up"},
		// Packets written into wem-o come back with a source the reverse
		// path filter would call martian (it routes them via a or b).
		{"sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf." + tunOut + ".rp_filter=0",
			"net.ipv4.conf.all.forwarding=1", "net.ipv6.conf." + tunA + ".disable_ipv6=1",
			"net.ipv6.conf." + tunB + ".disable_ipv6=1", "net.ipv6.conf." + tunOut + ".disable_ipv6=1"},
		{"route", "add", "default", "dev", tunA, "table", tableA},
		{"route", "add", "default", "dev", tunB, "table", tableB},
		{"rule", "add", "iif", a, "lookup", tableA, "pref", tableA},
		{"rule", "add", "iif", b, "lookup", tableB, "pref", tableB},
	}
	for _, s := range steps {
		if err := l.ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// ip runs `ip -n ns args…`, or sysctl in the namespace.
func (l *Link) ip(args ...string) error {
	cmd := exec.Command("ip", append([]string{"-n", l.ns}, args...)...)
	if args[0] == "sysctl" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", l.ns}, args...)...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Set changes the shape of both directions from now on (packets in flight
// keep theirs).
func (l *Link) Set(s Shape) {
	l.mu.Lock()
	l.shape = s
	l.mu.Unlock()
}

// Shape is the link's shape.
func (l *Link) Shape() Shape {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shape
}

// Down cuts the link: every packet is dropped, in flight or arriving,
// until Up. Connections through it are not told: they stall, as behind a
// cut cable.
func (l *Link) Down() { l.setDown(true) }

// Up restores the link Down cut.
func (l *Link) Up() { l.setDown(false) }

func (l *Link) setDown(v bool) {
	l.mu.Lock()
	l.down = v
	l.mu.Unlock()
}

// Stats returns the counters of the packets that arrived on a (ab) and on
// b (ba).
func (l *Link) Stats() (ab, ba Counters) {
	get := func(d *direction) Counters {
		return Counters{Packets: d.n.packets.Load(), Bytes: d.n.bytes.Load(), Lost: d.n.lost.Load(),
			Overflow: d.n.overflow.Load(), Cut: d.n.cut.Load()}
	}
	return get(l.dirs[0]), get(l.dirs[1])
}

// read admits each packet arriving from d's interface, or drops it.
func (l *Link) read(d *direction) {
	defer l.wg.Done()
	defer close(d.line)
	buf := make([]byte, 1<<16)
	for {
		n, err := d.tun.Read(buf)
		if err != nil {
			return // closed
		}
		at, ok := l.admit(d, n, time.Now())
		if !ok {
			continue
		}
		select {
		case d.line <- packet{b: append([]byte(nil), buf[:n]...), at: at}:
		default:
			d.n.overflow.Add(1)
		}
	}
}

// admit decides a packet of n bytes that arrived at now: dropped (cut,
// lost, the queue full) or when it leaves the link.
func (l *Link) admit(d *direction, n int, now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.shape
	switch {
	case l.down:
		d.n.cut.Add(1)
		return time.Time{}, false
	case s.Loss > 0 && rand.Float64() < s.Loss:
		d.n.lost.Add(1)
		return time.Time{}, false
	}
	start := now
	if d.next.After(now) {
		start = d.next
	}
	if s.Rate > 0 && start.Sub(now) > s.queueTime() {
		d.n.overflow.Add(1)
		return time.Time{}, false
	}
	d.next = start.Add(txTime(n, s.Rate))
	return d.next.Add(s.Delay), true
}

// write sends each of d's packets on when its time comes.
func (l *Link) write(d *direction) {
	defer l.wg.Done()
	for p := range d.line {
		if wait := time.Until(p.at); wait > 0 {
			time.Sleep(wait)
		}
		l.mu.Lock()
		down := l.down
		l.mu.Unlock()
		if down {
			d.n.cut.Add(1)
			continue
		}
		if _, err := l.out.Write(p.b); err != nil {
			if errors.Is(err, os.ErrClosed) {
				for range d.line { // the reader ends too: let it
				}
				return
			}
			continue // a packet the namespace refused (no route): dropped, as a router would
		}
		d.n.packets.Add(1)
		d.n.bytes.Add(uint64(len(p.b)))
	}
}

// Close stops the link: the TUNs and their routes go, and the namespace
// forwards between a and b directly again.
func (l *Link) Close() error {
	var errs []error
	for _, t := range []string{tableA, tableB} {
		if err := l.ip("rule", "del", "pref", t); err != nil {
			errs = append(errs, err)
		}
	}
	files := []*os.File{l.out}
	for _, d := range l.dirs {
		if d != nil {
			files = append(files, d.tun)
		}
	}
	closeAll(files)
	l.wg.Wait()
	return errors.Join(errs...)
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
