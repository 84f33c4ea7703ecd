package agentapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// The check-in's policy: which credential proves what, which machine is
// admitted, what it is told. It reads and never writes, so it is tested
// by calling it (policy_test.go), as plan.Decide is.

// request is a check-in as the policy reads it.
type request struct {
	body       plan.CheckIn // what the agent sent, validated (checkInIdentity)
	credential string       // its bearer credential, "" for none
	tls        bool         // it came over TLS
	ip         string       // its source address
}

// facts are what the policy reads of the server: the Plan, the clock, the
// secret that signs credentials, each machine's current session (by key),
// each node's provisioned generation, and whether images are shared
// between machines (Server.Swarm).
type facts struct {
	plan        *plan.Plan
	now         time.Time
	secret      boot.Secret
	session     func(key string) (status.Session, bool)
	provisioned func(site, node string) (generation int, ok bool)
	swarm       bool
	// machine is the status of a machine by its key (nil: none is known).
	machine func(key string) (status.Machine, bool)
}

// claimant is whom a check-in's credential proves the machine to be.
type claimant struct {
	site    *plan.Site
	node    *plan.Node // nil: a machine that is no node
	machine string     // an unknown machine's key (or what a node's agent also sent)
	// subject is the credentials' subject (boot.Subject), key the
	// machine's session key: site/subject.
	subject, key string
	// grant is the credential's; a check-in by identity has none, and
	// its grant is the node's generation.
	grant      boot.Grant
	byIdentity bool // over TLS with no credential: found by what it reports
	// media: its credential is a media credential (boot.KindMedia), not
	// a served script's boot token.
	media bool
	// resumed is the session a held machine asks again with (nil: it
	// presented a boot token, or none).
	resumed *status.Session
}

func (c claimant) nodeName() string {
	if c.node == nil {
		return ""
	}
	return c.node.Name
}

// verdict is the policy's word on a check-in: a refusal, a final answer,
// or a decision of what the machine is told once gate has let it through.
type verdict struct {
	who claimant
	// event is the machine's timeline event as the policy knows it: the
	// one a refusal notes, and the base of the check-in's own.
	event   status.Event
	refusal *refusal
	// final, when set, is answered as it is (a provisioned node that came
	// by its identity, told to boot its disk): no proof, no session.
	final    *plan.CheckInReply
	decision decision
}

// decision is what a machine admitted is told, and what its timeline
// event says.
type decision struct {
	reply plan.CheckInReply // without its session credential and seed yet
	// seed is whose cloud-init the reply carries (nil: none); install what
	// the session's workflow installs (a node's).
	seed    *plan.Artifacts
	install *plan.Install
	// What the server keeps of the machine's inventory (cleaned), and the
	// event's state, message and flags.
	inventory           *plan.Inventory
	state, message      string
	held                string
	isError, installing bool
	// released: the node Git held until now is given its workflow (the
	// server paces such installs: Server.pace).
	released bool
	// retiring: the workflow is a retirement's.
	retiring bool
	// commission names the QA of a held node's commissioning workflow
	// ("" for any other reply).
	commission string
}

// policy is the check-in's policy: authenticate (whom the credential
// proves the machine to be), admit (whether that machine is served now),
// decide (what it is told).
func policy(f facts, req request) verdict {
	who, ev, ref := authenticate(f, req)
	v := verdict{who: who, event: ev, refusal: ref}
	if ref != nil {
		return v
	}
	if v.refusal, v.final = admit(f, who, req, &v.event); v.refusal != nil || v.final != nil {
		return v
	}
	v.decision = decide(f, who, req.body)
	return v
}

// authenticate finds whom the check-in claims to be (find) and checks its
// credential for that machine (credential).
func authenticate(f facts, req request) (claimant, status.Event, *refusal) {
	c := req.body
	if f.plan == nil {
		return claimant{}, status.Event{}, unavailable("no plan loaded yet")
	}
	site := f.plan.Site(c.Site)
	if site == nil {
		return claimant{}, status.Event{}, badRequest(http.StatusNotFound, fmt.Sprintf("check-in: no site %q is served here", c.Site))
	}
	who := claimant{site: site, machine: c.Machine, byIdentity: req.credential == "" && req.tls}
	ev := status.Event{Kind: status.KindAgent, Site: site.Name, UUID: c.Identity.UUID, Serial: c.Identity.Serial, IP: req.ip}
	if ref := find(f.plan, c, &who, &ev); ref != nil {
		return who, ev, ref
	}
	ev.Boot = c.Boot.String()
	return who, ev, credential(f, req, &who)
}

