// Package http serves the boot plane over HTTP to machines' firmware and
// to operators: the entry script that makes iPXE say who it is, the
// per-machine script chosen by plan.Decide (the function `bootops
// explain` calls), GRUB's configs over TFTP, the Micro-OS files, the site
// overlays, the iPXE builds, and the status API. The API the Micro-OS
// agent and the installed OS call is boot/agentapi's; Server mounts it on
// the same listeners (Server.Agent).
package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/bootops/bootops/api"
	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/agentapi"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// StatusReader is what the status API shows.
type StatusReader interface {
	Machines() []status.Machine
	Machine(key string) (status.Machine, bool)
	Events(key string) []status.Event
}

// Source says which revision is served, which was last attempted and
// why; the document is the "source" part of GET /api/v1/status, shown as
// it is.
type Source interface {
	Status() any
}

// Server is the HTTP boot server. Plans, Events and Secret are required.
type Server struct {
	Plans  boot.Plans
	Events status.Recorder
	// Secret signs the boot token in each served script (in place of
	// plan.TokenPlaceholder), which the agent API's check-in spends.
	Secret boot.Secret
	// BootTokenTTL bounds a boot token's life (default
	// DefaultBootTokenTTL).
	BootTokenTTL time.Duration
	// Machines is what the daemon knows of machines beyond the Plan.
	Machines Machines
	// Files are what is served beside the scripts.
	Files Files
	// View is what the status API shows beside the Plan.
	View View
	// Agent is the agent API, served on the same listeners (nil: none).
	Agent *agentapi.Server
	// Authorize says whether a request's credential gives role (see
	// Operators): the status, timelines and delivery record need
	// RoleRead. Nil allows every request (this package's tests; the
	// daemon always sets it).
	Authorize func(r *http.Request, role Role) bool
	// Routes are more handlers on the same listener, by pattern (the
	// webhook, the metrics); one that streams says so (Streaming).
	Routes map[string]http.Handler
	// Middleware, when set, wraps every route (a test's contract check).
	Middleware func(http.Handler) http.Handler
	// Guard, when set, tracks which of Serve's connections are idle, for
	// the listeners wrapped with its Listener — the TCP listener, below
	// any TLS: a request must still see its TLS state.
	Guard *Guard
	// DrainTimeout bounds how long requests in flight may finish after the
	// context ends (default 10 s).
	DrainTimeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	Log *slog.Logger
}

// Machines is what the script server knows of machines beyond the Plan.
type Machines struct {
	// Provisioned reports the generation a node was last provisioned at;
	// a node provisioned at its current reprovision generation boots from
	// its disk. Nil: no node is provisioned.
	Provisioned func(site, node string) (generation int, ok bool)
	// Known reports whether the status store keeps a machine, by its key;
	// a machine it does not know is a newcomer, and must fit in its source
	// address's budget (Newcomers) before it is recorded or given a
	// credential. Nil Known: every machine that is no node is a newcomer.
	// Nil Newcomers: no budget.
	Known     func(key string) bool
	Newcomers *status.Newcomers
	// MACOf, when set, gives the MAC the DHCP server knows for a client
	// address: an unknown machine that reports no usable identifier is
	// keyed by it (else by its address).
	MACOf func(ip string) string
}

// Files are what the server serves beside the scripts.
type Files struct {
	// Artifacts are the Micro-OS files (nil: none are served).
	Artifacts *Artifacts
	// Binaries are the iPXE builds, also served over HTTP for UEFI HTTP
	// boot (GET /tftp/<name>). Nil: none.
	Binaries interface {
		Lookup(name string) ([]byte, bool)
	}
	// Overlay is a site's signed overlay, built (and signed) when the Plan
	// being served was swapped in: bytes, like every other artifact (nil:
	// none are served).
	Overlay func(site string) ([]byte, error)
	// Media is the file of a boot medium (kind media.iso, media.img or
	// boot.efi) of a site, or of one of its nodes (node ""): built once
	// for the Plan being served, from nothing secret (nil: none are
	// served). An error wrapping fs.ErrNotExist is a 404.
	Media func(ctx context.Context, site, node, kind string) (string, error)
}

