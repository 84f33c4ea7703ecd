package compiler

import (
	"fmt"
	"io/fs"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/schema"
)

// repo is the validated objects of a repository, indexed for the checks
// that span objects.
type repo struct {
	fsys     fs.FS
	sites    map[string]*object
	profiles map[string]*object
	microOS  map[string]*object
	nodes    []*nodeObj
	// ekCAs are each site's EK CA files, read and checked by checkSite.
	ekCAs map[string][]plan.EKCA
	// peDigests are the PE digests of the Micro-OSes some site and
	// profile require attestation of (checkAttestation).
	peDigests map[string]string
	errs      Errors
	// broken names objects that failed the schema, by kind: a reference to
	// one is not reported again.
	broken map[string]map[string]bool
	cache  *renderCache
	index  *index
}

type nodeObj struct {
	*object
	site    string
	profile string
}

func (r *repo) errorf(pos Pos, path, format string, args ...any) {
	r.errs = append(r.errs, errorf(pos, path, format, args...))
}

// assemble runs the cross-object rules and, when they hold, the renderers.
func assemble(objs []*object, fsys fs.FS, cache *renderCache, ix *index, loadErrs Errors, stats *Stats) (*plan.Plan, *repo, Errors) {
	r := &repo{fsys: fsys, cache: cache, index: ix, sites: map[string]*object{}, profiles: map[string]*object{}, microOS: map[string]*object{},
		ekCAs: map[string][]plan.EKCA{}, peDigests: map[string]string{},
		broken: map[string]map[string]bool{"Site": {}, "Profile": {}, "MicroOS": {}, "Node": {}}}
	valid := objs[:0:0]
	for _, o := range objs {
		if o.invalid {
			r.broken[o.kind][o.name] = true
			continue
		}
		valid = append(valid, o)
	}
	objs = valid
	if !slices.IsSortedFunc(objs, byPlace) {
		slices.SortFunc(objs, byPlace)
	}
	for _, o := range objs {
		switch o.kind {
		case "Site":
			r.unique(r.sites, o, "Site")
		case "Profile":
			r.unique(r.profiles, o, "Profile")
		case "MicroOS":
			r.unique(r.microOS, o, "MicroOS")
		}
	}
	for _, o := range objs {
		if o.kind == "Node" {
			r.addNode(o)
		}
	}
	r.errs = append(r.errs, r.index.update(r.nodes)...)
	for _, name := range sortedKeys(r.sites) {
		r.checkSite(r.sites[name])
	}
	for _, name := range sortedKeys(r.profiles) {
		r.checkProfile(r.profiles[name])
	}
	for _, name := range sortedKeys(r.microOS) {
		r.checkMicroOS(r.microOS[name])
	}
	r.checkAddresses()
	r.checkBMCs()
	r.checkRollouts()
	r.checkExpects()
	r.checkRetire()
	r.checkAttestation()
	r.checkRemote()
	if len(r.errs) > 0 || len(loadErrs) > 0 {
		return nil, r, append(loadErrs, r.errs...)
	}
	if stats != nil {
		*stats = Stats{Sites: len(r.sites), Nodes: len(r.nodes), Profiles: len(r.profiles), MicroOS: len(r.microOS)}
		return nil, r, nil
	}
	p, errs := r.render()
	return p, r, errs
}

func (r *repo) unique(m map[string]*object, o *object, kind string) {
	if first, dup := m[o.name]; dup {
		r.errorf(o.pos("name"), "name", "duplicate %s %q (also at %s)", kind, o.name, first.pos("name"))
		return
	}
	m[o.name] = o
}

// nodeFacts are what a node says of itself, worked out once per object
// (objects are cached across compilations).
type nodeFacts struct {
	site, fromPath, profile string
	hasIdentity             bool
	errs                    Errors // problems of the object alone
}