// find names the machine: the node the check-in names, else the unknown
// machine its key names; over TLS without a credential (who.byIdentity),
// the node its identifiers point at, as they would have for its script.
func find(p *plan.Plan, c plan.CheckIn, who *claimant, ev *status.Event) *refusal {
	if c.Node != "" {
		if who.node = p.Node(who.site.Name, c.Node); who.node == nil {
			return unauthorized("check-in: no node " + c.Node + " on site " + who.site.Name)
		}
		ev.Node = who.node.Name
	} else {
		ev.SetKey(c.Machine)
		if strings.HasPrefix(c.Machine, "serial:") {
			ev.UUID = "" // the key is the serial: the event must not be keyed by the UUID
		}
	}
	if !who.byIdentity || c.Node != "" {
		return nil
	}
	n, key, reason := identify(p, who.site.Name, c.Identity)
	if reason != "" {
		return mismatch(reason)
	}
	who.node, who.machine = n, key
	if n != nil {
		ev.Node = n.Name
	} else {
		ev.SetKey(key)
	}
	return nil
}

// credential checks the check-in's credential against whom it claims to
// be: the boot token of the machine's script, or a held machine's session
// credential, which must be its current session's. A check-in by identity
// has none to check.
func credential(f facts, req request, who *claimant) *refusal {
	who.subject = boot.Subject(who.nodeName(), who.machine)
	who.key = who.site.Name + "/" + who.subject
	if who.byIdentity {
		if who.node != nil {
			who.grant.Generation = who.node.Reprovision
		}
		return nil
	}
	g, err := f.secret.Verify(req.credential, boot.KindBoot, who.site.Name, who.subject, f.now)
	if errors.Is(err, boot.ErrWrongKind) {
		// A media credential: a boot token an operator asked for.
		if g2, err2 := f.secret.Verify(req.credential, boot.KindMedia, who.site.Name, who.subject, f.now); !errors.Is(err2, boot.ErrWrongKind) {
			g, err, who.media = g2, err2, true
		}
	}
	if errors.Is(err, boot.ErrWrongKind) {
		// A held machine asking again, with the session it was given.
		if g, err = f.secret.Verify(req.credential, boot.KindSession, who.site.Name, who.subject, f.now); err == nil {
			cur, ok := f.session(who.key)
			if !ok || cur.ID != g.ID {
				err = errSuperseded
			}
			who.resumed = &cur
		}
	}
	if who.subject == "" || err != nil {
		what := "node " + who.nodeName()
		if who.node == nil {
			what = "the unknown machine " + who.machine
		}
		return unauthorized("check-in: " + what + ": " + credentialError(err))
	}
	who.grant = g
	return nil
}

// admit says whether the machine the credential proved is served now. A
// node must be the machine Git registers, and nothing the machine reports
// may be another node's. A node provisioned at its generation boots its
// disk: told so when it came by its identity (anyone over TLS can say
// this much: it changes nothing of the node's), refused as an
// identity-conflict when it holds a credential minted before (a session
// opened for an install cannot outlive it).
func admit(f facts, who claimant, req request, ev *status.Event) (*refusal, *plan.CheckInReply) {
	n := who.node
	if n == nil {
		return nil, nil
	}
	if reason := verifyIdentity(f.plan, who.site.Name, n, req.body.Identity); reason != "" {
		return mismatch(reason), nil
	}
	if got, want := boot.AgentArch(req.body.Arch), boot.ProfileArch(f.plan.Profile(n.Profile)); got != "" && got != want {
		return mismatch(fmt.Sprintf("the agent runs on %s (%s) and node %s is registered %s (profile %s, os.arch): its image is not for this machine", got, req.body.Arch, n.Name, want, n.Profile)), nil
	}
	gen, ok := f.provisioned(who.site.Name, n.Name)
	if !ok || gen < n.Reprovision || n.Retire != nil {
		return nil, nil // a node Git retires is erased, installed or not
	}
	if who.byIdentity {
		ev.Message = "agent told to boot from its disk: provisioned at generation " + fmt.Sprint(gen)
		return nil, &plan.CheckInReply{Hold: fmt.Sprintf("node %s is provisioned (generation %d): boot from its disk", n.Name, gen)}
	}
	what := "a token minted before"
	if who.resumed != nil {
		what = "a session credential"
	}
	why := fmt.Sprintf("node %s is provisioned (generation %d), yet a machine at %s checks in as it with %s", n.Name, gen, req.ip, what)
	return conflict(http.StatusConflict, why, "check-in refused: "+why), nil
}

