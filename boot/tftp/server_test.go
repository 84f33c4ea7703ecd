package tftp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pin/tftp/v3"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
)

// running is a server on loopback for one test.
type running struct {
	addr   string
	mem    *status.Memory
	logs   *testutil.SyncBuffer
	cancel context.CancelFunc
	done   chan error
}

// start serves files on 127.0.0.1:0; set adjusts the server first.
func start(t *testing.T, files Files, set func(*Server)) *running {
	t.Helper()
	return startOn(t, "udp4", "127.0.0.1:0", files, set)
}

// startOn serves files on addr of network (udp4 or udp6).
func startOn(t *testing.T, network, addr string, files Files, set func(*Server)) *running {
	t.Helper()
	conn, err := net.ListenPacket(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &running{addr: conn.LocalAddr().String(), mem: &status.Memory{}, logs: &testutil.SyncBuffer{}, done: make(chan error, 1)}
	s := &Server{Files: files, Events: r.mem, Log: slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if set != nil {
		set(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- s.Serve(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(15 * time.Second):
			t.Error("Serve did not return")
		}
	})
	return r
}

// events returns the messages of the events recorded for 127.0.0.1.
func (r *running) events() []string {
	var out []string
	for _, e := range r.mem.Events("ip:127.0.0.1") {
		m := e.Message
		if e.Error {
			m = "error: " + m
		}
		out = append(out, m)
	}
	return out
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// fetch gets name with pin/tftp's client, an implementation not ours.
func fetch(t *testing.T, addr, name string, blksize int, tsize bool) []byte {
	t.Helper()
	c, err := tftp.NewClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	if blksize > 0 {
		c.SetBlockSize(blksize)
	}
	c.RequestTSize(tsize)
	c.SetTimeout(10 * time.Second) // a loaded machine (the race detector, other tests) can stall a packet for seconds
	wt, err := c.Receive(name, "octet")
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	n, ok := wt.(tftp.IncomingTransfer).Size() // before the transfer: it forgets the options
	var got bytes.Buffer
	if _, err := wt.WriteTo(&got); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if tsize && (!ok || n != int64(got.Len())) {
		t.Errorf("tsize %d (%v), got %d bytes", n, ok, got.Len())
	}
	return got.Bytes()
}

func TestTransfersAreByteIdentical(t *testing.T) {
	efi := random(850_528)
	exact := random(512 * 40) // a multiple of the block size: an empty last block
	r := start(t, Files{"ipxe.efi": efi, "exact.bin": exact, "empty": {}}, nil)
	for name, tc := range map[string]struct {
		file    string
		blksize int
		tsize   bool
	}{
		"no options (512)":       {file: "ipxe.efi"},
		"blksize 1468":           {file: "ipxe.efi", blksize: 1468},
		"blksize 8192":           {file: "ipxe.efi", blksize: 8192},
		"tsize":                  {file: "ipxe.efi", tsize: true},
		"blksize 1468 and tsize": {file: "ipxe.efi", blksize: 1468, tsize: true},
		"size a multiple of 512": {file: "exact.bin"},
		"empty file":             {file: "empty", tsize: true},
	} {
		t.Run(name, func(t *testing.T) {
			want := Files{"ipxe.efi": efi, "exact.bin": exact, "empty": {}}[tc.file]
			got := fetch(t, r.addr, tc.file, tc.blksize, tc.tsize)
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes, want %d, identical=false", len(got), len(want))
			}
		})
	}
}

// TestBlockNumbersRollOver sends a file of more than 65535 blocks of 512
// bytes: block numbers wrap to 0 and the client still gets every byte.
func TestBlockNumbersRollOver(t *testing.T) {
	if testing.Short() {
		t.Skip("34 MB over lock-step TFTP")
	}
	big := random(512*70_000 + 100)
	r := start(t, Files{"big": big}, nil)
	got := fetch(t, r.addr, "big", 0, false)
	if !bytes.Equal(got, big) {
		t.Fatalf("got %d bytes, want %d", len(got), len(big))
	}
}

// peer is a TFTP client written packet by packet, to send exactly what a
// test wants.
type peer struct {
	t    *testing.T
	conn *net.UDPConn
	srv  *net.UDPAddr // the server's port 69, then the transfer's
}

// dial makes a client on loopback of addr's family.
func dial(t *testing.T, addr string) *peer {
	t.Helper()
	network, local := "udp4", net.IPv4(127, 0, 0, 1)
	if strings.HasPrefix(addr, "[") {
		network, local = "udp6", net.IPv6loopback
	}
	conn, err := net.ListenUDP(network, &net.UDPAddr{IP: local})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	srv, err := net.ResolveUDPAddr(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	return &peer{t: t, conn: conn, srv: srv}
}

func (p *peer) send(b []byte) {
	p.t.Helper()
	if _, err := p.conn.WriteToUDP(b, p.srv); err != nil {
		p.t.Fatal(err)
	}
}

// recv returns the next packet, nil after wait; the sender's address
// becomes the one packets go to.
func (p *peer) recv(wait time.Duration) []byte {
	p.t.Helper()
	buf := make([]byte, 70_000)
	p.conn.SetReadDeadline(time.Now().Add(wait))
	n, from, err := p.conn.ReadFromUDP(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	if err != nil {
		p.t.Fatal(err)
	}
	p.srv = from
	return buf[:n]
}

// expect receives a packet and checks its opcode and block (or error
// code).
func (p *peer) expect(op, block uint16) []byte {
	p.t.Helper()
	b := p.recv(3 * time.Second)
	if len(b) < 4 || binary.BigEndian.Uint16(b) != op || op != opOACK && binary.BigEndian.Uint16(b[2:]) != block {
		p.t.Fatalf("got %s, want opcode %d block/code %d", describe(b), op, block)
	}
	return b
}

func (p *peer) ack(block uint16) {
	p.send(binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, opACK), block))
}

func describe(b []byte) string {
	if b == nil {
		return "nothing"
	}
	if len(b) < 4 {
		return fmt.Sprintf("%x", b)
	}
	return fmt.Sprintf("opcode %d block/code %d (%d bytes)", binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:]), len(b))
}

