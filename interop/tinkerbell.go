package interop

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/validate/content"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
)

// TinkerbellAPIVersion is the API version of every exported object.
const TinkerbellAPIVersion = "tinkerbell.org/v1alpha1"

// Files ExportTinkerbell writes: one multi-document YAML file per kind, so
// `kubectl apply -f OUT/` applies them all.
const (
	TinkerbellHardwareFile  = "hardware.yaml"
	TinkerbellTemplatesFile = "templates.yaml"
	TinkerbellWorkflowsFile = "workflows.yaml"
)

// TinkerbellOptions tune an export.
type TinkerbellOptions struct {
	// Namespace of every object (default "tink-system", where Tinkerbell's
	// Helm chart runs).
	Namespace string
	// AutoDisk is the device written for nodes whose disk is "auto": the
	// agent picks the first non-removable disk at run time, a Tinkerbell
	// action needs a path. "" skips such nodes.
	AutoDisk string
}

// TinkerbellExport is what one site becomes in Tinkerbell.
type TinkerbellExport struct {
	Files     []compiler.File // hardware.yaml, templates.yaml, workflows.yaml, in this order
	Hardware  int             // how many of each kind
	Templates int
	Workflows int
	// Skipped are the nodes that cannot be Tinkerbell Hardware, in node order.
	Skipped []SkippedNode
}

// SkippedNode is a node left out of an export, and why.
type SkippedNode struct {
	Node   string
	Source string // file:line
	Reason string
}

func (s SkippedNode) String() string {
	return fmt.Sprintf("%s (%s): %s", s.Node, s.Source, s.Reason)
}

// ExportTinkerbell renders the Hardware, Template and Workflow objects of
// one site: a Hardware and a Workflow per node, a Template per profile (per
// distinct action layout of a profile's nodes, in the rare case they
// differ). A Template holds what the profile's nodes share; what differs
// between nodes (cloud-init seed, file contents with ${node}, disk) comes
// from each Workflow's hardwareMap, which Tinkerbell hands to the template
// as data beside device_1. Output is deterministic.
func ExportTinkerbell(p *plan.Plan, site string, opt TinkerbellOptions) (*TinkerbellExport, error) {
	s := p.Site(site)
	if s == nil {
		var names []string
		for _, s := range p.Sites {
			names = append(names, s.Name)
		}
		return nil, fmt.Errorf("no site %q (sites: %s)%s", site, strings.Join(names, ", "), compiler.DidYouMean(site, names))
	}
	if opt.Namespace == "" {
		opt.Namespace = "tink-system"
	}
	if err := CheckTinkerbellNamespace(opt.Namespace); err != nil {
		return nil, fmt.Errorf("tinkerbell: namespace %q: %w", opt.Namespace, err)
	}
	x := &TinkerbellExport{}
	var nodes []*tinkNode
	for _, n := range s.Nodes {
		tn, why := newTinkNode(p, s, n, opt)
		if why != "" {
			x.Skipped = append(x.Skipped, SkippedNode{Node: n.Name, Source: n.Source, Reason: why})
			continue
		}
		nodes = append(nodes, tn)
	}
	groups := groupByLayout(nodes)

	// Every object is checked before any is encoded: one the API server
	// would reject fails the export, naming the node it comes from.
	var hws, tpls, wfs []tinkObject
	var bad []error
	for _, tn := range nodes {
		o := tn.hardware(s, opt.Namespace)
		bad = append(bad, tn.check(o)...)
		hws = append(hws, o)
	}
	for _, g := range groups {
		o := g.template(s, opt.Namespace)
		bad = append(bad, g.nodes[0].check(o)...)
		tpls = append(tpls, o)
		for _, tn := range g.nodes {
			tn.template = g.name
			tn.vars = g.varsOf(tn)
		}
	}
	for _, tn := range nodes {
		o := tn.workflow(opt.Namespace)
		bad = append(bad, tn.check(o)...)
		wfs = append(wfs, o)
	}
	if len(bad) > 0 {
		return nil, errors.Join(bad...)
	}
	for _, f := range []struct {
		path string
		objs []tinkObject
	}{{TinkerbellHardwareFile, hws}, {TinkerbellTemplatesFile, tpls}, {TinkerbellWorkflowsFile, wfs}} {
		var b bytes.Buffer
		for _, o := range f.objs {
			if err := writeDoc(&b, o); err != nil {
				return nil, err
			}
		}
		x.Files = append(x.Files, compiler.File{Path: f.path, Data: b.Bytes()})
	}
	x.Hardware, x.Templates, x.Workflows = len(hws), len(tpls), len(wfs)
	return x, nil
}

