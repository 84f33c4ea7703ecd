package tftp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Opcodes (RFC 1350, RFC 2347).
const (
	opRRQ   = 1
	opWRQ   = 2
	opDATA  = 3
	opACK   = 4
	opERROR = 5
	opOACK  = 6
)

// Error codes (RFC 1350, RFC 2347).
const (
	errCodeUndefined = 0
	errCodeNotFound  = 1
	errCodeAccess    = 2
	errCodeIllegalOp = 4
	errCodeOptions   = 8
)

// Limits of the negotiated options.
const (
	defaultBlksize = 512   // RFC 1350
	minBlksize     = 8     // RFC 2348
	maxBlksize     = 65464 // RFC 2348
	maxWindow      = 64    // RFC 7440 allows 65535; 64 blocks already fill a client's default receive buffer at 1468 bytes
	maxTimeout     = 255   // RFC 2349, seconds
)

// errNotRequest is returned for a first packet that is neither a read nor a
// write request.
var errNotRequest = errors.New("tftp: not a read or write request")

// request is a parsed RRQ or WRQ.
type request struct {
	op       uint16
	filename string
	mode     string // lower case: "octet", "netascii" or "mail"
	options  []option
}

// option is one RFC 2347 option as the client sent it; the name is lower
// case, as option names are case-insensitive.
type option struct{ name, value string }

// parseRequest reads a request packet: opcode, filename NUL, mode NUL, then
// option name NUL value NUL pairs. It checks the shape only; what is served
// is decided by the caller.
func parseRequest(b []byte) (request, error) {
	if len(b) < 2 {
		return request{}, fmt.Errorf("%w: %d bytes", errNotRequest, len(b))
	}
	r := request{op: binary.BigEndian.Uint16(b)}
	if r.op != opRRQ && r.op != opWRQ {
		return request{}, fmt.Errorf("%w: opcode %d", errNotRequest, r.op)
	}
	body := b[2:]
	if len(body) == 0 || body[len(body)-1] != 0 {
		return request{}, errors.New("tftp: request not NUL-terminated")
	}
	fields := bytes.Split(body[:len(body)-1], []byte{0})
	if len(fields) < 2 {
		return request{}, errors.New("tftp: request without a mode")
	}
	if len(fields[0]) == 0 {
		return request{}, errors.New("tftp: empty file name")
	}
	r.filename = string(fields[0])
	r.mode = strings.ToLower(string(fields[1]))
	switch r.mode {
	case "octet", "netascii", "mail":
	default:
		return request{}, fmt.Errorf("tftp: unknown mode %s", quote(r.mode))
	}
	// A trailing name without a value is ignored: some clients pad.
	for i := 2; i+1 < len(fields); i += 2 {
		name := strings.ToLower(string(fields[i]))
		if r.get(name) != "" {
			continue // the first of duplicates counts
		}
		r.options = append(r.options, option{name, string(fields[i+1])})
	}
	return r, nil
}

// get returns the value of an option, "" when absent.
func (r request) get(name string) string {
	for _, o := range r.options {
		if o.name == name {
			return o.value
		}
	}
	return ""
}

// params are what a read transfer was negotiated to.
type params struct {
	blksize int
	window  int
	timeout time.Duration // 0: the server's
	oack    []option      // the options acknowledged; none: no OACK is sent
}

// negotiate picks the options of a read request the server accepts
// (RFC 2347: unknown or invalid ones are left out of the OACK, which the
// client takes as refused). maxBlk caps blksize below what the path's MTU
// carries without fragmentation; size is the file's transfer size.
func negotiate(r request, maxBlk int, size int) params {
	p := params{blksize: defaultBlksize, window: 1}
	for _, o := range r.options {
		switch o.name {
		case "blksize":
			n, err := strconv.Atoi(o.value)
			if err != nil || n < minBlksize {
				continue
			}
			p.blksize = min(n, maxBlksize, max(maxBlk, defaultBlksize))
			p.oack = append(p.oack, option{o.name, strconv.Itoa(p.blksize)})
		case "tsize":
			p.oack = append(p.oack, option{o.name, strconv.Itoa(size)})
		case "timeout":
			n, err := strconv.Atoi(o.value)
			if err != nil || n < 1 || n > maxTimeout {
				continue
			}
			p.timeout = time.Duration(n) * time.Second
			p.oack = append(p.oack, option{o.name, o.value})
		case "windowsize":
			n, err := strconv.Atoi(o.value)
			if err != nil || n < 1 {
				continue
			}
			p.window = min(n, maxWindow)
			p.oack = append(p.oack, option{o.name, strconv.Itoa(p.window)})
		}
	}
	return p
}

// appendOACK encodes an option acknowledgement.
func appendOACK(b []byte, opts []option) []byte {
	b = binary.BigEndian.AppendUint16(b, opOACK)
	for _, o := range opts {
		b = append(b, o.name...)
		b = append(b, 0)
		b = append(b, o.value...)
		b = append(b, 0)
	}
	return b
}

// appendError encodes an error packet.
func appendError(b []byte, code uint16, msg string) []byte {
	b = binary.BigEndian.AppendUint16(b, opERROR)
	b = binary.BigEndian.AppendUint16(b, code)
	b = append(b, msg...)
	return append(b, 0)
}

// parseError reads the code and message of an error packet whose opcode
// has been checked.
func parseError(b []byte) (uint16, string) {
	if len(b) < 4 {
		return errCodeUndefined, ""
	}
	msg := b[4:]
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		msg = msg[:i]
	}
	return binary.BigEndian.Uint16(b[2:]), string(msg)
}

// toNetascii converts a file for a netascii transfer (RFC 764): CR LF for
// LF and CR NUL for a bare CR.
func toNetascii(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/16)
	for _, c := range b {
		switch c {
		case '\n':
			out = append(out, '\r', '\n')
		case '\r':
			out = append(out, '\r', 0)
		default:
			out = append(out, c)
		}
	}
	return out
}