// decide is what the machine admitted is told: a node its workflow,
// unless it booted for another generation (reboot) or does not meet its
// expectations (held, before any disk is touched); an unknown machine
// what its site's policy says now.
func decide(f facts, who claimant, c plan.CheckIn) decision {
	d := decision{inventory: cleanInventory(c.Inventory)}
	if who.node != nil {
		decideNode(&d, f, who, c)
	} else {
		decideUnknown(&d, f.plan, who, c)
	}
	if d.reply.Workflow != nil && who.site.Peers != nil && f.swarm {
		d.reply.Peers = who.site.Peers
	}
	return d
}

func decideNode(d *decision, f facts, who claimant, c plan.CheckIn) {
	n := who.node
	unmet := unmetExpectations(n, d.inventory)
	var wasHeld bool
	if f.machine != nil {
		wasHeld = released(f.machine(who.site.Name + "/" + n.Name))
	}
	switch {
	case unproven(who):
		why := "over the Internet a serial, a UUID or a MAC proves nothing: boot it with a media credential (bootops media credential) or register its TPM in Git (identity.tpm)"
		d.reply = plan.CheckInReply{Hold: why, RetrySeconds: 30}
		d.state, d.held = status.StateHeld, why
		d.message = "held, given nothing: node " + n.Name + " of remote site " + who.site.Name + " checked in by what it reports alone; " + why
	case who.grant.Generation != n.Reprovision:
		d.reply = plan.CheckInReply{Hold: fmt.Sprintf("node %s's reprovision generation is %d, this machine booted for %d: reboot it", n.Name, n.Reprovision, who.grant.Generation)}
		d.message = "agent told to reboot: " + d.reply.Hold
	case n.Retire != nil:
		decideRetire(d, f, who, c)
	case len(unmet) > 0:
		// Before any disk is touched: the machine is not what the order
		// said. It asks again; a fixed machine (at its next boot) or a
		// fixed expectation in Git lets it go on.
		why := strings.Join(unmet, "; ")
		d.reply = plan.CheckInReply{Hold: "expectations not met: " + why, RetrySeconds: 30}
		d.state, d.isError, d.held = status.StateHeld, true, why
		d.message = "held before any disk is touched: " + why
	case n.Hold != "":
		// Non-zero-touch: it showed what it is, runs its profile's QA
		// once, and waits for Git. It asks again every few seconds; a
		// reboot comes back here.
		why := holdWhy(n)
		if qa, digest := commissioning(n); digest != "" && commissioned(f, who) != digest {
			d.reply = plan.CheckInReply{Workflow: &plan.Workflow{Node: n.Name, Profile: n.Profile, Commission: true, Actions: qa}}
			d.state, d.held, d.commission = status.StateCommissioning, why, digest
			d.message = fmt.Sprintf("held until Git releases it, its profile's %d QA actions first (%s): %s; %s", len(qa), actionNames(qa), describe(c), why)
			return
		}
		d.reply = plan.CheckInReply{Hold: why, RetrySeconds: HoldRetrySeconds}
		d.state, d.held = status.StateHeld, why
		d.message = "held until Git releases it: " + describe(c) + "; " + why
	default:
		wf := n.Artifacts.Workflow
		in := n.Install
		d.reply = plan.CheckInReply{Workflow: &wf, Generation: n.Reprovision}
		d.seed, d.install, d.installing = &n.Artifacts, &in, true
		d.message = "agent checked in: " + describe(c) + "; workflow of profile " + n.Profile + fmt.Sprintf(", %d actions", len(wf.Actions))
		if who.media {
			d.message += "; proved by a media credential (now spent)"
		}
		if wasHeld {
			d.released = true
			d.message += "; released by Git (it was held)"
		}
	}
}

// unproven: a node of a remote site that showed only what anyone can
// claim — it checked in by its identity without a TPM registered (whose
// proof gate would demand), or asks again with the session that gave it.
func unproven(who claimant) bool {
	if who.site.Remote == nil || who.node.Identity.TPM != nil {
		return false
	}
	return who.byIdentity || (who.resumed != nil && who.resumed.Unproven)
}

