package plan

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// NormalizeMAC returns mac in lower case with ':' separators, or "" when it
// is not a 6-byte hardware address written with ':', '-' or nothing.
func NormalizeMAC(mac string) string {
	var hex [12]byte
	n := 0
	for i := 0; i < len(mac); i++ {
		c := mac[i]
		switch {
		case c == ':' || c == '-' || c == '.' || c == ' ':
			continue
		case c >= 'A' && c <= 'F':
			c += 'a' - 'A'
		case c >= '0' && c <= '9' || c >= 'a' && c <= 'f':
		default:
			return ""
		}
		if n == 12 {
			return ""
		}
		hex[n] = c
		n++
	}
	if n != 12 {
		return ""
	}
	out := make([]byte, 0, 17)
	for i := 0; i < 12; i += 2 {
		if i > 0 {
			out = append(out, ':')
		}
		out = append(out, hex[i], hex[i+1])
	}
	return string(out)
}

// NormalizeUUID returns uuid in lower case in the 8-4-4-4-12 form, or "" when
// it is not 32 hex digits (with or without dashes).
func NormalizeUUID(uuid string) string {
	s := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(uuid), "-", ""))
	if len(s) != 32 || !isHex(s) {
		return ""
	}
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

// NormalizeEK returns an EK hash ("sha256:" and 64 hex digits, the prefix
// and the digits in any case) in lower case, or "" when it is not one.
func NormalizeEK(ek string) string {
	s := strings.ToLower(strings.TrimSpace(ek))
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != 64 || !isHex(h) {
		return ""
	}
	return s
}

