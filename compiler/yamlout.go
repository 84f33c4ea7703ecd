package compiler

import (
	"sort"
	"strings"

	"github.com/bootops/bootops/plan"
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
var yamlString = plan.YAMLString
