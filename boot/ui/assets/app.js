// bootops dashboard: one EventSource (GET /api/v1/stream) brings a snapshot
// of the fleet, then only the machines that changed; a node's page adds its
// timeline (?key=). No polling, no framework, no CDN.
"use strict";

const STATES = ["registered", "discovered", "booting", "microos", "commissioning", "provisioning", "provisioned", "running", "failed", "mismatch", "held", "retired"];
const ACTIVE = new Set(["booting", "microos", "commissioning", "provisioning"]);
const FIRST_SCREEN = 60; // rows: more than a wall screen shows
const $ = (sel) => document.querySelector(sel);

// What the page knows, and hooks a browser test reads.
const machines = new Map(); // key → machine
const rows = new Map(); // key → {tr (the row), cells}
let source = null, plan = "", actions = false, cluster = null;
let sortBy = { col: "node", dir: 1 };
let es = null, route = null, layoutQueued = false;
let order = []; // the row keys, as they are in the table
let lastStepped = null; // on a node's page: its newest event that named a step
const probe = (window.bootops = { snapshots: 0, updates: 0, changedAt: {}, painted: null, timelineEvents: 0 });

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}

function isNode(m) { return !!m.node; }
function label(m) { return m.node || m.mac || m.serial || m.uuid || m.key; }
function firstLine(s) { return (s || "").split("\n")[0]; }

function fmtBytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function fmtDuration(ms) {
  let s = Math.max(0, Math.round(ms / 1000));
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(s).padStart(2, "0")}s` : `${s}s`;
}

// progress is the share of the workflow done (0..1) and its words, from
// the machine's newest event (or the given one: a node's page knows the
// newest event that named a step, when the newest is a plain log line).
function progress(m, stepped) {
  const l = (m.last && m.last.steps) || !stepped ? m.last || {} : stepped;
  if (m.state === "provisioned" || m.state === "running") return { f: 1, text: "done", cls: "done" };
  if (!l.steps) return { f: 0, text: m.state === "microos" ? "checked in" : "", cls: "" };
  const part = l.total > 0 ? Math.min(1, (l.bytes || 0) / l.total) : 0;
  const f = m.state === "failed" ? (l.step - 1) / l.steps : Math.min(1, (l.step - 1 + part) / l.steps);
  let text = `${l.step}/${l.steps} ${l.action || ""}`;
  if (l.total > 0) text += ` ${fmtBytes(l.bytes || 0)} / ${fmtBytes(l.total)}`;
  else if (l.bytes > 0) text += ` ${fmtBytes(l.bytes)}`;
  return { f, text, cls: m.state === "failed" ? "failed" : "" };
}

function elapsedMs(m) {
  if (!ACTIVE.has(m.state) || !m.since) return -1;
  return Date.now() - Date.parse(m.since);
}

// ---- the fleet table -------------------------------------------------------

// A row is cloned from one built once: 1,000 rows in a few milliseconds.
let rowTemplate = null;
function makeRow(key) {
  if (!rowTemplate) {
    const bar = el("div", { class: "bar" }, el("i", {}), el("span", {}));
    rowTemplate = el("div", { class: "row", role: "row" }, el("div", {}, el("a", {})), el("div", {}),
      el("div", {}, el("span", { class: "state" }), el("span", { class: "power" }), el("span", { class: "sync" })), el("div", {}, bar, el("small", { class: "from" })), el("div", {}), el("div", { class: "msg" }));
  }
  const tr = rowTemplate.cloneNode(true);
  tr.dataset.key = key;
  const [node, site, state, prog, elapsed, message] = tr.children;
  const bar = prog.firstChild;
  return { tr, cells: { node, site, state, progress: prog, elapsed, message }, link: node.firstChild, state: state.firstChild, power: state.children[1], sync: state.lastChild, bar, fill: bar.firstChild, ptext: bar.lastChild, from: prog.lastChild };
}

function fillRow(r, m) {
  r.link.textContent = label(m);
  r.link.href = "#node/" + encodeURIComponent(m.key);
  r.cells.site.textContent = m.site || "";
  r.state.textContent = m.state;
  r.state.className = "state s-" + m.state;
  // The BMC's word on the machine's power, when it has a BMC.
  r.power.textContent = m.power ? "⏻ " + m.power : "";
  r.power.className = "power p-" + (m.power || "none");
  r.power.title = m.powerError || "";
  // Whether it runs what Git says (once it was installed).
  const stale = (m.sync || "").startsWith("out of date");
  r.sync.textContent = stale ? "out of date" : m.sync === "in sync" ? "in sync" : "";
  r.sync.className = "sync" + (stale ? " stale" : "");
  r.sync.title = m.sync || "";
  const p = progress(m);
  r.bar.className = "bar " + p.cls;
  r.fill.style.width = (p.f * 100).toFixed(1) + "%";
  r.ptext.textContent = p.text;
  // Where its image came from, when it fetched it with its peers.
  r.from.textContent = imageFrom(m);
  const e = elapsedMs(m);
  r.cells.elapsed.textContent = e < 0 ? "" : fmtDuration(e);
  const msg = firstLine(m.last && m.last.message);
  r.cells.message.textContent = msg;
  r.cells.message.title = msg;
}

function sortKey(m, col) {
  switch (col) {
    case "node": return label(m);
    case "site": return (m.site || "") + "/" + label(m);
    case "state": return STATES.indexOf(m.state);
    case "progress": return progress(m).f;
    case "elapsed": return elapsedMs(m);
    case "message": return firstLine(m.last && m.last.message);
  }
  return "";
}

// filter is what the controls ask for, read once per layout.
function filter() {
  const q = $("#filter").value.trim().toLowerCase();
  return { state: $("#state-filter").value, site: $("#site-filter").value, words: q ? q.split(/\s+/) : [] };
}

function matches(m, f) {
  if (f.state && m.state !== f.state) return false;
  if (f.site && m.site !== f.site) return false;
  if (!f.words.length) return true;
  const hay = [m.node, m.site, profileText(m), m.state, m.mac, m.uuid, m.serial, m.boot, m.hostname, m.power, m.sync, m.hardware, m.last && m.last.message].join(" ").toLowerCase();
  return f.words.every((w) => hay.includes(w));
}

// layout puts the rows in order and hides the filtered ones: at most once
// a frame, however many updates arrive.
function queueLayout() {
  if (layoutQueued) return;
  layoutQueued = true;
  requestAnimationFrame(() => layout()); // not layout itself: it would take the frame time as its cap
}

// layout puts the first cap rows (all by default) in the table.
function layout(cap = Infinity) {
  layoutQueued = false;
  const nodes = [...machines.values()].filter(isNode);
  const { col, dir } = sortBy;
  const keyed = nodes.map((m) => [sortKey(m, col), label(m), m]);
  keyed.sort((a, b) => (a[0] < b[0] ? -dir : a[0] > b[0] ? dir : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  const body = $("#rows");
  let shown = 0, same = order.length === keyed.length;
  const f = filter();
  const next = [];
  for (const [, , m] of keyed) {
    const show = matches(m, f);
    if (show) shown++;
    if (next.length >= cap) { same = false; continue; }
    let r = rows.get(m.key);
    if (!r) { r = makeRow(m.key); rows.set(m.key, r); fillRow(r, m); }
    if (r.tr.hidden === show) r.tr.hidden = !show;
    if (same && order[next.length] !== m.key) same = false;
    next.push(m.key);
  }
  // Rows move only when the order changed: an update that moves nothing
  // costs the browser no layout of the whole table.
  if (!same) {
    const frag = document.createDocumentFragment();
    for (const k of next) frag.append(rows.get(k).tr);
    body.replaceChildren(frag);
    order = next;
  }
  $("#shown").textContent = `${shown} of ${nodes.length} nodes`;
  renderSites(nodes);
  renderOthers();
}

function renderSites(nodes) {
  const bySite = new Map();
  for (const m of nodes) {
    const s = bySite.get(m.site) || new Map();
    s.set(m.state, (s.get(m.state) || 0) + 1);
    bySite.set(m.site, s);
  }
  const box = $("#sites");
  const frag = document.createDocumentFragment();
  const siteSel = $("#site-filter");
  for (const site of [...bySite.keys()].sort()) {
    const counts = bySite.get(site);
    let total = 0;
    const chips = el("div", { class: "chips" });
    for (const st of STATES) {
      const n = counts.get(st);
      if (!n) continue;
      total += n;
      const c = el("span", { class: "chip s-" + st, text: `${st} ${n}`, "data-state": st, "data-site": site });
      c.onclick = () => { $("#state-filter").value = st; $("#site-filter").value = site; queueLayout(); };
      chips.append(c);
    }
    frag.append(el("div", { class: "site", "data-site": site }, el("h3", { text: `${site} · ${total} nodes${heard(site)}` }), chips));
    if (![...siteSel.options].some((o) => o.value === site)) siteSel.append(el("option", { value: site, text: site }));
  }
  box.replaceChildren(frag);
}

// heard says, on a hub, when a site was last heard from: a site whose
// uplink is down shows how long ago.
function heard(site) {
  const list = source && source.hub && source.sites;
  if (!list) return "";
  const s = list.find((x) => x.name === site);
  if (!s || !s.lastHeard) return " · never heard";
  const ago = Date.now() - Date.parse(s.lastHeard);
  if (ago < 30000) return "";
  return ` · last heard ${fmtDuration(ago)} ago` + (s.pending ? `, ${s.pending} events unsent` : "");
}

function renderOthers() {
  const unknown = [...machines.values()].filter((m) => !isNode(m));
  const ul = $("#unknown-list");
  ul.replaceChildren(...unknown.map((m) => {
    const pre = el("pre", { text: m.nodeYAML || "" });
    const copy = el("button", { text: "Copy Node YAML" });
    copy.onclick = () => navigator.clipboard && navigator.clipboard.writeText(m.nodeYAML || "");
    return el("div", { class: "card", "data-key": m.key },
      el("div", {}, el("a", { href: "#node/" + encodeURIComponent(m.key), text: m.key }), " ",
        el("span", { class: "state s-" + m.state, text: m.state }), " ",
        el("span", { class: "muted", text: firstLine(m.last && m.last.message) })),
      pre, copy);
  }));
  $("#unknown").hidden = unknown.length === 0;
  $("#unknown-count").textContent = `(${unknown.length})`;
  const mism = [...machines.values()].filter((m) => m.state === "mismatch");
  $("#mismatch-list").replaceChildren(...mism.map((m) => el("div", { class: "card", "data-key": m.key },
    el("a", { href: "#node/" + encodeURIComponent(m.key), text: label(m) }), " ",
    el("span", { class: "muted", text: m.last && m.last.message }))));
  $("#mismatch").hidden = mism.length === 0;
}

// ---- a site of more than one daemon ------------------------------------------
// One line: the member answering this page, the leader, the majority, who
// answers each site's DHCP, the other members' state.
function renderCluster() {
  const el = $("#cluster");
  if (!cluster) { el.hidden = true; return; }
  const parts = [`member ${cluster.member} of ${cluster.size}`, `leader ${cluster.leader || "none"}`,
    cluster.quorum ? "with a majority" : "NO MAJORITY: refusing check-ins"];
  for (const [role, who] of Object.entries(cluster.roles || {}).sort()) parts.push(`${role}: ${who}`);
  for (const m of cluster.members || []) parts.push(`${m.name} ${m.offline ? "offline" : m.current ? "current" : "behind by " + (m.lag || 0)}`);
  // The revision each member serves: one when they agree.
  const serving = Object.entries(cluster.serving || {}).sort();
  const revs = new Set(serving.map(([, r]) => r));
  const short = (r) => (r.length === 40 ? r.slice(0, 12) : r);
  if (revs.size === 1) parts.push(`serving ${short(serving[0][1])}`);
  if (revs.size > 1) parts.push("NOT THE SAME REVISION: " + serving.map(([n, r]) => `${n} ${short(r)}`).join(", "));
  el.textContent = "cluster: " + parts.join(" · ");
  el.className = cluster.quorum && revs.size <= 1 ? "cluster" : "cluster bad";
  el.hidden = false;
}

// ---- the source --------------------------------------------------------------

function renderSource() {
  const rev = $("#revision"), ban = $("#refused");
  if (source && source.hub) {
    const n = (source.sites || []).length;
    rev.textContent = `hub ${source.hub} · ${n} site${n === 1 ? "" : "s"} (read-only: configuration comes from each site's Git)`;
    ban.hidden = true;
    return;
  }
  if (!source) { rev.textContent = plan ? "plan " + plan.slice(0, 12) : "no plan yet"; ban.hidden = true; return; }
  const a = source.applied || {};
  const when = a.at ? new Date(a.at).toLocaleString() : "";
  rev.textContent = a.revision ? `serving ${a.revision.slice(0, 12)} ${a.message ? "“" + firstLine(a.message) + "”" : ""} · applied ${when}` : "no revision served yet";
  rev.title = source.url || "";
  const t = source.attempted || {};
  if (t.result === "refused" && t.errors && t.errors.length) {
    // The reason names the first error: say it once, then all of them.
    const n = t.errorCount || t.errors.length;
    ban.textContent = `the newest revision ${(t.revision || "").slice(0, 12)} was refused (${n} error${n === 1 ? "" : "s"}); ` +
      `${(a.revision || "").slice(0, 12)} stays in service\n` + t.errors.join("\n") +
      (n > t.errors.length ? `\n… ${n - t.errors.length} more` : "");
    ban.hidden = false;
  } else if (source.stale || t.result === "refused") {
    ban.textContent = source.reason || `the newest revision ${(t.revision || "").slice(0, 12)} was refused`;
    ban.hidden = false;
  } else ban.hidden = true;
}