// NormalizeSerial returns serial trimmed and in upper case: SMBIOS serials
// are compared case-insensitively.
func NormalizeSerial(serial string) string {
	return strings.ToUpper(strings.TrimSpace(serial))
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Machine is what a booting machine presents: any of its identifiers may be
// empty.
type Machine struct {
	MAC    string `json:"mac,omitempty"`
	UUID   string `json:"uuid,omitempty"`
	Serial string `json:"serial,omitempty"`
}

func (m Machine) normalize() Machine {
	return Machine{MAC: NormalizeMAC(m.MAC), UUID: NormalizeUUID(m.UUID), Serial: NormalizeSerial(m.Serial)}
}

// Outcome classifies a Decision.
type Outcome string

// Outcomes of Decide.
const (
	// Match: one node matches and nothing contradicts it.
	Match Outcome = "match"
	// Mismatch: the identifiers point at different nodes, contradict the
	// matching node's registered ones, or the node belongs to another site.
	// The machine is refused.
	Mismatch Outcome = "mismatch"
	// Unknown: nothing matches; the site's unknownNodes policy applies.
	Unknown Outcome = "unknown"
)

// Conflict is one identifier that disagrees with a registered node.
type Conflict struct {
	Node       string `json:"node"`
	Site       string `json:"site"`
	Source     string `json:"source"`
	Field      string `json:"field"`
	Registered string `json:"registered,omitempty"`
	Presented  string `json:"presented"`
}

// Decision is what a machine presenting some identifiers gets.
type Decision struct {
	Outcome Outcome `json:"outcome"`
	// Site is the site whose network the machine boots on (may be nil when
	// the plan has no such site).
	Site *Site `json:"-"`
	// Node is the matched node (Match only).
	Node *Node `json:"-"`
	// Profile is the profile the machine installs: the node's, or the site's
	// default for an unknown machine under the provision policy.
	Profile string `json:"profile,omitempty"`
	// Policy is the site's unknownNodes policy (Unknown only).
	Policy    string     `json:"policy,omitempty"`
	Reason    string     `json:"reason"`
	Conflicts []Conflict `json:"conflicts,omitempty"`
}

// Boots reports whether the machine is answered with a Micro-OS.
func (d Decision) Boots() bool {
	switch d.Outcome {
	case Match:
		return true
	case Unknown:
		return d.Site != nil && d.Site.Unknown != nil
	}
	return false
}

type index struct {
	sites    map[string]*Site
	nodes    map[string]*Node // site/name
	profiles map[string]*Profile
	byMAC    map[string]*Node
	byUUID   map[string]*Node
	bySerial map[string]*Node
	// reservations (DHCPv4) and reservationsV6 (DHCPv6) by site/MAC;
	// reserved addresses of both families by site/address; sites with a
	// node known by serial only.
	reservations   map[string]Reservation
	reservationsV6 map[string]Reservation
	reservedIPs    map[string]bool
	serialOnly     map[string]bool
}

func (p *Plan) idx() *index {
	p.once.Do(func() {
		ix := &index{
			sites:          map[string]*Site{},
			nodes:          map[string]*Node{},
			profiles:       map[string]*Profile{},
			byMAC:          map[string]*Node{},
			byUUID:         map[string]*Node{},
			bySerial:       map[string]*Node{},
			reservations:   map[string]Reservation{},
			reservationsV6: map[string]Reservation{},
			reservedIPs:    map[string]bool{},
			serialOnly:     map[string]bool{},
		}
		for _, pr := range p.Profiles {
			ix.profiles[pr.Name] = pr
		}
		for _, s := range p.Sites {
			ix.sites[s.Name] = s
			for _, r := range s.Reservations {
				for _, ip := range []string{r.IP, r.IPv6} {
					if ip != "" {
						ix.reservedIPs[s.Name+"/"+ip] = true
					}
				}
				for _, m := range r.MACs {
					if r.IP != "" {
						ix.reservations[s.Name+"/"+m] = r
					}
					if r.IPv6 != "" {
						ix.reservationsV6[s.Name+"/"+m] = r
					}
				}
			}
			for _, n := range s.Nodes {
				if len(n.Identity.MACs) == 0 && n.Identity.UUID == "" {
					ix.serialOnly[s.Name] = true
				}
				ix.nodes[s.Name+"/"+n.Name] = n
				for _, m := range n.Identity.MACs {
					ix.byMAC[m] = n
				}
				if n.Identity.UUID != "" {
					ix.byUUID[n.Identity.UUID] = n
				}
				if n.Identity.Serial != "" {
					ix.bySerial[n.Identity.Serial] = n
				}
			}
		}
		p.index = ix
	})
	return p.index
}

// Decide says what a machine presenting m on site's network gets. site may
// be "" when the Plan has exactly one site. It is the one decision function
// behind `bootops explain` and the HTTP boot server; it does not know which
// nodes are already provisioned (the boot plane checks that on a Match).
func (p *Plan) Decide(site string, m Machine) Decision {
	ix := p.idx()
	m = m.normalize()
	var s *Site
	if site != "" {
		s = ix.sites[site]
	} else if len(p.Sites) == 1 {
		s = p.Sites[0]
	}

	var hits []hit
	if n := ix.bySerial[m.Serial]; m.Serial != "" && n != nil {
		hits = append(hits, hit{"serial", m.Serial, n})
	}
	if n := ix.byUUID[m.UUID]; m.UUID != "" && n != nil {
		hits = append(hits, hit{"uuid", m.UUID, n})
	}
	if n := ix.byMAC[m.MAC]; m.MAC != "" && n != nil {
		hits = append(hits, hit{"mac", m.MAC, n})
	}

	if len(hits) == 0 {
		return unknown(s, site, m)
	}

	// Identifiers pointing at different nodes.
	var conflicts []Conflict
	n := hits[0].node
	for _, h := range hits[1:] {
		if h.node != n {
			conflicts = append(conflicts, Conflict{
				Node: h.node.Name, Site: h.node.Site, Source: h.node.Source,
				Field: h.field, Registered: h.value, Presented: h.value,
			})
		}
	}
	if len(conflicts) > 0 {
		all := append([]Conflict{{Node: n.Name, Site: n.Site, Source: n.Source, Field: hits[0].field, Registered: hits[0].value, Presented: hits[0].value}}, conflicts...)
		var parts []string
		for _, c := range all {
			parts = append(parts, fmt.Sprintf("%s %s is node %s/%s", c.Field, c.Presented, c.Site, c.Node))
		}
		return Decision{Outcome: Mismatch, Site: s, Conflicts: all,
			Reason: "identifiers point at different nodes: " + strings.Join(parts, "; ")}
	}

	// Identifiers contradicting the node's registered ones.
	id := n.Identity
	if m.Serial != "" && id.Serial != "" && m.Serial != id.Serial {
		conflicts = append(conflicts, Conflict{Node: n.Name, Site: n.Site, Source: n.Source, Field: "serial", Registered: id.Serial, Presented: m.Serial})
	}
	if m.UUID != "" && id.UUID != "" && m.UUID != id.UUID {
		conflicts = append(conflicts, Conflict{Node: n.Name, Site: n.Site, Source: n.Source, Field: "uuid", Registered: id.UUID, Presented: m.UUID})
	}
	if m.MAC != "" && len(id.MACs) > 0 && !slices.Contains(id.MACs, m.MAC) {
		conflicts = append(conflicts, Conflict{Node: n.Name, Site: n.Site, Source: n.Source, Field: "mac", Registered: strings.Join(id.MACs, ","), Presented: m.MAC})
	}
	matched := matchedBy(hits)
	if len(conflicts) > 0 {
		var parts []string
		for _, c := range conflicts {
			parts = append(parts, fmt.Sprintf("%s %s presented, %s registered", c.Field, c.Presented, c.Registered))
		}
		return Decision{Outcome: Mismatch, Site: s, Node: n, Conflicts: conflicts,
			Reason: fmt.Sprintf("%s matches node %s/%s (%s) but %s", matched, n.Site, n.Name, n.Source, strings.Join(parts, "; "))}
	}
	if s != nil && n.Site != s.Name {
		return Decision{Outcome: Mismatch, Site: s, Node: n,
			Conflicts: []Conflict{{Node: n.Name, Site: n.Site, Source: n.Source, Field: "site", Registered: n.Site, Presented: s.Name}},
			Reason:    fmt.Sprintf("%s matches node %s/%s (%s), registered at site %s, but it boots on site %s", matched, n.Site, n.Name, n.Source, n.Site, s.Name)}
	}
	if s == nil {
		s = ix.sites[n.Site]
	}
	return Decision{Outcome: Match, Site: s, Node: n, Profile: n.Profile,
		Reason: fmt.Sprintf("%s matches node %s/%s (%s); no identifier contradicts it", matched, n.Site, n.Name, n.Source)}
}

type hit struct {
	field, value string
	node         *Node
}

func matchedBy(hits []hit) string {
	var parts []string
	for _, h := range hits {
		parts = append(parts, h.field+" "+h.value)
	}
	sort.Strings(parts)
	return strings.Join(parts, " and ")
}

func unknown(s *Site, site string, m Machine) Decision {
	if s == nil {
		reason := "no registered node has these identifiers"
		if site != "" {
			reason += fmt.Sprintf(", and there is no site %q to apply an unknown-machine policy", site)
		} else {
			reason += ", and the plan has several sites: name the site whose network the machine boots on"
		}
		return Decision{Outcome: Unknown, Policy: PolicyIgnore, Reason: reason}
	}
	var presented []string
	for _, kv := range [][2]string{{"mac", m.MAC}, {"uuid", m.UUID}, {"serial", m.Serial}} {
		if kv[1] != "" {
			presented = append(presented, kv[0]+" "+kv[1])
		}
	}
	why := "the machine presented no usable mac, uuid or serial"
	if len(presented) > 0 {
		why = "no registered node has " + strings.Join(presented, ", ")
	}
	d := Decision{Outcome: Unknown, Site: s, Policy: s.UnknownNodes}
	switch s.UnknownNodes {
	case PolicyProvision:
		d.Profile = s.DefaultProfile
		d.Reason = fmt.Sprintf("%s; site %s provisions unknown machines with its default profile %s", why, s.Name, s.DefaultProfile)
	case PolicyHold:
		d.Reason = fmt.Sprintf("%s; site %s holds unknown machines in the Micro-OS until a Node is committed", why, s.Name)
	default:
		d.Reason = fmt.Sprintf("%s; site %s ignores unknown machines", why, s.Name)
	}
	return d
}

// Reservation returns the static IPv4 lease of a MAC (normalised) on a
// site: a node with only an IPv6 reservation has none.
func (p *Plan) Reservation(site, mac string) (Reservation, bool) {
	r, ok := p.idx().reservations[site+"/"+mac]
	return r, ok
}

// ReservationV6 returns the static IPv6 lease (Reservation.IPv6) of a MAC
// (normalised) on a site.
func (p *Plan) ReservationV6(site, mac string) (Reservation, bool) {
	r, ok := p.idx().reservationsV6[site+"/"+mac]
	return r, ok
}

// Reserved reports whether ip (IPv4, or IPv6 in canonical form) is a
// node's static address on a site.
func (p *Plan) Reserved(site, ip string) bool {
	return p.idx().reservedIPs[site+"/"+ip]
}

// Registered says whether a node of the Plan has the MAC (normalised):
// how the DHCP servers answer nodes first when unknown clients flood them.
func (p *Plan) Registered(mac string) bool {
	return mac != "" && p.idx().byMAC[mac] != nil
}

// HasSerialOnlyNodes reports whether a site has a node registered by serial
// alone: such a node cannot be recognised before iPXE reports the serial, so
// the DHCP server must answer machines it does not know.
func (p *Plan) HasSerialOnlyNodes(site string) bool {
	return p.idx().serialOnly[site]
}