func (o *object) facts() *nodeFacts {
	if o.nodeFacts != nil {
		return o.nodeFacts
	}
	id := o.v.get("identity")
	f := &nodeFacts{
		site:     o.str("site"),
		fromPath: siteFromPath(o.file),
		profile:  o.str("profile"),
	}
	// What counts is what is left after normalisation: mac: [] names no
	// machine.
	for _, c := range o.identityClaims() {
		if c.norm != "" {
			f.hasIdentity = true
		}
	}
	if !f.hasIdentity {
		msg := "needs at least one of mac, uuid, serial, tpm"
		if m := id.get("mac"); m != nil && m.kind == kList && len(m.list) == 0 {
			msg += " (mac is an empty list)"
		}
		f.errs = append(f.errs, errorf(o.pos("identity"), "identity", "%s", msg))
	}
	if f.site != "" && f.fromPath != "" && f.site != f.fromPath {
		f.errs = append(f.errs, errorf(o.pos("site"), "site", "node says site %q but its file is under sites/%s/", f.site, f.fromPath))
	}
	tr := &repo{}
	tr.checkTemplate(o, o.v.get("cloudInit"), "cloudInit")
	f.errs = append(f.errs, tr.errs...)
	o.nodeFacts = f
	return f
}

func (r *repo) addNode(o *object) {
	n := &nodeObj{object: o}
	// Every node takes part in the name and identity checks, even when its
	// site or profile is wrong: all errors at once.
	defer func() { r.nodes = append(r.nodes, n) }()
	f := o.facts()
	r.errs = append(r.errs, f.errs...)
	n.site = f.site
	switch {
	case f.site != "" && f.fromPath != "" && f.site != f.fromPath:
		return
	case f.site == "" && f.fromPath != "":
		n.site = f.fromPath
	case f.site == "" && len(r.sites) == 1:
		for name := range r.sites {
			n.site = name
		}
	case f.site == "":
		r.errorf(o.pos(), "site", "missing: set site, or put the file under sites/<site>/")
		return
	}
	site := r.sites[n.site]
	if site == nil {
		if !r.broken["Site"][n.site] {
			path := "site"
			if f.site == "" {
				path = ""
			}
			r.errorf(o.pos("site"), path, "unknown site %q%s", n.site, DidYouMean(n.site, sortedKeys(r.sites)))
		}
		n.site = ""
		return
	}
	n.profile = f.profile
	if n.profile == "" {
		n.profile = site.str("defaultProfile")
		if n.profile == "" {
			r.errorf(o.pos(), "profile", "missing: the node names no profile and site %s has no defaultProfile", n.site)
			return
		}
	}
	// An unknown defaultProfile is the site file's error, said once there.
	if f.profile != "" && r.profiles[n.profile] == nil && !r.broken["Profile"][n.profile] {
		r.errorf(o.pos("profile"), "profile", "unknown profile %q%s", n.profile, DidYouMean(n.profile, sortedKeys(r.profiles)))
	}
}

// claim is one normalised identifier a node registers.
type claim struct {
	key               string // field=value
	field, norm, path string
	pos               Pos
}

// identityClaims normalises the node's identifiers once: objects are cached
// across compilations, and so are their claims.
func (o *object) identityClaims() []claim {
	if o.claims != nil {
		return o.claims
	}
	out := []claim{}
	add := func(field, norm, path string, pos Pos) {
		out = append(out, claim{key: field + "=" + norm, field: field, norm: norm, path: path, pos: pos})
	}
	id := o.v.get("identity")
	if mac := id.get("mac"); mac != nil {
		if mac.kind == kString {
			add("mac", plan.NormalizeMAC(mac.str), "identity.mac", o.pos("identity", "mac"))
		}
		for i, m := range mac.list {
			add("mac", plan.NormalizeMAC(m.str), indexPath("identity.mac", i), Pos{File: o.file, Line: m.line, Col: m.col})
		}
	}
	if u := id.get("uuid"); u != nil {
		add("uuid", plan.NormalizeUUID(u.str), "identity.uuid", o.pos("identity", "uuid"))
	}
	if s := id.get("serial"); s != nil {
		add("serial", plan.NormalizeSerial(s.str), "identity.serial", o.pos("identity", "serial"))
	}
	if ek := id.lookup("tpm", "ek"); ek != nil {
		add("tpm.ek", plan.NormalizeEK(ek.str), "identity.tpm.ek", o.pos("identity", "tpm", "ek"))
	}
	o.claims = out
	return out
}

