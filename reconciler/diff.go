package reconciler

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/bootops/bootops/plan"
)

// Kinds of change.
const (
	Added       = "add"
	Removed     = "remove"
	Changed     = "change"
	Reprovision = "reprovision" // the node's reprovision was raised: its disk will be wiped
)

// FieldChange is one field of an object, before and after.
type FieldChange struct {
	Field string `json:"field"`
	Old   string `json:"old,omitempty"`
	New   string `json:"new,omitempty"`
}

// NodeChange is one node that changes.
type NodeChange struct {
	Kind   string        `json:"kind"`
	Site   string        `json:"site"`
	Name   string        `json:"name"`
	Source string        `json:"source,omitempty"` // file:line in the head (the base for a removal)
	Fields []FieldChange `json:"fields,omitempty"`
	// Artifacts names the rendered files that change (ipxe, user-data,
	// meta-data, network-config, workflow).
	Artifacts []string `json:"artifacts,omitempty"`
	// Provisioned is set with --server: the node is provisioned at its
	// current generation, so it changes only when reprovision is raised.
	Provisioned bool `json:"provisioned,omitempty"`

	base, head *plan.Node
}

// ObjectChange is a site, profile or Micro-OS that changes, and the nodes
// whose rendered files change because of it only (a profile edit reaches
// hundreds of nodes: it is one change, with their names).
type ObjectChange struct {
	Kind    string        `json:"kind"`
	Object  string        `json:"object"` // site, profile, microOS
	Name    string        `json:"name"`
	Fields  []FieldChange `json:"fields,omitempty"`
	Reaches []string      `json:"reaches,omitempty"` // site/node

	// example is the first node reached, before and after, so the
	// rendered change can be shown once for all of them.
	example [2]*plan.Node
}

// Example returns the first node the change reaches as it is rendered in
// the base and in the head revision, or nils when it reaches none.
func (o ObjectChange) Example() (base, head *plan.Node) { return o.example[0], o.example[1] }

// ChangeSet is what a change to the repository does: `bootops diff`.
type ChangeSet struct {
	Base    string `json:"base"`
	Head    string `json:"head"`
	Summary struct {
		Add         int `json:"add"`
		Change      int `json:"change"`
		Remove      int `json:"remove"`
		Reprovision int `json:"reprovision"`
	} `json:"summary"`
	Objects []ObjectChange `json:"objects"`
	Nodes   []NodeChange   `json:"nodes"`
	// Installs are the nodes (in both revisions) whose install changes:
	// what an installed machine of theirs would then not be running.
	Installs []InstallChange `json:"installs,omitempty"`
	// Live: the nodes were marked against a running daemon (--server).
	Live bool `json:"live,omitempty"`
}

// InstallChange is a node whose install (image, workflow, cloud-init)
// changes.
type InstallChange struct {
	Site    string   `json:"site"`
	Node    string   `json:"node"`
	Changes []string `json:"changes"`
	// Installed is set with --server: the machine is installed (provisioned
	// or running), so the change puts it out of date.
	Installed bool `json:"installed,omitempty"`
}

// OutOfDate counts the installed machines (marked with --server) the
// change puts out of date, and the install changes among them ("image",
// "workflow", "cloud-init").
func (c *ChangeSet) OutOfDate() (n int, what []string) {
	for _, in := range c.Installs {
		if !in.Installed {
			continue
		}
		n++
		for _, x := range in.Changes {
			x, _, _ = strings.Cut(x, " ")
			if !slices.Contains(what, x) {
				what = append(what, x)
			}
		}
	}
	return n, what
}

// Empty reports whether nothing changes.
func (c *ChangeSet) Empty() bool { return len(c.Objects) == 0 && len(c.Nodes) == 0 }

