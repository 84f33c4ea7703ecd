package agentapi

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
def encryption():  # an encrypted root: seal it to this boot's PCRs once, then say how it is sealed
    try:
        st = json.load(open(os.environ.get("BOOTOPS_ENCRYPTION_STATE", "/var/lib/bootops/encryption.json")))
    except (OSError, ValueError):
        return None
    dev, slot = st["device"], str(st["firstBootSlot"])
    pcrs = ",".join(str(p) for p in st["pcrs"])
    rep = {"device": dev, "sealed": False, "pcrs": st["pcrs"]}
    def run(argv, stdin=None):
        p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(" ".join(argv[:3]) + ": " + (p.stderr or p.stdout).strip()[-300:])
        return p.stdout
    try:
        slots = {}
        for line in run(["clevis", "luks", "list", "-d", dev]).splitlines():
            n, _, pin = line.partition(":")
            slots[n.strip()] = pin.replace(" ", "")
        if not any('"pcr_ids":"' + pcrs + '"' in pin for n, pin in slots.items() if n != slot):
            # The first-boot key (sealed in the Micro-OS, to no PCR)
            # opens the container; a new key is sealed to the PCRs of
            # this boot, the installed OS's own.
            key = run(["clevis", "luks", "pass", "-d", dev, "-s", slot])
            run(["clevis", "luks", "bind", "-y", "-d", dev, "-k", "-", "tpm2", json.dumps({"pcr_bank": "sha256", "pcr_ids": pcrs})], key)
            print("bootops: sealed", dev, "to PCRs", pcrs)
        if slot in slots:
            run(["clevis", "luks", "unbind", "-f", "-d", dev, "-s", slot])
            print("bootops: removed the first-boot key of", dev)
        rep["sealed"] = True
    except Exception as e:
        rep["error"] = str(e)[-500:]
        print("bootops: sealing", dev, "failed:", e)
    return rep
sealed = encryption()
result = cloud_init()
body = {"site": site, "node": node, "instanceId": instance_id(), "hostname": socket.gethostname(),
        "kernel": os.uname().release, "addresses": addresses(), "install": install, "cloudInit": result}
if sealed:
    body["encryption"] = sealed
body = json.dumps(body).encode()
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
// node's report budget must not be spent. It is answered with the
// credential renewed (ResultReportRefused counts the refused).
func (s *Server) osReport(w http.ResponseWriter, r *http.Request) {
	ev := status.Event{Kind: status.KindReport, IP: clientIP(r)}
	rep, body, ref := s.readReport(w, r)
	var g boot.Grant
	if ref == nil {
		ev, g, ref = s.checkReport(r, rep, body)
	}
	if ref != nil {
		// What the report said stays off the timeline: only that it was refused.
		s.refuse(w, status.Event{Kind: status.KindReport, Site: ev.Site, Node: ev.Node, IP: ev.IP}, ref)
		return
	}
	if ev.Quoted {
		ev.Message += ", quoted by its TPM"
	}
	cloudInit(&ev, rep.CloudInit)
	encryption(&ev, rep.Encryption)
	if err := s.Store.RecordSync(ev); err != nil {
		s.refuse(w, ev, unavailable("status store: "+err.Error()))
		return
	}
	s.count(ResultOK)
	writeJSON(w, map[string]string{"state": status.StateRunning, "credential": s.reportCredential(ev.Site, ev.Node, g.Generation, g.ID)})
}

// readReport reads a report: its credential's shape first (before the
// body is read), then its body, bounded and decoded.
func (s *Server) readReport(w http.ResponseWriter, r *http.Request) (plan.OSReport, []byte, *refusal) {
	var rep plan.OSReport
	if err := boot.Peek(bearer(r), s.now(), boot.KindReport); err != nil {
		why := credentialError(err)
		ref := reportRefused(http.StatusUnauthorized, "wrong or missing credential (from "+clientIP(r)+"): "+why, false)
		ref.why = why
		return rep, nil, ref
	}
	body, code, err := readBody(w, r, maxReportBody)
	if err == nil {
		code, err = http.StatusBadRequest, json.Unmarshal(body, &rep)
	}
	if err != nil {
		return rep, nil, badRequest(code, "report: "+err.Error())
	}
	return rep, body, nil
}