func decideUnknown(d *decision, p *plan.Plan, who claimant, c plan.CheckIn) {
	m := plan.Machine{UUID: c.Identity.UUID, Serial: c.Identity.Serial}
	if mac, ok := strings.CutPrefix(who.machine, "mac:"); ok {
		m.MAC = mac
	}
	site := who.site
	dd := p.Decide(site.Name, m)
	switch {
	case dd.Outcome == plan.Unknown && dd.Policy == plan.PolicyProvision && site.Unknown != nil:
		wf := site.Unknown.Workflow
		d.reply = plan.CheckInReply{Workflow: &wf}
		d.seed = site.Unknown
		d.message = "unknown machine checked in: " + describe(c) + "; workflow of the default profile " + dd.Profile
	case dd.Outcome == plan.Unknown && dd.Policy == plan.PolicyHold:
		d.reply = plan.CheckInReply{Hold: dd.Reason, RetrySeconds: 30}
		d.state, d.message = status.StateHeld, "unknown machine held: "+describe(c)
	default:
		// Registered since it booted, or refused: it boots again and gets
		// what the Plan says now.
		d.reply = plan.CheckInReply{Hold: "the plan changed since this machine booted: reboot it (" + dd.Reason + ")"}
		d.message = "unknown machine told to reboot: " + dd.Reason
	}
}

// identify finds the node a machine that checked in by its identity is:
// any of its MACs with its UUID and serial, as plan.Decide judges them.
// No node: an unknown machine, keyed by its first MAC (else its UUID or
// serial). A machine whose identifiers point at different nodes, or
// contradict one, is refused with the reason.
func identify(p *plan.Plan, site string, id plan.Identity) (*plan.Node, string, string) {
	macs := id.MACs
	if len(macs) == 0 {
		macs = []string{""}
	}
	var found *plan.Node
	for _, mac := range macs {
		d := p.Decide(site, plan.Machine{MAC: plan.NormalizeMAC(mac), UUID: id.UUID, Serial: id.Serial})
		switch d.Outcome {
		case plan.Match:
			if found != nil && found != d.Node {
				return nil, "", fmt.Sprintf("its NICs belong to nodes %s and %s", found.Name, d.Node.Name)
			}
			found = d.Node
		case plan.Mismatch:
			return nil, "", d.Reason
		}
	}
	if found != nil {
		return found, "", ""
	}
	key := plan.MachineKey(plan.Machine{MAC: plan.NormalizeMAC(macs[0]), UUID: id.UUID, Serial: id.Serial})
	if key == "" || !boot.SafeKey(key) {
		return nil, "", "it reports no MAC, UUID or serial"
	}
	return nil, key, ""
}

// verifyIdentity says why the machine is not node n ("" when it is): what
// the node registers must be what the machine reports, and nothing the
// machine reports may belong to another node.
func verifyIdentity(p *plan.Plan, site string, n *plan.Node, id plan.Identity) string {
	reg := n.Identity
	var why []string
	if reg.Serial != "" && plan.NormalizeSerial(id.Serial) != reg.Serial {
		why = append(why, fmt.Sprintf("node %s is registered with serial %s (%s), the machine reports serial %q", n.Name, reg.Serial, n.Source, id.Serial))
	}
	if reg.UUID != "" && plan.NormalizeUUID(id.UUID) != reg.UUID {
		why = append(why, fmt.Sprintf("node %s is registered with uuid %s (%s), the machine reports uuid %q", n.Name, reg.UUID, n.Source, id.UUID))
	}
	if len(reg.MACs) > 0 && !hasMAC(reg.MACs, id.MACs) {
		why = append(why, fmt.Sprintf("node %s is registered with mac %s (%s), the machine has %s", n.Name, strings.Join(reg.MACs, ", "), n.Source, strings.Join(id.MACs, ", ")))
	}
	// Identifiers of another node (a NIC nobody registered is fine).
	if d := p.Decide(site, plan.Machine{UUID: id.UUID, Serial: id.Serial}); d.Outcome == plan.Mismatch || (d.Outcome == plan.Match && d.Node != n) {
		why = append(why, d.Reason)
	}
	for _, m := range id.MACs {
		if d := p.Decide(site, plan.Machine{MAC: m}); d.Outcome == plan.Match && d.Node != n {
			why = append(why, fmt.Sprintf("the machine's mac %s is registered to node %s (%s)", m, d.Node.Name, d.Node.Source))
		}
	}
	return strings.Join(why, "; ")
}

// hasMAC reports whether the machine has a NIC Git registers.
func hasMAC(registered, reported []string) bool {
	for _, m := range reported {
		for _, r := range registered {
			if plan.NormalizeMAC(m) == r {
				return true
			}
		}
	}
	return false
}
