package compiler

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/bootops/bootops/plan"
)

// render builds the Plan from checked objects: every node's iPXE script,
// cloud-init, workflow, and the DHCP reservations of reservation sites.
func (r *repo) render() (*plan.Plan, Errors) {
	p := &plan.Plan{Sites: []*plan.Site{}, Profiles: []*plan.Profile{}, MicroOS: []*plan.MicroOS{}}
	microOS := r.renderMicroOS(p)
	profiles := r.renderProfiles(p)
	var sites []*plan.Site
	for _, name := range sortedKeys(r.sites) {
		sites = append(sites, r.renderSite(name, profiles, microOS))
	}
	r.renderNodes(sites, profiles, microOS)
	for _, s := range sites {
		sortReservations(s.Reservations)
		s.Hash = plan.SiteHash(s)
		p.Sites = append(p.Sites, s)
	}
	p.Hash = plan.PlanHash(p)
	return p, nil
}

// renderMicroOS adds the Micro-OSes to p, by name, and returns them by
// name.
func (r *repo) renderMicroOS(p *plan.Plan) map[string]*plan.MicroOS {
	microOS := map[string]*plan.MicroOS{}
	for _, name := range sortedKeys(r.microOS) {
		o := r.microOS[name]
		m := &plan.MicroOS{
			Name:      name,
			Kernel:    artifact(o.v.get("kernel")),
			Initrd:    artifact(o.v.get("initrd")),
			Cmdline:   o.str("cmdline"),
			Overlay:   o.v.get("overlay") != nil && o.v.get("overlay").b,
			HTTPSBoot: o.v.get("httpsBoot") != nil && o.v.get("httpsBoot").b,
			PEDigest:  r.peDigests[name],
		}
		if c := o.str("chain"); c != plan.ChainIPXE {
			m.Chain = c
		}
		if a := plan.ArchOr(o.str("arch")); a != plan.ArchX86_64 {
			m.Arch = a
		}
		if u := o.v.get("uki"); u != nil {
			a := artifact(u)
			m.UKI = &a
		}
		m.Hash = plan.Hash(m)
		microOS[name] = m
		p.MicroOS = append(p.MicroOS, m)
	}
	return microOS
}

// renderProfiles adds the profiles to p, by name, and returns them by
// name.
func (r *repo) renderProfiles(p *plan.Plan) map[string]*plan.Profile {
	profiles := map[string]*plan.Profile{}
	for _, name := range sortedKeys(r.profiles) {
		o := r.profiles[name]
		pr := &plan.Profile{
			Name:        name,
			Description: o.str("description"),
			OS:          plan.OS{Type: o.str("os", "type"), Arch: o.str("os", "arch"), Version: o.str("os", "version")},
			Image:       plan.Image{URL: o.str("image", "url"), SHA256: o.str("image", "sha256"), Compression: o.str("image", "compression")},
			MicroOS:     o.str("microOS"),
			KernelArgs:  o.v.get("kernelArgs").strs(),
			Disk:        o.str("disk"),
			Encryption:  encryption(o),
		}
		pr.Hash = plan.Hash(pr)
		profiles[name] = pr
		p.Profiles = append(p.Profiles, pr)
	}
	return profiles
}

// renderSite is the named site without its nodes: its network, its
// policies and what an unknown machine gets.
func (r *repo) renderSite(name string, profiles map[string]*plan.Profile, microOS map[string]*plan.MicroOS) *plan.Site {
	o := r.sites[name]
	nw := o.v.get("network")
	s := &plan.Site{
		Name: name,
		Network: plan.Network{
			Interface:     nw.get("interface").String(),
			ServerAddress: nw.get("serverAddress").String(),
			HTTPPort:      nw.get("httpPort").integer(),
			HTTPSPort:     nw.get("httpsPort").integer(),
			DHCP:          nw.get("dhcp").String(),
			Subnet:        nw.get("subnet").String(),
			Gateway:       nw.get("gateway").String(),
			DNS:           nw.get("dns").strs(),
			LeaseSeconds:  nw.get("leaseSeconds").integer(),
		},
		DefaultProfile: o.str("defaultProfile"),
		UnknownNodes:   o.str("unknownNodes"),
		Labels:         o.v.get("labels").stringMap(),
		Env:            o.v.get("env").stringMap(),
		Power:          powerPolicy(o.str("power")),
		Peers:          peerLimits(o),
		Rollouts:       r.rollouts(o),
		Nodes:          []*plan.Node{},
	}
	if cas := r.ekCAs[name]; cas != nil {
		s.TPM = &plan.SiteTPM{EKCAs: cas}
	}
	if pool := nw.get("pool"); pool != nil {
		s.Network.Pool = &plan.Pool{Start: pool.get("start").str, End: pool.get("end").str}
	}
	if s.Network.ServerAddress == "" {
		// IPv6 only: nothing answers DHCPv4 for the site.
		s.Network.DHCP = plan.DHCPOff
	}
	s.Network.IPv6 = networkV6(nw.get("ipv6"))
	s.Remote = siteRemote(o, s.Network)
	s.Unknown = r.unknownArtifacts(o, s, profiles, microOS)
	return s
}

