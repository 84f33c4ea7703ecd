package agentapi

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/tpm"
)

// ChallengeTTL is how long a TPM challenge waits for its proof; a machine
// activates a credential in well under a second.
const ChallengeTTL = 2 * time.Minute

// maxChallenges bounds the challenges waiting for a proof: past it, a
// check-in with a TPM is asked to come back (429) rather than grow the
// table.
const maxChallenges = 4096

// Default challenge budget of a source (an address; an IPv6 /64 shares
// LinkShare times it): a machine asks once per boot.
const (
	DefaultChallengeBurst = 8
	DefaultChallengeEvery = 10 * time.Second
)

// challenges are the TPM challenges handed out and not yet answered, by ID.
// Each is for one machine (site/subject), asked by one asker (the boot
// token and the address it came from), and taken at most once, by the
// same asker. An asker has one challenge at a time: asking again replaces
// it, so repeating a check-in never grows the table; another address
// naming the same machine cannot replace the real machine's.
type challenges struct {
	mu    sync.Mutex
	m     map[string]pending
	asked map[string]string // key and asker → the ID of its challenge
}

type pending struct {
	key, asker string
	exp        tpm.Expected
	quote      bool
	expires    time.Time
}

// put keeps a challenge in place of the asker's previous one, dropping the
// expired ones when the table is full; false when it is full of live ones.
func (c *challenges) put(id string, p pending, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m, c.asked = map[string]pending{}, map[string]string{}
	}
	slot := p.key + "\x00" + p.asker
	if old, ok := c.asked[slot]; ok {
		delete(c.m, old)
	}
	if len(c.m) >= maxChallenges {
		for k, v := range c.m {
			if now.After(v.expires) {
				delete(c.m, k)
				delete(c.asked, v.key+"\x00"+v.asker)
			}
		}
		if len(c.m) >= maxChallenges {
			delete(c.asked, slot)
			return false
		}
	}
	c.m[id], c.asked[slot] = p, id
	return true
}

// take removes the challenge id and returns it when it was made for key
// and asker and has not expired.
func (c *challenges) take(id, key, asker string, now time.Time) (pending, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.m[id]
	if !ok || p.key != key || p.asker != asker {
		return pending{}, false
	}
	delete(c.m, id)
	delete(c.asked, p.key+"\x00"+p.asker)
	return p, !now.After(p.expires)
}

// waiting is how many challenges wait for a proof.
func (c *challenges) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// mustProveTPM says what a node's check-in must prove of its TPM, "" when
// nothing: its registered EK, a certificate from its site's manufacturer
// CAs, a measured boot.
func mustProveTPM(site *plan.Site, n *plan.Node) string {
	if n == nil {
		return ""
	}
	var what []string
	if n.Identity.TPM != nil {
		what = append(what, "it is registered by its TPM")
	}
	if site.TPM != nil && len(site.TPM.EKCAs) > 0 {
		what = append(what, "site "+site.Name+" trusts TPMs by their EK certificate")
	}
	if n.Attestation != nil && n.Attestation.Require {
		what = append(what, "its attestation is required")
	}
	return strings.Join(what, ", ")
}

// attest binds a check-in to the machine's TPM. A check-in that carries a
// TPM identity and no proof is answered with a challenge only: nothing of
// the node (workflow, user-data, session) crosses before the proof. The
// proof must activate the challenge's credential (only the TPM holding the
// EK can), be the TPM Git registered for the node or one whose EK
// certificate chains to the site's CAs, and, when the node's attestation
// is required, quote a measured boot with Secure Boot on and the node's
// Micro-OS in PCR 4. A node that must prove a TPM and sends none is
// refused. On success the event carries the proof (ev.EK, ev.TPM) and
// attest returns the proved attestation key's public area (nil when the
// machine sent no TPM); otherwise the challenge to answer with, or the
// refusal.
//
// asker names who asks: the boot token's ID (none over TLS by identity)
// and the address; the proof must come from the same.
func (s *Server) attest(p *plan.Plan, c plan.CheckIn, who claimant, asker string, ev *status.Event) ([]byte, *plan.TPMChallenge, *refusal) {
	if c.TPM == nil {
		if must := mustProveTPM(who.site, who.node); must != "" {
			ev.TPM = "tpm: none sent"
			return nil, nil, refuseTPM(fmt.Sprintf("node %s must prove its TPM (%s), and this machine sent no TPM identity", who.node.Name, must))
		}
		return nil, nil, nil
	}
	if c.Proof == nil {
		ch, ref := s.challenge(c, who, asker, ev.IP)
		return nil, ch, ref
	}
	ak, ref := s.prove(p, c, who, asker, ev)
	return ak, nil, ref
}