func (r *repo) checkSite(s *object) {
	env := s.v.get("env").stringMap()
	for _, k := range sortedKeys(env) {
		if !envName.MatchString(k) {
			r.errorf(s.pos("env", k), "env."+k, "%q is not an environment variable name: letters, digits and '_', not starting with a digit", k)
		}
		if why := secretEnv(k, env[k]); why != "" {
			r.errorf(s.pos("env", k), "env."+k, "%s, and a site's env is no place for a secret: the site overlay carries it to any machine on the LAN that asks, unauthenticated. Keep it out of env (the installed system can fetch it with credentials of its own)", why)
		}
	}
	r.checkEKCAs(s)
	if dp := s.str("defaultProfile"); dp != "" && r.profiles[dp] == nil && !r.broken["Profile"][dp] {
		r.errorf(s.pos("defaultProfile"), "defaultProfile", "unknown profile %q%s", dp, DidYouMean(dp, sortedKeys(r.profiles)))
	}
	switch s.str("unknownNodes") {
	case plan.PolicyProvision:
		if s.str("defaultProfile") == "" {
			r.errorf(s.pos("unknownNodes"), "unknownNodes", "provision needs a defaultProfile (or set unknownNodes: hold or ignore)")
		}
	case plan.PolicyHold:
		if r.holdMicroOS(s) == "" {
			r.errorf(s.pos("unknownNodes"), "unknownNodes", "hold boots unknown machines into a Micro-OS: set a defaultProfile or define a MicroOS named \"default\"")
		}
	}
	nw := s.v.get("network")
	r.checkNetworkV6(s)
	if nw.get("serverAddress") == nil {
		r.checkIPv6Only(s)
		return
	}
	if nw.get("dhcp").String() != plan.DHCPReservation {
		if nw.get("pool") != nil {
			r.errorf(s.pos("network", "pool"), "network.pool", "only used in reservation mode (network.dhcp: reservation)")
		}
		return
	}
	if nw.get("subnet") == nil {
		r.errorf(s.pos("network", "dhcp"), "network.subnet", "missing: reservation mode needs the subnet it hands addresses in")
		return
	}
	subnet, err := netip.ParsePrefix(nw.get("subnet").str)
	if err != nil || subnet.Masked() != subnet {
		r.errorf(s.pos("network", "subnet"), "network.subnet", "%q is not a network address (want %s)", nw.get("subnet").str, subnet.Masked())
		return
	}
	for _, f := range []string{"serverAddress", "gateway"} {
		if v := nw.get(f); v != nil {
			if a, err := netip.ParseAddr(v.str); err == nil && !subnet.Contains(a) {
				r.errorf(s.pos("network", f), "network."+f, "%s is outside the subnet %s", v.str, subnet)
			}
		}
	}
	if pool := nw.get("pool"); pool != nil {
		start, _ := netip.ParseAddr(pool.get("start").str)
		end, _ := netip.ParseAddr(pool.get("end").str)
		for _, f := range []string{"start", "end"} {
			a, _ := netip.ParseAddr(pool.get(f).str)
			if !subnet.Contains(a) {
				r.errorf(s.pos("network", "pool", f), "network.pool."+f, "%s is outside the subnet %s", a, subnet)
			}
		}
		if end.Less(start) {
			r.errorf(s.pos("network", "pool", "end"), "network.pool.end", "%s comes before the start %s", end, start)
		}
	}
}

// checkIPv6Only: a site without an IPv4 serverAddress has ipv6, and no
// other IPv4 setting.
func (r *repo) checkIPv6Only(s *object) {
	nw := s.v.get("network")
	if nw.get("ipv6") == nil {
		r.errorf(s.pos("network"), "network", "no server address: set serverAddress (IPv4), ipv6 {serverAddress, prefix}, or both")
		return
	}
	for _, f := range []string{"subnet", "gateway", "dns", "pool"} {
		if nw.get(f) != nil {
			r.errorf(s.pos("network", f), "network."+f, "an IPv4 setting on an IPv6-only site: set network.serverAddress (IPv4) too, or leave it out")
		}
	}
	if nw.get("dhcp").String() == plan.DHCPReservation {
		r.errorf(s.pos("network", "dhcp"), "network.dhcp", "reservation hands out IPv4 addresses: it needs network.serverAddress (for DHCPv6, set network.ipv6.dhcp)")
	}
}

