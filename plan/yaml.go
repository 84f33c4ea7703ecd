package plan

import (
	"regexp"
	"strconv"
	"strings"
)

// YAMLString quotes s unless it reads back as the same plain string.
func YAMLString(s string) string {
	if s == "" || plainUnsafe(s) {
		return strconv.Quote(s) // Go's escapes are YAML's: \n, \t, \", \\, \xNN, \uNNNN
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