// View is what the status API shows beside the Plan.
type View struct {
	// Status is every machine seen, and its timeline (nil: none).
	Status StatusReader
	// Source is the revision served (nil: none shown).
	Source Source
	// Rollouts, when set, is every rollout group worth showing.
	Rollouts func() []RolloutStatus
	// Power, when set, is a node's power as its BMC last said, and why it
	// is unreachable (both "" for a node without a BMC).
	Power func(key string) (state, problem string)
	// Cluster, when set, is the site's cluster as this member sees it (a
	// site of more than one daemon).
	Cluster func() *ClusterStatus
}

// ClusterStatus is a site's cluster as the member asked sees it
// (docs/cluster.md): the members, the leader of the cluster's metadata,
// whether this member is with a majority, and who holds each role.
type ClusterStatus struct {
	Member  string          `json:"member"`
	Leader  string          `json:"leader"`
	Size    int             `json:"size"`
	Quorum  bool            `json:"quorum"`
	Members []ClusterMember `json:"members"`
	// Roles: each role ("dhcp.<site>") and the member holding it ("" none).
	Roles map[string]string `json:"roles,omitempty"`
	// Serving: the Git revision each member said it serves (each compiles
	// Git itself, from the same source).
	Serving map[string]string `json:"serving,omitempty"`
}

// ClusterMember is another member as this one sees it: current (seen and
// caught up), offline, when last heard (ms ago) and how many operations
// behind (its replication lag).
type ClusterMember struct {
	Name     string `json:"name"`
	Current  bool   `json:"current"`
	Offline  bool   `json:"offline,omitempty"`
	ActiveMS int64  `json:"activeMs"`
	Lag      uint64 `json:"lag,omitempty"`
}

// DefaultBootTokenTTL bounds the time from a served script to the agent's
// check-in (the Micro-OS's download and boot).
const DefaultBootTokenTTL = 30 * time.Minute

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// bootToken mints the one-use token a served script carries.
func (s *Server) bootToken(site, subject string, generation int) string {
	ttl := s.BootTokenTTL
	if ttl <= 0 {
		ttl = DefaultBootTokenTTL
	}
	return s.Secret.Mint(boot.Grant{Kind: boot.KindBoot, Site: site, Subject: subject, Generation: generation,
		ID: boot.NewID(), Expires: s.now().Add(ttl)})
}

// unknownKey is what an unknown machine is known by, which the agent
// presents again (bootops.machine=) and its token is bound to: its MAC,
// UUID or serial (plan.MachineKey), else the MAC the DHCP server saw at
// its address, else its address. Never "": machines that report nothing
// must not share one key, nor one token.
func (s *Server) unknownKey(m plan.Machine, ip string) string {
	if k := plan.MachineKey(m); k != "" && boot.SafeKey(k) {
		return k
	}
	if s.Machines.MACOf != nil && ip != "" {
		if mac := plan.NormalizeMAC(s.Machines.MACOf(ip)); mac != "" {
			return "mac:" + mac
		}
	}
	if ip != "" {
		return "ip:" + ip
	}
	return ""
}

// Route is one of the server's patterns (net/http's ServeMux syntax) and
// its handler.
type Route struct {
	Pattern string
	Handler http.Handler
}

// routes are the server's own routes and the agent API's; Routes come on
// top.
func (s *Server) routes() []Route {
	return append(s.firmwareRoutes(), s.agentRoutes()...)
}

// agentRoutes are the agent API's routes, those that stream let run past
// the listeners' write deadline.
func (s *Server) agentRoutes() []Route {
	if s.Agent == nil {
		return nil
	}
	var rs []Route
	for _, r := range s.Agent.Routes() {
		h := r.Handler
		if r.Streams {
			h = Streaming(h)
		}
		rs = append(rs, Route{r.Pattern, h})
	}
	return rs
}

