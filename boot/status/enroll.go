package status

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/bootops/bootops/plan"
)

// NodeYAML is a Node object that registers m, named name (SuggestName(m)
// when empty): what `bootops status --unknown`, `bootops enroll` and the
// dashboard offer to commit for a machine that is no node yet. Every value
// is written through plan.YAMLString, the quoting cloud-init's documents
// get: whatever a machine reported, it reads back as the same string and
// can never add a key. A value that is not UTF-8 (which no YAML document
// can carry as it is) is refused, and so is an EK hash that is not one.
func NodeYAML(m Machine, name string) (string, error) {
	if name == "" {
		name = SuggestName(m)
	}
	for what, v := range map[string]string{"name": name, "site": m.Site, "serial": m.Serial, "uuid": m.UUID, "mac": m.MAC} {
		if !utf8.ValidString(v) {
			return "", fmt.Errorf("the machine's %s %q is not UTF-8: register it by hand", what, v)
		}
	}
	ek := plan.NormalizeEK(m.EK)
	if m.EK != "" && ek == "" {
		return "", fmt.Errorf("the machine's TPM EK hash %q is not sha256: and 64 hex digits: register it by hand", m.EK)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: %s\n", plan.YAMLString(name))
	if m.Site != "" {
		fmt.Fprintf(&b, "site: %s\n", plan.YAMLString(m.Site))
	}
	b.WriteString("identity:\n")
	if m.Serial != "" {
		fmt.Fprintf(&b, "  serial: %s\n", plan.YAMLString(m.Serial))
	}
	if m.UUID != "" {
		fmt.Fprintf(&b, "  uuid: %s\n", plan.YAMLString(m.UUID))
	}
	if m.MAC != "" {
		fmt.Fprintf(&b, "  mac: %s\n", plan.YAMLString(m.MAC))
	}
	if ek != "" {
		fmt.Fprintf(&b, "  tpm:\n    ek: %s\n", plan.YAMLString(ek))
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// SuggestName makes a node name (a DNS label) from the machine's serial,
// else its MAC, else its UUID, else its EK hash ("tpm-" and 12 digits).
func SuggestName(m Machine) string {
	src := m.Serial
	if src == "" {
		src = strings.ReplaceAll(m.MAC, ":", "")
	}
	if src == "" {
		src = m.UUID
	}
	if h, ok := strings.CutPrefix(plan.NormalizeEK(m.EK), "sha256:"); src == "" && ok {
		src = "tpm-" + h[:12]
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
