package plan

import (
	"strings"
	"testing"
)

func testPlan() *Plan {
	a := &Site{Name: "a", UnknownNodes: PolicyProvision, DefaultProfile: "base", Unknown: &Artifacts{IPXE: "#!ipxe\n"}}
	b := &Site{Name: "b", UnknownNodes: PolicyIgnore}
	h := &Site{Name: "h", UnknownNodes: PolicyHold, Unknown: &Artifacts{IPXE: "#!ipxe\n"}}
	a.Nodes = []*Node{
		{Name: "by-serial", Site: "a", Profile: "p1", Source: "n.yaml:1", Identity: Identity{Serial: "SN1"}},
		{Name: "by-all", Site: "a", Profile: "p2", Source: "n.yaml:9", Identity: Identity{Serial: "SN2", UUID: "01020304-0506-0708-090a-0b0c0d0e0f10", MACs: []string{"52:54:00:00:00:02", "52:54:00:00:01:02"}}},
		{Name: "by-mac", Site: "a", Profile: "p1", Source: "m.yaml:1", Identity: Identity{MACs: []string{"52:54:00:00:00:03"}}},
	}
	b.Nodes = []*Node{{Name: "far", Site: "b", Profile: "p1", Source: "b.yaml:1", Identity: Identity{UUID: "11111111-2222-3333-4444-555555555555"}}}
	return &Plan{Sites: []*Site{a, b, h}}
}