// checkNetworkV6: the server address a reachable unicast address inside a
// /64 prefix, the pool inside it (reservation mode only), ordered and
// without the server address.
func (r *repo) checkNetworkV6(s *object) {
	v6 := s.v.lookup("network", "ipv6")
	if v6 == nil {
		return
	}
	at := func(f ...string) Pos { return s.pos(append([]string{"network", "ipv6"}, f...)...) }
	path := func(f string) string { return "network.ipv6." + f }
	if v6.get("dhcp").String() != plan.DHCPReservation && v6.get("pool") != nil {
		r.errorf(at("pool"), path("pool"), "only used in reservation mode (network.ipv6.dhcp: reservation)")
	}
	prefix, err := netip.ParsePrefix(v6.get("prefix").str)
	prefixOK := false
	switch {
	case err != nil || !prefix.Addr().Is6() || prefix.Addr().Is4In6():
		r.errorf(at("prefix"), path("prefix"), "%q is not an IPv6 prefix", v6.get("prefix").str)
	case prefix.Masked() != prefix:
		r.errorf(at("prefix"), path("prefix"), "%q is not a network address (want %s)", v6.get("prefix").str, prefix.Masked())
	case prefix.Bits() != 64:
		r.errorf(at("prefix"), path("prefix"), "%s is a /%d: an IPv6 link is a /64 (the prefix its router advertises; SLAAC needs a /64)", prefix, prefix.Bits())
	case !usableV6(prefix.Addr()):
		r.errorf(at("prefix"), path("prefix"), "%s is %s: want the global or unique-local prefix the router advertises", prefix, v6Kind(prefix.Addr()))
	default:
		prefixOK = true
	}
	server, err := netip.ParseAddr(v6.get("serverAddress").str)
	switch {
	case err != nil || !server.Is6():
		r.errorf(at("serverAddress"), path("serverAddress"), "%q is not an IPv6 address", v6.get("serverAddress").str)
		return
	case !usableV6(server):
		r.errorf(at("serverAddress"), path("serverAddress"), "%s is %s: nodes reach the server at a global or unique-local address in network.ipv6.prefix", server, v6Kind(server))
	case prefixOK && !prefix.Contains(server):
		r.errorf(at("serverAddress"), path("serverAddress"), "%s is outside the prefix %s", server, prefix)
	case prefixOK && server == prefix.Addr():
		r.errorf(at("serverAddress"), path("serverAddress"), "%s is the subnet-router anycast address of %s", server, prefix)
	}
	pool := v6.get("pool")
	if pool == nil {
		return
	}
	start, errS := netip.ParseAddr(pool.get("start").str)
	end, errE := netip.ParseAddr(pool.get("end").str)
	if errS != nil || errE != nil {
		return
	}
	if prefixOK {
		for f, a := range map[string]netip.Addr{"start": start, "end": end} {
			if !prefix.Contains(a) {
				r.errorf(at("pool", f), path("pool."+f), "%s is outside the prefix %s", a, prefix)
			} else if a == prefix.Addr() {
				r.errorf(at("pool", f), path("pool."+f), "%s is the subnet-router anycast address of %s", a, prefix)
			}
		}
	}
	if end.Less(start) {
		r.errorf(at("pool", "end"), path("pool.end"), "%s comes before the start %s", end, start)
	} else if !server.Less(start) && !end.Less(server) {
		r.errorf(at("pool"), path("pool"), "%s-%s holds the server address %s", start, end, server)
	}
}

// usableV6 reports whether a is an IPv6 unicast address nodes can reach
// across the link: global or unique-local, not link-local, multicast,
// loopback, unspecified or IPv4-mapped.
func usableV6(a netip.Addr) bool {
	return a.Is6() && !a.Is4In6() && a.IsGlobalUnicast()
}

