package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"

	"github.com/bootops/bootops/test/flood"
)

// LeaseSummary is what the made-up clients' REQUESTs got, counted on the
// wire: ACKs, NAKs, other answers, none; how many pool addresses the ACKs
// gave away; and what a new machine's DISCOVER got after the flood.
type LeaseSummary struct {
	Sent       int    `json:"sent"`
	Acks       int    `json:"acks"`
	Naks       int    `json:"naks"`
	Other      int    `json:"other"`
	Unanswered int    `json:"unanswered"`
	Addresses  int    `json:"addresses"` // distinct pool addresses ACKed
	Newcomer   string `json:"newcomer"`  // after the flood: "offer ADDRESS" or "none"
	ProbeSummary
	Elapsed string `json:"elapsed"`
}

// Transaction IDs: the top byte says whose packet it is.
const (
	xidFlood    = 0x10
	xidProbe    = 0x20
	xidNewcomer = 0x30
)

func xid(kind byte, i int) dhcpv4.TransactionID {
	var t dhcpv4.TransactionID
	binary.BigEndian.PutUint32(t[:], uint32(kind)<<24|uint32(i)&0xffffff)
	return t
}

// dhcpClient sends from port 68 on one interface and hands each answer to
// whoever waits for its transaction ID, or to the flood's counts.
type dhcpClient struct {
	conn   *net.UDPConn
	server *net.UDPAddr

	mu      sync.Mutex
	waiting map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4
	s       LeaseSummary
	leased  map[string]bool
}

func (c *dhcpClient) receive() {
	buf := make([]byte, 1500)
	for {
		n, _, err := c.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		m, err := dhcpv4.FromBytes(buf[:n])
		if err != nil || m.OpCode != dhcpv4.OpcodeBootReply {
			continue
		}
		c.mu.Lock()
		if ch, ok := c.waiting[m.TransactionID]; ok {
			delete(c.waiting, m.TransactionID)
			ch <- m
		} else if m.TransactionID[0] == xidFlood {
			switch m.MessageType() {
			case dhcpv4.MessageTypeAck:
				c.s.Acks++
				c.leased[m.YourIPAddr.String()] = true
			case dhcpv4.MessageTypeNak:
				c.s.Naks++
			default:
				c.s.Other++
			}
		}
		c.mu.Unlock()
	}
}

// discover sends a DISCOVER from mac and waits up to a second for the
// OFFER: its address.
func (c *dhcpClient) discover(mac net.HardwareAddr, id dhcpv4.TransactionID) (netip.Addr, error) {
	m, err := dhcpv4.NewDiscovery(mac, dhcpv4.WithTransactionID(id))
	if err != nil {
		return netip.Addr{}, err
	}
	ch := make(chan *dhcpv4.DHCPv4, 1)
	c.mu.Lock()
	c.waiting[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
	}()
	if _, err := c.conn.WriteTo(m.ToBytes(), c.server); err != nil {
		return netip.Addr{}, err
	}
	select {
	case r := <-ch:
		a, _ := netip.AddrFromSlice(r.YourIPAddr.To4())
		if r.MessageType() != dhcpv4.MessageTypeOffer {
			return a, fmt.Errorf("%s, not an OFFER", r.MessageType())
		}
		return a, nil
	case <-time.After(time.Second):
		return netip.Addr{}, errors.New("no OFFER within 1s")
	}
}

