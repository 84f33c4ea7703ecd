package udpserve

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
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
