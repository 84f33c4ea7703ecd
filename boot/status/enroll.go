package status

import (
	"fmt"
	"strings"
)

// NodeYAML is a Node object that registers m, named name (SuggestName(m)
// when empty): what `bootops status --unknown`, `bootops enroll` and the
// dashboard offer to commit for a machine that is no node yet.
func NodeYAML(m Machine, name string) string {
	if name == "" {
		name = SuggestName(m)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: %s\n", name)
	if m.Site != "" {
		fmt.Fprintf(&b, "site: %s\n", m.Site)
	}
	b.WriteString("identity:\n")
	if m.Serial != "" {
		fmt.Fprintf(&b, "  serial: %q\n", m.Serial)
	}
	if m.UUID != "" {
		fmt.Fprintf(&b, "  uuid: %s\n", m.UUID)
	}
	if m.MAC != "" {
		fmt.Fprintf(&b, "  mac: %q\n", m.MAC)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// SuggestName makes a node name (a DNS label) from the machine's serial,
// else its MAC, else its UUID.
func SuggestName(m Machine) string {
	src := m.Serial
	if src == "" {
		src = strings.ReplaceAll(m.MAC, ":", "")
	}
	if src == "" {
		src = m.UUID
	}
	var b strings.Builder
	for _, r := range strings.ToLower(src) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteRune('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 63 {
		name = strings.Trim(name[:63], "-")
	}
	if name == "" {
		name = "node"
	}
	return name
}
