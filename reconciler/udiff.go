package reconciler

import (
	"fmt"
	"strings"
)

// UnifiedDiff is a line diff of a and b in the unified format (diff -u),
// with context lines around each change; "" when they are equal.
func UnifiedDiff(oldName, newName, a, b string, context int) string {
	if a == b {
		return ""
	}
	x, y := splitLines(a), splitLines(b)
	ops := lineOps(x, y)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", oldName, newName)
	// Group the edit script into hunks.
	type op struct {
		kind byte // ' ', '-', '+'
		text string
	}
	var all []op
	for _, o := range ops {
		all = append(all, op(o))
	}
	i := 0
	for i < len(all) {
		for i < len(all) && all[i].kind == ' ' {
			i++
		}
		if i == len(all) {
			break
		}
		start := max(0, i-context)
		end := i
		for end < len(all) {
			if all[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(all) && all[run].kind == ' ' {
				run++
			}
			if run == len(all) || run-end > 2*context {
				end = min(len(all), end+context)
				break
			}
			end = run
		}
		// Line numbers at the hunk's start.
		oldLine, newLine := 1, 1
		for _, o := range all[:start] {
			if o.kind != '+' {
				oldLine++
			}
			if o.kind != '-' {
				newLine++
			}
		}
		oldN, newN := 0, 0
		for _, o := range all[start:end] {
			if o.kind != '+' {
				oldN++
			}
			if o.kind != '-' {
				newN++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(oldLine, oldN), hunkRange(newLine, newN))
		for _, o := range all[start:end] {
			out.WriteByte(o.kind)
			out.WriteString(strings.TrimSuffix(o.text, "\n"))
			out.WriteByte('\n')
			if !strings.HasSuffix(o.text, "\n") {
				out.WriteString("\\ No newline at end of file\n")
			}
		}
		i = end
	}
	return out.String()
}

func hunkRange(line, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", line-1)
	}
	if n == 1 {
		return fmt.Sprint(line)
	}
	return fmt.Sprintf("%d,%d", line, n)
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

type lineOp struct {
	kind byte
	text string
}

// lineOps is an edit script by longest common subsequence; past a size
// where that gets costly, everything is one replacement.
func lineOps(x, y []string) []lineOp {
	var ops []lineOp
	if len(x)*len(y) > 4_000_000 {
		for _, l := range x {
			ops = append(ops, lineOp{'-', l})
		}
		for _, l := range y {
			ops = append(ops, lineOp{'+', l})
		}
		return ops
	}
	n, m := len(x), len(y)
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case x[i] == y[j]:
			ops = append(ops, lineOp{' ', x[i]})
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			ops = append(ops, lineOp{'-', x[i]})
			i++
		default:
			ops = append(ops, lineOp{'+', y[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, lineOp{'-', x[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, lineOp{'+', y[j]})
	}
	return ops
}
