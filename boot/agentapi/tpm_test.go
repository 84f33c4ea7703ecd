package agentapi

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/tpm"
	"github.com/bootops/bootops/tpm/tpmtest"
)

// TestTPMCheckIn: a node registered by its TPM gets its workflow and
// user-data only after its TPM activated the server's credential; a
// machine with its serial and another TPM, one that copies its EK, one
// that replays a proof and one that sends no TPM get none of it.
func TestTPMCheckIn(t *testing.T) {
	m1, id1, ek1, close1 := tpmtest.Machine(t, 1)
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	p.Profiles = []*plan.Profile{{Name: "base", MicroOS: "default"}}
	p.MicroOS[0].PEDigest = "sha256:" + strings.Repeat("cd", 32)
	n := &plan.Node{Name: "t", Site: "lab", Profile: "base", Source: "t.yaml:1",
		Identity: plan.Identity{Serial: "SER-T", TPM: &plan.TPMIdentity{EK: ek1}},
		Artifacts: plan.Artifacts{IPXE: "#!ipxe\nkernel k bootops.node=t bootops.token=" + plan.TokenPlaceholder + "\n",
			Workflow: plan.Workflow{Node: "t", Profile: "base", Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}},
			UserData: "#cloud-config\npassword: the-secret\n"}}
	p.Sites[0].Nodes = append(p.Sites[0].Nodes, n)
	s, mem := newServer(t, p)
	counts := map[string]int{}
	s.Count = func(r string) { counts[r]++ }
	h := s.Handler()
	tok := func() string { return nodeToken(s, "lab", "t") }
	in := plan.CheckIn{Site: "lab", Node: "t", Identity: plan.Identity{Serial: "SER-T"}}
	noSecrets := func(what, body string) {
		t.Helper()
		if strings.Contains(body, "the-secret") || strings.Contains(body, `"workflow"`) || strings.Contains(body, `"session"`) {
			t.Errorf("%s: the node's workflow, user-data or session crossed: %s", what, body)
		}
	}

	// No TPM sent: refused.
	code, body := post(t, h, plan.AgentCheckInPath, tok(), in)
	if code != 409 || !strings.Contains(body, "node t must prove its TPM (it is registered by its TPM), and this machine sent no TPM identity") {
		t.Errorf("no TPM: %d %s", code, body)
	}
	noSecrets("no TPM", body)

	// The real machine: a challenge, then the workflow.
	token := tok()
	in.TPM = &id1
	code, body = post(t, h, plan.AgentCheckInPath, token, in)
	ch := reply(t, body).Challenge
	if code != 200 || ch == nil || ch.Quote {
		t.Fatalf("first check-in: %d %s, want a challenge and no quote asked", code, body)
	}
	noSecrets("challenge", body)
	proof, err := m1.Prove(ch.Challenge, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in.Proof = &plan.TPMProof{Challenge: ch.ID, Proof: proof}
	code, body = post(t, h, plan.AgentCheckInPath, token, in)
	if code != 200 || !strings.Contains(body, "the-secret") || !strings.Contains(body, `"action":"wipe-disk"`) {
		t.Fatalf("proven check-in: %d %s", code, body)
	}
	if got := mem.Machines(); !machineHas(got, "lab/t", "tpm: ek "+ek1+", activated") {
		t.Errorf("status of lab/t has no proof: %+v", got)
	}
	// The same proof again, with a fresh token: the challenge is spent.
	code, body = post(t, h, plan.AgentCheckInPath, tok(), in)
	if code != 410 || !strings.Contains(body, "challenge is unknown, spent or expired") {
		t.Errorf("replayed proof: %d %s", code, body)
	}
	noSecrets("replayed proof", body)

	// Attestation required: the challenge asks for a quote, and a proof
	// without one is refused.
	n.Attestation = &plan.Attestation{Require: true}
	in.Proof = nil
	token = tok()
	_, body = post(t, h, plan.AgentCheckInPath, token, in)
	ch = reply(t, body).Challenge
	if ch == nil || !ch.Quote {
		t.Fatalf("attestation required: %s, want a challenge asking for a quote", body)
	}
	proof, err = m1.Prove(ch.Challenge, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in.Proof = &plan.TPMProof{Challenge: ch.ID, Proof: proof}
	code, body = post(t, h, plan.AgentCheckInPath, token, in)
	if code != 409 || !strings.Contains(body, "measured boot required but the machine sent no quote") {
		t.Errorf("no quote: %d %s", code, body)
	}
	noSecrets("no quote", body)
	n.Attestation = nil
	close1()

	// Another machine with the node's serial and its own TPM: it proves
	// its TPM, which is not the node's.
	m2, id2, _, _ := tpmtest.Machine(t, 2)
	token = tok()
	in.TPM, in.Proof = &id2, nil
	_, body = post(t, h, plan.AgentCheckInPath, token, in)
	ch = reply(t, body).Challenge
	if ch == nil {
		t.Fatalf("second machine: %s, want a challenge", body)
	}
	if proof, err = m2.Prove(ch.Challenge, nil, nil); err != nil {
		t.Fatal(err)
	}
	in.Proof = &plan.TPMProof{Challenge: ch.ID, Proof: proof}
	code, body = post(t, h, plan.AgentCheckInPath, token, in)
	if code != 409 || !strings.Contains(body, "node t is registered with TPM ek "+ek1+"; this machine holds ek sha256:") {
		t.Errorf("another TPM: %d %s", code, body)
	}
	noSecrets("another TPM", body)

	// It copies the node's EK: its TPM cannot activate the credential,
	// and a guessed secret is refused.
	token = tok()
	copied := id2
	copied.EK = id1.EK
	in.TPM, in.Proof = &copied, nil
	_, body = post(t, h, plan.AgentCheckInPath, token, in)
	ch = reply(t, body).Challenge
	if ch == nil {
		t.Fatalf("copied EK: %s, want a challenge", body)
	}
	if _, err := m2.Prove(ch.Challenge, nil, nil); err == nil {
		t.Errorf("a TPM activated a credential made for another TPM's EK")
	}
	in.Proof = &plan.TPMProof{Challenge: ch.ID, Proof: tpm.Proof{Secret: make([]byte, 32)}}
	code, body = post(t, h, plan.AgentCheckInPath, token, in)
	if code != 409 || !strings.Contains(body, "failed its TPM proof") {
		t.Errorf("copied EK: %d %s", code, body)
	}
	noSecrets("copied EK", body)
	if counts[ResultChallenged] != 4 || counts[ResultConflict] != 4 || counts[ResultOK] != 1 {
		t.Errorf("counts: %v", counts)
	}
	var conflicts int
	for _, e := range mem.Events("lab/t") {
		if strings.Contains(e.Message, "identity-conflict") {
			conflicts++
		}
	}
	if conflicts != 4 {
		t.Errorf("%d identity-conflicts on lab/t's timeline, want 4", conflicts)
	}
}

func machineHas(ms []status.Machine, key, tpm string) bool {
	for _, m := range ms {
		if m.Key == key {
			return strings.HasPrefix(m.TPM, tpm)
		}
	}
	return false
}

// tpmMatches: a node's registered EK is the only TPM it takes; a node Git
// names no EK of, at a site that trusts a manufacturer, takes a TPM whose
// EK certificate chains to it.
func TestTPMMatches(t *testing.T) {
	ca, caKey := testCA(t, "manufacturer")
	other, otherKey := testCA(t, "someone else")
	ekKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ek, _ := tpm.EKHash(&ekKey.PublicKey)
	certBy := func(ca *x509.Certificate, key *ecdsa.PrivateKey, pub any) []byte {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "ek"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageKeyEncipherment}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, key)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	good := certBy(ca, caKey, &ekKey.PublicKey)
	untrusted := certBy(other, otherKey, &ekKey.PublicKey)
	elseKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	forAnother := certBy(ca, caKey, &elseKey.PublicKey)
	pemOf := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}))
	trusting := &plan.Site{Name: "lab", TPM: &plan.SiteTPM{EKCAs: []plan.EKCA{{Path: "ca/m.pem", PEM: pemOf}}}}
	plain := &plan.Site{Name: "lab"}
	byEK := &plan.Node{Name: "a", Identity: plan.Identity{TPM: &plan.TPMIdentity{EK: ek}}}
	byOtherEK := &plan.Node{Name: "b", Identity: plan.Identity{TPM: &plan.TPMIdentity{EK: "sha256:" + strings.Repeat("0", 64)}}}
	bySerial := &plan.Node{Name: "c", Identity: plan.Identity{Serial: "S"}}
	for _, tc := range []struct {
		name string
		site *plan.Site
		n    *plan.Node
		cert []byte
		want string
	}{
		{"registered EK", plain, byEK, nil, ""},
		{"another registered EK, though its certificate is trusted", trusting, byOtherEK, good, "node b is registered with TPM ek sha256:000"},
		{"no EK in Git, a trusted certificate", trusting, bySerial, good, ""},
		{"no EK in Git, no certificate", trusting, bySerial, nil, "sent no EK certificate, and site lab trusts TPMs by their certificate"},
		{"no EK in Git, another CA", trusting, bySerial, untrusted, "is not trusted by site lab"},
		{"no EK in Git, a certificate of another key", trusting, bySerial, forAnother, "the EK certificate is for sha256:"},
		{"no EK in Git, no CA", plain, bySerial, nil, ""},
	} {
		got := tpmMatches(tc.site, tc.n, tc.cert, ek)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func testCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

// BenchmarkCheckIn: a node's check-in through the server, as its agent
// makes it (the script's token, then the check-in), without a TPM and with
// one (a challenge, the TPM's activation of it, the check-in again), in
// one run. The TPM is the reference simulator.
func BenchmarkCheckIn(b *testing.B) {
	m, id, ek, _ := tpmtest.Machine(b, 1)
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	wf := plan.Workflow{Profile: "base", Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}
	for _, name := range []string{"plain", "tpm"} {
		n := &plan.Node{Name: name, Site: "lab", Profile: "base", Source: name + ".yaml:1", Identity: plan.Identity{Serial: "S-" + strings.ToUpper(name)},
			Artifacts: plan.Artifacts{IPXE: "#!ipxe\nkernel k bootops.node=" + name + " bootops.token=" + plan.TokenPlaceholder + "\n", Workflow: wf}}
		if name == "tpm" {
			n.Identity.TPM = &plan.TPMIdentity{EK: ek}
		}
		p.Sites[0].Nodes = append(p.Sites[0].Nodes, n)
	}
	s, _ := newServer(b, p)
	s.Limits.Challenges = &status.Budgets{Burst: 1 << 30} // one address asks for every challenge here
	// The server alone, without the tests' contract check around it.
	saved := checkRoutes
	checkRoutes = nil
	h := s.Handler()
	checkRoutes = saved
	checkIn := func(b *testing.B, name string, withTPM bool) {
		serial := "S-" + strings.ToUpper(name)
		tok := nodeToken(s, "lab", name)
		in := plan.CheckIn{Site: "lab", Node: name, Identity: plan.Identity{Serial: serial}}
		if withTPM {
			in.TPM = &id
			_, body := post(b, h, plan.AgentCheckInPath, tok, in)
			ch := reply(b, body).Challenge
			if ch == nil {
				b.Fatalf("no challenge: %s", body)
			}
			proof, err := m.Prove(ch.Challenge, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			in.Proof = &plan.TPMProof{Challenge: ch.ID, Proof: proof}
		}
		if code, body := post(b, h, plan.AgentCheckInPath, tok, in); code != 200 || !strings.Contains(body, `"workflow"`) {
			b.Fatalf("check-in: %d %s", code, body)
		}
	}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			checkIn(b, "plain", false)
		}
	})
	b.Run("tpm", func(b *testing.B) {
		for b.Loop() {
			checkIn(b, "tpm", true)
		}
	})
}

