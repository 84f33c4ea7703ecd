package spec

import (
	"slices"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/power"
	"github.com/bootops/bootops/swarm"
)

// Responses many operations share.
var (
	noPlan      = fail(503, "No plan is loaded yet (the daemon has not compiled a revision): try again.")
	badRequest  = fail(400, "The request is malformed: the message says what is wrong.")
	tooLarge    = fail(413, "The body is over the route's limit.")
	storeDown   = fail(503, "The status or session store could not write: nothing was acknowledged.")
	needUIToken = fail(401, "The operator token is missing or wrong.")
	// reads are the status API's credentials: an operator's token, the
	// dashboard's cookie or an operator's certificate; none only with
	// serve --open-reads.
	reads    = []string{"", "operatorToken", "operatorCookie", "operatorCertificate"}
	needRead = []resp{fail(401, "No operator credential: reads need the read role (unless serve --open-reads); a hub's view needs its token."),
		fail(403, "The credential is no operator's, or its role is not enough.")}
)

// agentQuery names the machine a session credential is of.
var agentQuery = []param{
	query("site", "The machine's site."),
	query("node", "The node, for a registered machine."),
	query("machine", "The unknown machine's key (mac:…, uuid:…, serial:…), for a machine that is no node."),
}

// powerResps are what every power route answers with (power.Answer).
func powerResps() []resp {
	a := t[power.Answer]()
	return []resp{
		jsonResp(200, "The node's power as its BMC said.", a),
		badRequest,
		jsonResp(404, "No such node, or it has no BMC.", a),
		jsonResp(409, "The node has no BMC.", a),
		jsonResp(502, "The BMC refused or failed.", a),
		jsonResp(503, "Another power action on the node is under way.", a),
		jsonResp(504, "The BMC did not answer within --bmc-timeout.", a),
	}
}

var webhookReply = obj("type", "object", "required", []string{"result"}, "properties", obj(
	"result", enum("accepted", "ignored", "unauthorized", "bad_request", "unavailable"),
	"message", str, "ref", str, "after", str))