// firmwareRoutes are what firmware, boot loaders and operators fetch.
func (s *Server) firmwareRoutes() []Route {
	return []Route{
		{"GET /boot.ipxe", http.HandlerFunc(s.entry)},
		{"GET /ipxe", http.HandlerFunc(s.script)},
		{"GET /artifacts/microos/{name}/{file}", Streaming(http.HandlerFunc(s.artifact))},
		{"GET /artifacts/overlay/{site}", http.HandlerFunc(s.overlayHandler)},
		{"GET /media/{site}/{file}", Streaming(http.HandlerFunc(s.medium))},
		{"GET /media/{site}/nodes/{node}/{file}", Streaming(http.HandlerFunc(s.medium))},
		{"GET /tftp/{file}", Streaming(http.HandlerFunc(s.binary))},
		{"GET /api/v1/status", s.Needs(RoleRead, http.HandlerFunc(s.status))},
		{"POST /api/v1/login", http.HandlerFunc(s.login)},
		{"GET /api/v1/events", s.Needs(RoleRead, http.HandlerFunc(s.events))},
		{"GET /api/v1/report", s.Needs(RoleRead, http.HandlerFunc(s.deliveryRecord))},
		{"POST /api/v1/media-credentials", s.Needs(RoleOperate, http.HandlerFunc(s.mediaCredential))},
		{"GET /api/v1/recovery-keys/{site}/{node}", s.Needs(RoleOperate, http.HandlerFunc(s.recoveryKeys))},
		{"GET " + api.Path, api.Handler()},
		{"GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })},
		{"GET /readyz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.Plans.Current() == nil {
				http.Error(w, "no plan yet", http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, "ok\n")
		})},
	}
}

// Patterns are every pattern Handler serves, Routes' too, sorted: what
// the contract test holds api/openapi.json to.
func (s *Server) Patterns() []string {
	var ps []string
	for _, r := range s.routes() {
		ps = append(ps, r.Pattern)
	}
	for p := range s.Routes {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// checkRoutes, when set (by this package's tests), wraps every handler
// the server makes: the contract check of api/openapi.json.
var checkRoutes func(http.Handler) http.Handler

// Handler returns the server's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range s.routes() {
		mux.Handle(r.Pattern, r.Handler)
	}
	for pattern, h := range s.Routes {
		mux.Handle(pattern, h)
	}
	var h http.Handler = mux
	if s.Middleware != nil {
		h = s.Middleware(h)
	}
	if checkRoutes != nil {
		h = checkRoutes(h)
	}
	return h
}

// Serve serves on ln until ctx ends, then drains requests for up to 10 s.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := NewHTTPServer(s.Handler(), s.Guard, s.logger())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	timeout := s.DrainTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	drain, cancel := context.WithTimeoutCause(context.Background(), timeout, errors.New("http: drain deadline"))
	defer cancel()
	if err := srv.Shutdown(drain); err != nil {
		// The deadline passed: what is still in flight is cut.
		s.logger().Warn("http: requests still in flight at the drain deadline: closed", "deadline", timeout.String())
		srv.Close()
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *Server) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.New(slog.DiscardHandler)
}

// entry is the first script iPXE fetches: it comes back with its identity.
func (s *Server) entry(w http.ResponseWriter, r *http.Request) {
	site := boot.Word(r.URL.Query().Get("site"), 63)
	q := "mac=${netX/mac}&uuid=${uuid}&serial=${serial:uristring}&arch=${buildarch}&platform=${platform}"
	if site != "" {
		q += "&site=" + site
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "#!ipxe\n# bootops: tell the boot server who this machine is\nchain http://%s/ipxe?%s || goto failed\nexit\n:failed\nisset ${bootops-disk} && exit 1 ||\necho bootops: the boot server did not answer; retrying in 10 s\nsleep 10\nchain http://%s/boot.ipxe?site=%s\n", r.Host, q, r.Host, site)
}