// v6Kind names what makes a not usableV6.
func v6Kind(a netip.Addr) string {
	switch {
	case a.Is4In6():
		return "IPv4-mapped (::ffff:0:0/96)"
	case a.IsLinkLocalUnicast():
		return "link-local (fe80::/10)"
	case a.IsMulticast():
		return "multicast (ff00::/8)"
	case a.IsLoopback():
		return "the loopback address"
	case a.IsUnspecified():
		return "the unspecified address"
	}
	return "not a unicast address"
}

// holdMicroOS is the Micro-OS unknown machines boot under the hold policy.
func (r *repo) holdMicroOS(s *object) string {
	if p := r.profiles[s.str("defaultProfile")]; p != nil {
		return p.str("microOS")
	}
	if r.microOS["default"] != nil {
		return "default"
	}
	return ""
}

// checkAddresses: reservation IPs inside the subnet (ipv6: the prefix),
// unique, and only in reservation-mode sites.
func (r *repo) checkAddresses() {
	seen := map[string]owner{}
	for _, n := range r.nodes {
		r.checkAddressV6(n, seen)
		ipv := n.v.get("ip")
		if ipv == nil || n.site == "" {
			continue
		}
		site := r.sites[n.site]
		nw := site.v.get("network")
		pos := n.pos("ip")
		if nw.get("serverAddress") == nil {
			r.errorf(pos, "ip", "site %s has no IPv4 (network.serverAddress): a static IPv4 address needs it, with network.dhcp: reservation", n.site)
			continue
		}
		if nw.get("dhcp").String() != plan.DHCPReservation {
			r.errorf(pos, "ip", "site %s is in %s mode: static IPs need network.dhcp: reservation", n.site, nw.get("dhcp").String())
			continue
		}
		if n.v.lookup("identity", "mac") == nil {
			r.errorf(pos, "ip", "a DHCP reservation needs identity.mac")
		}
		ip, err := netip.ParseAddr(ipv.str)
		if err != nil {
			continue
		}
		if subnet, err := netip.ParsePrefix(nw.get("subnet").String()); err == nil {
			if !subnet.Contains(ip) {
				r.errorf(pos, "ip", "%s is outside site %s's subnet %s", ip, n.site, subnet)
				continue
			}
			if ip == subnet.Addr() || ip == lastAddr(subnet) {
				r.errorf(pos, "ip", "%s is the network or broadcast address of %s", ip, subnet)
				continue
			}
		}
		for _, f := range []string{"serverAddress", "gateway"} {
			if nw.get(f).String() == ip.String() {
				r.errorf(pos, "ip", "%s is the site's %s", ip, f)
			}
		}
		r.claimAddress(n, pos, "ip", ip, nw.get("pool"), seen)
	}
}

// claimAddress records ip, node n's field at pos, as n's on its site:
// refused inside the site's pool for unknown machines (pool, may be nil)
// and when another node of the site has it (seen, by site/address).
func (r *repo) claimAddress(n *nodeObj, pos Pos, field string, ip netip.Addr, pool *value, seen map[string]owner) {
	if pool != nil {
		start, _ := netip.ParseAddr(pool.get("start").str)
		end, _ := netip.ParseAddr(pool.get("end").str)
		if !ip.Less(start) && !end.Less(ip) {
			r.errorf(pos, field, "%s is inside the pool %s-%s for unknown machines", ip, start, end)
		}
	}
	key := n.site + "/" + ip.String()
	if first, dup := seen[key]; dup {
		r.errorf(pos, field, "%s is also node %s's (at %s)", ip, first.name, first.pos)
		return
	}
	seen[key] = owner{n.name, pos}
}

