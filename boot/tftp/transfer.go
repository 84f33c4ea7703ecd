package tftp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/ipv4"
)

// transfer is one file being sent to one client: the state of the
// exchange, advanced by the pump that owns it. Block numbers are counted
// from 1 without bound; their 16 low bits go on the wire, so they roll
// over from 65535 to 0 and files past 65535 blocks go through (as
// tftp-hpa, curl and iPXE expect).
type transfer struct {
	name    string // as the client asked for it
	peer    netip.AddrPort
	addr    *net.UDPAddr
	data    []byte // the file as sent (converted for netascii)
	p       params
	timeout time.Duration
	retries int
	start   time.Time
	pump    *pump

	blocks   uint64 // data blocks, the last one short (empty when the size is a multiple of blksize)
	next     uint64 // the first block not acknowledged; 0 while the OACK is
	last     uint64 // the last block of the window in flight
	deadline time.Time
	tries    int
	resent   int // packets sent again after a timeout

	oack []byte     // the OACK, when options were accepted
	hdr  [][4]byte  // a DATA header per block of the window
	iov  [][][]byte // a message's buffers per block of the window
}

// errNoAck is returned when the client stops answering.
var errNoAck = errors.New("no acknowledgement")

// newTransfer prepares a transfer; its first window (the OACK, or the
// first blocks) is the one in flight.
func newTransfer(name string, peer netip.AddrPort, data []byte, p params, timeout time.Duration, retries int) *transfer {
	t := &transfer{
		name:    name,
		peer:    peer,
		addr:    net.UDPAddrFromAddrPort(peer),
		data:    data,
		p:       p,
		timeout: timeout,
		retries: retries,
		start:   time.Now(),
		blocks:  uint64(len(data)/p.blksize) + 1,
		hdr:     make([][4]byte, p.window),
		iov:     make([][][]byte, p.window),
	}
	for i := range t.iov {
		t.iov[i] = make([][]byte, 0, 2)
	}
	if len(p.oack) > 0 {
		t.oack = appendOACK(nil, p.oack)
		t.next, t.last = 0, 0
	} else {
		t.next = 1
		t.last = min(uint64(p.window), t.blocks)
	}
	return t
}

// window appends the packets of the window in flight to ms and arms the
// retransmission deadline. The DATA messages point into the file: blocks
// are not copied.
func (t *transfer) window(ms []ipv4.Message, now time.Time) []ipv4.Message {
	t.deadline = now.Add(t.timeout)
	if t.next == 0 {
		return append(ms, ipv4.Message{Buffers: [][]byte{t.oack}, Addr: t.addr})
	}
	for k := t.next; k <= t.last; k++ {
		i := k - t.next
		h := &t.hdr[i]
		binary.BigEndian.PutUint16(h[:], opDATA)
		binary.BigEndian.PutUint16(h[2:], uint16(k))
		off := (k - 1) * uint64(t.p.blksize)
		end := min(off+uint64(t.p.blksize), uint64(len(t.data)))
		b := append(t.iov[i][:0], h[:])
		if end > off {
			b = append(b, t.data[off:end])
		}
		t.iov[i] = b
		ms = append(ms, ipv4.Message{Buffers: b, Addr: t.addr})
	}
	return ms
}

// packet handles a datagram from the client. It reports whether the
// window moved (the caller then sends t.window unless t.done) and the
// error that ends the transfer, if the client sent one.
//
// An ACK of a block outside the window in flight, above all the duplicate
// ACK of the block before it, is ignored without sending anything:
// answering a duplicate ACK with data is the Sorcerer's Apprentice bug
// (RFC 1123 4.2.3.1), which doubles the traffic for the rest of the
// transfer. A lost packet is resent on the timeout instead.
func (t *transfer) packet(b []byte) (moved bool, err error) {
	if len(b) < 4 {
		return false, nil
	}
	switch binary.BigEndian.Uint16(b) {
	case opACK:
		rel := uint64(binary.BigEndian.Uint16(b[2:]) - uint16(t.next))
		if rel > t.last-t.next {
			return false, nil
		}
		t.next += rel + 1
		t.last = min(t.next+uint64(t.p.window)-1, t.blocks)
		t.tries = 0
		return true, nil
	case opERROR:
		code, msg := parseError(b)
		return false, fmt.Errorf("client error %d: %s", code, quote(msg))
	}
	return false, nil
}

// done reports whether the client acknowledged the last block.
func (t *transfer) done() bool { return t.next > t.blocks }

// expired is called once the deadline passed: it reports whether the
// window should be sent again, or the error that ends the transfer.
func (t *transfer) expired() (bool, error) {
	if t.tries == t.retries {
		what := fmt.Sprintf("block %d", t.next)
		if t.next == 0 {
			what = "the option acknowledgement"
		}
		return false, fmt.Errorf("%w of %s after %d tries of %s", errNoAck, what, t.tries+1, t.timeout)
	}
	t.tries++
	t.resent += int(t.last-t.next) + 1
	return true, nil
}
