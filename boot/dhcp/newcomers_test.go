package dhcp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// Past the link's budget of machines new to the store, DHCP still answers
// every machine but keeps no sighting of the new ones; a node's are kept.
func TestNewcomersNotRecorded(t *testing.T) {
	live := &boot.Live{}
	live.Swap(testPlan(plan.DHCPProxy, plan.PolicyProvision))
	mem := &status.Memory{}
	nc := &status.Newcomers{Burst: 3, Every: time.Hour}
	client := serveLoopback(t, &Server{Plans: live, Site: "lab", Config: Config{ServerIP: server, HTTPPort: 8080, Mode: plan.DHCPProxy},
		Events: mem, Newcomers: nc, Known: mem.Known})
	answered := 0
	buf := make([]byte, 1500)
	for i := range 10 {
		req := pxeDiscover(t, fmt.Sprintf("52:54:00:77:00:%02x", i), iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001")
		for range 50 { // the server may not be listening yet; a busy machine may be slow
			client.Write(req.ToBytes())
			client.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, err := client.Read(buf)
			if err == nil {
				if r, err := dhcpv4.FromBytes(buf[:n]); err == nil && r.MessageType() == dhcpv4.MessageTypeOffer {
					answered++
					break
				}
			} else if !errors.Is(err, os.ErrDeadlineExceeded) {
				// Refused at once (ICMP port unreachable): the server
				// does not listen yet, and nothing was counted.
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	client.Write(pxeDiscover(t, "52:54:00:00:00:01", iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001").ToBytes())
	var unknown, node int
	testutil.Poll(10*time.Second, 20*time.Millisecond, func() bool {
		unknown, node = 0, 0
		for _, m := range mem.Machines() {
			if m.Node != "" {
				node++
			} else {
				unknown++
			}
		}
		return node == 1 && unknown >= 3
	})
	if answered != 10 || unknown != 3 || node != 1 || nc.Denied() != 7 {
		t.Errorf("%d answered, %d unknown and %d nodes recorded, %d turned away; want 10, 3, 1, 7", answered, unknown, node, nc.Denied())
	}
}

// Relayed requests share one newcomers' budget, whatever relay address
// they name: a host on the link that makes up relays gets no more.
func TestNewcomersRelayedShareOneBudget(t *testing.T) {
	keys := map[string]bool{}
	for i := range 100 {
		req := pxeDiscover(t, "52:54:00:77:00:01", iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001")
		req.GatewayIPAddr = net.IPv4(198, 18, byte(i), 1)
		keys[source(req)] = true
	}
	if len(keys) != 1 {
		t.Errorf("100 made-up relays got %d budgets, want one", len(keys))
	}
	local := pxeDiscover(t, "52:54:00:77:00:01", iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001")
	if keys[source(local)] {
		t.Error("the local link shares the relays' budget")
	}
}