func rq(op uint16, name, mode string, opts ...string) []byte {
	b := binary.BigEndian.AppendUint16(nil, op)
	for _, s := range append([]string{name, mode}, opts...) {
		b = append(append(b, s...), 0)
	}
	return b
}

func TestLostAndDuplicateAcks(t *testing.T) {
	file := random(512*3 + 10)
	r := start(t, Files{"f": file}, func(s *Server) { s.Timeout = 300 * time.Millisecond })
	p := dial(t, r.addr)
	p.send(rq(opRRQ, "f", "octet"))
	d1 := p.expect(opDATA, 1)
	// Our ACK "is lost": the server sends block 1 again on its timeout.
	start := time.Now()
	again := p.expect(opDATA, 1)
	if !bytes.Equal(again, d1) {
		t.Fatal("block 1 resent differently")
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("resent after %s, before the timeout", d)
	}
	p.ack(1)
	p.expect(opDATA, 2)
	// The duplicate ACK of block 1 (our first ACK arriving late) must
	// not make the server send block 2 again (Sorcerer's Apprentice).
	p.ack(1)
	if b := p.recv(150 * time.Millisecond); b != nil {
		t.Fatalf("a duplicate ACK was answered with %s", describe(b))
	}
	p.ack(2)
	p.expect(opDATA, 3)
	p.ack(3)
	last := p.expect(opDATA, 4)
	if !bytes.Equal(last[4:], file[512*3:]) {
		t.Fatal("last block differs")
	}
	p.ack(4)
	testutil.WaitFor(t, "the transfer's event", 5*time.Second, func() bool { return len(r.events()) == 1 })
	if ev := r.events(); !strings.HasPrefix(ev[0], "tftp: sent f in ") {
		t.Errorf("events %q", ev)
	}
	if !strings.Contains(r.logs.String(), "resent=1") {
		t.Errorf("the transfer's log line does not count the resend:\n%s", r.logs)
	}
}

func TestClientThatStopsAnsweringFails(t *testing.T) {
	r := start(t, Files{"f": random(5000)}, func(s *Server) { s.Timeout = 50 * time.Millisecond; s.Retries = 2 })
	p := dial(t, r.addr)
	p.send(rq(opRRQ, "f", "octet"))
	for range 3 { // the first send and two retries
		p.expect(opDATA, 1)
	}
	testutil.WaitFor(t, "the transfer's event", 5*time.Second, func() bool { return len(r.events()) == 1 })
	if ev := r.events(); !strings.Contains(ev[0], `error: tftp: "f" failed: block 1: no acknowledgement`) && !strings.Contains(ev[0], "no acknowledgement") {
		t.Errorf("events %q", ev)
	}
	if b := p.recv(200 * time.Millisecond); b != nil {
		t.Errorf("after giving up: %s", describe(b))
	}
}

func TestOptionsAndWindow(t *testing.T) {
	file := random(100*10 + 1)
	r := start(t, Files{"f": file}, nil)
	p := dial(t, r.addr)
	p.send(rq(opRRQ, "f", "OCTET", "BlkSize", "100", "tsize", "0", "windowsize", "4", "timeout", "3", "unknown", "x"))
	oack := p.expect(opOACK, 0)
	for _, want := range []string{"blksize\x00100\x00", "tsize\x001001\x00", "windowsize\x004\x00", "timeout\x003\x00"} {
		if !bytes.Contains(oack, []byte(want)) {
			t.Errorf("OACK %q lacks %q", oack[2:], want)
		}
	}
	if bytes.Contains(oack, []byte("unknown")) {
		t.Errorf("OACK %q acknowledges an unknown option", oack[2:])
	}
	var got []byte
	p.ack(0)
	for _, w := range [][]uint16{{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11}} {
		for _, k := range w {
			got = append(got, p.expect(opDATA, k)[4:]...)
		}
		p.ack(w[len(w)-1])
	}
	if !bytes.Equal(got, file) {
		t.Fatalf("got %d bytes, want %d", len(got), len(file))
	}
}

