package plan

import "testing"

func TestServerURLs(t *testing.T) {
	v6 := &NetworkV6{ServerAddress: "2001:db8:1::1", Prefix: "2001:db8:1::/64", DHCP: DHCPProxy}
	for _, c := range []struct {
		name                             string
		nw                               Network
		server, agent, serverV6, agentV6 string
	}{
		{"ipv4", Network{ServerAddress: "198.18.0.1", HTTPPort: 8080},
			"http://198.18.0.1:8080", "http://198.18.0.1:8080", "", ""},
		{"dual stack, TLS", Network{ServerAddress: "198.18.0.1", HTTPPort: 8080, HTTPSPort: 8443, IPv6: v6},
			"http://198.18.0.1:8080", "https://198.18.0.1:8443", "http://[2001:db8:1::1]:8080", "https://[2001:db8:1::1]:8443"},
		{"ipv6 only", Network{HTTPPort: 80, IPv6: v6},
			"http://[2001:db8:1::1]:80", "http://[2001:db8:1::1]:80", "http://[2001:db8:1::1]:80", "http://[2001:db8:1::1]:80"},
	} {
		s := &Site{Network: c.nw}
		if got := [4]string{s.ServerURL(), s.AgentURL(), s.ServerURLv6(), s.AgentURLv6()}; got != [4]string{c.server, c.agent, c.serverV6, c.agentV6} {
			t.Errorf("%s: ServerURL, AgentURL, ServerURLv6, AgentURLv6 = %q", c.name, got)
		}
	}
	if got := HostPort("fd00::5", 69); got != "[fd00::5]:69" {
		t.Errorf("HostPort: %q", got)
	}
}

// Reservation is the DHCPv4 lease of a MAC, ReservationV6 the DHCPv6 one:
// a node with only one has no other.
func TestReservationsByFamily(t *testing.T) {
	p := &Plan{Sites: []*Site{{Name: "s", Reservations: []Reservation{
		{Node: "both", MACs: []string{"52:54:00:00:00:01"}, IP: "198.18.0.21", IPv6: "2001:db8:1::21"},
		{Node: "v6", MACs: []string{"52:54:00:00:00:02"}, IPv6: "2001:db8:1::22"},
		{Node: "v4", MACs: []string{"52:54:00:00:00:03"}, IP: "198.18.0.23"},
	}}}}
	for _, c := range []struct {
		mac        string
		ip, ipv6   string
		has4, has6 bool
	}{
		{"52:54:00:00:00:01", "198.18.0.21", "2001:db8:1::21", true, true},
		{"52:54:00:00:00:02", "", "2001:db8:1::22", false, true},
		{"52:54:00:00:00:03", "198.18.0.23", "", true, false},
	} {
		r4, ok4 := p.Reservation("s", c.mac)
		r6, ok6 := p.ReservationV6("s", c.mac)
		if ok4 != c.has4 || ok6 != c.has6 || ok4 && r4.IP != c.ip || ok6 && r6.IPv6 != c.ipv6 {
			t.Errorf("%s: Reservation %+v %v, ReservationV6 %+v %v", c.mac, r4, ok4, r6, ok6)
		}
	}
	for ip, want := range map[string]bool{"2001:db8:1::22": true, "198.18.0.23": true, "2001:db8:1::23": false, "": false} {
		if p.Reserved("s", ip) != want {
			t.Errorf("Reserved(%q) = %v", ip, !want)
		}
	}
}
