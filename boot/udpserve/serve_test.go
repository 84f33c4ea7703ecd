package udpserve

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Packets Accept refuses never reach Handle; the others do, each with its
// sender; when ctx ends Serve closes the socket and returns nil.
func TestServeAcceptsAndStops(t *testing.T) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, "test", Socket{Conn: conn,
			Accept: func(pkt []byte) bool { return pkt[0] != 'x' },
			First:  func(pkt []byte, _ netip.AddrPort) bool { return pkt[0] == 'n' },
			Handle: func(pkt []byte, peer netip.AddrPort) {
				if peer.Addr().Unmap() != netip.MustParseAddr("127.0.0.1") {
					t.Errorf("peer %s", peer)
				}
				got <- string(pkt)
			}})
	}()
	client, err := net.DialUDP("udp4", nil, conn.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, p := range []string{"x-refused", "node", "other"} {
		if _, err := client.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case p := <-got:
			seen[p] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("handled %v, want node and other", seen)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after ctx ended: %v", err)
	}
	close(got)
	for p := range got {
		seen[p] = true
	}
	if seen["x-refused"] || !seen["node"] || !seen["other"] {
		t.Errorf("handled %v, want node and other only", seen)
	}
	if _, _, err := conn.ReadFromUDPAddrPort(make([]byte, 1)); err == nil {
		t.Error("the socket is still open after Serve returned")
	}
}

// While the workers are busy, what the queue has no room for is dropped at
// once and counted; nothing is answered twice or lost from the count.
func TestServeCountsAFullQueue(t *testing.T) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, Series{
		Dropped:    prometheus.CounterOpts{Name: "t_dropped_total", Help: "d"},
		Exhausted:  prometheus.CounterOpts{Name: "t_exhausted_total", Help: "e"},
		Suppressed: prometheus.CounterOpts{Name: "t_suppressed_total", Help: "s"},
		QueueFull:  prometheus.CounterOpts{Name: "t_queue_full_total", Help: "f"},
	})
	release := make(chan struct{})
	var handled atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, "test", Socket{Conn: conn, Metrics: m,
			Handle: func([]byte, netip.AddrPort) { <-release; handled.Add(1) }})
	}()
	client, err := net.DialUDP("udp4", nil, conn.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// One lane holds laneLen packets and each worker one more: past that,
	// every packet the socket delivers is dropped and counted.
	const sent = laneLen + 2000
	for i := range sent {
		if _, err := client.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	full := func() float64 { return testutil.ToFloat64(m.queueFull) }
	deadline := time.Now().Add(30 * time.Second)
	for full() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	dropped := full()
	close(release)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if dropped == 0 {
		t.Fatalf("%d packets sent to busy workers: none counted as dropped", sent)
	}
	if total := float64(handled.Load()) + full(); total > sent {
		t.Errorf("%v handled + %v dropped > %d sent", handled.Load(), full(), sent)
	}
}

// A server that is not the site's active one (Active false) answers
// nothing; once active, it answers.
func TestServeOnlyWhenActive(t *testing.T) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var active atomic.Bool
	got := make(chan string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Serve(ctx, "test", Socket{Conn: conn, Active: active.Load, Handle: func(pkt []byte, _ netip.AddrPort) { got <- string(pkt) }})
	client, err := net.DialUDP("udp4", nil, conn.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	client.Write([]byte("passive"))
	select {
	case p := <-got:
		t.Fatalf("answered %q while not active", p)
	case <-time.After(300 * time.Millisecond):
	}
	active.Store(true)
	client.Write([]byte("active"))
	select {
	case p := <-got:
		if p != "active" {
			t.Errorf("answered %q", p)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("not answered once active")
	}
}
