package status

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Printable escapes what in s could drive a terminal or a browser, or
// forge a line or a column of output: C0 control characters (newlines,
// tabs and ESC among them), DEL, C1 controls (U+0080–U+009F, where CSI and OSC also
// live), the line and paragraph separators, the bidirectional overrides
// and isolates (text that reads one way and runs another), and bytes that
// are not UTF-8. Each is written \xNN or \uNNNN, so nothing is lost. The
// store keeps every string a machine sends this way, and the commands
// print through it again.
func Printable(s string) string {
	i := 0
	for i < len(s) {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		if c >= 0x80 {
			r, n := utf8.DecodeRuneInString(s[i:])
			if !unsafeRune(r, n) {
				i += n
				continue
			}
		}
		break
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		c := s[i]
		switch {
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
			i++
		case c == '\t':
			b.WriteString(`\t`)
			i++
		case c == '\n':
			b.WriteString(`\n`)
			i++
		case c == '\r':
			b.WriteString(`\r`)
			i++
		case c < 0x80:
			fmt.Fprintf(&b, `\x%02x`, c)
			i++
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && n == 1:
				fmt.Fprintf(&b, `\x%02x`, c)
			case unsafeRune(r, n):
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				b.WriteString(s[i : i+n])
			}
			i += n
		}
	}
	return b.String()
}

func unsafeRune(r rune, n int) bool {
	return r == utf8.RuneError && n == 1 || r >= 0x80 && r <= 0x9f ||
		r == 0x2028 || r == 0x2029 || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

// CSVCell is s as a spreadsheet cell that is never a formula: a formula
// character (= + - @, a tab or a carriage return) at its start, or after
// any separator a spreadsheet may split on (comma, semicolon, tab, pipe;
// spaces between), gets a quote before it (OWASP's CSV injection advice),
// so a cell split by a semicolon-separating spreadsheet is still text.
func CSVCell(s string) string {
	var b strings.Builder
	start := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if start && strings.IndexByte("=+-@\t\r", c) >= 0 {
			b.WriteByte('\'')
		}
		b.WriteByte(c)
		start = strings.IndexByte(",;|\t", c) >= 0 || start && c == ' '
	}
	return b.String()
}

// MaxMessage bounds an event's message as stored: the rest is cut, and
// the cut says how much went.
const MaxMessage = 8 << 10

// MaxField bounds every other string of an event as stored (an
// identifier, a state, a hostname; 2 KiB for the boot chain and
// cloud-init's result): a padded field costs the store no more than this.
const MaxField = 1 << 10

// BriefField bounds each string of a machine's summary in a fleet's
// document (Brief).
const BriefField = 512

// Brief is m as a fleet's document shows it, whatever its events were
// padded with: its identifiers whole (Key, Site, Node: the timeline is
// found by them; each within MaxField already), every other string within
// BriefField, its last event what happened, when and how far — without
// what it carried (an inventory, an install) — and no TPM report key (nor
// escrows, which no document carries). The
// whole record stays in the store; its events tell the rest.
func (m Machine) Brief() Machine {
	for _, f := range []*string{&m.MAC, &m.UUID, &m.Serial, &m.EK, &m.TPM, &m.State, &m.Boot, &m.Hostname, &m.Kernel,
		&m.Held, &m.Sync, &m.Revision, &m.InstallID, &m.CloudInit, &m.Encryption} {
		*f = cutString(*f, BriefField)
	}
	m.ReportKey, m.escrows = "", nil
	l := m.Last
	m.Last = Event{Time: l.Time, Kind: l.Kind, Site: l.Site, Node: l.Node, State: cutString(l.State, BriefField),
		Message: cutString(l.Message, 2*BriefField), Error: l.Error, Action: cutString(l.Action, BriefField),
		Step: l.Step, Steps: l.Steps, Bytes: l.Bytes, Total: l.Total, Rate: l.Rate}
	return m
}

// printable is e as the store keeps it: every string it carries made
// Printable, its message within MaxMessage and every other string within
// MaxField (the boot chain and cloud-init's result, twice that).
func (e Event) printable() Event {
	for _, f := range []*string{&e.Kind, &e.Site, &e.Node, &e.MAC, &e.UUID, &e.Serial, &e.IP, &e.State, &e.Message, &e.Action, &e.Boot, &e.Hostname, &e.Kernel,
		&e.InstallID, &e.CloudInit, &e.Revision, &e.Held, &e.EK, &e.TPM, &e.Sync, &e.Rollout} {
		*f = Printable(*f)
	}
	e.Message = cutString(e.Message, MaxMessage)
	for _, f := range []*string{&e.Kind, &e.Site, &e.Node, &e.MAC, &e.UUID, &e.Serial, &e.IP, &e.State, &e.Action, &e.Hostname, &e.Kernel,
		&e.InstallID, &e.Revision, &e.Held, &e.EK, &e.TPM, &e.Sync, &e.Rollout} {
		*f = cutString(*f, MaxField)
	}
	e.Boot, e.CloudInit = cutString(e.Boot, 2*MaxField), cutString(e.CloudInit, 2*MaxField)
	e.Escrow, e.Encryption = printableEscrow(e.Escrow), printableSealed(e.Encryption)
	return e
}

// cutString is s within max bytes (on a rune's start), saying how much
// went.
func cutString(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s … [cut: %d more bytes]", s[:cut], len(s)-cut)
}