// unknownArtifacts is what site s boots a machine it does not know into:
// the default profile, the hold Micro-OS, or nothing (nil).
func (r *repo) unknownArtifacts(o *object, s *plan.Site, profiles map[string]*plan.Profile, microOS map[string]*plan.MicroOS) *plan.Artifacts {
	switch s.UnknownNodes {
	case plan.PolicyProvision:
		pr := profiles[s.DefaultProfile]
		a := r.artifacts(&plan.Node{Site: s.Name, Profile: pr.Name}, nil, s, pr, microOS[pr.MicroOS], "")
		return &a
	case plan.PolicyHold:
		m := microOS[r.holdMicroOS(o)]
		a := &plan.Artifacts{IPXE: ipxeScript(s, m, nil, "", nil, "bootops.mode=hold"), Workflow: plan.Workflow{Actions: []plan.Action{}}}
		if m.Chain == plan.ChainShim {
			a.GRUB = grubConfig(s, m, nil, "", nil, "bootops.mode=hold")
		}
		return a
	}
	return nil
}

// renderJob is one node to render into its site: out is the cache's
// answer for key, or nil until rendered.
type renderJob struct {
	n    *nodeObj
	site *plan.Site
	key  renderKey
	out  *plan.Node
}

// renderNodes renders every node into its site, by name, with its
// reservation: in parallel, and only when the node, its site, its profile
// or its Micro-OS changed since the last compilation.
func (r *repo) renderNodes(sites []*plan.Site, profiles map[string]*plan.Profile, microOS map[string]*plan.MicroOS) {
	jobs := r.renderJobs(sites, profiles)
	var misses []int
	for i := range jobs {
		if jobs[i].out == nil {
			misses = append(misses, i)
		}
	}
	parallel(len(misses), func(i int) {
		j := &jobs[misses[i]]
		j.out = r.node(j.n, j.site, profiles[j.n.profile], microOS)
	})
	for _, i := range misses {
		r.cache.put(jobs[i].key, jobs[i].out)
	}
	for _, j := range jobs {
		s, pn := j.site, j.out
		s.Nodes = append(s.Nodes, pn)
		if pn.IP != "" || pn.IPv6 != "" {
			s.Reservations = append(s.Reservations, plan.Reservation{Node: pn.Name, MACs: pn.Identity.MACs, IP: pn.IP, IPv6: pn.IPv6, Hostname: pn.Hostname})
		}
	}
}

// renderJobs lists the nodes site by site, each site's by name, with what
// the render cache holds for each.
func (r *repo) renderJobs(sites []*plan.Site, profiles map[string]*plan.Profile) []renderJob {
	bySite := map[string][]*nodeObj{}
	for _, n := range r.nodes {
		bySite[n.site] = append(bySite[n.site], n)
	}
	jobs := make([]renderJob, 0, len(r.nodes))
	for _, s := range sites {
		nodes := bySite[s.Name]
		slices.SortFunc(nodes, func(a, b *nodeObj) int { return strings.Compare(a.name, b.name) })
		for _, n := range nodes {
			key := r.renderKey(n, profiles[n.profile].MicroOS)
			jobs = append(jobs, renderJob{n: n, site: s, key: key, out: r.cache.get(key)})
		}
	}
	return jobs
}