// script answers the per-machine request with what plan.Decide says.
func (s *Server) script(w http.ResponseWriter, r *http.Request) {
	s.machineScript(w, r, ipxeFlavor)
}

// flavor is a boot loader's script language: the per-machine script it
// gets, and the ones that boot the disk, refuse, or say why not.
type flavor struct {
	name    string
	of      func(*plan.Artifacts) string
	local   func(why string) string
	refuse  func(why string) string
	notHere func(why string) string
}

var ipxeFlavor = flavor{
	name:    "iPXE",
	of:      func(a *plan.Artifacts) string { return a.IPXE },
	local:   localBoot,
	refuse:  refusal,
	notHere: func(why string) string { return "#!ipxe\necho bootops: " + ipxeText(why) + "\nexit 1\n" },
}

// machineScript decides for the machine the request names and answers in
// flavor f.
func (s *Server) machineScript(w http.ResponseWriter, r *http.Request, f flavor) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	body, code := s.decideScript(r.URL.Query(), clientIP(r), f)
	if code != http.StatusOK {
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "10")
		}
		http.Error(w, body, code)
		return
	}
	io.WriteString(w, body)
}

// newcomer reports whether the machine e is about is one the store does
// not keep and its source ip has no budget left for: it is turned away,
// unrecorded. A node is never a newcomer.
func (s *Server) newcomer(e status.Event, ip string) bool {
	m := s.Machines
	if e.Node != "" || m.Newcomers == nil || (m.Known != nil && m.Known(e.Key())) {
		return false
	}
	return !m.Newcomers.Allow(ip)
}

// registered is what of m's identifiers Git registers for node n.
func registered(n *plan.Node, m plan.Machine) (mac, uuid, serial string) {
	if slices.Contains(n.Identity.MACs, m.MAC) {
		mac = m.MAC
	}
	if n.Identity.UUID != "" && n.Identity.UUID == m.UUID {
		uuid = m.UUID
	}
	if n.Identity.Serial != "" && n.Identity.Serial == m.Serial {
		serial = m.Serial
	}
	return mac, uuid, serial
}

// decideScript is the script in flavor f for the machine q names (mac,
// uuid, serial, site), asking from ip, and the HTTP status to send it with:
// 503 when there is no plan yet, 429 for a newcomer over its budget.
func (s *Server) decideScript(q url.Values, ip string, f flavor) (string, int) {
	p := s.Plans.Current()
	if p == nil {
		return f.notHere("no plan loaded yet; try again"), http.StatusServiceUnavailable
	}
	id := parseIdentity(q)
	site := id.Site
	if site != "" && p.Site(site) == nil {
		site = "" // a site we do not serve: decide as if none was given
	}
	d := p.Decide(site, id.Machine)
	ev := status.Event{Kind: status.KindScript, MAC: id.Machine.MAC, UUID: id.Machine.UUID, Serial: id.Machine.Serial, IP: ip}
	if d.Site != nil {
		ev.Site = d.Site.Name
	}
	var body string
	switch {
	case d.Outcome == plan.Match:
		body = s.nodeScript(d, id.Machine, f, &ev)
	case d.Outcome == plan.Mismatch:
		body = s.refusedScript(d, f, &ev)
	case d.Boots():
		body = s.unknownScript(d, id.Machine, ip, f, &ev)
	default:
		ev.Message = "not answered: " + d.Reason
		body = f.notHere(d.Reason)
	}
	if s.newcomer(ev, ip) {
		// Neither recorded nor given a token: a flood of made-up
		// identities from one address stops here.
		return f.notHere(boot.TooManyNewcomers(ip)), http.StatusTooManyRequests
	}
	s.Events.Record(ev)
	s.logger().Info("script", "loader", f.name, "site", ev.Site, "node", ev.Node, "mac", ev.MAC, "uuid", ev.UUID, "serial", ev.Serial, "outcome", string(d.Outcome), "message", ev.Message)
	return boot.ForFamily(p.Site(ev.Site), ip)(body), http.StatusOK
}