// ops is every operation of the API. A route of the servers that is not
// here, or a path here that no route serves, fails TestRoutesDocumented.
var ops = []op{
	// The boot plane: what firmware and iPXE fetch.
	{method: "get", path: "/boot.ipxe", id: "getEntryScript", tag: "boot",
		summary: "The entry iPXE script", desc: "The first script iPXE fetches: it chains to /ipxe with the machine's MAC, UUID, serial, architecture and platform.",
		params: []param{query("site", "The site the DHCP server's boot file named, passed on to /ipxe.")},
		resps:  []resp{text(200, "An iPXE script.")}},
	{method: "get", path: "/ipxe", id: "getMachineScript", tag: "boot",
		summary: "The machine's iPXE script",
		desc:    "What plan.Decide says for the machine these identifiers name (bootops explain shows the same decision): the Micro-OS script with a one-use boot token, a local-disk script for a provisioned node, or a refusal.",
		params: []param{query("mac", "The booting NIC's MAC."), query("uuid", "The SMBIOS UUID."), query("serial", "The SMBIOS serial."),
			query("arch", "iPXE's buildarch."), query("platform", "iPXE's platform (pcbios, efi)."), query("site", "The site, when the DHCP server named one.")},
		resps: []resp{text(200, "An iPXE script."),
			fail(429, "The machine is new to the server and its address is past its budget (--new-machines-burst).").with("Retry-After", "Seconds to wait."),
			text(503, "No plan loaded yet: an iPXE script that says so.")}},
	{method: "get", path: "/artifacts/microos/{name}/{file}", id: "getMicroOSFile", tag: "boot",
		summary: "A Micro-OS file", desc: "The kernel, initrd or UKI of a Micro-OS, from the artifact cache (Range and If-None-Match are answered), or a redirect to its URL (--artifact-mode redirect).",
		params: []param{pathP("name", "The Micro-OS's name."), {in: "path", name: "file", desc: "Which file.", required: true, schema: enum("kernel", "initrd", "uki")},
			query("mac", "The asking machine's MAC, for its timeline.")},
		resps: []resp{{code: 200, desc: "The file.", bodies: []content{{"application/octet-stream", nil}, {"application/efi", nil}}},
			{code: 206, desc: "A range of the file.", bodies: []content{{"application/octet-stream", nil}, {"application/efi", nil}}},
			noBody(302, "The file is at its URL (Location)."), noBody(304, "Not modified (If-None-Match)."),
			fail(404, "No such Micro-OS or file."), fail(416, "The range is outside the file."),
			fail(500, "The cached file could not be read."), fail(502, "The file could not be fetched or did not match its digest."),
			fail(503, "The server has no artifact store.")}},
	{method: "get", path: "/artifacts/overlay/{site}", id: "getOverlay", tag: "boot",
		summary: "A site's signed overlay", desc: "The overlay the Micro-OS of a TLS site unpacks: the site's CA and settings, signed.",
		params: []param{pathP("site", "The site.")},
		resps:  []resp{ok("The overlay.", "application/octet-stream", nil), fail(503, "No overlay for the site.")}},
	{method: "get", path: "/media/{site}/{file}", id: "getSiteMedium", tag: "boot",
		summary: "A site's boot medium", desc: "Built from the Plan served, the site's Micro-OS and CA, nothing secret (docs/edge.md): boot.efi is what a firmware's HTTPS boot URL names, media.iso what a BMC inserts as virtual media, media.img the USB image. Ranges are served.",
		params: []param{pathP("site", "The site."), {in: "path", name: "file", desc: "Which medium.", required: true, schema: enum("boot.efi", "media.iso", "media.img")}},
		resps: []resp{{code: 200, desc: "The medium.", bodies: []content{{"application/efi", nil}, {"application/vnd.efi-iso", nil}, {"application/vnd.efi-img", nil}}},
			fail(404, "No such site or medium."), fail(503, "No plan yet, no site CA, or the Micro-OS's files cannot be had.")}},
	{method: "get", path: "/media/{site}/nodes/{node}/{file}", id: "getNodeMedium", tag: "boot",
		summary: "A node's boot medium", desc: "As the site's, with the node's static network from Git.",
		params: []param{pathP("site", "The site."), pathP("node", "The node."), {in: "path", name: "file", desc: "Which medium.", required: true, schema: enum("boot.efi", "media.iso", "media.img")}},
		resps: []resp{{code: 200, desc: "The medium.", bodies: []content{{"application/efi", nil}, {"application/vnd.efi-iso", nil}, {"application/vnd.efi-img", nil}}},
			fail(404, "No such site, node or medium."), fail(503, "No plan yet, no site CA, or the Micro-OS's files cannot be had.")}},
	{method: "get", path: "/tftp/{file}", id: "getIPXEBinary", tag: "boot",
		summary: "An iPXE build over HTTP", desc: "What UEFI HTTP boot loads: the same iPXE builds the TFTP server serves.",
		params: []param{pathP("file", "The build's name (ipxe.efi, snponly.efi, …).")},
		resps: []resp{ok("The binary.", "application/efi", nil), {code: 206, desc: "A range of it.", bodies: []content{{"application/efi", nil}}},
			noBody(304, "Not modified."), fail(404, "No such build."), fail(416, "The range is outside the file.")}},

	// The agent's API (the Micro-OS and the installed OS).
	{method: "post", path: plan.AgentCheckInPath, id: "agentCheckIn", tag: "agent",
		summary: "The agent checks in", desc: "The Micro-OS's agent says who the machine is; the answer is its workflow, cloud-init seed and session credential, or why it waits. The boot token is spent by it. Over TLS a machine may check in by its identity alone, with no credential. A check-in that carries a TPM identity and no proof is answered with a challenge only (the token is not spent); the same check-in with the proof gets the answer.",
		security: []string{"agentBoot", "agentSession", ""},
		body:     jsonBody(t[plan.CheckIn]()),
		resps: []resp{jsonResp(200, "What the machine is to do.", t[plan.CheckInReply]()), badRequest,
			fail(401, "The credential is missing, wrong, expired or already used, or names no node."),
			fail(404, "No such site is served here."), fail(409, "The machine is not the node it claims to be (its identifiers, or its TPM), or the node is already provisioned."),
			fail(410, "The TPM challenge the proof answers is unknown, spent or expired: check in again."),
			tooLarge, fail(429, "A machine new to the server, past its address's budget, or too many TPM challenges waiting."), storeDown}},
	{method: "post", path: plan.AgentEventsPath, id: "agentEvents", tag: "agent",
		summary: "The agent reports events", desc: "A batch of the workflow's events (at most 500); the answer says up to which sequence number they are stored durably.",
		security: []string{"agentSession"},
		body:     jsonBody(t[plan.EventBatch]()),
		resps: []resp{jsonResp(200, "The events are stored.", t[plan.EventAck]()), badRequest,
			fail(401, "The session credential is missing, wrong, expired or superseded (a boot token is not one)."),
			fail(409, "The events are out of the workflow's order."), tooLarge, storeDown}},
	{method: "post", path: plan.ReportPath, id: "osReport", tag: "agent",
		summary: "The installed OS reports", desc: "Each boot of the installed OS says that the install bootops recorded for the node runs: the node becomes running. A report never says what the disk holds (only the install path does); its credential is of one install of the node, and each accepted report is answered with it renewed.",
		security: []string{"reportToken"},
		params: []param{
			header("Bootops-Tpm-Quote", "Required when the node's install was opened by a check-in that proved its TPM: base64 of the TPMS_ATTEST of a quote by that check-in's attestation key (tpm2_quote -m), whose qualifying data is sha256(\"bootops report v1\\0\" + credential + \"\\0\" + sha256(body))."),
			header("Bootops-Tpm-Signature", "With Bootops-Tpm-Quote: base64 of its TPMT_SIGNATURE (tpm2_quote -s)."),
		},
		body: jsonBody(t[plan.OSReport]()),
		resps: []resp{jsonResp(200, "The node is running; credential is the report credential renewed (keep it for the next report).",
			obj("type", "object", "required", []string{"state"}, "properties", obj("state", enum("running"), "credential", obj("type", "string")))),
			badRequest, fail(401, "The credential is missing or wrong, or names no node; or the node's install is bound to its TPM and the report's quote is missing or not by that TPM's key over this credential and body."),
			fail(403, "Sent over plain HTTP to a site with TLS."),
			fail(409, "The credential or instance-id is of another generation or another install of the node, the node has no finished install, or the report claims an install digest bootops did not record."),
			tooLarge, fail(429, "The node is over its report budget: not recorded.").with("Retry-After", "Seconds to wait."), noPlan}},
	{method: "get", path: plan.AgentSwarmPath + "{image}/manifest", id: "getSwarmManifest", tag: "agent",
		summary: "An image's swarm manifest", desc: "The chunks of the image a machine's image-to-disk action installs, for fetching it with its peers (imageDelivery: peers). 503 with Retry-After while the server prepares the image.",
		security: []string{"agentSession"},
		params:   append([]param{pathP("image", "The image's sha256.")}, agentQuery...),
		resps: []resp{jsonResp(200, "The manifest.", t[swarm.Manifest]()), fail(401, "The session credential is missing, wrong or superseded."),
			fail(404, "The site shares no images, or the machine's workflow has no such image."),
			fail(502, "The image could not be fetched."), fail(503, "The image is being prepared, or no plan is loaded.").with("Retry-After", "Seconds to wait.")}},
	{method: "post", path: plan.AgentSwarmPath + "{image}", id: "swarmReport", tag: "agent",
		summary: "A machine's report to its image's swarm", desc: "What chunks the machine has, fetched and lost; the answer is its next transfers.",
		security: []string{"agentSession"},
		params:   append([]param{pathP("image", "The image's sha256.")}, agentQuery...),
		body:     jsonBody(t[swarm.Report]()),
		resps: []resp{jsonResp(200, "The machine's next transfers.", t[swarm.Reply]()), badRequest,
			fail(401, "The session credential is missing, wrong or superseded."),
			fail(404, "The site shares no images, or the machine's workflow has no such image."),
			fail(409, "The image is not prepared: ask for its manifest first."), tooLarge, noPlan}},
	{method: "get", path: "/swarm/{source}/chunk/{i}", id: "getSwarmChunk", tag: "agent",
		summary: "A chunk of an image", desc: "The server's copy of a chunk, for the bearers of the swarm's key (Reply.key).",
		security: []string{"swarmKey"},
		params:   []param{pathP("source", "The image's source (Manifest.source)."), {in: "path", name: "i", desc: "The chunk's index.", required: true, schema: obj("type", "integer", "minimum", 0)}},
		resps: []resp{ok("The chunk's bytes.", "application/octet-stream", nil), fail(401, "Not a member of this swarm."),
			fail(404, "No such image or chunk."), fail(500, "The image's file could not be read.")}},
	{method: "get", path: plan.QAStreamPath, id: "getQAStream", tag: "agent",
		summary: "Bytes for the network test", desc: "qa-network's download: bytes zeros, at most plan.MaxQAStream.",
		security: []string{"agentSession"},
		params:   append([]param{queryS("bytes", "How many bytes.", obj("type", "integer", "minimum", 1, "maximum", plan.MaxQAStream))}, agentQuery...),
		resps: []resp{ok("Zeros.", "application/octet-stream", nil), fail(400, "bytes is not a count from 1 to the maximum."),
			fail(401, "The session credential is missing, wrong or superseded.")}},

	// The status API.
	{method: "get", path: "/api/v1/status", id: "getStatus", tag: "status", hub: true,
		summary: "Where every machine stands",
		desc:    "The source revision served, every registered node (seen or not) and every machine seen that is no node; a hub adds its sites. bootops status reads it.",
		params: []param{queryS("nodes", "0: the source and plan only (what a script waiting for a revision polls).", enum("0", "1")),
			queryS("inventory", "1: each machine's hardware inventory too (a few kB each).", enum("0", "1")),
			query("site", "A hub only: one site's machines, rollouts and row.")},
		security: reads,
		resps:    append([]resp{jsonResp(200, "The status document.", t[bhttp.StatusDoc]())}, needRead...)},
	{method: "post", path: "/api/v1/login", id: "login", tag: "dashboard",
		summary: "Keep an operator token for the dashboard", desc: "The dashboard presents the operator's token once; the answer keeps it in an HttpOnly, SameSite=Strict cookie that its reads (GET) present.",
		security: []string{"operatorToken"},
		resps:    []resp{{code: 204, desc: "The cookie is set.", headers: map[string]string{"Set-Cookie": "bootops-token=…; HttpOnly; SameSite=Strict"}}, needRead[0], needRead[1]}},
	{method: "get", path: "/api/v1/events", id: "getEvents", tag: "status", hub: true,
		summary: "A machine's timeline", desc: "One machine's events, oldest first, by key, or by site and node.",
		params:   []param{query("key", "The machine's key: site/node, or an unknown machine's (mac:…)."), query("site", "The node's site (with node)."), query("node", "The node (with site).")},
		security: reads,
		resps:    append([]resp{jsonResp(200, "The events.", t[[]status.Event]())}, needRead...)},
	{method: "get", path: "/api/v1/report", id: "getDeliveryRecord", tag: "status",
		summary: "The delivery record", desc: "Each node's installation as delivered: its identity, the image and install, the QA results, when it was provisioned and ran.",
		params: []param{query("site", "Only this site's nodes."), queryS("since", "Only installs after this time (RFC 3339).", obj("type", "string", "format", "date-time")),
			queryS("format", "csv: the same as a spreadsheet (the dashboard's download).", enum("json", "csv"))},
		security: reads,
		resps: append([]resp{{code: 200, desc: "The records.", bodies: []content{{"application/json", t[[]bhttp.DeliveryRecord]()}, {"text/csv", str}}},
			fail(400, "since is not an RFC 3339 time.")}, needRead...)},
	{method: "get", path: "/api/v1/stream", id: "getStream", tag: "status", hub: true,
		summary: "The fleet, live (server-sent events)", desc: "The dashboard's stream: a snapshot of the fleet, then its changes; with key, that machine's timeline too.",
		params:   []param{query("key", "A machine whose timeline to follow.")},
		security: reads,
		resps: append([]resp{ok("An event stream.", "text/event-stream", str), fail(400, "key is too long."),
			fail(503, "Too many streams are open.").with("Retry-After", "Seconds to wait.")}, needRead...)},
	{method: "get", path: "/api/v1/power/{site}/{node}", id: "getPower", tag: "power",
		summary: "A node's power state", desc: "As the BMC last said (the read role); with the operate role, asked of the BMC now.",
		security: append(slices.Clone(reads), "uiToken"),
		params:   []param{pathP("site", "The site."), pathP("node", "The node.")},
		resps:    append(powerResps(), needRead...)},
	{method: "post", path: "/api/v1/power/{site}/{node}", id: "setPower", tag: "power",
		summary: "Power a node on, off or cycle it", security: []string{"uiToken", "operatorCertificate"},
		params: []param{pathP("site", "The site."), pathP("node", "The node.")},
		body:   jsonBody(obj("type", "object", "required", []string{"action"}, "properties", obj("action", enum("on", "off", "cycle")))),
		resps:  append(powerResps(), needUIToken)},
	{method: "post", path: "/api/v1/boot-device/{site}/{node}", id: "setBootDevice", tag: "power",
		summary: "Set a node's next boot device", security: []string{"uiToken", "operatorCertificate"},
		params: []param{pathP("site", "The site."), pathP("node", "The node.")},
		body:   jsonBody(obj("type", "object", "required", []string{"device"}, "properties", obj("device", enum("pxe", "disk"), "once", obj("type", "boolean")))),
		resps:  append(powerResps(), needUIToken)},
	{method: "post", path: "/api/v1/media-credentials", id: "mediaCredential", tag: "power",
		summary: "A node's media credential", desc: "Mints a single-use, expiring credential by which a node booting a medium over the Internet proves who it is (docs/edge.md). The medium never holds it: bootops media credential writes it beside a USB image's files.",
		security: []string{"uiToken", "operatorCertificate"},
		body:     jsonBody(t[bhttp.MediaCredentialRequest]()),
		resps: []resp{jsonResp(200, "The credential.", t[bhttp.MediaCredential]()), fail(400, "The body or its ttl is malformed."),
			fail(403, "The credential's role is not operate, or (a hub) the dashboard is read-only."),
			fail(404, "No such node."), fail(503, "No plan is loaded yet."), needUIToken}},
	{method: "get", path: "/api/v1/recovery-keys/{site}/{node}", id: "getRecoveryKeys", tag: "status", hub: true,
		summary:  "A node's recovery key escrows",
		desc:     "The recovery keys of the node's encrypted installs as their agents escrowed them: ciphertext only, armored age to the profile's recipients, newest first (the last two kept). An operator decrypts one with a recipient's identity (bootops recovery-key); no plaintext ever reaches the server. A node never installed encrypted has none: an empty list. The site daemon puts each read that finds escrows on the node's timeline.",
		security: []string{"uiToken", "operatorCertificate"},
		params:   []param{pathP("site", "The site."), pathP("node", "The node.")},
		resps: []resp{jsonResp(200, "The node's escrows (maybe none).", t[bhttp.RecoveryKeys]()),
			fail(401, "No operator credential."), fail(403, "The credential's role is not operate."),
			fail(404, "No such node.")}},
	{method: "post", path: "/api/v1/sync", id: "sync", tag: "gitops",
		summary: "Look at the source now", desc: "What the dashboard's sync button does: the daemon fetches its Git source at once.",
		security: []string{"uiToken", "operatorCertificate"},
		resps: []resp{text(202, "The daemon is fetching the source."), needUIToken,
			fail(403, "The credential's role is not operate, or (a hub) the dashboard is read-only.")}},
	{method: "post", path: "/hooks/git", id: "gitWebhook", tag: "gitops",
		summary: "A Git push webhook", desc: "A forge's push makes the daemon fetch at once. The signature is over the raw body: GitHub's and the generic X-Hub-Signature-256 (HMAC-SHA256), Gitea's and Forgejo's signatures, or GitLab's token. Other methods get 405.",
		security: []string{"githubSignature", "giteaSignature", "forgejoSignature", "gitlabToken"},
		params: []param{header("X-GitHub-Event", "GitHub's event (push, ping)."), header("X-Gitea-Event", "Gitea's event."),
			header("X-Forgejo-Event", "Forgejo's event."), header("X-Gitlab-Event", "GitLab's event.")},
		body: &content{"application/json", obj("description", "The forge's push payload (ref, after).")},
		resps: []resp{jsonResp(200, "Valid, but not a push: ignored.", webhookReply), jsonResp(202, "A push: a reconcile was triggered (or the push was to another ref).", webhookReply),
			jsonResp(400, "The body is not a push payload.", webhookReply), jsonResp(401, "The signature or token is missing or wrong.", webhookReply),
			jsonResp(413, "The body is over the limit.", webhookReply), jsonResp(503, "No webhook secret is configured.", webhookReply)}},

	// Operations.
	{method: "get", path: "/healthz", id: "healthz", tag: "operations", summary: "Liveness", resps: []resp{text(200, "ok")}},
	{method: "get", path: "/readyz", id: "readyz", tag: "operations", summary: "Readiness: a plan is served",
		resps: []resp{text(200, "ok"), text(503, "No plan yet.")}},
	{method: "get", path: "/metrics", id: "metrics", tag: "operations", hub: true, summary: "Prometheus metrics",
		resps: []resp{ok("The metrics in Prometheus' text format.", "text/plain", str)}},
	{method: "get", path: "/api/v1/openapi.json", id: "getOpenAPI", tag: "operations", hub: true, summary: "This document",
		resps: []resp{jsonResp(200, "The OpenAPI document.", obj("type", "object"))}},
	{method: "get", path: "/debug/pprof/", id: "pprofIndex", tag: "operations", summary: "Go's profiles (--pprof-addr only)",
		desc: "Served on --pprof-addr's listener alone, never on the boot plane's.", resps: []resp{ok("The index.", "text/html", str)}},
	{method: "get", path: "/debug/pprof/{profile}", id: "pprofProfile", tag: "operations", summary: "A named profile (--pprof-addr only)",
		params: []param{pathP("profile", "heap, goroutine, allocs, block, mutex, threadcreate, cmdline, symbol."), query("debug", "1: text, not protobuf.")},
		resps: []resp{{code: 200, desc: "The profile: protobuf, or text with debug=1.", bodies: []content{{"application/octet-stream", nil}, {"text/plain", str}}},
			fail(404, "No such profile.")}},
	{method: "get", path: "/debug/pprof/profile", id: "pprofCPU", tag: "operations", summary: "A CPU profile (--pprof-addr only)",
		params: []param{queryS("seconds", "How long to profile (default 30).", obj("type", "integer", "minimum", 1))},
		resps:  []resp{ok("The profile.", "application/octet-stream", nil)}},
	{method: "get", path: "/debug/pprof/trace", id: "pprofTrace", tag: "operations", summary: "An execution trace (--pprof-addr only)",
		params: []param{queryS("seconds", "How long to trace (default 1).", obj("type", "number", "minimum", 0))},
		resps:  []resp{ok("The trace.", "application/octet-stream", nil)}},

	// The dashboard.
	{method: "get", path: "/", id: "dashboard", tag: "dashboard", hub: true, summary: "The dashboard",
		desc:  "On a hub, /?token=… sets the view cookie.",
		resps: []resp{ok("The page.", "text/html", str)}},
	{method: "get", path: "/ui/{file}", id: "dashboardAsset", tag: "dashboard", hub: true, summary: "The dashboard's files",
		params: []param{pathP("file", "The file (style, script).")},
		resps:  []resp{{code: 200, desc: "The file.", bodies: []content{{"*/*", nil}}}, noBody(304, "Not modified."), fail(404, "No such file.")}},
	{method: "get", path: "/favicon.ico", id: "favicon", tag: "dashboard", hub: true, summary: "No icon", resps: []resp{noBody(204, "None.")}},
}
