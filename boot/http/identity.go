package http

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/bootops/bootops/plan"
)

// identity is what iPXE reports about itself on the per-machine request.
type identity struct {
	Machine  plan.Machine
	Site     string
	Arch     string
	Platform string
}

// parseIdentity reads the query the entry script makes iPXE send. Values
// iPXE could not fill in come back empty or as junk ("", "00:00:…" for no
// UUID, a firmware's "To Be Filled By O.E.M." serial): those are dropped,
// never guessed at, so they cannot match a node.
func parseIdentity(q url.Values) identity {
	id := identity{
		Site:     word(q.Get("site"), 63),
		Arch:     word(q.Get("arch"), 16),
		Platform: word(q.Get("platform"), 16),
	}
	id.Machine.MAC = plan.NormalizeMAC(q.Get("mac"))
	id.Machine.UUID, _ = parseUUID(q.Get("uuid"))
	id.Machine.Serial, _ = parseSerial(q.Get("serial"))
	return id
}

// parseUUID is a machine's SMBIOS UUID as bootops keeps it; "" for none
// or one a firmware reports when nobody set it (all zeros, all ones). ok
// is false when u is no UUID at all.
func parseUUID(u string) (string, bool) {
	if strings.TrimSpace(u) == "" {
		return "", true
	}
	n := plan.NormalizeUUID(u)
	if n == "" {
		return "", false
	}
	if strings.Trim(n, "0-") == "" || strings.Trim(n, "f-") == "" {
		return "", true
	}
	return n, true
}

// parseSerial is a machine's serial as bootops keeps it; "" for none or
// a placeholder a firmware reports. ok is false when s is no serial at all:
// over 64 bytes, or anything but printable ASCII without spaces.
func parseSerial(s string) (string, bool) {
	if strings.TrimSpace(s) == "" {
		return "", true
	}
	if s = clean(s, 64); s == "" {
		return "", false
	}
	if junkSerial(s) {
		return "", true
	}
	return plan.NormalizeSerial(s), true
}

// clean keeps printable ASCII without spaces, up to max bytes; "" for
// anything else.
func clean(s string, max int) string {
	s = strings.TrimSpace(s)
	if len(s) > max {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return ""
		}
	}
	return s
}

// checkInIdentity is what an agent says it is, through the parsers a
// script request's identity goes through; an error (400) for any value
// that is not an identifier: a MAC, UUID or serial no firmware reports,
// a machine key that is not one the server hands out, too many NICs.
func checkInIdentity(c *plan.CheckIn) error {
	if word(c.Site, 63) != c.Site { // word gives "" past 63 bytes
		return fmt.Errorf("site %.70q: not a site name", c.Site)
	}
	if word(c.Node, 63) != c.Node {
		return fmt.Errorf("node %.70q: not a node name", c.Node)
	}
	if c.Machine != "" && !validMachineKey(c.Machine) {
		return fmt.Errorf("machine %.70q: not a machine key (mac:, uuid: or serial: and its value)", c.Machine)
	}
	id := &c.Identity
	if len(id.MACs) > 64 {
		return fmt.Errorf("identity: %d MACs, at most 64", len(id.MACs))
	}
	for i, m := range id.MACs {
		if plan.NormalizeMAC(m) == "" {
			return fmt.Errorf("identity.macs[%d] %.40q: not a MAC address", i, m)
		}
	}
	var ok bool
	uuid, serial := id.UUID, id.Serial
	if id.UUID, ok = parseUUID(uuid); !ok {
		return fmt.Errorf("identity.uuid %.40q: not a UUID", uuid)
	}
	if id.Serial, ok = parseSerial(serial); !ok {
		return fmt.Errorf("identity.serial %.70q: not a serial (printable ASCII without spaces, at most 64 bytes)", serial)
	}
	if len(c.Disks) > 256 {
		return fmt.Errorf("disks: %d, at most 256", len(c.Disks))
	}
	for i, d := range c.Disks {
		if clean(d.Name, 64) != d.Name {
			return fmt.Errorf("disks[%d].name %.70q: not a device name", i, d.Name)
		}
	}
	if len(c.Arch) > 32 || len(c.Agent) > 128 {
		return fmt.Errorf("arch or agent version too long")
	}
	switch c.Boot.Firmware {
	case "", "uefi", "bios":
	default:
		return fmt.Errorf("boot.firmware %.40q: want uefi or bios", c.Boot.Firmware)
	}
	switch c.Boot.Chain {
	case "", plan.ChainIPXE, plan.ChainShim, plan.ChainUKI:
	default:
		return fmt.Errorf("boot.chain %.40q: want %s, %s or %s", c.Boot.Chain, plan.ChainIPXE, plan.ChainShim, plan.ChainUKI)
	}
	return nil
}

// validMachineKey reports whether k is a key the server hands an unknown
// machine (plan.MachineKey's, or ip: and an address), which may stand on
// a kernel command line as it is.
func validMachineKey(k string) bool {
	kind, v, ok := strings.Cut(k, ":")
	if !ok || len(k) > 128 || !safeKey(k) {
		return false
	}
	switch kind {
	case "mac":
		return plan.NormalizeMAC(v) == v
	case "uuid":
		u, _ := parseUUID(v)
		return u != "" && u == v
	case "serial":
		s, _ := parseSerial(v)
		return s != "" && s == v
	case "ip":
		a, err := netip.ParseAddr(v)
		return err == nil && a.String() == v
	}
	return false
}

// junkSerial reports serials firmwares report when nobody set one.
func junkSerial(s string) bool {
	switch strings.ToLower(s) {
	case "0", "none", "default", "unknown", "n/a", "na", "system-serial-number", "0123456789", "to-be-filled-by-o.e.m.":
		return true
	}
	return strings.Trim(s, "0") == ""
}

// word keeps letters, digits, '-' and '_' only, up to max bytes.
func word(s string, max int) string {
	if len(s) > max {
		return ""
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return ""
		}
	}
	return s
}