// CheckTinkerbellNamespace returns an error if ns cannot be a Kubernetes
// namespace: a DNS-1123 label, at most 63 lower-case letters, digits and
// '-', starting and ending with a letter or digit. The words are
// Kubernetes' own.
func CheckTinkerbellNamespace(ns string) error {
	if msgs := content.IsDNS1123Label(ns); len(msgs) > 0 {
		return errors.New("not a Kubernetes namespace: " + strings.Join(msgs, "; "))
	}
	return nil
}

// maxAnnotationBytes is the API server's limit on an object's annotations,
// keys and values together (TotalAnnotationSizeLimitB in
// k8s.io/apimachinery/pkg/api/validation, which this binary does not link).
const maxAnnotationBytes = 256 << 10

// metaProblems is what the API server would reject in an object's name,
// labels and annotations, by Kubernetes' own rules: a name is a DNS-1123
// subdomain, a label key or annotation key a qualified name, a label value
// at most 63 characters of a restricted set. bootops's schema keeps node,
// site and profile names DNS-1123 labels, so a plan compiled from a
// repository passes; the check guards against a name the schema would let
// through in future, or a plan made some other way.
func metaProblems(m tinkMeta) []string {
	var out []string
	add := func(field, value string, msgs []string) {
		for _, msg := range msgs {
			out = append(out, fmt.Sprintf("%s %q: %s", field, clip(value), msg))
		}
	}
	add("metadata.name", m.Name, content.IsDNS1123Subdomain(m.Name))
	for _, k := range slices.Sorted(maps.Keys(m.Labels)) {
		add("metadata.labels key", k, content.IsLabelKey(k))
		add("metadata.labels["+k+"]", m.Labels[k], content.IsLabelValue(m.Labels[k]))
	}
	size := 0
	for _, k := range slices.Sorted(maps.Keys(m.Annotations)) {
		add("metadata.annotations key", k, content.IsLabelKey(k))
		size += len(k) + len(m.Annotations[k])
	}
	if size > maxAnnotationBytes {
		out = append(out, fmt.Sprintf("metadata.annotations: %d bytes, over Kubernetes' limit of %d", size, maxAnnotationBytes))
	}
	return out
}

// check returns an error for each problem of o's metadata, naming the node
// o is made for and where the node is defined.
func (tn *tinkNode) check(o tinkObject) []error {
	var errs []error
	for _, p := range metaProblems(o.Metadata) {
		errs = append(errs, fmt.Errorf("tinkerbell: node %s (%s): %s %s: %s", clip(tn.n.Name), clip(tn.n.Source), o.Kind, clip(o.Metadata.Name), p))
	}
	return errs
}

// clip shortens a value too long to read in an error.
func clip(s string) string {
	n := 100
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:n], len(s))
}

// tinkNode is a node on its way to Tinkerbell.
type tinkNode struct {
	n       *plan.Node
	profile *plan.Profile
	disk    string
	actions []tinkAction // every value resolved for this node
	// Set once the templates are made.
	template string
	vars     map[string]string
}

func newTinkNode(p *plan.Plan, s *plan.Site, n *plan.Node, opt TinkerbellOptions) (*tinkNode, string) {
	if len(n.Identity.MACs) == 0 {
		return nil, "no MAC address: Tinkerbell finds a machine's Hardware by the MAC it DHCPs with (add identity.mac)"
	}
	pr := p.Profile(n.Profile)
	if pr == nil {
		return nil, fmt.Sprintf("profile %q is not in the plan", n.Profile)
	}
	disk := ""
	for _, a := range n.Artifacts.Workflow.Actions {
		if a.Disk != "" {
			disk = a.Disk
			break
		}
	}
	if disk == "" {
		disk = pr.Disk
	}
	if disk == "" || disk == "auto" {
		if opt.AutoDisk == "" {
			return nil, `disk "auto": a Tinkerbell action needs a device path (set disk: on the profile or node, or pass --auto-disk /dev/sda)`
		}
		disk = opt.AutoDisk
	}
	tn := &tinkNode{n: n, profile: pr, disk: disk}
	for _, a := range n.Artifacts.Workflow.Actions {
		acts, err := tinkActions(a, n, disk)
		if err != nil {
			return nil, err.Error()
		}
		tn.actions = append(tn.actions, acts...)
	}
	// Two unnamed write-file actions are both "write-file": Tinkerbell
	// reports actions by name, so each gets its own.
	seen := map[string]bool{}
	for i := range tn.actions {
		name := tn.actions[i].Name
		for k := 2; seen[name]; k++ {
			name = tn.actions[i].Name + "-" + strconv.Itoa(k)
		}
		seen[name] = true
		tn.actions[i].Name = name
	}
	return tn, ""
}