// Diff compares two Plans. Where a node is defined (its file) is no part of
// it: a node moved to another file, unchanged, is no change.
func Diff(base, head *plan.Plan) *ChangeSet {
	cs := &ChangeSet{Objects: []ObjectChange{}, Nodes: []NodeChange{}}
	objIdx := map[string]int{}
	addObj := func(o ObjectChange) {
		objIdx[o.Object+"/"+o.Name] = len(cs.Objects)
		cs.Objects = append(cs.Objects, o)
	}
	// Sites, profiles, Micro-OS.
	for _, kind := range []string{"site", "profile", "microOS"} {
		bm, hm := objects(base, kind), objects(head, kind)
		for _, name := range unionKeys(bm, hm) {
			b, h := bm[name], hm[name]
			switch {
			case b == nil:
				addObj(ObjectChange{Kind: Added, Object: kind, Name: name})
			case h == nil:
				addObj(ObjectChange{Kind: Removed, Object: kind, Name: name})
			default:
				if f := fieldDiff(b, h); len(f) > 0 {
					addObj(ObjectChange{Kind: Changed, Object: kind, Name: name, Fields: f})
				}
			}
		}
	}
	// Nodes.
	bn, hn := nodes(base), nodes(head)
	for _, key := range unionKeys(bn, hn) {
		b, h := bn[key], hn[key]
		switch {
		case b == nil:
			cs.Nodes = append(cs.Nodes, NodeChange{Kind: Added, Site: h.Site, Name: h.Name, Source: h.Source, head: h, Fields: identityFields(h)})
			cs.Summary.Add++
			continue
		case h == nil:
			cs.Nodes = append(cs.Nodes, NodeChange{Kind: Removed, Site: b.Site, Name: b.Name, Source: b.Source, base: b})
			cs.Summary.Remove++
			continue
		}
		if c := b.Install.Changes(h.Install); len(c) > 0 && b.Install.Digest != "" {
			cs.Installs = append(cs.Installs, InstallChange{Site: h.Site, Node: h.Name, Changes: c})
		}
		own := nodeFields(b, h)
		arts := artifactDiff(b, h)
		if len(own) == 0 && len(arts) == 0 {
			continue
		}
		kind := Changed
		if h.Reprovision > b.Reprovision {
			kind = Reprovision
		}
		if len(own) == 0 {
			// Only its rendered files change: that is its profile's (or
			// Micro-OS's, or site's) change, shown once with the nodes
			// it reaches.
			if cause := causeOf(objIdx, cs, h, head); cause >= 0 {
				if len(cs.Objects[cause].Reaches) == 0 {
					cs.Objects[cause].example = [2]*plan.Node{b, h}
				}
				cs.Objects[cause].Reaches = append(cs.Objects[cause].Reaches, h.Site+"/"+h.Name)
				cs.Summary.Change++
				continue
			}
		}
		cs.Nodes = append(cs.Nodes, NodeChange{Kind: kind, Site: h.Site, Name: h.Name, Source: h.Source, Fields: own, Artifacts: arts, base: b, head: h})
		if kind == Reprovision {
			cs.Summary.Reprovision++
		} else {
			cs.Summary.Change++
		}
	}
	return cs
}

// causeOf finds the changed object a node's rendered files follow from.
func causeOf(idx map[string]int, cs *ChangeSet, n *plan.Node, p *plan.Plan) int {
	if i, ok := idx["profile/"+n.Profile]; ok && cs.Objects[i].Kind == Changed {
		return i
	}
	if pr := p.Profile(n.Profile); pr != nil {
		if i, ok := idx["microOS/"+pr.MicroOS]; ok && cs.Objects[i].Kind == Changed {
			return i
		}
	}
	if i, ok := idx["site/"+n.Site]; ok && cs.Objects[i].Kind == Changed {
		return i
	}
	return -1
}

func objects(p *plan.Plan, kind string) map[string]any {
	out := map[string]any{}
	switch kind {
	case "site":
		for _, s := range p.Sites {
			c := *s
			c.Nodes, c.Hash, c.Reservations, c.Unknown = nil, "", nil, nil
			out[s.Name] = c
		}
	case "profile":
		for _, x := range p.Profiles {
			c := *x
			c.Hash = ""
			out[x.Name] = c
		}
	case "microOS":
		for _, x := range p.MicroOS {
			c := *x
			c.Hash = ""
			out[x.Name] = c
		}
	}
	return out
}

func nodes(p *plan.Plan) map[string]*plan.Node {
	out := map[string]*plan.Node{}
	for _, s := range p.Sites {
		for _, n := range s.Nodes {
			out[s.Name+"/"+n.Name] = n
		}
	}
	return out
}

