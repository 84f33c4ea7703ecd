package agentapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// checkin answers an agent's first request. Its credential is the boot
// token of the script the machine was served (good for one check-in), a
// held machine's session credential, or over TLS none (the machine is
// found by its identity). The steps: read the request; policy
// (authenticate → admit → decide, pure); gate (what admission spends);
// openSession; answer (record, reply: the workflow and a session
// credential for its events).
func (s *Server) checkin(w http.ResponseWriter, r *http.Request) {
	req, ref := s.readCheckIn(w, r)
	if ref != nil {
		s.refuse(w, status.Event{}, ref)
		return
	}
	p := s.Plans.Current()
	v := policy(s.facts(p), req)
	switch {
	case v.refusal != nil:
		s.refuse(w, v.event, v.refusal)
		return
	case v.final != nil:
		s.Store.Record(v.event)
		s.count(ResultOK)
		writeJSON(w, v.final)
		return
	}
	ak, challenge, ref := s.gate(p, req, &v)
	if ref == nil && challenge == nil {
		s.paceRelease(&v)
		ref = s.openSession(req, &v, ak)
	}
	switch {
	case ref != nil:
		s.refuse(w, v.event, ref)
	case challenge != nil:
		s.count(ResultChallenged)
		writeJSON(w, plan.CheckInReply{Challenge: challenge})
	default:
		s.answer(w, v)
	}
}

// facts are what the policy reads of this server, with p the Plan the
// request reads throughout.
func (s *Server) facts(p *plan.Plan) facts {
	return facts{plan: p, now: s.now(), secret: s.Secret, session: s.Store.Session, provisioned: s.provisioned, swarm: s.Swarm != nil,
		machine: s.Store.Machine}
}

// readCheckIn reads a check-in: its credential's shape first (before the
// body is read), then its body, bounded, decoded and validated.
func (s *Server) readCheckIn(w http.ResponseWriter, r *http.Request) (request, *refusal) {
	req := request{credential: bearer(r), tls: r.TLS != nil, ip: clientIP(r)}
	if ref := s.precheck(req.credential, "check-in", req.tls, boot.KindBoot, boot.KindMedia, boot.KindSession); ref != nil {
		return req, ref
	}
	b, code, err := readBody(w, r, maxCheckInBody)
	if err == nil {
		req.body, code, err = parseCheckIn(b)
	}
	if err != nil {
		return req, badRequest(code, "check-in: "+err.Error())
	}
	return req, nil
}

// parseCheckIn decodes a check-in's body and validates what it says the
// machine is (checkInIdentity); on error, the status to refuse it with.
func parseCheckIn(b []byte) (plan.CheckIn, int, error) {
	var c plan.CheckIn
	if err := json.Unmarshal(b, &c); err != nil {
		return c, http.StatusBadRequest, err
	}
	return c, http.StatusBadRequest, checkInIdentity(&c)
}

// gate takes what admission costs, in order, before the machine is given
// anything: a newcomer's place in its address's budget; its TPM's proof
// (a challenge first; a held machine asking again with its session proved
// it when it was given the session); its boot token, spent. It returns
// the proved attestation key (nil without a TPM), or a challenge to answer
// with, or a refusal.
func (s *Server) gate(p *plan.Plan, req request, v *verdict) (ak []byte, challenge *plan.TPMChallenge, ref *refusal) {
	who := v.who
	if who.node == nil && s.newcomer(v.event, req.ip) {
		// A machine the store never saw, past its address's budget:
		// turned away before it costs a token or a session.
		return nil, nil, throttled("10", "check-in: "+boot.TooManyNewcomers(req.ip))
	}
	if who.resumed != nil {
		return nil, nil, nil
	}
	// From the address and with the boot token it asked with.
	asker := "tls@" + req.ip
	if !who.byIdentity {
		asker = who.grant.ID + "@" + req.ip
	}
	if ak, challenge, ref = s.attest(p, req.body, who, asker, &v.event); challenge != nil || ref != nil || who.byIdentity {
		return ak, challenge, ref
	}
	fresh, err := s.Store.UseToken(who.grant.ID, who.grant.Expires)
	if err != nil {
		return nil, nil, unavailable("session store: " + err.Error())
	}
	if !fresh && who.media {
		why := fmt.Sprintf("a media credential already used was presented again, from %s: a second machine claims this identity, or the medium was copied", req.ip)
		return nil, nil, conflict(http.StatusUnauthorized, why, "check-in: the media credential was already used: ask for a new one (bootops media credential)")
	}
	if !fresh {
		why := fmt.Sprintf("a boot token already used was presented again, from %s: a second machine claims this identity, or the token was copied", req.ip)
		return nil, nil, conflict(http.StatusUnauthorized, why, "check-in: the boot token was already used: boot the machine again for a new one")
	}
	return ak, nil, nil
}

