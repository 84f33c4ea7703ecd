package compiler

import (
	"strconv"
	"strings"
)

// DidYouMean returns ` (did you mean "x"?)` when one candidate is close to
// s, or "".
func DidYouMean(s string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := distance(strings.ToLower(s), strings.ToLower(c))
		limit := max(1, min(len(c), len(s))/3)
		if d <= limit && (best == "" || d < bestD) {
			best, bestD = c, d
		}
	}
	if best == "" || best == s {
		return ""
	}
	return " (did you mean " + strconv.Quote(best) + "?)"
}

// distance is the Levenshtein distance with adjacent transpositions counted
// as one edit.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