// nodeScript is a registered node's script: its disk when it is
// provisioned at its generation, else its Micro-OS with a boot token.
func (s *Server) nodeScript(d plan.Decision, m plan.Machine, f flavor, ev *status.Event) string {
	n := d.Node
	ev.Site, ev.Node = n.Site, n.Name
	// Only what Git registers for the node goes on its record: another
	// identifier the request names beside it is the request's word, and
	// must not join an unknown machine's history to the node's.
	ev.MAC, ev.UUID, ev.Serial = registered(n, m)
	// A node Git retires gets the Micro-OS whatever its disk holds: it is
	// erased there (or, retired already, told to power off).
	if gen, ok := s.provisioned(n.Site, n.Name); ok && gen >= n.Reprovision && n.Retire == nil {
		ev.Message = "served local-disk script: provisioned at generation " + fmt.Sprint(gen)
		return f.local(fmt.Sprintf("node %s is provisioned (generation %d): booting from its disk", n.Name, gen))
	}
	script := f.of(&n.Artifacts)
	if script == "" {
		ev.Error, ev.Message = true, fmt.Sprintf("not answered: profile %s's Micro-OS has no %s script (its chain is not %s)", n.Profile, f.name, f.name)
		return f.notHere(ev.Message)
	}
	ev.State, ev.Message = status.StateBooting, fmt.Sprintf("served the Micro-OS %s script of profile %s (%s)", f.name, n.Profile, d.Reason)
	if f.name == "iPXE" {
		ev.Message = fmt.Sprintf("served the Micro-OS script of profile %s (%s)", n.Profile, d.Reason)
	}
	return strings.ReplaceAll(script, plan.TokenPlaceholder, s.bootToken(n.Site, n.Name, n.Reprovision))
}

// refusedScript stops a machine that contradicts its registration; every
// node its identifiers point at gets the event.
func (s *Server) refusedScript(d plan.Decision, f flavor, ev *status.Event) string {
	ev.State, ev.Error = status.StateMismatch, true
	ev.Message = "refused: " + d.Reason
	if d.Node != nil {
		ev.Site, ev.Node = d.Node.Site, d.Node.Name
		return f.refuse(d.Reason)
	}
	for i, c := range d.Conflicts {
		if i > 0 && c.Node == d.Conflicts[0].Node {
			continue
		}
		e := *ev
		e.Site, e.Node = c.Site, c.Node
		if i < len(d.Conflicts)-1 {
			s.Events.Record(e)
		} else {
			*ev = e
		}
	}
	return f.refuse(d.Reason)
}

// unknownScript is the site's unknown machines' Micro-OS, with a boot
// token bound to the key the machine is known by (unknownKey).
func (s *Server) unknownScript(d plan.Decision, m plan.Machine, ip string, f flavor, ev *status.Event) string {
	// The token is bound to what the machine booted as, which the agent
	// presents again: it follows the token on the kernel line.
	key := s.unknownKey(m, ip)
	if key == "" {
		ev.Error, ev.Message = true, "not answered: the machine reports no identifier and no address"
		return f.notHere("this machine reports no MAC, UUID or serial: it cannot be told apart from others")
	}
	if key != plan.MachineKey(m) {
		// Keyed by what the agent will present, as its events are.
		ev.MAC, ev.UUID, ev.Serial = "", "", ""
		ev.SetKey(key)
	}
	script := f.of(d.Site.Unknown)
	if script == "" {
		ev.Error, ev.Message = true, fmt.Sprintf("not answered: the unknown machines' Micro-OS has no %s script", f.name)
		return f.notHere(ev.Message)
	}
	token := s.bootToken(d.Site.Name, boot.Subject("", key), 0) + " " + plan.CmdlineMachine + "=" + key
	if d.Site.TLS() {
		// No token on a line that crosses the LAN in clear: the agent
		// checks in over TLS by its identity.
		token = ""
	}
	ev.State = status.StateBooting
	if d.Policy == plan.PolicyHold {
		ev.State = status.StateHeld
	}
	ev.Message = "unknown machine: " + d.Reason
	return strings.ReplaceAll(script, plan.TokenPlaceholder, token)
}

