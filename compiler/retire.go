package compiler

// checkRetire: what the schema cannot say about a retirement: a disk kept
// twice is a typo for another disk, which would then be erased.
func (r *repo) checkRetire() {
	for _, n := range r.nodes {
		keep := n.v.lookup("retire", "keep")
		if keep == nil || n.invalid {
			continue
		}
		seen := map[string]int{}
		for i, x := range keep.list {
			if j, dup := seen[x.str]; dup {
				r.errorf(n.at(x), indexPath("retire.keep", i), "disk %s is also retire.keep[%d]: a repeated serial is often another disk's, mistyped — that disk would be erased", x.str, j)
				continue
			}
			seen[x.str] = i
		}
	}
}
