package boot

import (
	"net/netip"
	"strings"

	"github.com/bootops/bootops/plan"
)

// What a machine says it is, as both servers of the boot plane keep it:
// the script server (boot/http) reads it from iPXE's query, the agent API
// (boot/agentapi) from the check-in; one set of parsers, so a value one
// drops the other drops too.

// ParseUUID is a machine's SMBIOS UUID as bootops keeps it; "" for none
// or one a firmware reports when nobody set it (all zeros, all ones). ok
// is false when u is no UUID at all.
func ParseUUID(u string) (string, bool) {
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

// ParseSerial is a machine's serial as bootops keeps it; "" for none or
// a placeholder a firmware reports. ok is false when s is no serial at all:
// over 64 bytes, or anything but printable ASCII without spaces.
func ParseSerial(s string) (string, bool) {
	if strings.TrimSpace(s) == "" {
		return "", true
	}
	if s = Clean(s, 64); s == "" {
		return "", false
	}
	if junkSerial(s) {
		return "", true
	}
	return plan.NormalizeSerial(s), true
}

// Clean keeps printable ASCII without spaces, up to max bytes; "" for
// anything else.
func Clean(s string, max int) string {
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

// junkSerial reports serials firmwares report when nobody set one.
func junkSerial(s string) bool {
	switch strings.ToLower(s) {
	case "0", "none", "default", "unknown", "n/a", "na", "system-serial-number", "0123456789", "to-be-filled-by-o.e.m.":
		return true
	}
	return strings.Trim(s, "0") == ""
}

// Word keeps letters, digits, '-' and '_' only, up to max bytes; "" for
// anything else.
func Word(s string, max int) string {
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

// SafeKey reports whether a machine key can stand on a kernel command
// line and in an iPXE script as it is: no spaces, no "${" expansion, no
// quotes.
func SafeKey(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == ':' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// ValidMachineKey reports whether k is a key the script server hands an
// unknown machine (plan.MachineKey's, or ip: and an address), which the
// agent presents again at check-in.
func ValidMachineKey(k string) bool {
	kind, v, ok := strings.Cut(k, ":")
	if !ok || len(k) > 128 || !SafeKey(k) {
		return false
	}
	switch kind {
	case "mac":
		return plan.NormalizeMAC(v) == v
	case "uuid":
		u, _ := ParseUUID(v)
		return u != "" && u == v
	case "serial":
		s, _ := ParseSerial(v)
		return s != "" && s == v
	case "ip":
		a, err := netip.ParseAddr(v)
		return err == nil && a.String() == v
	}
	return false
}

// TooManyNewcomers is what a machine new to the server is told when its
// source address is past its budget (status.Newcomers), by either server.
func TooManyNewcomers(ip string) string {
	return "too many machines new to this server from " + ip + " at once: try again in 10 s"
}