// profileText is the profile Git gives a node, and its encryption:
// "web · encrypted (LUKS2, TPM PCRs 7)".
function profileText(m) {
  const g = m.git || {};
  return [g.profile, g.encryption].filter(Boolean).join(" · ");
}

// erasedOf is a retired node's erase, disk by disk: name, NIST class, and
// whether samples read back proved it ("" when it has none).
function erasedOf(m) {
  if (!m.erasures || !m.erasures.disks) return "";
  const disks = m.erasures.disks.map(d => d.disk.name + " (" + d.disk.serial + "): " + (d.error ? "NOT ERASED: " + d.error : d.method + ", NIST " + d.class));
  return disks.join("; ") + (m.eraseCertificate ? "; certificate signed" : "");
}

function imageFrom(m) {
  if (!m.image) return "";
  const mb = (n) => (n > 0 && n < 1048576 ? "<1" : Math.floor(n / 1048576)) + " MB";
  return "image: " + mb(m.image.fromServer) + " from the server, " + mb(m.image.fromPeers) + " from peers";
}

// ---- a node's page -------------------------------------------------------------

function renderNode(key) {
  const m = machines.get(key);
  $("#node-title").textContent = m ? label(m) : key;
  const dl = $("#node-summary");
  if (!m) { dl.replaceChildren(el("dt", { text: "state" }), el("dd", { text: "not seen" })); return; }
  const items = [["key", m.key], ["site", m.site], ["profile", profileText(m)], ["state", m.state], ["since", m.since && new Date(m.since).toLocaleString()],
    ["MAC", m.mac], ["UUID", m.uuid], ["serial", m.serial], ["TPM", m.tpm || (m.ek ? "ek " + m.ek : "")], ["boot", m.boot], ["hostname", m.hostname], ["kernel", m.kernel],
    ["power", m.power && (m.power + (m.powerError ? ": " + m.powerError : ""))], ["sync", m.sync], ["hardware", m.hardware], ["encryption", m.encryption], ["held", m.held], ["erased", erasedOf(m)], ["image", imageFrom(m).replace(/^image: /, "")], ["events", m.events]];
  dl.replaceChildren(...items.filter(([, v]) => v !== undefined && v !== "").flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: String(v) })]));
  const p = progress(m, lastStepped);
  const bar = el("div", { class: "bar " + p.cls }, el("i", { style: `width:${(p.f * 100).toFixed(1)}%` }), el("span", { text: p.text }));
  $("#node-progress").replaceChildren(bar);
  const y = $("#node-yaml");
  y.hidden = !m.nodeYAML;
  y.textContent = m.nodeYAML || "";
}