func TestWindowResendsFromTheLastAck(t *testing.T) {
	r := start(t, Files{"f": random(512 * 6)}, func(s *Server) { s.Timeout = 100 * time.Millisecond })
	p := dial(t, r.addr)
	p.send(rq(opRRQ, "f", "octet", "windowsize", "3"))
	p.expect(opOACK, 0)
	p.ack(0)
	for k := range uint16(3) {
		p.expect(opDATA, k+1)
	}
	p.ack(1) // blocks 2 and 3 "lost": the next window starts at 2
	for _, k := range []uint16{2, 3, 4} {
		p.expect(opDATA, k)
	}
}

func TestWriteRequestRefused(t *testing.T) {
	r := start(t, Files{"ipxe.efi": []byte("x")}, nil)
	p := dial(t, r.addr)
	p.send(rq(opWRQ, "ipxe.efi", "octet"))
	p.expect(opERROR, errCodeAccess)
	testutil.WaitFor(t, "the transfer's event", 5*time.Second, func() bool { return len(r.events()) == 1 })
	if ev := r.events(); ev[0] != `error: tftp: "ipxe.efi" failed: write requests are not served` {
		t.Errorf("events %q", ev)
	}
}

func TestNamesOutsideTheFilesRefused(t *testing.T) {
	r := start(t, Files{"ipxe.efi": []byte("x")}, nil)
	names := []string{"../x", "../ipxe.efi", "/etc/passwd", "/usr/lib/ipxe/ipxe.efi", "./ipxe.efi", "IPXE.EFI", "ipxe.efi\x7f", "unknown"}
	for _, name := range names {
		p := dial(t, r.addr)
		p.send(rq(opRRQ, name, "octet"))
		p.expect(opERROR, errCodeNotFound)
	}
	testutil.WaitFor(t, "an event for each name", 5*time.Second, func() bool { return len(r.events()) == len(names) })
	for i, ev := range r.events() {
		if want := "error: tftp: no file " + quote(names[i]); ev != want {
			t.Errorf("event %q, want %q", ev, want)
		}
	}
	if !strings.Contains(r.logs.String(), "tftp: not found") {
		t.Error("no log line")
	}
}

func TestMalformedPacketsIgnored(t *testing.T) {
	r := start(t, Files{"f": []byte("file")}, nil)
	p := dial(t, r.addr)
	for _, b := range [][]byte{
		{},
		{0},
		{0, opRRQ},
		{0, opRRQ, 'f'},    // no NUL
		{0, opRRQ, 'f', 0}, // no mode
		{0, opRRQ, 0, 'o', 'c', 't', 'e', 't', 0}, // empty name
		rq(opRRQ, "f", "binary"),                  // unknown mode
		{0, opACK, 0, 1},                          // not a request
		{0, 9, 'x', 0, 'y', 0},
		bytes.Repeat([]byte{0xff}, 2000),
	} {
		p.send(b)
	}
	if b := p.recv(200 * time.Millisecond); b != nil {
		t.Fatalf("a malformed packet was answered: %s", describe(b))
	}
	if got := fetch(t, r.addr, "f", 0, false); string(got) != "file" {
		t.Fatalf("after the junk: %q", got)
	}
	if n := strings.Count(r.logs.String(), "tftp: malformed request ignored"); n != 10 {
		t.Errorf("%d log lines for 10 malformed packets:\n%s", n, r.logs)
	}
}

func TestNetascii(t *testing.T) {
	r := start(t, Files{"t": []byte("a\nb\rc")}, nil)
	c, _ := tftp.NewClient(r.addr)
	wt, err := c.Receive("t", "netascii")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	wt.WriteTo(&got)
	if got.String() != "a\nb\rc" { // the client converts back
		t.Errorf("got %q", got.String())
	}
	p := dial(t, r.addr)
	p.send(rq(opRRQ, "t", "netascii"))
	if b := p.expect(opDATA, 1); string(b[4:]) != "a\r\nb\r\x00c" {
		t.Errorf("on the wire %q", b[4:])
	}
	p.ack(1)
}