func unionKeys[V any](a, b map[string]V) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// fieldDiff compares two values field by field (dotted paths, leaves as
// JSON text).
func fieldDiff(a, b any) []FieldChange {
	fa, fb := flatten(a), flatten(b)
	var out []FieldChange
	for _, k := range unionKeys(fa, fb) {
		if fa[k] != fb[k] {
			out = append(out, FieldChange{Field: k, Old: fa[k], New: fb[k]})
		}
	}
	return out
}

func flatten(v any) map[string]string {
	b, _ := json.Marshal(v)
	var x any
	json.Unmarshal(b, &x)
	out := map[string]string{}
	var walk func(prefix string, x any)
	walk = func(prefix string, x any) {
		if m, ok := x.(map[string]any); ok && len(m) > 0 {
			for k, v := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, v)
			}
			return
		}
		switch t := x.(type) {
		case string:
			out[prefix] = t
		case nil:
		default:
			b, _ := json.Marshal(t)
			out[prefix] = string(b)
		}
	}
	walk("", x)
	return out
}

// nodeFields compares what a node's own definition says.
func nodeFields(b, h *plan.Node) []FieldChange {
	own := func(n *plan.Node) any {
		return struct {
			Profile     string            `json:"profile"`
			Hostname    string            `json:"hostname"`
			IP          string            `json:"ip"`
			IPv6        string            `json:"ipv6"`
			Identity    plan.Identity     `json:"identity"`
			Labels      map[string]string `json:"labels"`
			Reprovision int               `json:"reprovision"`
			Install     string            `json:"install"`
			Retire      *plan.Retire      `json:"retire"`
		}{n.Profile, n.Hostname, n.IP, n.IPv6, n.Identity, n.Labels, n.Reprovision, installOf(n), n.Retire}
	}
	return fieldDiff(own(b), own(h))
}

// installOf is the install that counts for n: "hold" or "auto" (where it
// is said is not the node's change).
func installOf(n *plan.Node) string {
	if n.Hold != "" {
		return plan.InstallHold
	}
	return plan.InstallAuto
}

func identityFields(n *plan.Node) []FieldChange {
	var out []FieldChange
	for _, f := range []FieldChange{{Field: "serial", New: n.Identity.Serial}, {Field: "uuid", New: n.Identity.UUID}, {Field: "mac", New: strings.Join(n.Identity.MACs, ",")}, {Field: "profile", New: n.Profile}} {
		if f.New != "" {
			out = append(out, f)
		}
	}
	return out
}

// artifactDiff names the rendered files that differ.
func artifactDiff(b, h *plan.Node) []string {
	var out []string
	for _, a := range ArtifactsOf(b) {
		if ArtifactText(h, a) != ArtifactText(b, a) {
			out = append(out, a)
		}
	}
	return out
}

// ArtifactsOf lists a node's rendered files by name.
func ArtifactsOf(*plan.Node) []string {
	return []string{"ipxe", "user-data", "meta-data", "network-config", "workflow"}
}

// ArtifactText is one rendered file of a node.
func ArtifactText(n *plan.Node, name string) string {
	if n == nil {
		return ""
	}
	switch name {
	case "ipxe":
		return n.Artifacts.IPXE
	case "user-data":
		return n.Artifacts.UserData
	case "meta-data":
		return n.Artifacts.MetaData
	case "network-config":
		return n.Artifacts.NetworkConfig
	case "workflow":
		b, _ := json.MarshalIndent(n.Artifacts.Workflow, "", "  ")
		return string(b) + "\n"
	}
	return ""
}

// Nodes of a change, for --artifacts.
func (c NodeChange) Nodes() (base, head *plan.Node) { return c.base, c.head }

// String is one line: "~ rack1-01  profile: a → b".
func (f FieldChange) String() string {
	switch {
	case f.Old == "":
		return fmt.Sprintf("%s: %s", f.Field, f.New)
	case f.New == "":
		return fmt.Sprintf("%s: %s → (none)", f.Field, f.Old)
	}
	return fmt.Sprintf("%s: %s → %s", f.Field, f.Old, f.New)
}
