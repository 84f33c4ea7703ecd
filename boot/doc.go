// Package boot holds the network boot plane: boot/dhcp, boot/tftp,
// boot/http (firmware's and operators' HTTP) and boot/agentapi (the API the
// Micro-OS agent and the installed OS call) serve machines from the live
// Plan, and boot/status records what they did. This package has what they
// share: the Plans interface, the credentials' Secret, and the parsers of
// what a machine says it is. The servers import plan, never the compiler: they read the Plan
// through the small Plans interface, which the daemon swaps atomically.
package boot

import (
	"sync/atomic"

	"github.com/bootops/bootops/plan"
)

// Plans gives the Plan being served. Every request reads it once and uses
// that one Plan throughout, so no request sees parts of two Plans.
type Plans interface {
	Current() *plan.Plan
}

// Live is the daemon's current Plan, swapped atomically.
type Live struct {
	p atomic.Pointer[plan.Plan]
}

// Current returns the Plan being served (nil before the first).
func (l *Live) Current() *plan.Plan { return l.p.Load() }

// Swap makes p the Plan being served.
func (l *Live) Swap(p *plan.Plan) { l.p.Store(p) }

var _ Plans = (*Live)(nil)