// sortReservations orders a site's reservations by IPv4 address, then
// IPv6 (IPv6-only reservations first).
func sortReservations(res []plan.Reservation) {
	slices.SortFunc(res, func(a, b plan.Reservation) int {
		x, _ := netip.ParseAddr(a.IP)
		y, _ := netip.ParseAddr(b.IP)
		if c := x.Compare(y); c != 0 {
			return c
		}
		x, _ = netip.ParseAddr(a.IPv6)
		y, _ = netip.ParseAddr(b.IPv6)
		return x.Compare(y)
	})
}

// networkV6 is a site's network.ipv6, addresses in canonical form; nil
// when the site has none.
func networkV6(v *value) *plan.NetworkV6 {
	if v == nil {
		return nil
	}
	n := &plan.NetworkV6{
		ServerAddress: canonicalAddr(v.get("serverAddress").str),
		Prefix:        v.get("prefix").str,
		DHCP:          v.get("dhcp").String(),
	}
	if p, err := netip.ParsePrefix(n.Prefix); err == nil {
		n.Prefix = p.String()
	}
	for _, d := range v.get("dns").strs() {
		n.DNS = append(n.DNS, canonicalAddr(d))
	}
	if pool := v.get("pool"); pool != nil {
		n.Pool = &plan.Pool{Start: canonicalAddr(pool.get("start").str), End: canonicalAddr(pool.get("end").str)}
	}
	return n
}

// canonicalAddr writes an IPv6 address one way (RFC 5952: lowercase, the
// longest run of zero groups as ::), so addresses compare as strings.
func canonicalAddr(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.String()
	}
	return s
}

// renderKey is what a node's rendering depends on; microOS is the name of
// its profile's Micro-OS.
func (r *repo) renderKey(n *nodeObj, microOS string) renderKey {
	return renderKey{node: n.object, site: r.sites[n.site], profile: r.profiles[n.profile], microOS: r.microOS[microOS], profileName: n.profile}
}

func artifact(v *value) plan.Artifact {
	return plan.Artifact{URL: v.get("url").String(), Path: v.get("path").String(), SHA256: v.get("sha256").String()}
}

func (r *repo) node(n *nodeObj, s *plan.Site, pr *plan.Profile, microOS map[string]*plan.MicroOS) *plan.Node {
	id := n.v.get("identity")
	pn := &plan.Node{
		Name:        n.name,
		Site:        s.Name,
		Profile:     pr.Name,
		Hostname:    n.str("hostname"),
		IP:          n.str("ip"),
		IPv6:        canonicalAddr(n.str("ipv6")),
		Labels:      n.v.get("labels").stringMap(),
		Reprovision: n.v.get("reprovision").integer(),
		Hold:        r.hold(n),
		Retire:      retire(n),
		BMC:         r.bmc(n),
		Network:     nodeNetwork(n),
		Source:      fmt.Sprintf("%s:%d", n.file, n.line),
		Identity: plan.Identity{
			UUID:   plan.NormalizeUUID(id.get("uuid").String()),
			Serial: plan.NormalizeSerial(id.get("serial").String()),
		},
	}
	if pn.Hostname == "" {
		pn.Hostname = n.name
	}
	for _, m := range id.get("mac").strs() {
		pn.Identity.MACs = append(pn.Identity.MACs, plan.NormalizeMAC(m))
	}
	if ek := id.lookup("tpm", "ek"); ek != nil {
		pn.Identity.TPM = &plan.TPMIdentity{EK: plan.NormalizeEK(ek.str)}
	}
	pn.Artifacts = r.artifacts(pn, n.v.get("cloudInit"), s, pr, microOS[pr.MicroOS], n.str("disk"))
	pn.Expect = r.expect(n)
	pn.Attestation = r.attestation(n)
	pn.Install = plan.InstallOf(pn)
	pn.Hash = plan.Hash(pn)
	return pn
}

