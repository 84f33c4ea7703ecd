package compiler

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// writeYAML writes v as block-style YAML with sorted keys: deterministic,
// and quoting any string a YAML reader could take for something else.
func writeYAML(b *strings.Builder, v *value, indent int) {
	pad := strings.Repeat("  ", indent)
	switch v.kind {
	case kMap:
		keys := append([]string(nil), v.keys...)
		sort.Strings(keys)
		for _, k := range keys {
			e := v.get(k)
			b.WriteString(pad)
			b.WriteString(yamlString(k))
			b.WriteByte(':')
			writeChild(b, e, indent)
		}
	case kList:
		for _, e := range v.list {
			if e.kind == kMap && len(e.keys) > 0 {
				// "- key: value" with the other keys aligned under it.
				var sub strings.Builder
				writeYAML(&sub, e, indent+1)
				b.WriteString(pad)
				b.WriteString("- ")
				b.WriteString(sub.String()[len(pad)+2:])
				continue
			}
			b.WriteString(pad)
			b.WriteByte('-')
			writeChild(b, e, indent)
		}
	default:
		b.WriteString(pad)
		b.WriteString(yamlScalar(v))
		b.WriteByte('\n')
	}
}

func writeChild(b *strings.Builder, e *value, indent int) {
	switch {
	case e.kind == kMap && len(e.keys) > 0, e.kind == kList && len(e.list) > 0:
		b.WriteByte('\n')
		writeYAML(b, e, indent+1)
	case e.kind == kMap:
		b.WriteString(" {}\n")
	case e.kind == kList:
		b.WriteString(" []\n")
	case e.kind == kString && strings.Contains(e.str, "\n") && !strings.ContainsAny(e.str, "\r\t") && strings.TrimRight(e.str, "\n") == e.str[:len(e.str)-1] && !strings.HasPrefix(e.str, " "):
		// Multi-line text as a literal block, as people write scripts.
		pad := strings.Repeat("  ", indent+1)
		b.WriteString(" |\n")
		for _, line := range strings.Split(strings.TrimSuffix(e.str, "\n"), "\n") {
			if line != "" {
				b.WriteString(pad)
				b.WriteString(line)
			}
			b.WriteByte('\n')
		}
	default:
		b.WriteByte(' ')
		b.WriteString(yamlScalar(e))
		b.WriteByte('\n')
	}
}

func yamlScalar(v *value) string {
	switch v.kind {
	case kString:
		return yamlString(v.str)
	case kNull:
		return "null"
	}
	return v.String()
}

// yamlString quotes s unless it reads back as the same plain string.
func yamlString(s string) string {
	if s == "" || plainUnsafe(s) {
		return strconv.Quote(s)
	}
	return s
}

// yamlNonString matches the plain scalars a YAML reader resolves to
// something other than a string: YAML 1.1's int (binary, octal 0…, hex,
// sexagesimal 12:30:00, with '_'), float (1.5, .inf, .nan, sexagesimal),
// timestamp (2001-12-14), merge (<<) and value (=), which PyYAML — hence
// cloud-init — applies, and YAML 1.2's 0o17, 09 and 1e3. The one part of
// YAML 1.1's float left out is the spec's "[0-9.]*" after the point, which
// would make 10.0.0.1 a number: no reader implements it.
var yamlNonString = regexp.MustCompile(`^(?:` +
	`[-+]?0b[01_]+|[-+]?0o?[0-7_]+|[-+]?0x[0-9a-fA-F_]+|[-+]?[0-9][0-9_]*` +
	`|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?` +
	`|[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+` +
	`|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)` +
	`|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)?` +
	`|<<|=` +
	`)$`)

func plainUnsafe(s string) bool {
	// Booleans and null in any case: YAML 1.1 has yes/no/on/off/y/n.
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~":
		return true
	}
	if yamlNonString.MatchString(s) {
		return true
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return true
	}
	if strings.ContainsAny(s[:1], "-?:,[]{}#&*!|>'\"%@` \t") || strings.ContainsAny(s, "\n\r\t\\") {
		return true
	}
	if strings.Contains(s, ": ") || strings.Contains(s, " #") || strings.HasSuffix(s, ":") || strings.HasSuffix(s, " ") {
		return true
	}
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return true
		}
	}
	return false
}
