package http

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/tpm"
)

// The installed OS's report: the agent writes a script into the new
// system (plan.CloudInitSeed.Report) that cloud-init runs at every boot;
// it posts a plan.OSReport with the node's report credential, minted at
// check-in for that node, generation and install (the session that runs
// it). A report may only say that the install bootops recorded booted,
// and how cloud-init went: it never says what the disk holds (only the
// install path does, see status.Machine.Proves). Each accepted report is
// answered with the credential renewed, which the script keeps.

// AgentReportRefused counts refused reports (a wrong, another node's, an
// old generation's or another install's credential, or none; a claim of
// an install bootops did not record).
const AgentReportRefused = "report_refused"

// ReportTTL bounds how long after its install, or its last report, a
// machine may report (a machine may sit powered off in a warehouse for
// weeks); each report renews it.
const ReportTTL = 90 * 24 * time.Hour

// Default report budget of a node: a burst, then one per interval. A
// machine reports once per boot; a flood of reports is turned away
// unrecorded, so it never pushes the node's history out.
const (
	DefaultReportBurst = 10
	DefaultReportEvery = 5 * time.Minute
)

// reportScript is the per-boot script: POSIX sh handing over to Python 3,
// which cloud-init itself needs, so nothing else must be installed. It
// runs inside cloud-init's final stage, so it leaves a child of its own
// (its output in /var/log/bootops-report.log) and returns: the child waits
// for cloud-init's result of this boot (at most 10 minutes; it is written
// when the final stage ends), then tries for about two minutes to send
// it, and gives up until the next boot.
const reportScript = `#!/bin/sh
# bootops: tell the boot server this node's OS is up (cloud-init runs it at every boot)
exec python3 - <<'BOOTOPS_REPORT'
import base64, hashlib, json, os, socket, ssl, subprocess, sys, tempfile, time, urllib.request
url, token, site, node, ca, install = %q, %q, %q, %q, %q, %q
run = os.environ.get("BOOTOPS_CLOUD_INIT_RUN", "/run/cloud-init")  # tests point it elsewhere
saved = os.path.join(os.environ.get("BOOTOPS_REPORT_STATE", "/var/lib/bootops"), "report-credential")
try:  # the credential the last report was given (renewed at each report)
    token = open(saved).read().strip() or token
except OSError:
    pass
if not os.environ.get("BOOTOPS_REPORT_FOREGROUND"):
    if os.fork() > 0:
        sys.exit(0)
    os.setsid()
    log = os.open("/var/log/bootops-report.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0); os.dup2(log, 1); os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
def instance_id():
    for p in (run + "/.instance-id", "/var/lib/cloud/data/instance-id"):
        try:
            return open(p).read().strip()
        except OSError:
            pass
    return ""
def addresses():
    try:
        return subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10).stdout.split()
    except Exception:
        return []
def cloud_init():
    for _ in range(600):
        try:
            errors = json.load(open(run + "/result.json")).get("v1", {}).get("errors") or []
            return "error: " + "; ".join(str(e) for e in errors)[:1000] if errors else "done"
        except (OSError, ValueError):
            time.sleep(1)
    return ""
result = cloud_init()
body = json.dumps({"site": site, "node": node, "instanceId": instance_id(), "hostname": socket.gethostname(),
                   "kernel": os.uname().release, "addresses": addresses(), "install": install, "cloudInit": result}).encode()
def quote(key, nonce):  # the install's TPM key quotes the credential and body (tpm2-tools)
    tcti = os.environ.get("BOOTOPS_TPM_TCTI", "device:/dev/tpmrm0")
    with tempfile.TemporaryDirectory() as d:
        for argv in (["tpm2_load", "-T", tcti, "-C", "0x81000002", "-u", key + ".pub", "-r", key + ".priv", "-c", d + "/key.ctx"],
                     ["tpm2_quote", "-T", tcti, "-c", d + "/key.ctx", "-l", "sha256:0", "-q", nonce, "-m", d + "/quote", "-s", d + "/sig", "-g", "sha256"]):
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            except FileNotFoundError:
                raise RuntimeError(argv[0] + " is not installed (Debian package tpm2-tools)")
            if p.returncode != 0:
                raise RuntimeError(argv[0] + ": " + p.stderr.strip()[-300:])
        return {"Bootops-Tpm-Quote": base64.b64encode(open(d + "/quote", "rb").read()).decode(),
                "Bootops-Tpm-Signature": base64.b64encode(open(d + "/sig", "rb").read()).decode()}
headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
key = os.path.join(os.path.dirname(saved), "report-key")
if os.path.exists(key + ".priv"):  # this install is bound to the machine's TPM
    nonce = hashlib.sha256(b"bootops report v1\0" + token.encode() + b"\0" + hashlib.sha256(body).digest()).hexdigest()
    try:
        headers.update(quote(key, nonce))
        print("bootops: quoted by the TPM")
    except Exception as e:
        print("bootops: no TPM quote, the report will be refused:", e)
ctx = ssl.create_default_context(cadata=ca) if ca else None
for attempt in range(24):
    try:
        req = urllib.request.Request(url, data=body, headers=headers)
        answer = json.loads(urllib.request.urlopen(req, timeout=10, context=ctx).read() or b"{}")
        print("bootops: reported to", url, "cloud-init:", result or "no result")
        if answer.get("credential"):
            os.makedirs(os.path.dirname(saved), mode=0o700, exist_ok=True)
            fd = os.open(saved + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, answer["credential"].encode()); os.fsync(fd); os.close(fd)
            os.replace(saved + ".new", saved)
        break
    except urllib.error.HTTPError as e:
        print("bootops: report refused:", e.code, e.read().decode(errors="replace").strip())
        break
    except Exception as e:
        print("bootops: report not delivered yet:", e)
        time.sleep(5)
BOOTOPS_REPORT
`