// lease sends -count REQUESTs, at -rate a second, each from a MAC of its
// own that never sent a DISCOVER, naming the pool's addresses in turn and
// this server; meanwhile the probe, a MAC the repository reserves an
// address for, sends DISCOVERs and times the OFFERs. With -wait it only
// waits (at most 30 s) until the probe is answered.
//
// It is long on purpose: the flood and the probe read best side by side,
// top to bottom, as a benchmark should.
func lease(args []string) (any, error) {
	fs := flag.NewFlagSet("lease", flag.ExitOnError)
	iface := fs.String("iface", "vcli", "the interface to send on (inside the bench's client namespace)")
	serverIP := fs.String("server-ip", "198.18.2.1", "the daemon's address on that link")
	poolRange := fs.String("pool", "198.18.2.100-198.18.2.199", "the site's pool, FIRST-LAST")
	count := fs.Int("count", 20000, "REQUESTs to send (at most 20000)")
	rate := fs.Int("rate", 2000, "REQUESTs a second")
	probeMAC := fs.String("probe-mac", "52:54:00:de:00:03", "the probe's MAC: a node's, with a reserved address")
	probeIP := fs.String("probe-ip", "", "the address reserved for it (set: an OFFER of another is a failure)")
	every := fs.Duration("probe-every", 200*time.Millisecond, "how often the probe sends its DISCOVER")
	deadline := fs.Duration("deadline", time.Minute, "give up after this long (at most 60s)")
	wait := fs.Bool("wait", false, "only wait until the probe is answered (at most 30s)")
	fs.Parse(args)
	server, err := netip.ParseAddr(*serverIP)
	if err != nil || !server.Is4() {
		return nil, fmt.Errorf("-server-ip %q: want an IPv4 address", *serverIP)
	}
	pool, err := flood.Sources(*poolRange)
	if err != nil || len(pool) == 0 {
		return nil, fmt.Errorf("-pool %q: want FIRST-LAST", *poolRange)
	}
	mac, err := net.ParseMAC(*probeMAC)
	if err != nil {
		return nil, fmt.Errorf("-probe-mac: %w", err)
	}
	if *count > 20000 || *rate < 1 || *deadline > time.Minute {
		return nil, fmt.Errorf("want -count of at most 20000, a -rate and -deadline of at most 1m")
	}
	conn, err := server4.NewIPv4UDPConn(*iface, &net.UDPAddr{Port: dhcpv4.ClientPort})
	if err != nil {
		return nil, err
	}
	c := &dhcpClient{conn: conn, server: &net.UDPAddr{IP: server.AsSlice(), Port: dhcpv4.ServerPort},
		waiting: map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4{}, leased: map[string]bool{}}
	go c.receive()
	defer conn.Close()

	var p probe
	ask := func(i int) error {
		a, err := c.discover(mac, xid(xidProbe, i))
		if err == nil && *probeIP != "" && a.String() != *probeIP {
			err = fmt.Errorf("offered %s, want %s", a, *probeIP)
		}
		return err
	}
	if *wait {
		for i := range 150 {
			if ask(i) == nil {
				return map[string]bool{"answered": true}, nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil, errors.New("the probe was not answered in 30s")
	}

	stop := make(chan struct{})
	var pw sync.WaitGroup
	pw.Add(1)
	go func() {
		defer pw.Done()
		p.run(*every, stop, ask)
	}()
	start := time.Now()
	end := start.Add(*deadline)
	perTick := max(1, *rate/100)
	sent := 0
	for tick := time.NewTicker(10 * time.Millisecond); sent < *count && time.Now().Before(end); <-tick.C {
		for range min(perTick, *count-sent) {
			i := sent
			m, err := dhcpv4.New(dhcpv4.WithTransactionID(xid(xidFlood, i)),
				dhcpv4.WithHwAddr(net.HardwareAddr{0x02, 0xfe, 0, byte(i >> 16), byte(i >> 8), byte(i)}),
				dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
				dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP(pool[i%len(pool)]))),
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server.AsSlice())))
			if err != nil {
				return nil, err
			}
			if _, err := conn.WriteTo(m.ToBytes(), c.server); err != nil {
				return nil, fmt.Errorf("send: %w", err)
			}
			sent++
		}
	}
	took := time.Since(start)
	time.Sleep(2 * time.Second) // the last answers
	close(stop)
	pw.Wait()
	newcomer := "none"
	if a, err := c.discover(net.HardwareAddr{0x02, 0xfd, 0, 0, 0, 1}, xid(xidNewcomer, 1)); err == nil {
		newcomer = "offer " + a.String()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.s
	s.Sent, s.Addresses, s.Newcomer = sent, len(c.leased), newcomer
	s.Unanswered = sent - s.Acks - s.Naks - s.Other
	s.ProbeSummary, s.Elapsed = p.summary(), round(took)
	return s, nil
}
