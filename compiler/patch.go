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
	type edit struct {
		file     string
		old, new []*object
		key      cacheKey
		res      *fileResult
		info     fs.FileInfo
	}
	var edits []*edit
	for p := range changed {
		if path.Ext(p) == ".cue" || !isSource(p) || excluded(p, c.ignore) || !c.listed[p] {
			return nil
		}
		old := lg.byFile[p]
		if len(old) == 0 || slices.ContainsFunc(old, func(o *object) bool { return o.kind != "Node" || o.v.get("ip") != nil || o.v.get("ipv6") != nil }) {
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
		if len(res.errs) > 0 || len(res.objs) == 0 || slices.ContainsFunc(res.objs, func(o *object) bool { return o.kind != "Node" || o.v.get("ip") != nil || o.v.get("ipv6") != nil }) {
			return nil
		}
		edits = append(edits, &edit{file: p, old: old, new: res.objs, key: key, res: res, info: info})
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
	// Update the kept index; a clash goes to the full compilation, which
	// brings the index back in line with whatever it finds.
	ix := &c.index
	oldSite := map[*object]string{}
	for _, e := range edits {
		for _, o := range e.old {
			en := ix.entries[o]
			if en == nil {
				return nil
			}
			oldSite[o] = en.site
			ix.remove(o, en)
		}
	}
	for _, n := range t.nodes {
		ix.add(n)
	}
	if len(ix.dupIDs) > 0 || len(ix.dupNames) > 0 {
		return nil
	}

	// Render the new nodes and swap them into copies of their sites.
	old := lg.plan
	p := &plan.Plan{Sites: slices.Clone(old.Sites), Profiles: old.Profiles, MicroOS: old.MicroOS}
	siteCopies := map[string]*plan.Site{}
	siteOf := func(name string) *plan.Site {
		if s := siteCopies[name]; s != nil {
			return s
		}
		i := slices.IndexFunc(p.Sites, func(s *plan.Site) bool { return s.Name == name })
		cp := *p.Sites[i]
		cp.Nodes = slices.Clone(cp.Nodes)
		p.Sites[i] = &cp
		siteCopies[name] = &cp
		return &cp
	}
	for _, e := range edits {
		for _, o := range e.old {
			s := siteOf(oldSite[o])
			s.Nodes = slices.DeleteFunc(s.Nodes, func(n *plan.Node) bool { return n.Name == o.name })
		}
	}
	for _, n := range t.nodes {
		s := siteOf(n.site)
		pr := lg.profiles[n.profile]
		key := r.renderKey(n, pr.MicroOS)
		pn := c.renders.get(key)
		if pn == nil {
			pn = r.node(n, s, pr, lg.microOS)
			c.renders.put(key, pn)
		}
		i, _ := slices.BinarySearchFunc(s.Nodes, pn.Name, func(x *plan.Node, name string) int { return strings.Compare(x.Name, name) })
		s.Nodes = slices.Insert(s.Nodes, i, pn)
	}
	for _, s := range siteCopies {
		s.Hash = plan.SiteHash(s)
	}
	p.Hash = plan.PlanHash(p)

	// Commit: the caches and the starting point for the next patch.
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
	return p
}
