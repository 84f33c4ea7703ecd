package agentapi

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// A node Git retires (docs/lifecycle.md): the decision that gives it its
// erase, the checks of what its agent reports, and the certificate the
// server signs.

// checkErasures says why a batch's erase records cannot be kept ("" when
// they can): an erased event carries one, no other event does, and its
// words are bounded (they go in a signed certificate).
func checkErasures(evs []plan.AgentEvent) string {
	for _, a := range evs {
		switch {
		case a.Type == plan.AgentErased && a.Erasure == nil:
			return fmt.Sprintf("event %d is an erased event without its erasure", a.Seq)
		case a.Type != plan.AgentErased && a.Erasure != nil:
			return fmt.Sprintf("event %d, of type %q, carries an erasure: only an erased event does", a.Seq, status.Printable(a.Type))
		case a.Erasure != nil:
			e := a.Erasure
			if e.Class != "" && e.Class != plan.ErasePurge && e.Class != plan.EraseClear {
				return fmt.Sprintf("the erasure of event %d: class %.20q: want purge or clear", a.Seq, e.Class)
			}
			if e.Disk.Size < 0 || e.Samples < 0 || e.Samples > 1<<20 {
				return fmt.Sprintf("the erasure of event %d: size %d, %d samples", a.Seq, e.Disk.Size, e.Samples)
			}
		}
	}
	return ""
}

// cleanErasure bounds the agent's words in an erase record.
func cleanErasure(e plan.DiskErasure) *plan.DiskErasure {
	c := func(s string) string {
		s = status.Printable(s)
		if len(s) > 256 {
			s = strings.ToValidUTF8(s[:256], "")
		}
		return s
	}
	e.Disk = plan.DiskInfo{Name: c(e.Disk.Name), Model: c(e.Disk.Model), Serial: c(e.Disk.Serial), Size: e.Disk.Size,
		Rotational: e.Disk.Rotational, Transport: c(e.Disk.Transport)}
	e.Method, e.Note, e.Verification, e.Error = c(e.Method), c(e.Note), c(e.Verification), c(e.Error)
	e.Start, e.End = e.Start.UTC(), e.End.UTC()
	return &e
}

// retires says whether session s runs a retirement.
func retires(s status.Session) bool { return s.Retire }

// decideRetire is what a node Git retires is told: its disks not kept
// are erased (as the inventory on record has them: the agent checks the
// machine has exactly these), then it powers off; once retired, it only
// powers off. Nothing is erased for a node without an inventory on record,
// nor for a machine whose disks are not the record's: it is held, the
// record kept as it was.
func decideRetire(d *decision, f facts, who claimant, c plan.CheckIn) {
	n, r := who.node, who.node.Retire
	var m status.Machine
	ok := false
	if f.machine != nil {
		m, ok = f.machine(who.site.Name + "/" + n.Name)
	}
	hold := func(why string) {
		d.inventory = nil // the record stays the one the retirement is checked against
		d.reply = plan.CheckInReply{Hold: why, RetrySeconds: 30}
		d.state, d.isError, d.held = status.StateHeld, true, why
		d.message = "held: " + why
	}
	poweroff := plan.Action{Action: "poweroff", Name: "poweroff", Timeout: "5m"}
	switch {
	case ok && m.Retired(): // its state may be the script server's booting by now
		d.reply = plan.CheckInReply{Workflow: &plan.Workflow{Node: n.Name, Profile: n.Profile, Retire: true, Actions: []plan.Action{poweroff}}}
		d.state = status.StateRetired
		d.message = "retired node booted again: told to power off (Git retires it)"
		return
	case r.Erase == plan.EraseNone:
		d.reply = plan.CheckInReply{Workflow: &plan.Workflow{Node: n.Name, Profile: n.Profile, Retire: true, Actions: []plan.Action{poweroff}}}
		d.retiring, d.message = true, "retiring without erasing any disk (retire.erase: none): powering off"
		return
	case !ok || m.Inventory == nil:
		hold("retire: no inventory on record for node " + n.Name + ": nothing is erased unchecked; boot it once without retire (install: hold shows it) to record one")
		return
	}
	var erase []plan.DiskInfo
	for _, disk := range m.Inventory.Disks {
		if slices.Contains(r.Keep, disk.Serial) {
			continue
		}
		if disk.Serial == "" {
			hold(fmt.Sprintf("retire: disk %s of the inventory on record has no serial: it cannot be told from another disk", disk.Name))
			return
		}
		erase = append(erase, disk)
	}
	if why := reportedDiffer(m.Inventory, d.inventory, r.Keep); why != "" {
		hold("retire: nothing erased: " + why)
		return
	}
	a := plan.Action{Action: plan.ActionEraseDisks, Name: plan.ActionEraseDisks, Timeout: "24h", Erase: r.Erase, Keep: r.Keep, Disks: erase}
	d.reply = plan.CheckInReply{Workflow: &plan.Workflow{Node: n.Name, Profile: n.Profile, Retire: true, Actions: []plan.Action{a, poweroff}}}
	var serials []string
	for _, disk := range erase {
		serials = append(serials, disk.Serial)
	}
	d.retiring = true
	d.message = fmt.Sprintf("retiring: %s erase of %d disks (%s)", r.Erase, len(erase), strings.Join(serials, ", "))
	if len(r.Keep) > 0 {
		d.message += ", keeping " + strings.Join(r.Keep, ", ")
	}
	d.message += "; " + describe(c)
}

// certify signs the erase certificate of the retirement session cur has
// just ended (its erased disks, as the store now holds them) and records
// it on the node's timeline, durably, before the agent is answered.
func (s *Server) certify(key string, cur status.Session, b plan.EventBatch) *refusal {
	if s.Certify == nil {
		return nil
	}
	m, _ := s.Store.Machine(key)
	p := s.Plans.Current()
	n := p.Node(b.Site, b.Node)
	if n == nil || n.Retire == nil {
		return nil // Git no longer retires it: nothing to vouch for
	}
	c := plan.EraseCertificate{Site: b.Site, Node: b.Node, Machine: n.Identity, Erase: n.Retire.Erase, Keep: n.Retire.Keep,
		Revision: cur.Revision, Retired: s.now().UTC(), Disks: []plan.DiskErasure{}}
	if m.Erasures != nil {
		c.Disks = m.Erasures.Disks
	}
	doc, err := json.Marshal(c)
	if err == nil {
		var signed string
		if signed, err = s.Certify(doc); err == nil {
			ev := status.Event{Kind: status.KindAgent, Site: b.Site, Node: b.Node, Time: s.now(), Certificate: signed,
				Message: fmt.Sprintf("erase certificate signed: %d disks (bootops erase-cert get %s/%s)", len(c.Disks), b.Site, b.Node)}
			err = s.Store.RecordSync(ev)
		}
	}
	if err != nil {
		return unavailable("erase certificate: " + err.Error())
	}
	return nil
}

// reportedDiffer is plan.DisksDiffer of what a check-in reports (nothing
// reported is no difference: the agent checks again).
func reportedDiffer(record, inv *plan.Inventory, keep []string) string {
	if inv == nil {
		return ""
	}
	return plan.DisksDiffer(record.Disks, inv.Disks, keep)
}
