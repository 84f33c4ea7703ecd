package reconciler

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// numbered is the lines "1\n" … "n\n" with the replacements in edit.
func numbered(n int, edit map[int]string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if s, ok := edit[i]; ok {
			b.WriteString(s)
			continue
		}
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

func TestUnifiedDiff(t *testing.T) {
	for name, c := range map[string]struct {
		a, b    string
		context int
		want    string
	}{
		"identical":  {a: "x\ny\n", b: "x\ny\n", context: 3, want: ""},
		"both empty": {context: 3, want: ""},
		"one line in the middle": {
			a: numbered(10, nil), b: numbered(10, map[int]string{5: "five\n"}), context: 3,
			want: "--- a\n+++ b\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n",
		},
		"additions at the end": {
			a: numbered(5, nil), b: numbered(7, nil), context: 3,
			want: "--- a\n+++ b\n@@ -3,3 +3,5 @@\n 3\n 4\n 5\n+6\n+7\n",
		},
		"deletions at the start": {
			a: numbered(6, nil), b: "3\n4\n5\n6\n", context: 3,
			want: "--- a\n+++ b\n@@ -1,5 +1,3 @@\n-1\n-2\n 3\n 4\n 5\n",
		},
		"no newline at the end of either": {
			a: "x\ny", b: "x\nz", context: 3,
			want: "--- a\n+++ b\n@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+z\n\\ No newline at end of file\n",
		},
		"newline added at the end": {
			a: "x\ny", b: "x\ny\n", context: 3,
			want: "--- a\n+++ b\n@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+y\n",
		},
		"unchanged last line without a newline": {
			a: "a\nb\nlast", b: "A\nb\nlast", context: 3,
			want: "--- a\n+++ b\n@@ -1,3 +1,3 @@\n-a\n+A\n b\n last\n\\ No newline at end of file\n",
		},
		"from nothing": {
			a: "", b: "x\ny\n", context: 3,
			want: "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+x\n+y\n",
		},
		"to nothing": {
			a: "x\n", b: "", context: 3,
			want: "--- a\n+++ b\n@@ -1 +0,0 @@\n-x\n",
		},
		"two far-apart changes": {
			a: numbered(20, nil), b: numbered(20, map[int]string{2: "two\n", 18: "eighteen\n"}), context: 3,
			want: "--- a\n+++ b\n" +
				"@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n" +
				"@@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n",
		},
		"changes 2×context apart share a hunk": {
			a: numbered(12, nil), b: numbered(12, map[int]string{3: "c\n", 10: "j\n"}), context: 3,
			want: "--- a\n+++ b\n@@ -1,12 +1,12 @@\n 1\n 2\n-3\n+c\n 4\n 5\n 6\n 7\n 8\n 9\n-10\n+j\n 11\n 12\n",
		},
		"no context": {
			a: numbered(6, nil), b: numbered(6, map[int]string{2: "", 5: "five\n"}), context: 0,
			want: "--- a\n+++ b\n@@ -2 +1,0 @@\n-2\n@@ -5 +4 @@\n-5\n+five\n",
		},
		"insertion with no context": {
			a: "a\nb\n", b: "a\nnew\nb\n", context: 0,
			want: "--- a\n+++ b\n@@ -1,0 +2 @@\n+new\n",
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := UnifiedDiff("a", "b", c.a, c.b, c.context); got != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

// TestUnifiedDiffMatchesSystemDiff compares the hunks with GNU diff's on
// inputs whose alignment is unique, so any LCS gives the same script.
func TestUnifiedDiffMatchesSystemDiff(t *testing.T) {
	if _, err := exec.LookPath("diff"); err != nil {
		t.Skip("no diff command")
	}
	ipxe := "#!ipxe\ndhcp\nset base http://198.18.0.1:8080\nkernel ${base}/vmlinuz console=ttyS0\ninitrd ${base}/initrd\nboot\n"
	for name, c := range map[string]struct {
		a, b    string
		context int
	}{
		"one line":           {numbered(10, nil), numbered(10, map[int]string{5: "five\n"}), 3},
		"far apart":          {numbered(40, nil), numbered(40, map[int]string{3: "c\n", 20: "t\n", 21: "", 37: "x\ny\n"}), 3},
		"gap of 2×context":   {numbered(12, nil), numbered(12, map[int]string{3: "c\n", 10: "j\n"}), 3},
		"gap of 2×context+1": {numbered(13, nil), numbered(13, map[int]string{3: "c\n", 11: "k\n"}), 3},
		"context 1":          {numbered(30, nil), numbered(30, map[int]string{1: "", 15: "o\n", 30: ""}), 1},
		"context 0":          {numbered(9, nil), numbered(9, map[int]string{4: "d\ne\n", 8: ""}), 0},
		"ipxe":               {ipxe, strings.Replace(ipxe, "console=ttyS0", "console=tty0 quiet", 1), 3},
		"no newline":         {"a\nb\nc", "a\nB\nc", 3},
		"newline dropped":    {"a\nb\nc\n", "a\nb\nc", 2},
		"from nothing":       {"", "a\nb\n", 3},
		"to nothing":         {"a\nb\n", "", 3},
	} {
		t.Run(name, func(t *testing.T) {
			want := systemDiff(t, c.a, c.b, c.context)
			got := UnifiedDiff("a", "b", c.a, c.b, c.context)
			if hunks(got) != hunks(want) {
				t.Errorf("got:\n%s\ndiff -U%d:\n%s", got, c.context, want)
			}
		})
	}
}

// TestUnifiedDiffRandom applies the output to a, which must give b, and
// checks the script is as short as diff --minimal's.
func TestUnifiedDiffRandom(t *testing.T) {
	if _, err := exec.LookPath("diff"); err != nil {
		t.Skip("no diff command")
	}
	r := rand.New(rand.NewPCG(1, 2))
	gen := func() string {
		var b strings.Builder
		for range r.IntN(25) {
			b.WriteString(string(rune('a' + r.IntN(4))))
			b.WriteByte('\n')
		}
		s := b.String()
		if s != "" && r.IntN(4) == 0 {
			s = s[:len(s)-1]
		}
		return s
	}
	for i := range 60 {
		a, b := gen(), gen()
		context := r.IntN(4)
		got := UnifiedDiff("a", "b", a, b, context)
		if a == b {
			if got != "" {
				t.Errorf("case %d: equal inputs gave %q", i, got)
			}
			continue
		}
		applied, err := applyUnified(a, got)
		if err != nil || applied != b {
			t.Errorf("case %d: patching %q with\n%s\ngave %q, %v; want %q", i, a, got, applied, err, b)
			continue
		}
		want := systemDiff(t, a, b, context, "--minimal")
		if n, m := changedLines(got), changedLines(want); n != m {
			t.Errorf("case %d: %d lines changed, diff --minimal changes %d\ngot:\n%s\ndiff:\n%s", i, n, m, got, want)
		}
	}
}

func TestUnifiedDiffLargeFallsBackToOneHunk(t *testing.T) {
	a, b := numbered(2001, nil), numbered(2001, map[int]string{1000: "changed\n"})
	got := UnifiedDiff("a", "b", a, b, 3)
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 3+2*2001 || lines[2] != "@@ -1,2001 +1,2001 @@" {
		t.Fatalf("%d lines, header %q; want one hunk replacing all 2001 lines", len(lines), lines[min(2, len(lines)-1)])
	}
	if applied, err := applyUnified(a, got); err != nil || applied != b {
		t.Errorf("the replacement does not give b: %v", err)
	}
	// Just under the limit the diff is exact.
	a, b = numbered(2000, nil), numbered(2000, map[int]string{1000: "changed\n"})
	if got := UnifiedDiff("a", "b", a, b, 3); hunks(got) != "@@ -997,7 +997,7 @@\n 997\n 998\n 999\n-1000\n+changed\n 1001\n 1002\n 1003\n" {
		t.Errorf("2000 lines:\n%s", got)
	}
}

// systemDiff runs diff -U<context> on a and b in temporary files.
func systemDiff(t *testing.T, a, b string, context int, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(pa, []byte(a), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pb, []byte(b), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-U" + strconv.Itoa(context)}, flags...)
	out, err := exec.Command("diff", append(args, pa, pb)...).Output()
	// diff exits 1 when the files differ.
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		t.Fatalf("diff: %v", err)
	}
	return string(out)
}

// hunks drops the --- and +++ lines, whose timestamps differ.
func hunks(d string) string {
	for range 2 {
		if _, rest, ok := strings.Cut(d, "\n"); ok {
			d = rest
		}
	}
	return d
}

func changedLines(d string) int {
	n := 0
	for _, l := range strings.Split(hunks(d), "\n") {
		if strings.HasPrefix(l, "+") || strings.HasPrefix(l, "-") {
			n++
		}
	}
	return n
}

// applyUnified patches a with a unified diff, checking every context and
// removed line and each hunk's counts.
func applyUnified(a, d string) (string, error) {
	old := splitLines(a)
	var out []string
	next := 0 // the next line of old not yet copied
	lines := strings.SplitAfter(hunks(d), "\n")
	for i := 0; i < len(lines) && lines[i] != ""; {
		h := strings.TrimSuffix(lines[i], "\n")
		f := strings.Fields(h)
		if len(f) != 4 || f[0] != "@@" || f[3] != "@@" || !strings.HasPrefix(f[1], "-") || !strings.HasPrefix(f[2], "+") {
			return "", fmt.Errorf("line %q: want a hunk header", h)
		}
		oldStart, on, err := hunkPos(f[1][1:])
		if err != nil {
			return "", err
		}
		ns, nn, err := hunkPos(f[2][1:])
		if err != nil {
			return "", err
		}
		// An empty range names the line before it.
		start := oldStart - 1
		if on == 0 {
			start = oldStart
		}
		if start < next {
			return "", fmt.Errorf("%s overlaps the hunk before", h)
		}
		out = append(out, old[next:start]...)
		if nn > 0 && ns-1 != len(out) || nn == 0 && ns != len(out) {
			return "", fmt.Errorf("%s: new start %d, have %d lines", h, ns, len(out))
		}
		next = start
		i++
		gotOld, gotNew := 0, 0
		for i < len(lines) && lines[i] != "" && !strings.HasPrefix(lines[i], "@@") {
			l := lines[i]
			i++
			noEOL := i < len(lines) && strings.HasPrefix(lines[i], `\ No newline at end of file`)
			if noEOL {
				i++
			}
			text := l[1:]
			if noEOL {
				text = strings.TrimSuffix(text, "\n")
			}
			switch l[0] {
			case ' ', '-':
				if next >= len(old) || old[next] != text {
					return "", fmt.Errorf("%s: line %d is not %q", h, next+1, text)
				}
				next++
				gotOld++
				if l[0] == ' ' {
					out = append(out, text)
					gotNew++
				}
			case '+':
				out = append(out, text)
				gotNew++
			default:
				return "", fmt.Errorf("line %q", l)
			}
		}
		if gotOld != on || gotNew != nn {
			return "", fmt.Errorf("%s: hunk has %d old and %d new lines", h, gotOld, gotNew)
		}
	}
	out = append(out, old[next:]...)
	return strings.Join(out, ""), nil
}

// hunkPos parses "l,n" or "l" (n = 1).
func hunkPos(s string) (int, int, error) {
	l, n, ok := strings.Cut(s, ",")
	start, err := strconv.Atoi(l)
	if err != nil {
		return 0, 0, fmt.Errorf("hunk range %q", s)
	}
	if !ok {
		return start, 1, nil
	}
	count, err := strconv.Atoi(n)
	if err != nil {
		return 0, 0, fmt.Errorf("hunk range %q", s)
	}
	return start, count, nil
}