// TPM challenges cost their sender: asking again with the same token from
// the same address replaces its challenge (the table does not grow), an
// address past its budget is turned away (429), and meanwhile the real
// machine, from its own address, gets its challenge and proves it. A
// challenge is spent only by the token and address that asked for it.
func TestTPMChallengesBudgeted(t *testing.T) {
	m1, id1, ek1, close1 := tpmtest.Machine(t, 1)
	defer close1()
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	n := &plan.Node{Name: "t", Site: "lab", Profile: "base", Source: "t.yaml:1",
		Identity: plan.Identity{Serial: "SER-T", TPM: &plan.TPMIdentity{EK: ek1}},
		Artifacts: plan.Artifacts{IPXE: "#!ipxe\nkernel k bootops.node=t bootops.token=" + plan.TokenPlaceholder + "\n",
			Workflow: plan.Workflow{Node: "t", Profile: "base", Actions: []plan.Action{{Action: "wipe-disk", Name: "wipe"}}}}}
	p.Sites[0].Nodes = append(p.Sites[0].Nodes, n)
	s, _ := newServer(t, p)
	// The budget's clock stands still: on a loaded machine the 150
	// check-ins below can take longer than a refill.
	frozen := time.Now()
	s.Limits.Challenges = &status.Budgets{Burst: DefaultChallengeBurst, Every: DefaultChallengeEvery, Now: func() time.Time { return frozen }}
	h := s.Handler()
	from := func(ip, token string, c plan.CheckIn) (int, string) {
		b, _ := json.Marshal(c)
		req := httptest.NewRequest("POST", plan.AgentCheckInPath, bytes.NewReader(b))
		req.RemoteAddr = ip + ":4000"
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	in := plan.CheckIn{Site: "lab", Node: "t", Identity: plan.Identity{Serial: "SER-T"}, TPM: &id1}
	tok := func() string { return nodeToken(s, "lab", "t") }

	// One token, asked with 100 times: one challenge waits, and the
	// address is past its budget after the first few.
	flood := tok()
	answered := 0
	for range 100 {
		if code, _ := from("198.18.0.66", flood, in); code == 200 {
			answered++
		}
	}
	if w := s.challenges.waiting(); w != 1 || answered != DefaultChallengeBurst {
		t.Errorf("after 100 check-ins with one token: %d challenges wait (want 1), %d answered (want %d)", w, answered, DefaultChallengeBurst)
	}
	// Fresh tokens from another address: past its budget, 429.
	throttled := 0
	for range 50 {
		if code, _ := from("198.18.0.67", tok(), in); code == 429 {
			throttled++
		}
	}
	if throttled != 50-DefaultChallengeBurst || s.challenges.waiting() != 1+DefaultChallengeBurst {
		t.Errorf("50 fresh tokens from one address: %d throttled, %d waiting", throttled, s.challenges.waiting())
	}
	// The real machine, from its own address.
	real := tok()
	code, body := from("198.18.0.10", real, in)
	ch := reply(t, body).Challenge
	if code != 200 || ch == nil {
		t.Fatalf("the real machine's check-in: %d %s", code, body)
	}
	proof, err := m1.Prove(ch.Challenge, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	proven := in
	proven.Proof = &plan.TPMProof{Challenge: ch.ID, Proof: proof}
	// Its proof, copied by another address or sent with another token: not spent.
	if code, body := from("198.18.0.66", real, proven); code != 410 {
		t.Errorf("the proof from another address: %d %s", code, body)
	}
	if code, body := from("198.18.0.10", real, proven); code != 200 || !strings.Contains(body, `"workflow"`) {
		t.Errorf("the real machine's proof: %d %s", code, body)
	}
}

// A node whose check-in proved its TPM installs with that TPM's key
// recorded: its report counts only when quoted by that key over the
// report's own credential and body. The credential alone (copied off the
// disk or the wire), a quote of another body, and another TPM's quote
// are refused, and none makes the node running.
func TestTPMBoundReport(t *testing.T) {
	m1, id1, ek1, close1 := tpmtest.Machine(t, 3)
	_, h, mem, cred, _ := tpmInstalled(t, m1, id1, ek1)

	key, err := m1.ReportKey()
	if err != nil {
		t.Fatal(err)
	}
	good, _ := json.Marshal(plan.OSReport{Site: "lab", Node: "t", InstanceID: "t-0", Hostname: "node-t", Kernel: "6.1"})
	other, _ := json.Marshal(plan.OSReport{Site: "lab", Node: "t", InstanceID: "t-0", Hostname: "forged", Kernel: "6.1"})
	report := func(body []byte, attest, sig []byte) (int, string) {
		req := httptest.NewRequest("POST", plan.ReportPath, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+cred)
		if attest != nil {
			req.Header.Set(HeaderTPMQuote, base64.StdEncoding.EncodeToString(attest))
			req.Header.Set(HeaderTPMSignature, base64.StdEncoding.EncodeToString(sig))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	notRunning := func(what string) {
		t.Helper()
		if m, _ := mem.Machine("lab/t"); m.State == status.StateRunning || m.Hostname == "forged" {
			t.Errorf("after %s: %s, hostname %q", what, m.State, m.Hostname)
		}
	}
	code, body := report(good, nil, nil)
	if code != 401 || !strings.Contains(body, "carries no TPM quote") {
		t.Errorf("the credential alone: %d %s", code, body)
	}
	notRunning("the credential alone")
	attest, sig := tpmtest.QuoteReport(t, key, tpm.ReportNonce(cred, good))
	code, body = report(other, attest, sig)
	if code != 401 || !strings.Contains(body, "quotes other data") {
		t.Errorf("a quote of another body: %d %s", code, body)
	}
	notRunning("a quote of another body")
	if code, body = report(good, attest, sig[:len(sig)-3]); code != 401 || !strings.Contains(body, "report quote refused: signature") {
		t.Errorf("a cut signature: %d %s", code, body)
	}
	close1()
	m2, _, _, _ := tpmtest.Machine(t, 4)
	key2, err := m2.ReportKey()
	if err != nil {
		t.Fatal(err)
	}
	a2, s2 := tpmtest.QuoteReport(t, key2, tpm.ReportNonce(cred, good))
	if code, body = report(good, a2, s2); code != 401 || !strings.Contains(body, "not the install's key's") {
		t.Errorf("another TPM's quote: %d %s", code, body)
	}
	notRunning("another TPM's quote")
	if code, body = report(good, attest, sig); code != 200 {
		t.Fatalf("the install's TPM's quote: %d %s", code, body)
	}
	if m, _ := mem.Machine("lab/t"); m.State != status.StateRunning || !strings.Contains(m.Last.Message, "quoted by its TPM") {
		t.Errorf("after the quoted report: %s, %q", m.State, m.Last.Message)
	}
}

// tpmInstalled installs node t, registered by the EK of m's TPM: its
// check-in proves the TPM, the agent's events record the install. It
// returns the server's handler and store, the install's report
// credential and its report script.
func tpmInstalled(t testing.TB, m *tpm.Machine, id tpm.Identity, ek string) (s *Server, h http.Handler, mem *status.Memory, cred, reportScript string) {
	t.Helper()
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	n := &plan.Node{Name: "t", Site: "lab", Profile: "base", Source: "t.yaml:1",
		Identity: plan.Identity{Serial: "SER-T", TPM: &plan.TPMIdentity{EK: ek}},
		Artifacts: plan.Artifacts{IPXE: "#!ipxe\nkernel k bootops.node=t bootops.token=" + plan.TokenPlaceholder + "\n",
			Workflow: plan.Workflow{Node: "t", Actions: []plan.Action{{Action: "wipe-disk"}}},
			UserData: "#cloud-config\n", MetaData: "instance-id: t-0\n"}}
	n.Install = plan.InstallOf(n)
	p.Sites[0].Nodes = append(p.Sites[0].Nodes, n)
	s, mem = newServer(t, p)
	h = s.Handler()

	token := nodeToken(s, "lab", "t")
	in := plan.CheckIn{Site: "lab", Node: "t", Identity: plan.Identity{Serial: "SER-T"}, TPM: &id}
	_, body := post(t, h, plan.AgentCheckInPath, token, in)
	ch := reply(t, body).Challenge
	if ch == nil {
		t.Fatalf("no challenge: %s", body)
	}
	proof, err := m.Prove(ch.Challenge, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in.Proof = &plan.TPMProof{Challenge: ch.ID, Proof: proof}
	code, body := post(t, h, plan.AgentCheckInPath, token, in)
	r := reply(t, body)
	if code != 200 || r.CloudInit == nil {
		t.Fatalf("proven check-in: %d %s", code, body)
	}
	c := regexp.MustCompile(`url, token, site, node, ca, install = "[^"]*", "([^"]+)"`).FindStringSubmatch(r.CloudInit.Report)
	if c == nil {
		t.Fatalf("no credential in the report script:\n%s", r.CloudInit.Report)
	}
	b := plan.EventBatch{Site: "lab", Node: "t", Events: []plan.AgentEvent{
		{Seq: 1, Time: time.Now(), Type: plan.AgentActionDone, Step: 1, Steps: 1, Action: "wipe-disk"},
		{Seq: 2, Time: time.Now(), Type: plan.AgentProvisioned}}}
	if code, body := post(t, h, plan.AgentEventsPath, r.Session, b); code != 200 {
		t.Fatalf("install: %d %s", code, body)
	}
	rec, _ := mem.Machine("lab/t")
	if want := base64.StdEncoding.EncodeToString(id.AK.Public); rec.ReportKey != want {
		t.Fatalf("the install's report key %q, want the proved AK %q", rec.ReportKey, want)
	}
	return s, h, mem, c[1], r.CloudInit.Report
}
