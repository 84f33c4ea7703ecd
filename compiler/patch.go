package compiler

import (
	"crypto/sha256"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/bootops/bootops/plan"
)

// lastGood is what the fast path of CompileChanged starts from: the last
// Plan compiled without errors and the objects it came from.
type lastGood struct {
	plan     *plan.Plan
	repo     *repo
	byFile   map[string][]*object // YAML objects by file
	microOS  map[string]*plan.MicroOS
	profiles map[string]*plan.Profile
}

func newLastGood(p *plan.Plan, r *repo, objs []*object) *lastGood {
	lg := &lastGood{plan: p, repo: r, byFile: map[string][]*object{}, microOS: map[string]*plan.MicroOS{}, profiles: map[string]*plan.Profile{}}
	for _, pr := range p.Profiles {
		lg.profiles[pr.Name] = pr
	}
	for _, o := range objs {
		if !o.fromCUE {
			lg.byFile[o.file] = append(lg.byFile[o.file], o)
		}
	}
	for _, m := range p.MicroOS {
		lg.microOS[m.Name] = m
	}
	return lg
}

// patch is CompileChanged's fast path for the common change, edits to
// files that hold only nodes: it re-checks and re-renders those nodes and
// swaps them into a copy of the last Plan, so a one-node change costs one
// node's work, not the fleet's. It returns nil whenever the change is
// anything else (a file added or removed, a site, profile or Micro-OS, CUE,
// static addresses, or any error), and the full compilation runs instead;
// a test checks that both ways give the same Plan.
func (c *Compiler) patch(fsys fs.FS, changed map[string]bool) *plan.Plan {
	lg := c.last
	if lg == nil || len(changed) == 0 {
		return nil
	}
	edits := make([]*patchEdit, 0, len(changed))
	for p := range changed {
		e := c.patchEdit(fsys, p, lg)
		if e == nil {
			return nil
		}
		edits = append(edits, e)
	}
	// Resolve the new nodes against the unchanged sites and profiles.
	r := lg.repo
	t := &repo{fsys: fsys, sites: r.sites, profiles: r.profiles, microOS: r.microOS, broken: r.broken}
	for _, e := range edits {
		for _, o := range e.new {
			t.addNode(o)
		}
	}
	if len(t.errs) > 0 {
		return nil
	}
	oldSite := map[*object]string{}
	if !c.reindex(edits, t.nodes, oldSite) {
		return nil
	}
	p := c.patchPlan(lg, edits, oldSite, t.nodes)
	c.commitPatch(lg, edits, p)
	return p
}

// patchEdit is one changed file the fast path takes: the objects it held
// and holds now, and what to cache of it.
type patchEdit struct {
	file     string
	old, new []*object
	key      cacheKey
	res      *fileResult
	info     fs.FileInfo
}

// patchEdit reads and checks the changed file p, or returns nil when the
// fast path cannot take it: p is not a listed YAML file that held, and
// still holds, only valid nodes without static addresses.
func (c *Compiler) patchEdit(fsys fs.FS, p string, lg *lastGood) *patchEdit {
	if path.Ext(p) == ".cue" || !isSource(p) || excluded(p, c.ignore) || !c.listed[p] {
		return nil
	}
	old := lg.byFile[p]
	if len(old) == 0 || !dynamicNodesOnly(old) {
		return nil
	}
	st, err := fs.Lstat(fsys, p)
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	data, info, e := readFile(fsys, p)
	if e != nil {
		return nil
	}
	key := cacheKey{p, sha256.Sum256(data)}
	res := c.yaml[key]
	if res == nil {
		res = c.loadYAML(p, data)
	}
	if len(res.errs) > 0 || len(res.objs) == 0 || !dynamicNodesOnly(res.objs) {
		return nil
	}
	return &patchEdit{file: p, old: old, new: res.objs, key: key, res: res, info: info}
}