// hold is where the install that counts for node n says hold (its own,
// else its profile's, else its site's), "" when it says auto or none
// says anything.
func (r *repo) hold(n *nodeObj) string {
	for _, o := range []*object{n.object, r.profiles[n.profile], r.sites[n.site]} {
		if o == nil || o.v.lookup("install") == nil {
			continue
		}
		if o.str("install") != plan.InstallHold {
			return ""
		}
		p := o.pos("install")
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return ""
}

// retire is the node's retirement, nil when Git does not retire it.
func retire(n *nodeObj) *plan.Retire {
	v := n.v.lookup("retire")
	if v == nil {
		return nil
	}
	return &plan.Retire{Erase: v.get("erase").String(), Keep: v.get("keep").strs()}
}

// artifacts renders one machine's files. n.Name is "" for unknown machines.
func (r *repo) artifacts(n *plan.Node, nodeCI *value, s *plan.Site, pr *plan.Profile, m *plan.MicroOS, disk string) plan.Artifacts {
	lookup := renderVars(n, s, pr)
	if disk == "" {
		disk = pr.Disk
	}
	a := plan.Artifacts{
		IPXE:     ipxeScript(s, m, n, pr.Name, pr.KernelArgs),
		Workflow: r.workflow(n, pr, disk, lookup),
	}
	if m.Chain == plan.ChainShim {
		a.GRUB = grubConfig(s, m, n, pr.Name, pr.KernelArgs)
	}
	if n.Name == "" {
		return a
	}
	var b strings.Builder
	b.WriteString("#cloud-config\n")
	writeYAML(&b, r.cloudConfig(n, nodeCI, pr, lookup), 0)
	a.UserData = b.String()
	// Quoted where a YAML 1.1 reader (cloud-init's PyYAML) would read a
	// number, a boolean, a date or null: hostname 0042 is not 34.
	a.MetaData = "instance-id: " + yamlString(n.Name+"-"+strconv.Itoa(n.Reprovision)) + "\nlocal-hostname: " + yamlString(n.Hostname) + "\n"
	a.NetworkConfig = networkConfig(n, s)
	return a
}

// renderVars is what ${…} names in a machine's cloud-init values and file
// contents.
func renderVars(n *plan.Node, s *plan.Site, pr *plan.Profile) func(string) (string, bool) {
	vars := map[string]string{
		"node": n.Name, "hostname": n.Hostname, "site": s.Name, "profile": pr.Name,
		"ip": n.IP, "ipv6": n.IPv6, "serial": n.Identity.Serial, "uuid": n.Identity.UUID, "server": s.ServerURL(),
	}
	if len(n.Identity.MACs) > 0 {
		vars["mac"] = n.Identity.MACs[0]
	}
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// cloudConfig is a node's user-data as values: the profile's cloudInit,
// the node's merged over it, the hostname, variables expanded.
func (r *repo) cloudConfig(n *plan.Node, nodeCI *value, pr *plan.Profile, lookup func(string) (string, bool)) *value {
	ci := mergeMaps(r.profiles[pr.Name].v.get("cloudInit"), nodeCI)
	if ci.get("hostname") == nil {
		ci.set("hostname", &value{kind: kString, str: n.Hostname})
	}
	return expandTree(ci, lookup)
}

// bootLine is the Micro-OS's kernel command line and the comment that
// names what boots, shared by the iPXE script and the GRUB config. It
// carries the agent's server URL, the node name and, unless the site
// talks TLS (the agent then checks in over TLS by its identity), the token
// placeholder the boot plane fills in; then the Micro-OS's cmdline, the
// profile's kernelArgs, and bootops's own extra parameters
// (bootops.mode=hold). The compiler has checked every value (checkCmdline,
// the schema's name patterns); each is cleaned again here (ipxeWord,
// ipxeArgs) so that no value, checked or not, can add a command to the
// script, end its kernel line early or be expanded.
func bootLine(s *plan.Site, m *plan.MicroOS, n *plan.Node, profile string, kernelArgs []string, extra ...string) (comment string, args []string) {
	site, micro, prof := ipxeWord(s.Name), ipxeWord(m.Name), ipxeWord(profile)
	args = []string{plan.CmdlineServer + "=" + ipxeWord(s.AgentURL())}
	if n != nil && n.Name != "" {
		node := ipxeWord(n.Name)
		comment = fmt.Sprintf("bootops: node %s, site %s, profile %s, micro-os %s", node, site, prof, micro)
		args = append(args, plan.CmdlineNode+"="+node)
	} else if profile != "" {
		comment = fmt.Sprintf("bootops: unknown machine on site %s, default profile %s, micro-os %s", site, prof, micro)
		args = append(args, "bootops.profile="+prof)
	} else {
		comment = fmt.Sprintf("bootops: unknown machine on site %s held in micro-os %s", site, micro)
	}
	args = append(args, plan.CmdlineSite+"="+site)
	if !s.TLS() {
		args = append(args, plan.CmdlineToken+"="+plan.TokenPlaceholder)
	}
	args = append(args, ipxeArgs(m.Cmdline)...)
	for _, a := range kernelArgs {
		args = append(args, ipxeArgs(a)...)
	}
	return comment, append(args, extra...)
}

// ipxeScript boots the Micro-OS through iPXE. The kernel line names the
// initrd (initrd=initrd) so UEFI kernels find it; a Micro-OS with an
// overlay gets the site's signed overlay as a second initrd.
func ipxeScript(s *plan.Site, m *plan.MicroOS, n *plan.Node, profile string, kernelArgs []string, extra ...string) string {
	base, micro := ipxeWord(s.ServerURL()), ipxeWord(m.Name)
	comment, args := bootLine(s, m, n, profile, kernelArgs, extra...)
	initrds := []string{"initrd=initrd"}
	if m.Overlay {
		initrds = append(initrds, "initrd=overlay")
	}
	var b strings.Builder
	b.WriteString("#!ipxe\n# " + comment + "\n")
	fmt.Fprintf(&b, "kernel %s/artifacts/microos/%s/kernel %s\n", base, micro, strings.Join(append(initrds, args...), " "))
	fmt.Fprintf(&b, "initrd --name initrd %s/artifacts/microos/%s/initrd\n", base, micro)
	if m.Overlay {
		fmt.Fprintf(&b, "initrd --name overlay %s/artifacts/overlay/%s\n", base, ipxeWord(s.Name))
	}
	b.WriteString("boot\n")
	return b.String()
}

// grubConfig boots the Micro-OS from Debian's signed GRUB (the shim
// chain): the kernel, which shim verifies, and the initrd (and the site
// overlay), which nothing verifies, over TFTP from the boot server. Every
// word is single-quoted: GRUB expands nothing inside.
func grubConfig(s *plan.Site, m *plan.MicroOS, n *plan.Node, profile string, kernelArgs []string, extra ...string) string {
	// Debian's signed GRUB reads files over TFTP only: its http module
	// is not built in, and Secure Boot forbids loading it.
	root := "(tftp," + ipxeWord(s.Network.PrimaryAddress()) + ")"
	micro := ipxeWord(m.Name)
	comment, args := bootLine(s, m, n, profile, kernelArgs, append(extra, plan.CmdlineChain+"="+plan.ChainShim)...)
	var b strings.Builder
	b.WriteString("# " + comment + "\n")
	b.WriteString("echo " + grubWord(comment) + "\n")
	fmt.Fprintf(&b, "linux %s/artifacts/microos/%s/kernel", root, micro)
	for _, a := range args {
		b.WriteString(" " + grubWord(a))
	}
	fmt.Fprintf(&b, "\ninitrd %s/artifacts/microos/%s/initrd", root, micro)
	if m.Overlay {
		fmt.Fprintf(&b, " %s/artifacts/overlay/%s", root, ipxeWord(s.Name))
	}
	b.WriteString("\nboot\n")
	return b.String()
}

// grubWord quotes w for GRUB's script language: inside single quotes
// nothing is special; a quote in w ends the quoting, is escaped, and
// starts it again.
func grubWord(w string) string {
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

func (r *repo) workflow(n *plan.Node, pr *plan.Profile, disk string, lookup func(string) (string, bool)) plan.Workflow {
	wf := plan.Workflow{Node: n.Name, Profile: pr.Name, Actions: []plan.Action{}}
	for _, a := range r.profiles[pr.Name].v.get("workflow").list {
		act := plan.Action{
			Action:  a.get("action").str,
			Name:    a.get("name").String(),
			Timeout: a.get("timeout").String(),
			Retries: a.get("retries").integer(),
		}
		if act.Name == "" {
			act.Name = act.Action
		}
		switch act.Action {
		case "wipe-disk":
			act.Disk = disk
		case "image-to-disk":
			act.Disk, act.URL, act.SHA256, act.Compression = disk, pr.Image.URL, pr.Image.SHA256, pr.Image.Compression
			act.Encrypt = cloneEncryption(pr.Encryption)
		case "cloud-init", "write-file", "exec", "kexec":
			act.Disk = disk
			act.Partition = a.get("partition").integer()
			if act.Partition == 0 {
				act.Partition = 1
			}
			act.FSType = a.get("fsType").String()
			if act.FSType == "" {
				act.FSType = "ext4"
			}
			act.Path = a.get("path").String()
			if act.Action == "cloud-init" && act.Path == "" {
				act.Path = "/var/lib/cloud/seed/nocloud"
			}
			if c := a.get("content"); c != nil {
				var b strings.Builder
				_ = expand(c.str, lookup, &b)
				act.Content = b.String()
			}
			act.Mode = a.get("mode").String()
			if act.Action == "write-file" && act.Mode == "" {
				act.Mode = "0644"
			}
			act.Command = a.get("command").strs()
			act.Chroot = a.get("chroot") != nil && a.get("chroot").b
		case plan.QAMemory:
			act.Share = orDefault(a.get("share").String(), plan.DefaultQAShare)
		case plan.QACPU:
			act.Duration = orDefault(a.get("duration").String(), plan.DefaultQADuration)
			act.MinOpsPerSec = a.get("minOpsPerSec").number()
		case plan.QADisk:
			act.Disk = disk
			act.Size = orDefault(a.get("size").String(), plan.DefaultQADiskSize)
			act.Write = a.get("write") != nil && a.get("write").b
			act.MinReadMBps = a.get("minReadMBps").number()
			act.MinWriteMBps = a.get("minWriteMBps").number()
		case plan.QANetwork:
			act.Size = orDefault(a.get("size").String(), plan.DefaultQANetworkSize)
			act.MinMbps = a.get("minMbps").number()
		}
		wf.Actions = append(wf.Actions, act)
	}
	return wf
}

// networkConfig renders cloud-init network-config version 2: a static
// address in reservation mode, DHCP otherwise.
func networkConfig(n *plan.Node, s *plan.Site) string {
	var b strings.Builder
	b.WriteString("version: 2\nethernets:\n  primary:\n")
	if n.Network != nil && n.Network.Interface != "" {
		fmt.Fprintf(&b, "    match:\n      macaddress: %q\n", n.Network.Interface)
	} else if len(n.Identity.MACs) > 0 {
		fmt.Fprintf(&b, "    match:\n      macaddress: %q\n", n.Identity.MACs[0])
	} else {
		b.WriteString(plan.NetworkMatchAny)
	}
	if n.Network != nil {
		staticNetworkConfig(&b, n.Network)
		return b.String()
	}
	v6 := s.Network.IPv6
	if n.IP == "" && n.IPv6 == "" {
		if s.Network.ServerAddress != "" {
			b.WriteString("    dhcp4: true\n")
		}
		if v6 != nil {
			networkConfigV6(&b, v6)
		}
		return b.String()
	}
	var addrs, dns []string
	if n.IP != "" {
		prefix, _ := netip.ParsePrefix(s.Network.Subnet)
		b.WriteString("    dhcp4: false\n")
		addrs = append(addrs, fmt.Sprintf("%s/%d", n.IP, prefix.Bits()))
		dns = append(dns, s.Network.DNS...)
	} else if s.Network.ServerAddress != "" {
		b.WriteString("    dhcp4: true\n")
	}
	if n.IPv6 != "" {
		// The address is static; the default route comes from the
		// router's advertisements.
		prefix, _ := netip.ParsePrefix(v6.Prefix)
		b.WriteString("    dhcp6: false\n    accept-ra: true\n")
		addrs = append(addrs, fmt.Sprintf("%s/%d", n.IPv6, prefix.Bits()))
		dns = append(dns, v6.DNS...)
	} else if v6 != nil {
		networkConfigV6(&b, v6)
	}
	b.WriteString("    addresses:\n")
	for _, a := range addrs {
		fmt.Fprintf(&b, "      - %s\n", yamlString(a))
	}
	if n.IP != "" && s.Network.Gateway != "" {
		fmt.Fprintf(&b, "    gateway4: %s\n", yamlString(s.Network.Gateway))
	}
	if len(dns) > 0 {
		b.WriteString("    nameservers:\n      addresses:\n")
		for _, d := range dns {
			fmt.Fprintf(&b, "        - %s\n", yamlString(d))
		}
	}
	return b.String()
}

// staticNetworkConfig is a node's own static network in cloud-init's
// network config (version 2): a VLAN on the NIC when it says one, the
// address, the default route, the name servers. The default route is
// gateway4: cloud-init 22.4 (Debian 12) refuses routes' "to: default"
// ("Address default is not a valid ip network", and brings up nothing),
// and renders "to: 0.0.0.0/0" for ifupdown as a post-up "route add",
// which a system without net-tools skips; gateway4 becomes the
// interface's gateway, set with iproute2. (netplan still takes it.)
func staticNetworkConfig(b *strings.Builder, nn *plan.NodeNetwork) {
	if nn.VLAN != 0 {
		fmt.Fprintf(b, "    dhcp4: false\nvlans:\n  vlan%d:\n    id: %d\n    link: primary\n", nn.VLAN, nn.VLAN)
	}
	b.WriteString("    dhcp4: false\n    addresses:\n")
	fmt.Fprintf(b, "      - %s\n", yamlString(nn.Address))
	if nn.Gateway != "" {
		fmt.Fprintf(b, "    gateway4: %s\n", yamlString(nn.Gateway))
	}
	if len(nn.DNS) > 0 {
		b.WriteString("    nameservers:\n      addresses:\n")
		for _, d := range nn.DNS {
			fmt.Fprintf(b, "        - %s\n", yamlString(d))
		}
	}
}

// networkConfigV6 is a dynamic IPv6 configuration: router advertisements
// (SLAAC, the default route), and DHCPv6 where the site hands out
// addresses with it.
func networkConfigV6(b *strings.Builder, v6 *plan.NetworkV6) {
	fmt.Fprintf(b, "    dhcp6: %t\n    accept-ra: true\n", v6.DHCP == plan.DHCPReservation)
}

// mergeMaps deep-merges over onto a copy of base (over wins).
func mergeMaps(base, over *value) *value {
	out := &value{kind: kMap}
	if base != nil && base.kind == kMap {
		out = base.clone()
	}
	if over == nil || over.kind != kMap {
		return out
	}
	for i, k := range over.keys {
		ov := over.vals[i]
		if bv := out.get(k); bv != nil && bv.kind == kMap && ov.kind == kMap {
			out.set(k, mergeMaps(bv, ov))
			continue
		}
		out.set(k, ov.clone())
	}
	return out
}

func expandTree(v *value, lookup func(string) (string, bool)) *value {
	switch v.kind {
	case kString:
		var b strings.Builder
		_ = expand(v.str, lookup, &b)
		return &value{kind: kString, str: b.String()}
	case kList, kMap:
		c := &value{kind: v.kind, keys: v.keys}
		for _, e := range v.list {
			c.list = append(c.list, expandTree(e, lookup))
		}
		for _, e := range v.vals {
			c.vals = append(c.vals, expandTree(e, lookup))
		}
		return c
	}
	return v
}

// peerLimits is a site's limits when its machines share images
// (imageDelivery: peers), nil else, so other sites keep their hash.
func peerLimits(o *object) *plan.Peers {
	if o.str("imageDelivery") != "peers" {
		return nil
	}
	p := o.v.get("peers")
	l := &plan.Peers{PerMachine: 4, Linger: "1m"}
	if p != nil {
		l.UploadMbit = p.get("uploadMbit").integer()
		l.PerMachine = max(p.get("perMachine").integer(), 1)
		l.Linger = p.get("linger").String()
	}
	return l
}

// powerPolicy is the Plan's site power: "" for manual, the default, so
// sites without a BMC keep their hash.
func powerPolicy(p string) string {
	if p == plan.PowerAuto {
		return p
	}
	return ""
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
