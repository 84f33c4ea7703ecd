package compiler

import (
	"cmp"
	"slices"
)

// index finds nodes that share a name (in a site) or an identifier (in the
// whole repository). It is kept from one compilation to the next and
// updated with the nodes that came, went or moved, so a recompile after a
// one-file change does not rebuild maps of every node's identifiers.
type index struct {
	gen      uint64
	entries  map[*object]*indexEntry
	ids      map[string][]idOwner
	names    map[nodeKey][]*object
	dupIDs   map[string]bool
	dupNames map[nodeKey]bool
}

type indexEntry struct {
	site string
	gen  uint64
	node *nodeObj
}

// idOwner is one claim of an identifier.
type idOwner struct {
	o *object
	c int // index into o.claims
}

// nodeKey names a node: names are unique per site.
type nodeKey struct{ site, name string }

// update makes the index hold exactly nodes and returns the clashes.
func (ix *index) update(nodes []*nodeObj) Errors {
	if ix.entries == nil {
		ix.entries = map[*object]*indexEntry{}
		ix.ids = map[string][]idOwner{}
		ix.names = map[nodeKey][]*object{}
		ix.dupIDs = map[string]bool{}
		ix.dupNames = map[nodeKey]bool{}
	}
	ix.gen++
	for _, n := range nodes {
		e := ix.entries[n.object]
		if e != nil && e.site == n.site {
			e.gen, e.node = ix.gen, n
			continue
		}
		if e != nil {
			ix.remove(n.object, e)
		}
		ix.add(n)
	}
	for o, e := range ix.entries {
		if e.gen != ix.gen {
			ix.remove(o, e)
		}
	}
	return ix.clashes()
}

func (ix *index) add(n *nodeObj) {
	ix.entries[n.object] = &indexEntry{site: n.site, gen: ix.gen, node: n}
	k := nodeKey{n.site, n.name}
	ix.names[k] = append(ix.names[k], n.object)
	if len(ix.names[k]) > 1 {
		ix.dupNames[k] = true
	}
	for i, c := range n.identityClaims() {
		ix.ids[c.key] = append(ix.ids[c.key], idOwner{n.object, i})
		if len(ix.ids[c.key]) > 1 {
			ix.dupIDs[c.key] = true
		}
	}
}

func (ix *index) remove(o *object, e *indexEntry) {
	delete(ix.entries, o)
	k := nodeKey{e.site, o.name}
	ix.names[k] = slices.DeleteFunc(ix.names[k], func(x *object) bool { return x == o })
	switch len(ix.names[k]) {
	case 0:
		delete(ix.names, k)
		fallthrough
	case 1:
		delete(ix.dupNames, k)
	}
	for _, c := range o.identityClaims() {
		ix.ids[c.key] = slices.DeleteFunc(ix.ids[c.key], func(x idOwner) bool { return x.o == o })
		switch len(ix.ids[c.key]) {
		case 0:
			delete(ix.ids, c.key)
			fallthrough
		case 1:
			delete(ix.dupIDs, c.key)
		}
	}
}

func byPlace(a, b *object) int {
	return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.line, b.line))
}

// clashes reports every node after the first (in file order) that reuses a
// name or an identifier, naming the first.
func (ix *index) clashes() Errors {
	var errs Errors
	for k := range ix.dupNames {
		owners := slices.Clone(ix.names[k])
		slices.SortFunc(owners, byPlace)
		first := owners[0]
		for _, o := range owners[1:] {
			errs = append(errs, errorf(o.pos("name"), "name", "duplicate Node %q in site %s (also at %s)", o.name, k.site, first.pos("name")))
		}
	}
	for k := range ix.dupIDs {
		owners := slices.Clone(ix.ids[k])
		slices.SortFunc(owners, func(a, b idOwner) int { return cmp.Or(byPlace(a.o, b.o), cmp.Compare(a.c, b.c)) })
		first := owners[0]
		fc := first.o.claims[first.c]
		for _, w := range owners[1:] {
			c := w.o.claims[w.c]
			if w.o == first.o {
				errs = append(errs, errorf(c.pos, c.path, "%s %s listed twice (also at %s)", c.field, c.norm, fc.pos))
				continue
			}
			site := ix.entries[first.o].site
			errs = append(errs, errorf(c.pos, c.path, "%s %s is also node %s/%s's (at %s)", c.field, c.norm, site, first.o.name, fc.pos))
		}
	}
	return errs
}