// openSession opens the machine's session (a new one replaces one in
// flight, an identity-conflict on its timeline) or goes on with the one
// it resumed, for what the decision tells it: a workflow's actions and
// install, or a hold to ask again from. A machine told to reboot gets
// none. The reply gets the session's credential and its seed.
func (s *Server) openSession(req request, v *verdict, ak []byte) *refusal {
	who, d, now := v.who, &v.decision, s.now()
	var sess status.Session
	if who.resumed != nil {
		sess = *who.resumed
	} else {
		if cur, ok := s.Store.Session(who.key); ok && cur.Active(now) {
			why := fmt.Sprintf("claimed again from %s while the session opened from %s at %s is in flight (%d of %d actions done): the newer check-in replaces it",
				req.ip, cur.Peer, cur.Started.UTC().Format(time.RFC3339), cur.Done, cur.Steps)
			s.note(v.event, conflict(http.StatusConflict, why, "")) // noted, not answered: the newer check-in goes on
		}
		sess = status.Session{ID: boot.NewID(), Generation: who.grant.Generation, Peer: req.ip, Started: now, Unproven: who.byIdentity && ak == nil}
		if ak != nil {
			sess.ReportKey = base64.StdEncoding.EncodeToString(ak)
		}
	}
	if d.install != nil || d.retiring {
		sess.Install, sess.Revision = d.install, s.revision()
	}
	if d.reply.Workflow == nil && d.reply.RetrySeconds == 0 {
		return nil
	}
	if wf := d.reply.Workflow; wf != nil {
		sess.Steps, sess.Need, sess.Retire, sess.Commission = len(wf.Actions), needed(*wf), wf.Retire, d.commission
		// A workflow starts at its first action, in a session resumed
		// too (a held node's QA passed, then its release).
		sess.Done, sess.Provisioned = 0, false
		sess.Actions, sess.Kinds = nil, nil
		for _, a := range wf.Actions {
			sess.Actions, sess.Kinds = append(sess.Actions, actionLabel(a)), append(sess.Kinds, a.Action)
		}
	}
	if who.resumed == nil {
		// A session's life is set once, at the check-in that opened it:
		// asking again never extends it.
		sess.Expires = now.Add(orDuration(s.Limits.SessionTTL, DefaultSessionTTL))
	}
	if err := s.Store.PutSession(who.key, sess); err != nil {
		return unavailable("session store: " + err.Error())
	}
	d.reply.Session = s.Secret.Mint(boot.Grant{Kind: boot.KindSession, Site: who.site.Name, Subject: who.subject, Generation: sess.Generation, ID: sess.ID, Expires: sess.Expires})
	if who.byIdentity {
		d.reply.Node, d.reply.Machine = who.nodeName(), who.machine
	}
	s.seed(&d.reply, d.seed, who, req, sess)
	return nil
}

// seed puts the cloud-init of of (a node's, or its site's unknown
// machines') in the reply, with the session's credential and the URLs in
// the machine's family; a node's also gets its installed OS's report
// script, and its network-config matched to the MAC it reports.
func (s *Server) seed(reply *plan.CheckInReply, of *plan.Artifacts, who claimant, req request, sess status.Session) {
	if of == nil || of.UserData == "" && of.MetaData == "" {
		return
	}
	family := boot.ForFamily(who.site, req.ip)
	fill := func(s string) string { return family(strings.ReplaceAll(s, plan.TokenPlaceholder, reply.Session)) }
	ci := &plan.CloudInitSeed{UserData: fill(of.UserData), MetaData: fill(of.MetaData), NetworkConfig: fill(of.NetworkConfig)}
	reply.CloudInit = ci
	n := who.node
	if n == nil {
		return
	}
	ci.Report = family(s.report(who.site, n, n.Install.Digest, sess))
	if mac := plan.NormalizeMAC(first(req.body.Identity.MACs)); mac != "" {
		ci.NetworkConfig = strings.Replace(ci.NetworkConfig, plan.NetworkMatchAny, fmt.Sprintf("    match:\n      macaddress: %q\n", mac), 1)
	}
}

// answer records the check-in on the machine's timeline, durably, and
// replies: nothing is said to the agent that is not stored.
func (s *Server) answer(w http.ResponseWriter, v verdict) {
	ev, d := v.event, v.decision
	ev.Inventory, ev.Message, ev.Held = d.inventory, d.message, d.held
	ev.State, ev.Error, ev.Installing, ev.Retiring = d.state, d.isError, d.installing, d.retiring
	if ev.State == "" {
		ev.State = status.StateMicroOS
	}
	if ev.TPM != "" {
		ev.Message += "; " + ev.TPM
	}
	if err := s.Store.RecordSync(ev); err != nil {
		s.refuse(w, ev, unavailable("status store: "+err.Error()))
		return
	}
	s.count(ResultOK)
	writeJSON(w, d.reply)
}

// needed is how many actions of wf must be done before the agent may
// report it provisioned: those before the first power action.
func needed(wf plan.Workflow) int {
	for i, a := range wf.Actions {
		if plan.IsPowerAction(a.Action) {
			return i
		}
	}
	return len(wf.Actions)
}

// actionLabel is what the agent names an action's events by: its name,
// else its kind (agent.step.emit).
func actionLabel(a plan.Action) string {
	if a.Name != "" {
		return a.Name
	}
	return a.Action
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