// checkAddressV6: a node's ipv6 inside its site's prefix, not the
// server's, outside the pool, not another node's (seen, by site/address).
func (r *repo) checkAddressV6(n *nodeObj, seen map[string]owner) {
	v := n.v.get("ipv6")
	if v == nil || n.site == "" {
		return
	}
	pos := n.pos("ipv6")
	v6 := r.sites[n.site].v.lookup("network", "ipv6")
	if v6 == nil {
		r.errorf(pos, "ipv6", "site %s has no network.ipv6: a static IPv6 address needs one with dhcp: reservation", n.site)
		return
	}
	if mode := v6.get("dhcp").String(); mode != plan.DHCPReservation {
		r.errorf(pos, "ipv6", "site %s's IPv6 is in %s mode: static IPv6 addresses need network.ipv6.dhcp: reservation", n.site, mode)
		return
	}
	if n.v.lookup("identity", "mac") == nil {
		r.errorf(pos, "ipv6", "a DHCPv6 reservation needs identity.mac")
	}
	ip, err := netip.ParseAddr(v.str)
	if err != nil || !ip.Is6() {
		return
	}
	if !usableV6(ip) {
		r.errorf(pos, "ipv6", "%s is %s", ip, v6Kind(ip))
		return
	}
	if prefix, err := netip.ParsePrefix(v6.get("prefix").str); err == nil && prefix.Masked() == prefix {
		if !prefix.Contains(ip) {
			r.errorf(pos, "ipv6", "%s is outside site %s's prefix %s", ip, n.site, prefix)
			return
		}
		if ip == prefix.Addr() {
			r.errorf(pos, "ipv6", "%s is the subnet-router anycast address of %s", ip, prefix)
			return
		}
	}
	if server, err := netip.ParseAddr(v6.get("serverAddress").str); err == nil && server == ip {
		r.errorf(pos, "ipv6", "%s is the site's network.ipv6.serverAddress", ip)
	}
	r.claimAddress(n, pos, "ipv6", ip, v6.get("pool"), seen)
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := 32 - p.Bits()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= (1<<host - 1)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// actionParams lists the parameters each workflow action takes; the JSON
// Schema for editors says the same (schema.ActionParams).
var actionParams = schema.ActionParams()

var commonParams = schema.CommonActionParams()

func (r *repo) checkProfile(p *object) {
	if m := p.str("microOS"); r.microOS[m] == nil && !r.broken["MicroOS"][m] {
		r.errorf(p.pos("microOS"), "microOS", "unknown MicroOS %q%s", m, DidYouMean(m, sortedKeys(r.microOS)))
	} else if mo := r.microOS[m]; mo != nil && plan.ArchOr(mo.str("arch")) != plan.ArchOr(p.str("os", "arch")) {
		// At os.arch (its os line when it takes the default, x86_64).
		r.errorf(p.pos("os", "arch"), "os.arch", "the profile installs for %s and its MicroOS %q runs on %s: its machines could not boot it; name a MicroOS built for %s (bootops microos build --arch %s)",
			plan.ArchOr(p.str("os", "arch")), m, plan.ArchOr(mo.str("arch")), plan.ArchOr(p.str("os", "arch")), plan.ArchOr(p.str("os", "arch")))
	}
	r.checkURL(p, "image.url", "image", "url")
	if u := p.str("image", "url"); qcow2URL.MatchString(u) {
		r.errorf(p.pos("image", "url"), "image.url", "%q is a qcow2 image: bootops streams raw disk images (a qcow2 file needs random access to be read); convert it once: qemu-img convert -O raw %s image.raw && zstd image.raw, then give image.raw.zst with compression: zst", u, path.Base(u))
	}
	if ka := p.v.get("kernelArgs"); ka != nil {
		for i, a := range ka.list {
			if why := checkCmdline(a.str); why != "" {
				r.errorf(Pos{p.file, a.line, a.col}, indexPath("kernelArgs", i), "%s", why)
			}
		}
	}
	r.checkTemplate(p, p.v.get("cloudInit"), "cloudInit")
	wf := p.v.get("workflow")
	names := map[string]int{}
	for i, a := range wf.list {
		base := indexPath("workflow", i)
		act := a.get("action").str
		allowed := actionParams[act]
		for _, k := range a.keys {
			if !slices.Contains(commonParams, k) && !slices.Contains(allowed, k) {
				r.errorf(Pos{p.file, a.get(k).line, a.get(k).col}, base+"."+k, "not a parameter of %s (it takes %s)", act, paramList(allowed))
			}
		}
		need := schema.ActionNeeds()[act]
		for _, k := range need {
			if a.get(k) == nil {
				r.errorf(Pos{p.file, a.line, a.col}, base+"."+k, "missing: %s needs %s", act, k)
			}
		}
		if c := a.get("content"); c != nil {
			r.checkTemplate(p, c, base+".content")
		}
		r.checkQA(p, wf.list[:i], a, base)
		name := a.get("name").String()
		if name == "" {
			name = act
		}
		if j, dup := names[name]; dup {
			r.errorf(Pos{p.file, a.line, a.col}, base+".name", "two actions are called %q (the other is workflow[%d]): name them", name, j)
		}
		names[name] = i
	}
	if !slices.ContainsFunc(wf.list, func(a *value) bool { return a.get("action").str == "image-to-disk" }) {
		r.errorf(p.pos("workflow"), "workflow", "never writes the image: add an image-to-disk action")
	}
	r.checkEncryption(p)
}

// checkQA checks what a QA action's parameters say about the workflow
// (before: the actions before it): qa-disk writes only over a disk a
// wipe-disk gave up; qa-network asks for what the boot server serves.
func (r *repo) checkQA(p *object, before []*value, a *value, base string) {
	switch a.get("action").str {
	case plan.QADisk:
		w := a.get("write")
		wiped := slices.ContainsFunc(before, func(b *value) bool { return b.get("action").str == "wipe-disk" })
		if w != nil && w.kind == kBool && w.b && !wiped {
			r.errorf(Pos{p.file, w.line, w.col}, base+".write", "write: true overwrites the disk's start: put a wipe-disk before this qa-disk (or read only)")
		}
	case plan.QANetwork:
		if sz := a.get("size"); sz != nil && sz.kind == kString {
			if n, err := plan.ParseSize(sz.str); err == nil && n > plan.MaxQAStream {
				r.errorf(Pos{p.file, sz.line, sz.col}, base+".size", "%s is more than the boot server streams (1Gi)", sz.str)
			}
		}
	}
}

func paramList(ps []string) string {
	if len(ps) == 0 {
		return "no parameters"
	}
	return strings.Join(ps, ", ")
}

// qcow2URL is an image URL naming a qcow2 file (compressed or not).
var qcow2URL = regexp.MustCompile(`(?i)\.qcow2?(\.(gz|zst|xz))?([?#].*)?$`)

// secretEnv says why an env variable looks like a secret ("" when it does
// not): a name with a word that says so (DB_PASSWORD, API_TOKEN, SSH_KEY but
// not SSH_PUBLIC_KEY), or a value that is a private key or an age secret.
func secretEnv(name, value string) string {
	words := strings.Split(strings.ToUpper(name), "_")
	public := slices.Contains(words, "PUBLIC") || slices.Contains(words, "PUB")
	for i, w := range words {
		switch w {
		case "PASSWORD", "PASSWD", "PASS", "SECRET", "SECRETS", "TOKEN", "PRIVATE", "CREDENTIAL", "CREDENTIALS", "APIKEY", "PSK":
			return fmt.Sprintf("its name says it is a secret (%s)", w)
		case "KEY":
			if i == len(words)-1 && !public {
				return "its name says it is a secret (a KEY that is not PUBLIC)"
			}
		}
	}
	switch {
	case strings.Contains(value, "-----BEGIN") && strings.Contains(value, "PRIVATE KEY"):
		return "its value is a private key"
	case strings.Contains(value, "AGE-SECRET-KEY-"), strings.Contains(value, "-----BEGIN AGE ENCRYPTED FILE"):
		return "its value is an age secret"
	}
	return ""
}

// envName is a POSIX shell's variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (r *repo) checkMicroOS(m *object) {
	if c := m.v.get("cmdline"); c != nil && c.kind == kString {
		if why := checkCmdline(c.str); why != "" {
			r.errorf(m.pos("cmdline"), "cmdline", "%s", why)
		}
	}
	if hb := m.v.get("httpsBoot"); hb != nil && hb.b && m.str("chain") != plan.ChainUKI {
		r.errorf(m.pos("httpsBoot"), "httpsBoot", "httpsBoot is how the firmware fetches the UKI: it needs chain uki")
	}
	if m.str("chain") == plan.ChainUKI && m.v.get("uki") == nil {
		r.errorf(m.pos("chain"), "chain", "chain uki boots the signed unified kernel image: set uki (bootops microos build --uki writes one)")
	}
	for _, f := range []string{"kernel", "initrd", "uki"} {
		a := m.v.get(f)
		if a == nil {
			continue
		}
		hasURL, hasPath := a.get("url") != nil, a.get("path") != nil
		switch {
		case hasURL == hasPath:
			r.errorf(m.pos(f), f, "set exactly one of url and path")
		case hasURL:
			r.checkURL(m, f+".url", f, "url")
			if a.get("sha256") == nil {
				r.errorf(m.pos(f), f+".sha256", "missing: an artifact fetched from a URL needs its sha256")
			}
		case hasPath:
			p := a.get("path").str
			clean := path.Clean(p)
			if clean == ".." || strings.HasPrefix(clean, "../") {
				r.errorf(m.pos(f, "path"), f+".path", "%q leaves the repository", p)
				continue
			}
			st, err := fs.Stat(r.fsys, clean)
			switch {
			case err != nil:
				r.errorf(m.pos(f, "path"), f+".path", "%q: %v", p, unwrapPathErr(err))
			case !st.Mode().IsRegular():
				r.errorf(m.pos(f, "path"), f+".path", "%q is not a regular file", p)
			}
		}
	}
}

