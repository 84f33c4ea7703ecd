package rollout

import (
	"cmp"
	"fmt"
	"strings"
)

// Summary is one line for a group's status: "rolling: 2 of 10 out of
// date, 1 in progress; waiting: canaries not yet healthy", "rolling: in
// sync (10 nodes)", or, while g is halted, "halted: r1-03: install
// failed: ...".
func Summary(d Decision, g *Group) string {
	if g != nil && g.Halt != nil {
		return "halted: " + g.Halt.Node + ": " + g.Halt.Why
	}
	var b strings.Builder
	b.WriteString(cmp.Or(d.Strategy, "manual") + ": ")
	if d.OutOfDate == 0 && d.InProgress == 0 {
		fmt.Fprintf(&b, "in sync (%d %s)", d.Nodes, plural(d.Nodes, "node", "nodes"))
	} else {
		fmt.Fprintf(&b, "%d of %d out of date", d.OutOfDate, d.Nodes)
	}
	if d.InProgress > 0 {
		fmt.Fprintf(&b, ", %d in progress", d.InProgress)
	}
	if d.Resumed != "" {
		b.WriteString("; resumed: " + d.Resumed)
	}
	if len(d.Start) > 0 {
		b.WriteString("; starting " + names(d.Start))
	}
	if len(d.Skipped) > 0 {
		fmt.Fprintf(&b, "; %d skipped", len(d.Skipped))
	}
	if d.Waiting != "" {
		b.WriteString("; waiting: " + d.Waiting)
	}
	return b.String()
}

// names lists a few nodes by name, and a long list by count, to keep the
// line one line.
func names(ns []string) string {
	if len(ns) <= 3 {
		return strings.Join(ns, ", ")
	}
	return fmt.Sprintf("%d nodes", len(ns))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