// binary serves an iPXE build to a UEFI HTTP-boot client.
func (s *Server) binary(w http.ResponseWriter, r *http.Request) {
	if s.Files.Binaries == nil {
		http.NotFound(w, r)
		return
	}
	b, ok := s.Files.Binaries.Lookup(r.PathValue("file"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/efi")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	s.Events.Record(status.Event{Kind: status.KindFile, IP: clientIP(r), Message: "http: sent " + r.PathValue("file")})
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	return host
}

func (s *Server) provisioned(site, node string) (int, bool) {
	if s.Machines.Provisioned == nil {
		return 0, false
	}
	return s.Machines.Provisioned(site, node)
}

// localBoot hands the machine back to its firmware, which boots the disk.
// A UEFI boot manager that sees a boot option return success opens its
// menu instead of trying the next option (EDK2 does, so OVMF does): on
// UEFI iPXE leaves with an error, and the firmware goes on to the disk.
// A BIOS goes on after a plain exit (an exit code there is a BIOS error).
// exit leaves only the innermost script, so bootops-disk tells the entry
// script (see entry) that this error is a hand-back, not a dead server.
func localBoot(why string) string {
	return "#!ipxe\necho bootops: " + ipxeText(why) + "\nset bootops-disk 1\niseq ${platform} efi && exit 1 ||\nexit\n"
}

// refusal prints why and stops here: never a wrong OS, never a wipe.
func refusal(why string) string {
	var b strings.Builder
	b.WriteString("#!ipxe\necho bootops: REFUSED, this machine does not match its registration\n")
	for _, part := range strings.Split(why, "; ") {
		b.WriteString("echo bootops:   " + ipxeText(part) + "\n")
	}
	b.WriteString("echo bootops: fix the Node in Git (bootops explain shows the decision); waiting\n:wait\nsleep 3600\ngoto wait\n")
	return b.String()
}

// ipxeSafe keeps a message from being read as iPXE syntax; built once (a
// Replacer builds its tables on first use).
var ipxeSafe = strings.NewReplacer("$", "", "\n", " ", "\r", " ", "||", "|", "&&", "&")

func ipxeText(s string) string { return ipxeSafe.Replace(s) }

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	// nodes=0 asks for the source alone: what a script waiting for a
	// revision polls.
	// inventory=1 adds each machine's hardware (bootops status -o json,
	// bootops inventory, the delivery record).
	q := r.URL.Query()
	doc := s.StatusDoc(q.Get("nodes") != "0")
	doc.StripInventory(q.Get("inventory") != "1")
	writeJSON(w, doc)
}

// StripInventory sums each machine's inventory up on a line (Hardware)
// and, when strip, leaves the inventory out (a few kB each: the
// dashboard and the fleet table do without them).
func (d *StatusDoc) StripInventory(strip bool) {
	for _, ms := range [][]status.Machine{d.Nodes, d.Machines} {
		for i := range ms {
			ms[i].Hardware = ms[i].Inventory.Summary()
			if strip {
				ms[i].Inventory = nil
			}
		}
	}
}

// StatusDoc is the document GET /api/v1/status serves: the source, and
// with nodes every registered node (seen or not) and every machine seen
// that is no node.
func (s *Server) StatusDoc(nodes bool) StatusDoc {
	doc := StatusDoc{Machines: []status.Machine{}}
	if s.View.Source != nil {
		doc.Source = s.View.Source.Status()
	}
	if s.View.Cluster != nil {
		doc.Cluster = s.View.Cluster()
	}
	p := s.Plans.Current()
	if p == nil {
		return doc
	}
	doc.Plan = p.Hash
	if !nodes {
		return doc
	}
	seen := map[string]bool{}
	var machines []status.Machine
	if s.View.Status != nil {
		machines = s.View.Status.Machines()
	}
	for _, m := range machines {
		seen[m.Key] = true
	}
	for _, site := range p.Sites {
		for _, n := range site.Nodes {
			if !seen[site.Name+"/"+n.Name] {
				doc.Nodes = append(doc.Nodes, status.Machine{Key: site.Name + "/" + n.Name, Site: site.Name, Node: n.Name, State: status.StateRegistered})
			}
		}
	}
	for _, m := range machines {
		if m.Node != "" {
			doc.Nodes = append(doc.Nodes, m)
		} else {
			doc.Machines = append(doc.Machines, m)
		}
	}
	if s.View.Power != nil {
		for i := range doc.Nodes {
			doc.Nodes[i].Power, doc.Nodes[i].PowerError = s.View.Power(doc.Nodes[i].Key)
		}
	}
	for i := range doc.Nodes {
		n := &doc.Nodes[i]
		if pn := p.Node(n.Site, n.Node); pn != nil {
			n.Sync = status.NodeSync(n, pn.Install)
		}
	}
	if s.View.Rollouts != nil {
		doc.Rollouts = s.View.Rollouts()
	}
	return doc
}

// RolloutStatus is one rollout group (a profile's nodes at a site) as
// the daemon last judged it.
type RolloutStatus struct {
	Site       string `json:"site"`
	Profile    string `json:"profile"`
	Strategy   string `json:"strategy"`
	OutOfDate  int    `json:"outOfDate"`
	InProgress int    `json:"inProgress"`
	// Halted is "<node>: <why>" while the group is halted.
	Halted  string `json:"halted,omitempty"`
	Summary string `json:"summary"`
}

// StatusDoc is GET /api/v1/status: the source revision, every registered
// node, and machines the boot plane saw that are no node.
type StatusDoc struct {
	Source   any              `json:"source"`
	Plan     string           `json:"plan"`
	Nodes    []status.Machine `json:"nodes"`
	Machines []status.Machine `json:"unknown"`
	// Sites is a hub's (bootops hub): each site daemon reporting to it and
	// when it was last heard. A site daemon leaves it out.
	Sites []SiteStatus `json:"sites,omitempty"`
	// Rollouts are the groups with out-of-date nodes, a rollout in
	// progress, or a halt.
	Rollouts []RolloutStatus `json:"rollouts,omitempty"`
	// Cluster is the site's cluster as the daemon asked sees it; absent
	// for a site of one daemon.
	Cluster *ClusterStatus `json:"cluster,omitempty"`
}

// SiteStatus is one site daemon as a hub last heard from it.
type SiteStatus struct {
	Name      string    `json:"name"`
	LastHeard time.Time `json:"lastHeard,omitzero"`
	Daemon    string    `json:"daemon,omitempty"`
	Plan      string    `json:"plan,omitempty"`
	// Pending is how many events the site had not sent yet when it last
	// said hello; Events is how many the hub has of it.
	Pending int    `json:"pending"`
	Events  uint64 `json:"events"`
	// Cluster is the site's cluster as its daemon that last said hello
	// sees it: its members, the leader, who answers DHCP.
	Cluster *ClusterStatus `json:"cluster,omitempty"`
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if s.View.Status == nil {
		writeJSON(w, []status.Event{})
		return
	}
	EventsHandler(s.View.Status.Events).ServeHTTP(w, r)
}

// EventsHandler is GET /api/v1/events over a timeline lookup: one
// machine's events, by ?key= or ?site=&node=, oldest first (a hub serves
// its view with it too).
func EventsHandler(events func(key string) []status.Event) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		if node := r.URL.Query().Get("node"); node != "" {
			key = r.URL.Query().Get("site") + "/" + node
		}
		ev := events(key)
		if ev == nil {
			ev = []status.Event{}
		}
		writeJSON(w, ev)
	})
}

// StatusHandler is GET /api/v1/status over a document (a hub's).
func StatusHandler(doc func() StatusDoc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := doc()
		d.StripInventory(r.URL.Query().Get("inventory") != "1")
		writeJSON(w, d)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