// checkReport checks a report against the node it names and what bootops
// recorded of it; it returns the node's running event (its install as
// recorded) and the credential's grant.
func (s *Server) checkReport(r *http.Request, rep plan.OSReport, body []byte) (status.Event, boot.Grant, *refusal) {
	ev := status.Event{Kind: status.KindReport, IP: clientIP(r)}
	p := s.Plans.Current()
	if p == nil {
		return ev, boot.Grant{}, unavailable("no plan loaded yet")
	}
	n := p.Node(rep.Site, rep.Node)
	if n == nil {
		return ev, boot.Grant{}, reportRefused(http.StatusUnauthorized, fmt.Sprintf("no node %q on site %q", rep.Node, rep.Site), false)
	}
	g, err := s.Secret.Verify(bearer(r), boot.KindReport, n.Site, n.Name, s.now())
	if err != nil {
		// Not the node's: nothing on its timeline (anyone can name it).
		return ev, g, reportRefused(http.StatusUnauthorized, "wrong or missing credential (from "+ev.IP+"): "+credentialError(err), false)
	}
	// From here the sender holds the node's credential: what it sends is
	// spent from the node's budget, refused or not, and on its timeline.
	ev.Site, ev.Node = n.Site, n.Name
	if !s.reportBudget().Allow(n.Site+"/"+n.Name, 1) {
		return ev, g, throttled("300", fmt.Sprintf("report: node %s is over its report budget (%d at once, then one per %s); not recorded", n.Name, DefaultReportBurst, DefaultReportEvery))
	}
	if site := p.Site(n.Site); site != nil && site.TLS() && r.TLS == nil {
		return ev, g, reportRefused(http.StatusForbidden, "sent over plain HTTP: site "+n.Site+" has TLS, and its report credential crosses the LAN only inside it", true)
	}
	ref := s.proveInstall(&ev, n, g, rep, r, body)
	return ev, g, ref
}

// proveInstall checks that a report, with the node's credential, speaks
// of the install bootops recorded, of the node's generation, and, for an
// install whose check-in proved a TPM, carries a quote by that TPM's key.
// It fills the running event in (its message says what runs).
func (s *Server) proveInstall(ev *status.Event, n *plan.Node, g boot.Grant, rep plan.OSReport, r *http.Request, body []byte) *refusal {
	m, _ := s.Store.Machine(n.Site + "/" + n.Name)
	ev.State, ev.Generation, ev.InstallID = status.StateRunning, g.Generation, g.ID
	ev.Hostname, ev.Kernel = boot.Clean(rep.Hostname, 253), boot.Clean(rep.Kernel, 128)
	if isDigest(rep.Install) {
		ev.Install = &plan.Install{Digest: rep.Install}
	}
	switch {
	case g.Generation != n.Reprovision:
		return reportRefused(http.StatusConflict, fmt.Sprintf("the credential is of generation %d; node %s is at %d: a machine installed before the reprovision", g.Generation, n.Name, n.Reprovision), true)
	case rep.InstanceID != fmt.Sprintf("%s-%d", n.Name, n.Reprovision):
		return reportRefused(http.StatusConflict, fmt.Sprintf("instance-id %q, want %s-%d: this is not the seed bootops wrote", boot.Clean(rep.InstanceID, 64), n.Name, n.Reprovision), true)
	}
	// An install whose check-in proved a TPM: the report's quote by that
	// TPM's key is checked once the report names the install.
	ev.Quoted = m.ReportKey != ""
	if why := m.Proves(*ev); why != "" {
		return reportRefused(http.StatusConflict, why+": a report says only that the install bootops recorded booted; it changes nothing else", true)
	}
	if ev.Quoted {
		if why := quoted(r, m.ReportKey, body); why != "" {
			return reportRefused(http.StatusUnauthorized, why+": a credential without the TPM that installed the node proves nothing", true)
		}
	}
	ev.Message = fmt.Sprintf("running: hostname %s, kernel %s, addresses %s (instance-id %s), install %s", ev.Hostname, ev.Kernel,
		strings.Join(cleanAll(rep.Addresses), " "), rep.InstanceID, plan.Short(m.Installed.Digest))
	return nil
}

// cloudInit puts cloud-init's result, as the report says it, on the event.
func cloudInit(ev *status.Event, said string) {
	ci := status.Printable(strings.TrimSpace(said))
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
}

// encryption puts the installed OS's word on its encrypted root, as the
// report says it, on the event: the OS's word only (the server cannot
// see a seal), kept on the node's record (status.Machine.Seal) when the
// report proves the recorded install.
func encryption(ev *status.Event, said *plan.EncryptionReport) {
	r := cleanEncryption(said)
	if r == nil {
		return
	}
	ev.Encryption = r
	switch {
	case r.Error != "":
		ev.Error = true
		ev.Message += ", root encrypted, seal failed: " + r.Error
	case r.Sealed:
		ev.Message += ", root encrypted and sealed to PCRs " + pcrs(r.PCRs)
	default:
		ev.Message += ", root encrypted, not sealed to PCRs yet"
	}
}

func pcrs(ps []int) string {
	if len(ps) == 0 {
		return "(none named)"
	}
	return strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ps)), ","), "[]")
}

// reportRefused refuses a report, on the node's timeline when onTimeline
// (the sender proved it holds the node's credential, within its budget),
// and in the log.
func reportRefused(code int, why string, onTimeline bool) *refusal {
	f := &refusal{status: code, result: ResultReportRefused, reason: "report refused: " + why, warn: "report refused", why: why}
	if onTimeline {
		f.note = "report refused: " + why
	}
	return f
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

func (s *Server) reportBudget() *status.Budgets {
	s.reportsOnce.Do(func() {
		if s.Limits.Reports == nil {
			s.Limits.Reports = &status.Budgets{Burst: DefaultReportBurst, Every: DefaultReportEvery, Now: s.Now}
		}
	})
	return s.Limits.Reports
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
		if c := boot.Clean(a, 64); c != "" && len(out) < 16 {
			out = append(out, c)
		}
	}
	return out
}