func TestTooManyTransfersRefused(t *testing.T) {
	r := start(t, Files{"f": random(2000)}, func(s *Server) { s.MaxTransfers = 1 })
	first := dial(t, r.addr)
	first.send(rq(opRRQ, "f", "octet"))
	first.expect(opDATA, 1)
	second := dial(t, r.addr)
	second.send(rq(opRRQ, "f", "octet"))
	second.expect(opERROR, errCodeUndefined)
	if !strings.Contains(r.logs.String(), "too many transfers") {
		t.Errorf("no log line:\n%s", r.logs)
	}
	// A repeated request from the first client is not a second transfer.
	first.send(rq(opRRQ, "f", "octet"))
	for k := uint16(1); k <= 4; k++ {
		if k > 1 {
			first.expect(opDATA, k)
		}
		first.ack(k)
	}
	testutil.WaitFor(t, "the transfer's event", 5*time.Second, func() bool { return len(r.events()) == 1 })
	if b := first.recv(100 * time.Millisecond); b != nil {
		t.Errorf("after the last ACK: %s", describe(b))
	}
}

func TestManyConcurrentClients(t *testing.T) {
	testutil.Slow(t)
	efi := random(850_528)
	r := start(t, Files{"ipxe.efi": efi}, nil)
	const clients = 100
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tftp.NewClient(r.addr)
			if err != nil {
				errs <- err
				return
			}
			c.SetBlockSize([]int{512, 1468, 8192}[i%3])
			c.SetTimeout(10 * time.Second)
			wt, err := c.Receive("ipxe.efi", "octet")
			if err != nil {
				errs <- err
				return
			}
			var got bytes.Buffer
			if _, err := wt.WriteTo(&got); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got.Bytes(), efi) {
				errs <- fmt.Errorf("client %d: %d bytes, not identical", i, got.Len())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	testutil.WaitFor(t, "an event for each client", 5*time.Second, func() bool { return len(r.events()) == clients })
}

func TestDrainLetsTransfersFinish(t *testing.T) {
	file := random(512*2 + 1)
	r := start(t, Files{"f": file}, nil)
	p := dial(t, r.addr)
	p.send(rq(opRRQ, "f", "octet"))
	p.expect(opDATA, 1)
	r.cancel()
	select {
	case err := <-r.done:
		t.Fatalf("Serve returned (%v) with a transfer in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	late := dial(t, r.addr)
	late.send(rq(opRRQ, "f", "octet"))
	if b := late.recv(100 * time.Millisecond); b != nil {
		t.Errorf("a request after the end was answered: %s", describe(b))
	}
	p.ack(1)
	p.expect(opDATA, 2)
	p.ack(2)
	p.expect(opDATA, 3)
	p.ack(3)
	select {
	case err := <-r.done:
		if err != nil {
			t.Error(err)
		}
		r.done <- nil // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return once the transfer ended")
	}
	if ev := r.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "tftp: sent f") {
		t.Errorf("events %q", ev)
	}
}

func TestDrainDeadlineEndsStalledTransfers(t *testing.T) {
	r := start(t, Files{"f": random(5000)}, func(s *Server) { s.DrainTimeout = 200 * time.Millisecond })
	p := dial(t, r.addr)
	p.send(rq(opRRQ, "f", "octet"))
	p.expect(opDATA, 1)
	start := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Error(err)
		}
		r.done <- nil
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return at the drain deadline")
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("returned after %s, before the drain deadline", d)
	}
	if ev := r.events(); len(ev) != 1 || !strings.Contains(ev[0], "server shutting down") {
		t.Errorf("events %q", ev)
	}
	if !strings.Contains(r.logs.String(), "drain deadline") {
		t.Errorf("no log line:\n%s", r.logs)
	}
}

// TestOtherClients fetches with curl and tftp-hpa's tftp (Debian package
// tftp-hpa; its client asks for no options), when installed.
func TestOtherClients(t *testing.T) {
	efi := random(850_528)
	r := start(t, Files{"ipxe.efi": efi}, nil)
	_, port, _ := net.SplitHostPort(r.addr)
	dir := t.TempDir()
	for name, args := range map[string][]string{
		"curl":             {"curl", "-sS", "--tftp-blksize", "1468", "-o", "OUT", "tftp://" + r.addr + "/ipxe.efi"},
		"curl, no options": {"curl", "-sS", "--tftp-no-options", "-o", "OUT", "tftp://" + r.addr + "/ipxe.efi"},
		"tftp-hpa":         {"tftp", "-m", "binary", "127.0.0.1", port, "-c", "get", "ipxe.efi", "OUT"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := exec.LookPath(args[0]); err != nil {
				t.Skipf("%s not installed", args[0])
			}
			out := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
			for i, a := range args {
				if a == "OUT" {
					args[i] = out
				}
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir = dir
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, b)
			}
			got, err := os.ReadFile(out)
			if err != nil || !bytes.Equal(got, efi) {
				t.Fatalf("%v: %d bytes, identical=%v", err, len(got), bytes.Equal(got, efi))
			}
		})
	}
}
