package compiler

import (
	"fmt"

	"github.com/bootops/bootops/plan"
)

// expect is node n's hardware expectations: its expect over its profile's,
// field by field; nil when neither has any, so nodes without keep their
// hash.
func (r *repo) expect(n *nodeObj) *plan.Expect {
	var pv *value
	if pr := r.profiles[n.profile]; pr != nil {
		pv = pr.v.get("expect")
	}
	nv := n.v.get("expect")
	if pv == nil && nv == nil {
		return nil
	}
	field := func(name string) *value {
		if v := nv.get(name); v != nil {
			return v
		}
		return pv.get(name)
	}
	e := &plan.Expect{CPUThreads: field("cpuThreads").String(), Memory: field("memory").String()}
	for _, d := range field("disks").listItems() {
		de := plan.DiskExpect{MinSize: d.get("minSize").String(), Count: d.get("count").integer(), Transport: d.get("transport").String()}
		if rot := d.get("rotational"); rot != nil && rot.kind == kBool {
			de.Rotational = &rot.b
		}
		e.Disks = append(e.Disks, de)
	}
	if nics := field("nics"); nics != nil {
		e.NICs = &plan.NICExpect{Count: nics.get("count").String(), Speed: nics.get("speed").String()}
	}
	for _, p := range field("pci").listItems() {
		e.PCI = append(e.PCI, plan.PCIExpect{Vendor: p.get("vendor").String(), Device: p.get("device").String(), Class: p.get("class").String(), Count: p.get("count").integer()})
	}
	if e.Empty() {
		return nil
	}
	return e
}

func (v *value) listItems() []*value {
	if v == nil || v.kind != kList {
		return nil
	}
	return v.list
}

// checkExpects: what the schema cannot say about an expect (a size or a
// count too large, a speed no link has, a speed without a unit read as
// Mb/s when gigabits were meant). Objects the schema refused are left to
// its errors.
func (r *repo) checkExpects() {
	var objs []*object
	for _, name := range sortedKeys(r.profiles) {
		objs = append(objs, r.profiles[name])
	}
	for _, n := range r.nodes {
		objs = append(objs, n.object)
	}
	for _, o := range objs {
		e := o.v.get("expect")
		if e == nil || o.invalid {
			continue
		}
		parse := func(v *value, path string, unit plan.Unit) {
			if v == nil || v.kind != kString {
				return
			}
			if _, err := plan.ParseComparison(v.str, unit); err != nil {
				r.errorf(o.at(v), path, "%v", err)
			}
		}
		parse(e.get("cpuThreads"), "expect.cpuThreads", plan.UnitCount)
		parse(e.get("memory"), "expect.memory", plan.UnitBytes)
		for i, d := range e.get("disks").listItems() {
			parse(d.get("minSize"), fmt.Sprintf("expect.disks[%d].minSize", i), plan.UnitBytes)
		}
		parse(e.lookup("nics", "count"), "expect.nics.count", plan.UnitCount)
		parse(e.lookup("nics", "speed"), "expect.nics.speed", plan.UnitMbps)
	}
}

// at is the position of v, one of o's values.
func (o *object) at(v *value) Pos {
	if v == nil || v.line == 0 {
		return Pos{File: o.file, Line: o.line, Col: o.col}
	}
	return Pos{File: o.file, Line: v.line, Col: v.col}
}