func (r *repo) checkURL(o *object, field string, path ...string) {
	s := o.str(path...)
	u, err := url.Parse(s)
	if err != nil {
		r.errorf(o.pos(path...), field, "invalid URL: %v", unwrapURLErr(err))
		return
	}
	if (u.Scheme == "http" || u.Scheme == "https") && u.Host == "" {
		r.errorf(o.pos(path...), field, "URL %q has no host", s)
	}
}

func unwrapURLErr(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// templateVars are what ${…} may name in cloud-init values and file contents.
var templateVars = []string{"node", "hostname", "site", "profile", "ip", "ipv6", "serial", "uuid", "mac", "server"}

// checkTemplate reports every unknown ${var} in the string values of v.
func (r *repo) checkTemplate(o *object, v *value, path string) {
	if v == nil {
		return
	}
	switch v.kind {
	case kString:
		if err := expand(v.str, func(name string) (string, bool) {
			return "", slices.Contains(templateVars, name)
		}, nil); err != nil {
			r.errorf(Pos{o.file, v.line, v.col}, path, "%v", err)
		}
	case kList:
		for i, e := range v.list {
			r.checkTemplate(o, e, indexPath(path, i))
		}
	case kMap:
		for i, k := range v.keys {
			r.checkTemplate(o, v.vals[i], joinPath(path, k))
		}
	}
}

// expand replaces ${name} in s; "$$" is a literal "$". It appends to out
// when out is not nil.
func expand(s string, lookup func(string) (string, bool), out *strings.Builder) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			if out != nil {
				out.WriteByte(c)
			}
			continue
		}
		switch s[i+1] {
		case '$':
			if out != nil {
				out.WriteByte('$')
			}
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return fmt.Errorf("unclosed ${ in %q", s)
			}
			name := s[i+2 : i+2+end]
			val, ok := lookup(name)
			if !ok {
				return fmt.Errorf("unknown variable ${%s}: want one of %s (write $$ for a literal $)%s", name, strings.Join(templateVars, ", "), DidYouMean(name, templateVars))
			}
			if out != nil {
				out.WriteString(val)
			}
			i += 2 + end
		default:
			if out != nil {
				out.WriteByte(c)
			}
		}
	}
	return nil
}

// owner is the node that first claimed something only one node may have
// (an address, a BMC), and where: a second claim's error names it.
type owner struct {
	name string
	pos  Pos
}