// k8s objects, as much of them as the export fills. Field names and types
// follow the CRDs in tinkerbell/tink config/crd/bases.
type (
	tinkObject struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Metadata   tinkMeta `yaml:"metadata"`
		Spec       any      `yaml:"spec"`
	}
	tinkMeta struct {
		Name        string            `yaml:"name"`
		Namespace   string            `yaml:"namespace"`
		Labels      map[string]string `yaml:"labels,omitempty"`
		Annotations map[string]string `yaml:"annotations,omitempty"`
	}
	hardwareSpec struct {
		Disks      []hwDisk      `yaml:"disks"`
		Interfaces []hwInterface `yaml:"interfaces"`
		Metadata   hwMetadata    `yaml:"metadata"`
		UserData   string        `yaml:"userData,omitempty"`
	}
	hwDisk struct {
		Device string `yaml:"device"`
	}
	hwInterface struct {
		DHCP    hwDHCP    `yaml:"dhcp"`
		Netboot hwNetboot `yaml:"netboot"`
	}
	hwDHCP struct {
		MAC         string   `yaml:"mac"`
		Hostname    string   `yaml:"hostname,omitempty"`
		Arch        string   `yaml:"arch,omitempty"`
		IP          *hwIP    `yaml:"ip,omitempty"`
		LeaseTime   int64    `yaml:"lease_time,omitempty"`
		NameServers []string `yaml:"name_servers,omitempty"`
	}
	hwIP struct {
		Address string `yaml:"address"`
		Netmask string `yaml:"netmask,omitempty"`
		Gateway string `yaml:"gateway,omitempty"`
		Family  int64  `yaml:"family"`
	}
	hwNetboot struct {
		AllowPXE      bool `yaml:"allowPXE"`
		AllowWorkflow bool `yaml:"allowWorkflow"`
	}
	hwMetadata struct {
		Facility hwFacility `yaml:"facility"`
		Instance hwInstance `yaml:"instance"`
	}
	hwFacility struct {
		FacilityCode string `yaml:"facility_code"`
	}
	hwInstance struct {
		ID              string `yaml:"id"`
		Hostname        string `yaml:"hostname"`
		AllowPXE        bool   `yaml:"allow_pxe"`
		OperatingSystem hwOS   `yaml:"operating_system"`
	}
	hwOS struct {
		Slug    string `yaml:"slug"`
		Version string `yaml:"version,omitempty"`
	}
	templateSpec struct {
		Data string `yaml:"data"`
	}
	workflowSpec struct {
		TemplateRef string            `yaml:"templateRef"`
		HardwareRef string            `yaml:"hardwareRef"`
		HardwareMap map[string]string `yaml:"hardwareMap"`
		BootOptions wfBootOptions     `yaml:"bootOptions"`
	}
	wfBootOptions struct {
		ToggleAllowNetboot bool `yaml:"toggleAllowNetboot"`
	}
)

func meta(name, ns, site string, labels map[string]string) tinkMeta {
	l := map[string]string{"app.kubernetes.io/managed-by": "bootops", "bootops.dev/site": site}
	for k, v := range labels {
		l[k] = v
	}
	return tinkMeta{Name: name, Namespace: ns, Labels: l}
}

// instanceID is the one the node's NoCloud meta-data carries: raising
// reprovision changes it, so cloud-init runs again.
func instanceID(n *plan.Node) string { return n.Name + "-" + strconv.Itoa(n.Reprovision) }

func (tn *tinkNode) hardware(s *plan.Site, ns string) tinkObject {
	n := tn.n
	arch := tn.profile.OS.Arch
	if arch == "arm64" {
		arch = "aarch64" // Tinkerbell's (and the kernel's) name
	}
	spec := hardwareSpec{
		Disks: []hwDisk{{Device: tn.disk}},
		Metadata: hwMetadata{
			Facility: hwFacility{FacilityCode: s.Name},
			Instance: hwInstance{
				ID: instanceID(n), Hostname: n.Hostname, AllowPXE: true,
				OperatingSystem: hwOS{Slug: tn.profile.Name, Version: tn.profile.OS.Version},
			},
		},
		// Hegel, Tinkerbell's metadata service, serves it to an OS that
		// reads cloud-init from there rather than from the NoCloud seed.
		UserData: n.Artifacts.UserData,
	}
	for i, mac := range n.Identity.MACs {
		d := hwDHCP{MAC: strings.ToLower(mac), Hostname: n.Hostname, Arch: arch}
		// bootops reserves one address for whichever NIC boots; Tinkerbell
		// gives it to an interface: the first.
		if i == 0 && n.IP != "" {
			d.IP = &hwIP{Address: n.IP, Gateway: s.Network.Gateway, Netmask: netmask(s.Network.Subnet), Family: 4}
			d.LeaseTime = int64(s.Network.LeaseSeconds)
			d.NameServers = s.Network.DNS
		}
		spec.Interfaces = append(spec.Interfaces, hwInterface{DHCP: d, Netboot: hwNetboot{AllowPXE: true, AllowWorkflow: true}})
	}
	m := meta(n.Name, ns, s.Name, map[string]string{"bootops.dev/profile": n.Profile})
	m.Annotations = map[string]string{"bootops.dev/source": n.Source}
	return tinkObject{APIVersion: TinkerbellAPIVersion, Kind: "Hardware", Metadata: m, Spec: spec}
}