// report renders a node's report script with a credential for the
// install the session opens, and that install's digest.
func (s *Server) report(site *plan.Site, n *plan.Node, install string, sess status.Session) string {
	ca := ""
	if site.TLS() {
		ca = s.SiteCA
	}
	return fmt.Sprintf(reportScript, site.AgentURL()+plan.ReportPath, s.reportCredential(site.Name, n.Name, sess.Generation, sess.ID), site.Name, n.Name, ca, install)
}

// reportCredential is a report credential for one install of a node.
func (s *Server) reportCredential(site, node string, generation int, install string) string {
	return s.Secret.Mint(boot.Grant{Kind: boot.KindReport, Site: site, Subject: node, Generation: generation,
		ID: install, Expires: s.now().Add(ReportTTL)})
}

// osReport takes the installed OS's report: its credential must be the
// node's, of the node's current generation and of the install bootops
// recorded; its instance-id the one the node's meta-data gave
// (node-generation); at a site with TLS it must come over TLS; and the
// node's report budget must not be spent.
func (s *Server) osReport(w http.ResponseWriter, r *http.Request) {
	if err := boot.Peek(bearer(r), s.now(), boot.KindReport); err != nil {
		s.logger().Warn("report refused", "ip", clientIP(r), "why", credentialError(err))
		s.agentFail(w, http.StatusUnauthorized, AgentReportRefused, "report refused: wrong or missing credential (from "+clientIP(r)+"): "+credentialError(err))
		return
	}
	var rep plan.OSReport
	body, code, err := readBody(w, r, maxReportBody)
	if err == nil {
		code, err = http.StatusBadRequest, json.Unmarshal(body, &rep)
	}
	if err != nil {
		s.agentFail(w, code, AgentBadRequest, "report: "+err.Error())
		return
	}
	p := s.Plans.Current()
	if p == nil {
		http.Error(w, "no plan loaded yet", http.StatusServiceUnavailable)
		return
	}
	n := p.Node(rep.Site, rep.Node)
	if n == nil {
		s.refuseReport(w, r, nil, http.StatusUnauthorized, fmt.Sprintf("no node %q on site %q", rep.Node, rep.Site))
		return
	}
	g, err := s.Secret.Verify(bearer(r), boot.KindReport, n.Site, n.Name, s.now())
	if err != nil {
		// Not the node's: nothing on its timeline (anyone can name it).
		s.refuseReport(w, r, nil, http.StatusUnauthorized, "wrong or missing credential (from "+clientIP(r)+"): "+credentialError(err))
		return
	}
	// From here the sender holds the node's credential: what it sends
	// is spent from the node's budget, refused or not.
	if !s.reportBudget().Allow(n.Site+"/"+n.Name, 1) {
		w.Header().Set("Retry-After", "300")
		s.agentFail(w, http.StatusTooManyRequests, AgentThrottled, fmt.Sprintf("report: node %s is over its report budget (%d at once, then one per %s); not recorded", n.Name, DefaultReportBurst, DefaultReportEvery))
		return
	}
	if site := p.Site(n.Site); site != nil && site.TLS() && r.TLS == nil {
		s.refuseReport(w, r, n, http.StatusForbidden, "sent over plain HTTP: site "+n.Site+" has TLS, and its report credential crosses the LAN only inside it")
		return
	}
	m, _ := s.machine(n.Site + "/" + n.Name)
	ev := status.Event{Kind: status.KindReport, Site: n.Site, Node: n.Name, IP: clientIP(r), State: status.StateRunning,
		Hostname: clean(rep.Hostname, 253), Kernel: clean(rep.Kernel, 128), Generation: g.Generation, InstallID: g.ID}
	if isDigest(rep.Install) {
		ev.Install = &plan.Install{Digest: rep.Install}
	}
	switch {
	case g.Generation != n.Reprovision:
		s.refuseReport(w, r, n, http.StatusConflict, fmt.Sprintf("the credential is of generation %d; node %s is at %d: a machine installed before the reprovision", g.Generation, n.Name, n.Reprovision))
		return
	case rep.InstanceID != fmt.Sprintf("%s-%d", n.Name, n.Reprovision):
		s.refuseReport(w, r, n, http.StatusConflict, fmt.Sprintf("instance-id %q, want %s-%d: this is not the seed bootops wrote", clean(rep.InstanceID, 64), n.Name, n.Reprovision))
		return
	}
	// An install whose check-in proved a TPM: the report's quote by that
	// TPM's key is checked once the report names the install.
	ev.Quoted = m.ReportKey != ""
	if why := m.Proves(ev); why != "" {
		s.refuseReport(w, r, n, http.StatusConflict, why+": a report says only that the install bootops recorded booted; it changes nothing else")
		return
	}
	if ev.Quoted {
		if why := quoted(r, m.ReportKey, body); why != "" {
			s.refuseReport(w, r, n, http.StatusUnauthorized, why+": a credential without the TPM that installed the node proves nothing")
			return
		}
	}
	ev.Message = fmt.Sprintf("running: hostname %s, kernel %s, addresses %s (instance-id %s), install %s", ev.Hostname, ev.Kernel,
		strings.Join(cleanAll(rep.Addresses), " "), rep.InstanceID, plan.Short(m.Installed.Digest))
	if ev.Quoted {
		ev.Message += ", quoted by its TPM"
	}
	ci := status.Printable(strings.TrimSpace(rep.CloudInit))
	if len(ci) > 1000 {
		ci = ci[:1000] + "…"
	}
	switch {
	case ci == "done":
		ev.CloudInit = ci
		ev.Message += ", cloud-init done"
	case strings.HasPrefix(ci, "error: "):
		ev.CloudInit, ev.Error = ci, true
		ev.Message += ", cloud-init " + ci
	}
	if err := s.record(ev); err != nil {
		http.Error(w, "status store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.count(AgentOK)
	writeJSON(w, map[string]string{"state": status.StateRunning, "credential": s.reportCredential(n.Site, n.Name, g.Generation, g.ID)})
}

// The headers of a report's TPM quote (base64): the TPMS_ATTEST and its
// TPMT_SIGNATURE, as tpm2_quote writes them (-m, -s).
const (
	HeaderTPMQuote     = "Bootops-Tpm-Quote"
	HeaderTPMSignature = "Bootops-Tpm-Signature"
)

// quoted says why a report does not carry a quote of the install's TPM
// key (key, base64 TPMT_PUBLIC) over its credential and body, "" when
// it does.
func quoted(r *http.Request, key string, body []byte) string {
	q, s := r.Header.Get(HeaderTPMQuote), r.Header.Get(HeaderTPMSignature)
	if q == "" || s == "" {
		return "the install is bound to the node's TPM, and the report carries no TPM quote (the installed OS needs tpm2-tools and /dev/tpmrm0)"
	}
	ak, err1 := base64.StdEncoding.DecodeString(key)
	attest, err2 := base64.StdEncoding.DecodeString(q)
	sig, err3 := base64.StdEncoding.DecodeString(s)
	if err := errors.Join(err1, err2, err3); err != nil {
		return "the report's TPM quote is not base64: " + err.Error()
	}
	if err := tpm.VerifyReport(ak, tpm.ReportNonce(bearer(r), body), attest, sig); err != nil {
		return err.Error()
	}
	return ""
}

// refuseReport refuses a report, on the node's timeline when the sender
// proved it holds the node's credential (n set; within its budget).
func (s *Server) refuseReport(w http.ResponseWriter, r *http.Request, n *plan.Node, code int, why string) {
	s.logger().Warn("report refused", "ip", clientIP(r), "why", why)
	if n != nil {
		s.Events.Record(status.Event{Kind: status.KindReport, Site: n.Site, Node: n.Name, IP: clientIP(r), Error: true, Message: "report refused: " + why})
	}
	s.agentFail(w, code, AgentReportRefused, "report refused: "+why)
}

// machine is what the status store holds of one machine.
func (s *Server) machine(key string) (status.Machine, bool) {
	if s.Status == nil {
		return status.Machine{}, false
	}
	return s.Status.Machine(key)
}

func (s *Server) reportBudget() *status.Budgets {
	s.reportsOnce.Do(func() {
		if s.Reports == nil {
			s.Reports = &status.Budgets{Burst: DefaultReportBurst, Every: DefaultReportEvery, Now: s.Now}
		}
	})
	return s.Reports
}

// isDigest: 64 lower-case hex digits.
func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func cleanAll(in []string) []string {
	var out []string
	for _, a := range in {
		if c := clean(a, 64); c != "" && len(out) < 16 {
			out = append(out, c)
		}
	}
	return out
}