function addTimeline(msg) {
  const body = $("#timeline tbody");
  if (msg.reset) { body.replaceChildren(); lastStepped = null; }
  const frag = document.createDocumentFragment();
  for (const e of msg.events) {
    if (e.steps) lastStepped = e;
    const text = e.message || "";
    frag.append(el("tr", { class: e.error ? "error" : "" },
      el("td", { text: new Date(e.time).toLocaleTimeString() + "." + String(new Date(e.time).getMilliseconds()).padStart(3, "0") }),
      el("td", { text: e.kind }), el("td", { text: e.state || "" }), el("td", { text: text })));
  }
  body.append(frag);
  probe.timelineEvents = body.rows.length;
  if (route && route.node) renderNode(route.node);
  if ($("#follow").checked && msg.events.length) window.scrollTo(0, document.body.scrollHeight);
}

// ---- the stream ------------------------------------------------------------------

function take(list) {
  for (const m of list || []) {
    machines.set(m.key, m);
    probe.changedAt[m.key] = Date.now();
    const r = rows.get(m.key);
    if (r) fillRow(r, m);
  }
}

function connect() {
  if (es) es.close();
  const key = route && route.node;
  es = new EventSource("/api/v1/stream" + (key ? "?key=" + encodeURIComponent(key) : ""));
  es.onopen = () => { $("#live").textContent = "live"; $("#live").className = "live"; };
  es.onerror = () => { $("#live").textContent = "reconnecting"; $("#live").className = "live off"; signIn(); };
  es.addEventListener("snapshot", (ev) => {
    if (probe.snapshotAt === undefined) probe.snapshotAt = performance.now();
    const d = JSON.parse(ev.data);
    machines.clear(); rows.clear(); order = [];
    source = d.source; plan = d.plan; actions = d.actions; cluster = d.cluster || null;
    $("#sync").hidden = !actions;
    take(d.machines);
    probe.snapshots++;
    renderSource();
    renderCluster();
    if (key) renderNode(key);
    else {
      // The counts and the first screen of rows first, the other rows
      // right after that has been painted.
      layout(FIRST_SCREEN);
      if (probe.laidOut === undefined) probe.laidOut = performance.now();
      requestAnimationFrame(() => requestAnimationFrame(() => {
        if (probe.painted === null) {
          probe.painted = performance.now();
          performance.mark("bootops-fleet-painted");
        }
        layout();
        requestAnimationFrame(() => requestAnimationFrame(() => {
          if (probe.complete === undefined) probe.complete = performance.now();
        }));
      }));
    }
  });
  es.addEventListener("update", (ev) => {
    const d = JSON.parse(ev.data);
    plan = d.plan;
    if ("source" in d) source = d.source;
    if ("cluster" in d) cluster = d.cluster;
    take(d.machines);
    for (const k of d.gone || []) { machines.delete(k); const r = rows.get(k); if (r) { r.tr.remove(); rows.delete(k); } }
    probe.updates++;
    renderSource();
    renderCluster();
    if (key) renderNode(key); else queueLayout();
  });
  es.addEventListener("timeline", (ev) => addTimeline(JSON.parse(ev.data)));
}

