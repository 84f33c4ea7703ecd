package http

import (
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
	if u := plan.NormalizeUUID(q.Get("uuid")); u != "" && strings.Trim(u, "0-") != "" && strings.Trim(u, "f-") != "" {
		id.Machine.UUID = u
	}
	if s := clean(q.Get("serial"), 64); s != "" && !junkSerial(s) {
		id.Machine.Serial = plan.NormalizeSerial(s)
	}
	return id
}

// clean keeps printable ASCII without spaces, up to max bytes.
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
