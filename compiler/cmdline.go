package compiler

import (
	"fmt"
	"strings"
)

// Kernel command lines: a MicroOS's cmdline and a Profile's kernelArgs are
// written into the kernel line of the iPXE script, so they are checked at
// compile time (checkCmdline) and cleaned again when the script is rendered
// (ipxeArgs), for a caller that renders values the checks never saw.
//
// iPXE reads a script line by line, expands ${…} settings in each line,
// splits it at white space, ends the line at a word starting with '#', and
// starts another command after a word "||", "&&" or ";". None of that is
// wanted in a kernel command line: no field of one is expanded, so "${" is
// refused rather than left to iPXE.

// cmdlineReserved is the prefix of the kernel parameters bootops sets
// itself (plan.CmdlineServer, CmdlineNode, CmdlineSite, CmdlineToken,
// CmdlineMachine, and bootops.profile and bootops.mode): an operator's
// value must not set or shadow them, nor any bootops.* parameter a later
// version may add. The one exception is cmdlineOperator.
const cmdlineReserved = "bootops."

// cmdlineOperator is the bootops.* parameter meant for operators: the
// Micro-OS's init opens a shell instead of powering off on failure.
const cmdlineOperator = "bootops.debug"

// checkCmdline says why s cannot go on the kernel line of an iPXE script,
// or "" when it can.
func checkCmdline(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != 0x7f {
			continue
		}
		switch c {
		case '\n':
			return `contains a newline (\n): iPXE would run the rest as a command of its own; write the parameters on one line`
		case '\r':
			return `contains a carriage return (\r): iPXE would end the line there; write the parameters on one line`
		case 0:
			return `contains a NUL byte (\x00): the kernel line would be cut there`
		case '\t':
			return `contains a tab (\t): separate kernel parameters with spaces`
		}
		return fmt.Sprintf("contains the control character %q: not allowed on a kernel command line", string(c))
	}
	if strings.Contains(s, "${") {
		return `contains "${": iPXE would expand it as a setting, and no kernel parameter is expanded; write the value itself`
	}
	for _, w := range strings.Fields(s) {
		switch {
		case w == "||" || w == "&&" || w == ";":
			return fmt.Sprintf("contains the word %q: iPXE would end the kernel command there and run what follows as another command", w)
		case strings.HasPrefix(w, "#"):
			return fmt.Sprintf("contains the word %q: iPXE would read the rest of the line as a comment", w)
		case strings.HasPrefix(w, cmdlineReserved):
			key, _, _ := strings.Cut(w, "=")
			if key == cmdlineOperator {
				continue
			}
			return fmt.Sprintf("sets %s: bootops.* parameters are bootops's own (it sets server, node, site, token and machine itself); the only one a repository may set is %s", key, cmdlineOperator)
		}
	}
	return ""
}

// ipxeArgs is the second line of defence: the words of an operator's
// command line that are safe on an iPXE kernel line. Control characters
// separate words; a word iPXE would expand, treat as a command separator
// or comment, or that sets a bootops.* parameter, is dropped. For checked
// values it changes nothing but runs of spaces.
func ipxeArgs(s string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		if checkCmdline(w) == "" {
			out = append(out, w)
		}
	}
	return out
}

// ipxeWord cleans a value bootops puts in the script itself (a name, the
// server URL): validated by the schema, so this only matters to a caller
// that renders unchecked values. Control characters and spaces are
// removed, and so is '$' (no name has one), so the value stays one inert
// word that iPXE cannot expand.
func ipxeWord(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '$' }) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c > ' ' && c != 0x7f && c != '$' {
			b.WriteByte(c)
		}
	}
	return b.String()
}
