// Package rollout plans the reinstalls of one group's out-of-date nodes
// (one profile at one site) under the group's plan.Rollout policy: which
// nodes start now, in what order, and whether the ones already started are
// healthy, failed, or still on their way.
//
// It is a pure planner. Step reads the nodes as the daemon sees them and
// the group's durable state (a Group, which the daemon stores as JSON and
// hands back), updates that state and returns a Decision. It does no I/O,
// starts no goroutine and never reads the clock: the caller passes now.
// The daemon persists the Group before it power-cycles the nodes in
// Decision.Start, so a restart between the two can at worst leave a node
// marked but never cycled (it then fails its health timeout and halts the
// group), never start a node twice.
package rollout
