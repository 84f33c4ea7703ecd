package agentapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// HoldRetrySeconds is how often a node Git holds (install: hold) asks
// again: the commit that releases it is taken within that.
const HoldRetrySeconds = 5

// heldBy starts the reason of every hold that is Git's install: hold or
// the pace of its release; a node whose last state is held with it was
// held by Git, and installing now is a release.
const heldBy = "install: "

// holdWhy is what a node Git holds is told, and its status says.
func holdWhy(n *plan.Node) string {
	return heldBy + "hold (" + n.Hold + "): it waits until a commit says install: auto"
}

// released says whether node n (its status in m) was held by Git until
// now: its last state is a hold of install: hold, or of a paced release,
// or the QA of its hold.
func released(m status.Machine, ok bool) bool {
	return ok && (m.State == status.StateHeld && strings.HasPrefix(m.Held, heldBy) || m.State == status.StateCommissioning)
}

// commissioning is the QA node n runs while Git holds it (its workflow's
// plan.CommissionActions) and a digest that names them ("" when none).
func commissioning(n *plan.Node) ([]plan.Action, string) {
	qa := plan.CommissionActions(n.Artifacts.Workflow)
	if len(qa) == 0 {
		return nil, ""
	}
	b, _ := json.Marshal(qa)
	sum := sha256.Sum256(b)
	return qa, hex.EncodeToString(sum[:8])
}

// commissioned names the QA the node passed since its last workflow
// handed out ("" when none).
func commissioned(f facts, who claimant) string {
	if f.machine == nil {
		return ""
	}
	m, _ := f.machine(who.site.Name + "/" + who.node.Name)
	return m.Commissioned
}

// actionNames lists actions by name: "qa-memory, qa-cpu".
func actionNames(as []plan.Action) string {
	var names []string
	for _, a := range as {
		names = append(names, actionLabel(a))
	}
	return strings.Join(names, ", ")
}

// pacer paces the nodes a commit releases: of a profile whose site has a
// rollout policy for it in Git, at most its maxUnavailable install at
// once; the others stay held until one is done. A node counts as
// installing while its status says provisioning, and from the moment the
// pacer gave it its workflow until its status moves on (the check-in that
// takes the slot is recorded before the agent starts).
type pacer struct {
	mu      sync.Mutex
	granted map[string]time.Time // site/node: when it was given its slot
}

// paceRelease holds a node Git just released while its profile's
// released nodes take every install slot (pacer), instead of handing it
// its workflow: it asks again in a few seconds.
func (s *Server) paceRelease(v *verdict) {
	d, who := &v.decision, v.who
	if !d.released || d.reply.Workflow == nil || who.node == nil {
		return
	}
	why := s.pace.take(who.site, who.node, s.now(), s.Store.Machine)
	if why == "" {
		return
	}
	*d = decision{inventory: d.inventory, state: status.StateHeld, held: why, message: "held: " + why,
		reply: plan.CheckInReply{Hold: why, RetrySeconds: HoldRetrySeconds}}
}

// grantLife bounds how long a slot given is counted without the node's
// status showing it installing: a check-in that took a slot and never came
// back (its TPM's answer did not come, the machine died) frees it then.
const grantLife = 3 * time.Minute

// take gives node n of site s a slot now, or says why not: how many of
// its profile's nodes install and the policy's bound. machine reads the
// status of a node by its key.
func (p *pacer) take(s *plan.Site, n *plan.Node, now time.Time, machine func(string) (status.Machine, bool)) string {
	pol := s.Rollouts[n.Profile]
	if pol == nil {
		return "" // no policy in Git: every node released installs at once
	}
	group := 0
	for _, o := range s.Nodes {
		if o.Profile == n.Profile {
			group++
		}
	}
	limit, err := pol.Max(group)
	if err != nil {
		limit = 1 // the compiler refuses such a policy; one at a time is the safe side
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.granted == nil {
		p.granted = map[string]time.Time{}
	}
	for k, at := range p.granted {
		if now.Sub(at) > grantLife {
			delete(p.granted, k)
		}
	}
	busy := 0
	for _, o := range s.Nodes {
		if o.Profile != n.Profile || o.Name == n.Name {
			continue
		}
		key := s.Name + "/" + o.Name
		m, _ := machine(key)
		switch {
		case m.State == status.StateProvisioning:
			busy++
		case !p.granted[key].IsZero() && (m.State == status.StateMicroOS || m.State == status.StateHeld):
			busy++
		}
	}
	if busy >= limit {
		return fmt.Sprintf("%sreleased; waiting for an install slot: %d of profile %s's nodes installing, its rollout's maxUnavailable is %s (%d)",
			heldBy, busy, n.Profile, pol.MaxUnavailable, limit)
	}
	p.granted[s.Name+"/"+n.Name] = now
	return ""
}