func netmask(subnet string) string {
	pfx, err := netip.ParsePrefix(subnet)
	if err != nil || !pfx.Addr().Is4() {
		return ""
	}
	m := uint32(0xffffffff) << (32 - pfx.Bits())
	if pfx.Bits() == 0 {
		m = 0
	}
	return netip.AddrFrom4([4]byte{byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)}).String()
}

func (tn *tinkNode) workflow(ns string) tinkObject {
	hm := map[string]string{"device_1": strings.ToLower(tn.n.Identity.MACs[0])}
	for k, v := range tn.vars {
		hm[k] = v
	}
	m := meta(tn.n.Name, ns, tn.n.Site, map[string]string{"bootops.dev/profile": tn.n.Profile})
	return tinkObject{APIVersion: TinkerbellAPIVersion, Kind: "Workflow", Metadata: m, Spec: workflowSpec{
		TemplateRef: tn.template,
		HardwareRef: tn.n.Name,
		HardwareMap: hm,
		// Netboot is allowed until the workflow succeeds, then the machine
		// boots its disk: bootops's "provisioned" without a reinstall loop.
		BootOptions: wfBootOptions{ToggleAllowNetboot: true},
	}}
}

// tinkGroup is the nodes of one profile whose actions have the same layout:
// one Template.
type tinkGroup struct {
	name   string
	layout string
	nodes  []*tinkNode
	// varying[i][j] names the hardwareMap key of value j of action i when
	// the nodes disagree on it ("" when they all agree).
	varying [][]string
}

func groupByLayout(nodes []*tinkNode) []*tinkGroup {
	byKey := map[string]*tinkGroup{}
	var groups []*tinkGroup
	for _, tn := range nodes {
		layout := actionsLayout(tn.actions)
		key := tn.profile.Name + "\x00" + layout
		g := byKey[key]
		if g == nil {
			g = &tinkGroup{name: tn.profile.Name, layout: layout}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.nodes = append(g.nodes, tn)
	}
	// Name: the profile; a second layout of a profile gets a suffix from
	// its hash, stable whatever else the repository holds.
	seen := map[string]bool{}
	for _, g := range groups {
		if seen[g.name] {
			sum := sha256.Sum256([]byte(g.layout))
			g.name += "-" + hex.EncodeToString(sum[:4])
		}
		seen[g.name] = true
		g.findVarying()
	}
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].name < groups[j].name })
	return groups
}

func (g *tinkGroup) findVarying() {
	first := g.nodes[0].actions
	used := map[string]bool{"device_1": true, "Hardware": true}
	g.varying = make([][]string, len(first))
	for i, a := range first {
		vals := a.values()
		g.varying[i] = make([]string, len(vals))
		for j, v := range vals {
			for _, tn := range g.nodes[1:] {
				if *tn.actions[i].values()[j] != *v {
					g.varying[i][j] = uniqueKey(used, varName(a.Name, a.valueName(j)))
					break
				}
			}
		}
	}
}

// varsOf is the node's hardwareMap entries beyond device_1.
func (g *tinkGroup) varsOf(tn *tinkNode) map[string]string {
	vars := map[string]string{}
	for i, keys := range g.varying {
		vals := tn.actions[i].values()
		for j, k := range keys {
			if k != "" {
				vars[k] = *vals[j]
			}
		}
	}
	return vars
}

// varName makes a template identifier of an action name and a value name:
// cloud-init-user-data, CONTENTS → cloud_init_user_data_contents.
func varName(action, value string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(action + "_" + value) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		s = "v_" + s
	}
	return s
}

func uniqueKey(used map[string]bool, k string) string {
	out := k
	for i := 2; used[out]; i++ {
		out = k + "_" + strconv.Itoa(i)
	}
	used[out] = true
	return out
}

func (g *tinkGroup) template(s *plan.Site, ns string) tinkObject {
	m := meta(g.name, ns, s.Name, map[string]string{"bootops.dev/profile": g.nodes[0].profile.Name})
	return tinkObject{APIVersion: TinkerbellAPIVersion, Kind: "Template", Metadata: m,
		Spec: templateSpec{Data: templateData(g, s)}}
}

// writeDoc appends one YAML document.
func writeDoc(b *bytes.Buffer, v any) error {
	b.WriteString("---\n")
	enc := yaml.NewEncoder(b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("tinkerbell: encode: %w", err)
	}
	return enc.Close()
}