// challenge hands the machine a challenge for its TPM, within its
// address's budget and the table's bound.
func (s *Server) challenge(c plan.CheckIn, who claimant, asker, ip string) (*plan.TPMChallenge, *refusal) {
	quote := who.node != nil && who.node.Attestation != nil && who.node.Attestation.Require
	ch, exp, err := tpm.NewChallenge(*c.TPM, nil)
	if err != nil {
		return nil, badRequest(http.StatusBadRequest, "check-in: "+err.Error())
	}
	if !s.challengeBudget().AllowSource(ip) {
		return nil, throttled("10", fmt.Sprintf("check-in: %s asked for too many TPM challenges (%d at once, then one per %s)", ip, DefaultChallengeBurst, DefaultChallengeEvery))
	}
	id, now := boot.NewID(), s.now()
	if !s.challenges.put(id, pending{key: who.key, asker: asker, exp: exp, quote: quote, expires: now.Add(ChallengeTTL)}, now) {
		return nil, throttled("10", "check-in: too many TPM challenges waiting for a proof")
	}
	return &plan.TPMChallenge{ID: id, Challenge: ch, Quote: quote}, nil
}

// prove checks the machine's proof against the challenge it answers, and
// the TPM it proves against the node's.
func (s *Server) prove(p *plan.Plan, c plan.CheckIn, who claimant, asker string, ev *status.Event) ([]byte, *refusal) {
	pend, ok := s.challenges.take(c.Proof.Challenge, who.key, asker, s.now())
	if !ok {
		return nil, badRequest(http.StatusGone, "check-in: the TPM challenge is unknown, spent or expired: check in again for a new one")
	}
	n := who.node
	var policy tpm.Policy
	if pend.quote {
		digest := microOSDigest(p, n)
		if digest == "" {
			return nil, refuseTPM(fmt.Sprintf("node %s's attestation is required, but the plan has no digest of its Micro-OS", n.Name))
		}
		policy = tpm.Policy{MeasuredBoot: true, SecureBoot: true, MicroOSDigests: []string{digest}}
	}
	res, err := tpm.Verify(pend.exp, c.Proof.Proof, policy)
	if err != nil {
		ev.EK, ev.TPM = pend.exp.EK, "tpm: refused: "+err.Error()
		what := "a machine"
		if n != nil {
			what = "node " + n.Name
		}
		return nil, refuseTPM(fmt.Sprintf("%s checking in from %s failed its TPM proof: %v", what, ev.IP, err))
	}
	if n != nil {
		if why := tpmMatches(who.site, n, c.TPM.EKCert, res.EK); why != "" {
			ev.EK, ev.TPM = res.EK, "tpm: refused: "+why
			return nil, refuseTPM(why)
		}
	}
	ev.EK, ev.TPM = res.EK, res.String()
	return pend.exp.AK, nil
}

func (s *Server) challengeBudget() *status.Budgets {
	s.challengesOnce.Do(func() {
		if s.Limits.Challenges == nil {
			s.Limits.Challenges = &status.Budgets{Burst: DefaultChallengeBurst, Every: DefaultChallengeEvery, Now: s.Now}
		}
	})
	return s.Limits.Challenges
}

// refuseTPM is a 409 identity-conflict, on the timeline and in the log;
// nothing of the node crosses.
func refuseTPM(why string) *refusal {
	return conflict(http.StatusConflict, why, "check-in refused: identity-conflict: "+why)
}

// tpmMatches says why the TPM a machine proved (ek) is not node n's, ""
// when it is: the EK Git registered for the node; for a node Git names no
// EK of, at a site that trusts manufacturers' EK certificates, a
// certificate of that key chaining to them (the node itself found by its
// serial, UUID or MAC).
func tpmMatches(site *plan.Site, n *plan.Node, certDER []byte, ek string) string {
	if n.Identity.TPM != nil {
		if n.Identity.TPM.EK == ek {
			return ""
		}
		return fmt.Sprintf("node %s is registered with TPM ek %s; this machine holds ek %s", n.Name, n.Identity.TPM.EK, ek)
	}
	if site.TPM == nil || len(site.TPM.EKCAs) == 0 {
		return ""
	}
	pool := x509.NewCertPool()
	for _, ca := range site.TPM.EKCAs {
		pool.AppendCertsFromPEM([]byte(ca.PEM))
	}
	if len(certDER) == 0 {
		return fmt.Sprintf("node %s: the TPM %s sent no EK certificate, and site %s trusts TPMs by their certificate", n.Name, ek, site.Name)
	}
	cert, err := tpm.VerifyEKCert(certDER, pool)
	if err == nil && cert.EK != ek {
		err = fmt.Errorf("the EK certificate is for %s", cert.EK)
	}
	if err != nil {
		return fmt.Sprintf("node %s: the TPM %s is not trusted by site %s: %v", n.Name, ek, site.Name, err)
	}
	return ""
}

// microOSDigest is the PE digest of the Micro-OS node n boots, "" when the
// plan has none.
func microOSDigest(p *plan.Plan, n *plan.Node) string {
	pr := p.Profile(n.Profile)
	if pr == nil {
		return ""
	}
	if m := p.MicroOSNamed(pr.MicroOS); m != nil {
		return m.PEDigest
	}
	return ""
}