// dynamicNodesOnly reports whether objs are all nodes without a static
// address (a reservation changes the site's, which patch does not redo).
func dynamicNodesOnly(objs []*object) bool {
	return !slices.ContainsFunc(objs, func(o *object) bool {
		return o.kind != "Node" || o.v.get("ip") != nil || o.v.get("ipv6") != nil || o.v.get("network") != nil
	})
}

// reindex takes the edits' old nodes out of the kept index, noting in
// oldSite the site each was in, and puts the new ones in. It reports false
// on a clash (or an old node the index does not hold): the full
// compilation then brings the index back in line with whatever it finds.
func (c *Compiler) reindex(edits []*patchEdit, nodes []*nodeObj, oldSite map[*object]string) bool {
	ix := &c.index
	for _, e := range edits {
		for _, o := range e.old {
			en := ix.entries[o]
			if en == nil {
				return false
			}
			oldSite[o] = en.site
			ix.remove(o, en)
		}
	}
	for _, n := range nodes {
		ix.add(n)
	}
	if len(ix.dupIDs) > 0 || len(ix.dupNames) > 0 {
		return false
	}
	return true
}

// patchPlan is the last Plan with the edits' old nodes taken out of
// copies of their sites and the new nodes rendered (or taken from the
// render cache) into them, in order.
func (c *Compiler) patchPlan(lg *lastGood, edits []*patchEdit, oldSite map[*object]string, nodes []*nodeObj) *plan.Plan {
	old := lg.plan
	p := &plan.Plan{Sites: slices.Clone(old.Sites), Profiles: old.Profiles, MicroOS: old.MicroOS}
	sites := siteCopies{p: p, copies: map[string]*plan.Site{}}
	for _, e := range edits {
		for _, o := range e.old {
			s := sites.get(oldSite[o])
			s.Nodes = slices.DeleteFunc(s.Nodes, func(n *plan.Node) bool { return n.Name == o.name })
		}
	}
	for _, n := range nodes {
		s := sites.get(n.site)
		pr := lg.profiles[n.profile]
		key := lg.repo.renderKey(n, pr.MicroOS)
		pn := c.renders.get(key)
		if pn == nil {
			pn = lg.repo.node(n, s, pr, lg.microOS)
			c.renders.put(key, pn)
		}
		i, _ := slices.BinarySearchFunc(s.Nodes, pn.Name, func(x *plan.Node, name string) int { return strings.Compare(x.Name, name) })
		s.Nodes = slices.Insert(s.Nodes, i, pn)
	}
	for _, s := range sites.copies {
		s.Hash = plan.SiteHash(s)
	}
	p.Hash = plan.PlanHash(p)
	return p
}

// siteCopies copies p's sites as they are first written, so the last
// Plan, which readers may still hold, never changes.
type siteCopies struct {
	p      *plan.Plan
	copies map[string]*plan.Site
}

// get is the copy of the named site, made on the first call.
func (sc *siteCopies) get(name string) *plan.Site {
	if s := sc.copies[name]; s != nil {
		return s
	}
	i := slices.IndexFunc(sc.p.Sites, func(s *plan.Site) bool { return s.Name == name })
	cp := *sc.p.Sites[i]
	cp.Nodes = slices.Clone(cp.Nodes)
	sc.p.Sites[i] = &cp
	sc.copies[name] = &cp
	return &cp
}

// commitPatch brings the caches up to date with the edits and makes p the
// next patch's starting point.
func (c *Compiler) commitPatch(lg *lastGood, edits []*patchEdit, p *plan.Plan) {
	for _, e := range edits {
		if st := c.stat[e.file]; st != nil && st.key != e.key {
			delete(c.yaml, st.key)
		}
		e.res.gen = c.gen
		c.yaml[e.key] = e.res
		c.stat[e.file] = &statEntry{size: e.info.Size(), mtime: e.info.ModTime().UnixNano(), key: e.key, gen: c.gen}
		lg.byFile[e.file] = e.new
	}
	lg.plan = p
	c.patched++
}
