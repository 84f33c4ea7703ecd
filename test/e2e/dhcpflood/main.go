// Command dhcpflood plays a misbehaving DHCP client for the end-to-end
// tests: it sends DISCOVERs from many random MACs, or packets a real
// client cannot send (a multicast or all-zero client hardware address —
// the kernel refuses such an address on an interface — or a REQUEST
// whose option 50 has a wrong length), then counts the replies. It runs
// inside the test's namespace, bounded in count and time.
//
//	dhcpflood -i IF [-n 200] [-mac 01:00:5e:00:00:01] [-opt50-len 3] [-pxe] [-wait 2s]
//
// It prints "sent N replies M multi K": K DISCOVERs had more than one
// reply (more than one server answered).
package main

import (
	"bytes"
	"crypto/rand"
	"flag"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
)

func main() {
	iface := flag.String("i", "", "interface to send on (required)")
	n := flag.Int("n", 1, "packets to send (at most 10000)")
	mac := flag.String("mac", "", "client hardware address of every packet (default: a random one each)")
	opt50 := flag.Int("opt50-len", -1, "send REQUESTs whose option 50 has this length instead of DISCOVERs")
	wait := flag.Duration("wait", 2*time.Second, "how long to listen for replies after the last packet (at most 30s)")
	server := flag.String("server", "", "count only the replies of this server (its identifier, option 54): another DHCP server on the LAN answers too")
	every := flag.Duration("every", time.Millisecond, "the wait between two packets (at most 1s)")
	pxe := flag.Bool("pxe", false, "DISCOVERs of a PXE client (option 60 PXEClient, arch 0): what a proxy DHCP answers")
	flag.Parse()
	if *iface == "" || *n < 1 || *n > 10000 || *wait > 30*time.Second || *every > time.Second || *opt50 > 255 {
		log.Fatal("usage: dhcpflood -i IF [-n 1..10000] [-mac MAC] [-opt50-len 0..255] [-wait ≤30s] [-every ≤1s] [-pxe] [-server IP]")
	}
	conn, err := server4.NewIPv4UDPConn(*iface, &net.UDPAddr{Port: dhcpv4.ClientPort})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// Replies are read as they come: a burst of them would overflow the
	// socket's buffer.
	_ = conn.SetReadBuffer(4 << 20)
	var mu sync.Mutex
	xids := map[dhcpv4.TransactionID]bool{}
	per := map[dhcpv4.TransactionID]int{} // replies to each DISCOVER (each sent once)
	replies := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			k, _, err := conn.ReadFrom(buf)
			if err != nil {
				return // the deadline
			}
			if r, err := dhcpv4.FromBytes(buf[:k]); err == nil && r.OpCode == dhcpv4.OpcodeBootReply && (*server == "" || r.ServerIdentifier().String() == *server) {
				mu.Lock()
				if xids[r.TransactionID] {
					replies++
					per[r.TransactionID]++
				}
				mu.Unlock()
			}
		}
	}()
	dst := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}
	for range *n {
		hw := make(net.HardwareAddr, 6)
		if *mac != "" {
			if hw, err = net.ParseMAC(*mac); err != nil {
				log.Fatal(err)
			}
		} else {
			rand.Read(hw)
			hw[0] = hw[0]&^1 | 2 // unicast, locally administered
		}
		d, err := dhcpv4.NewDiscovery(hw)
		if err != nil {
			log.Fatal(err)
		}
		if *opt50 >= 0 {
			d.UpdateOption(dhcpv4.OptMessageType(dhcpv4.MessageTypeRequest))
		}
		if *pxe {
			d.UpdateOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001"))
			d.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 0}))
		}
		b := d.ToBytes()
		if *opt50 >= 0 {
			// Option 50 with any length, in place of the end option (the
			// last 0xff: only zero padding follows it).
			end := bytes.LastIndexByte(b, 255)
			b = append(append(b[:end:end], 50, byte(*opt50)), make([]byte, *opt50)...)
			b = append(b, 255)
		}
		mu.Lock()
		xids[d.TransactionID] = true
		mu.Unlock()
		if _, err := conn.WriteTo(b, dst); err != nil {
			log.Fatal(err)
		}
		time.Sleep(*every) // a burst, not a wall: the bridge keeps up
	}
	conn.SetReadDeadline(time.Now().Add(*wait))
	<-done
	mu.Lock()
	defer mu.Unlock()
	multi := 0 // DISCOVERs answered more than once: two servers answering
	for _, k := range per {
		if k > 1 {
			multi++
		}
	}
	fmt.Printf("sent %d replies %d multi %d\n", *n, replies, multi)
}