function onRoute() {
  const h = location.hash.replace(/^#/, "");
  const next = h.startsWith("node/") ? { node: decodeURIComponent(h.slice(5)) } : {};
  const changed = !route || route.node !== next.node;
  route = next;
  $("#fleet").hidden = !!route.node;
  $("#node").hidden = !route.node;
  if (route.node) { $("#timeline tbody").replaceChildren(); lastStepped = null; renderNode(route.node); }
  if (changed) connect();
}

// ---- controls ----------------------------------------------------------------------

for (const st of STATES) $("#state-filter").append(el("option", { value: st, text: st }));
$("#filter").addEventListener("input", queueLayout);
$("#state-filter").addEventListener("change", queueLayout);
$("#site-filter").addEventListener("change", queueLayout);
for (const th of document.querySelectorAll("#nodes .head [data-sort]")) {
  th.addEventListener("click", () => {
    const col = th.dataset.sort;
    sortBy = { col, dir: sortBy.col === col ? -sortBy.dir : 1 };
    for (const o of document.querySelectorAll("#nodes .head [data-sort]")) o.className = o === th ? (sortBy.dir > 0 ? "asc" : "desc") : "";
    queueLayout();
  });
}
// Reads need an operator's token: when the stream is refused, ask for
// one once, present it to POST /api/v1/login (which keeps it in an
// HttpOnly cookie for the page's reads) and connect again.
let signingIn = false;
async function signIn() {
  if (signingIn) return;
  signingIn = true;
  try {
    const probe = await fetch("/api/v1/status?nodes=0");
    if (probe.status !== 401 && probe.status !== 403) return;
    es.close();
    $("#live").textContent = "sign in"; $("#live").className = "live off";
    const token = prompt("Operator token (bootops serve --operators-file, or the state folder's operator-token):");
    if (!token) return;
    const r = await fetch("/api/v1/login", { method: "POST", headers: { Authorization: "Bearer " + token } });
    if (!r.ok) { alert(await r.text()); return; }
    sessionStorage.setItem("bootops-token", token);
    connect();
  } finally {
    signingIn = false;
  }
}
$("#sync").addEventListener("click", async () => {
  let token = sessionStorage.getItem("bootops-token");
  if (!token) token = prompt("Operator token with the operate role:");
  if (!token) return;
  const r = await fetch("/api/v1/sync", { method: "POST", headers: { Authorization: "Bearer " + token } });
  if (r.ok) sessionStorage.setItem("bootops-token", token);
  else { sessionStorage.removeItem("bootops-token"); alert(await r.text()); }
});
// Elapsed times move with the clock, not with the server.
setInterval(() => {
  if (route && route.node) return;
  for (const [k, r] of rows) {
    const m = machines.get(k);
    if (m && ACTIVE.has(m.state) && !r.tr.hidden) r.cells.elapsed.textContent = fmtDuration(elapsedMs(m));
  }
}, 1000);
window.addEventListener("hashchange", onRoute);
onRoute();

// On a hub, "last heard" ages while a site is silent: lay out now and then.
setInterval(() => { if (source && source.hub && !(route && route.node)) queueLayout(); }, 15000);