func TestDecide(t *testing.T) {
	p := testPlan()
	for name, c := range map[string]struct {
		site    string
		m       Machine
		outcome Outcome
		node    string
		boots   bool
		reason  string
	}{
		"serial only":              {"a", Machine{Serial: "sn1"}, Match, "by-serial", true, "serial SN1 matches node a/by-serial (n.yaml:1)"},
		"uuid in upper case":       {"a", Machine{UUID: "01020304-0506-0708-090A-0B0C0D0E0F10"}, Match, "by-all", true, "uuid"},
		"second mac, dashes":       {"a", Machine{MAC: "52-54-00-00-01-02"}, Match, "by-all", true, "mac 52:54:00:00:01:02"},
		"all three agree":          {"a", Machine{MAC: "52:54:00:00:00:02", UUID: "0102030405060708090a0b0c0d0e0f10", Serial: "SN2"}, Match, "by-all", true, "mac 52:54:00:00:00:02 and serial SN2 and uuid"},
		"unregistered mac of node": {"a", Machine{MAC: "52:54:00:99:99:99", Serial: "SN2"}, Mismatch, "by-all", false, "mac 52:54:00:99:99:99 presented, 52:54:00:00:00:02,52:54:00:00:01:02 registered"},
		// The byte order of the first three UUID fields differs between
		// firmwares: a swapped UUID is a different UUID, and refused.
		"uuid byte-swapped": {"a", Machine{Serial: "SN2", UUID: "04030201-0605-0807-090a-0b0c0d0e0f10"}, Mismatch, "by-all", false, "uuid 04030201-0605-0807-090a-0b0c0d0e0f10 presented"},
		"two nodes":         {"a", Machine{Serial: "SN1", MAC: "52:54:00:00:00:03"}, Mismatch, "", false, "identifiers point at different nodes: serial SN1 is node a/by-serial; mac 52:54:00:00:00:03 is node a/by-mac"},
		"wrong site":        {"a", Machine{UUID: "11111111-2222-3333-4444-555555555555"}, Mismatch, "far", false, "registered at site b, but it boots on site a"},
		"unknown provision": {"a", Machine{Serial: "NEW"}, Unknown, "", true, "site a provisions unknown machines with its default profile base"},
		"unknown ignore":    {"b", Machine{MAC: "52:54:00:aa:bb:cc"}, Unknown, "", false, "site b ignores unknown machines"},
		"unknown hold":      {"h", Machine{}, Unknown, "", true, "the machine presented no usable mac, uuid or serial; site h holds"},
		"no site, known":    {"", Machine{Serial: "SN1"}, Match, "by-serial", true, "matches"},
		"no site, unknown":  {"", Machine{Serial: "NEW"}, Unknown, "", false, "name the site"},
		"missing site":      {"zz", Machine{Serial: "NEW"}, Unknown, "", false, `no site "zz"`},
		"junk identifiers":  {"a", Machine{MAC: "not-a-mac", UUID: "xyz"}, Unknown, "", true, "presented no usable"},
	} {
		t.Run(name, func(t *testing.T) {
			d := p.Decide(c.site, c.m)
			node := ""
			if d.Node != nil {
				node = d.Node.Name
			}
			if d.Outcome != c.outcome || node != c.node || d.Boots() != c.boots || !strings.Contains(d.Reason, c.reason) {
				t.Errorf("got %s node=%q boots=%v reason=%q\nwant %s node=%q boots=%v reason containing %q", d.Outcome, node, d.Boots(), d.Reason, c.outcome, c.node, c.boots, c.reason)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"52:54:00:AB:cd:EF": "52:54:00:ab:cd:ef", "52-54-00-ab-cd-ef": "52:54:00:ab:cd:ef", "525400abcdef": "52:54:00:ab:cd:ef",
		"5254.00ab.cdef": "52:54:00:ab:cd:ef", "52:54:00:ab:cd": "", "52:54:00:ab:cd:ef:01": "", "zz:54:00:ab:cd:ef": "",
	} {
		if got := NormalizeMAC(in); got != want {
			t.Errorf("NormalizeMAC(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"01020304-0506-0708-090A-0B0C0D0E0F10": "01020304-0506-0708-090a-0b0c0d0e0f10",
		"0102030405060708090a0b0c0d0e0f10":     "01020304-0506-0708-090a-0b0c0d0e0f10",
		"0102":                                 "", "g1020304-0506-0708-090a-0b0c0d0e0f10": "",
	} {
		if got := NormalizeUUID(in); got != want {
			t.Errorf("NormalizeUUID(%q) = %q, want %q", in, got, want)
		}
	}
	if got := NormalizeSerial("  sn-a1 "); got != "SN-A1" {
		t.Errorf("NormalizeSerial = %q", got)
	}
	ek := "sha256:ee08903b864743955c122523cfc868b09e2cd9d67e6d629130e8cb55aa11f7ca"
	for in, want := range map[string]string{
		ek: ek, "SHA256:EE08903B864743955C122523CFC868B09E2CD9D67E6D629130E8CB55AA11F7CA": ek, " sha256:ee08903b864743955c122523cfc868b09e2cd9d67e6d629130e8cb55aa11f7ca ": ek,
		"ee08903b864743955c122523cfc868b09e2cd9d67e6d629130e8cb55aa11f7ca": "", "sha256:ee08903b864743955c122523cfc868b09e2cd9d67e6d629130e8cb55aa11f7c": "", "sha256:ee08903b864743955c122523cfc868b09e2cd9d67e6d629130e8cb55aa11f7ca00": "", "sha1:ee08903b864743955c122523cfc868b09e2cd9d67e6d629130e8cb55aa11f7ca": "", "sha256:zz08903b864743955c122523cfc868b09e2cd9d67e6d629130e8cb55aa11f7ca": "",
	} {
		if got := NormalizeEK(in); got != want {
			t.Errorf("NormalizeEK(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReservationIndex(t *testing.T) {
	s := &Site{Name: "r", UnknownNodes: PolicyIgnore,
		Reservations: []Reservation{{Node: "a", MACs: []string{"52:54:00:00:00:01", "52:54:00:00:01:01"}, IP: "198.18.0.11"}},
		Nodes:        []*Node{{Name: "a", Site: "r", Identity: Identity{MACs: []string{"52:54:00:00:00:01"}}}}}
	p := &Plan{Sites: []*Site{s, {Name: "q", Nodes: []*Node{{Name: "b", Site: "q", Identity: Identity{Serial: "S"}}}}}}
	if r, ok := p.Reservation("r", "52:54:00:00:01:01"); !ok || r.IP != "198.18.0.11" {
		t.Errorf("second MAC: %+v %v", r, ok)
	}
	if _, ok := p.Reservation("q", "52:54:00:00:00:01"); ok {
		t.Error("a reservation leaked into another site")
	}
	if !p.Reserved("r", "198.18.0.11") || p.Reserved("r", "198.18.0.12") {
		t.Error("Reserved")
	}
	if p.HasSerialOnlyNodes("r") || !p.HasSerialOnlyNodes("q") {
		t.Error("HasSerialOnlyNodes")
	}
}
