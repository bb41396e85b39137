// clusterlab ui: the page. Plain JavaScript, no libraries; the server draws the
// packet's way (the same vertical SVG as `clusterlab trace --svg`).
"use strict";

const $ = (id) => document.getElementById(id);
const state = { view: null, tab: "trace", last: null, timeline: null, shown: 0, selStep: 0 };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}

function status(msg, ok) {
  // A notice (a permalink of another scenario) stays until something else is said.
  $("status").textContent = msg || state.notice || "";
  $("status").className = ok && (msg || !state.notice) ? "ok" : "";
}

async function getJSON(url) {
  const r = await fetch(url);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

// ---- the cluster map ----

function backendsOf(pod) {
  const key = pod.namespace + "/" + pod.name;
  return state.map.services.filter((s) => s.backends.includes(key)).map((s) => s.name);
}

function drawMap(v) {
  state.map = v;
  $("scenario-name").textContent = v.name || v.file || "scenario";
  document.title = "clusterlab ui: " + (v.name || v.file);
  $("description").textContent = v.description || "";
  const nodes = $("nodes");
  nodes.replaceChildren();
  for (const n of v.nodes) {
    const box = el("div", { class: "node", "data-node": n.name },
      el("h3", {}, "node " + n.name + " ", el("small", {}, n.ip + " · pods " + n.pod_cidr + (n.zone ? " · " + n.zone : ""))));
    for (const p of v.pods.filter((p) => p.node === n.name)) {
      const svcs = backendsOf(p);
      const labels = Object.entries(p.labels || {}).filter(([k]) => k !== "pod-template-hash").map(([k, val]) => el("span", { class: "label" }, k + "=" + val));
      const b = el("button", { type: "button", class: "pod" + (svcs.length ? " backend" : ""), "data-pod": p.namespace + "/" + p.name,
        title: "trace from this pod", onclick: () => { $("from").value = "pod:" + p.namespace + "/" + p.name; $("to").focus(); } },
        el("b", {}, p.namespace + "/" + p.name), " ", el("span", { class: "ip" }, p.ip || "no IP"),
        p.terminating ? " (terminating)" : "", el("br"), ...labels,
        svcs.length ? el("span", {}, " backs " + svcs.join(", ")) : null);
      box.append(b);
    }
    nodes.append(box);
  }
  const svcs = $("services");
  svcs.replaceChildren();
  for (const s of userFirst(v.services)) {
    const addrs = [s.cluster_ip && "ClusterIP " + s.cluster_ip, s.external_name && "ExternalName " + s.external_name,
      ...(s.load_balancer_ips || []).map((ip) => "LB " + ip), ...(s.external_ips || []).map((ip) => "external IP " + ip)].filter(Boolean);
    const box = el("div", { class: "svc", "data-service": s.namespace + "/" + s.name },
      el("h3", {}, s.namespace + "/" + s.name + " ", el("small", {}, s.type)),
      el("div", { class: "ip" }, addrs.join(" · ")));
    for (const p of s.ports) {
      box.append(el("div", {}, (p.name ? p.name + " " : "") + p.port + "/" + p.protocol + " → " + p.target_port + (p.node_port ? ", node port " + p.node_port : "")));
    }
    for (const d of destinationsOf(s).slice(0, 4)) {
      box.append(el("button", { type: "button", class: "dest", title: "trace to " + d, onclick: () => { $("to").value = d; trace(); } }, d));
    }
    box.append(el("div", {}, "backends: " + (s.backends.length ? s.backends.map((b) => b.split("/")[1]).join(", ") : "none")));
    box.addEventListener("mouseenter", () => highlight(s.backends));
    box.addEventListener("mouseleave", () => highlight([]));
    svcs.append(box);
  }
  $("externals").replaceChildren(...v.external_hosts.map((h) => el("div", { class: "svc" }, h.name + " ", el("span", { class: "ip" }, h.ip))));
}

// userFirst puts the scenario's own Services before the cluster's (kubernetes, kube-dns).
function userFirst(svcs) {
  const system = (s) => s.namespace === "kube-system" || (s.namespace === "default" && s.name === "kubernetes");
  return [...svcs.filter((s) => !system(s)), ...svcs.filter(system)];
}

function highlight(pods) {
  for (const b of document.querySelectorAll(".pod")) b.classList.toggle("hl", pods.includes(b.dataset.pod));
}

function destinationsOf(s) {
  const out = [];
  const key = s.namespace + "/" + s.name;
  for (const p of s.ports) {
    if (s.cluster_ip || s.external_name) {
      out.push("service:" + key + ":" + p.port);
      out.push(s.name + (s.namespace !== "default" ? "." + s.namespace : "") + ":" + p.port);
    }
    if (p.node_port) for (const n of state.view.nodes) out.push("nodeport:" + key + ":" + p.port + "@" + n.name);
    if ((s.load_balancer_ips || []).length) out.push("loadbalancer:" + key + ":" + p.port);
  }
  return out;
}

function fillControls(v) {
  fillEndpoints(v);
  $("after").replaceChildren(el("option", { value: "0" }, "before the steps"),
    ...v.steps.map((st) => el("option", { value: String(st.index) }, "after step " + st.index + ": " + st.title)));
  $("mode").replaceChildren(...v.modes.map((m) => el("option", { value: m }, m + (m === v.mode ? " (the scenario's)" : ""))));
  $("mode").value = v.mode;
}

// fillEndpoints offers the sources and destinations of the cluster as v shows it,
// keeping the current choices.
function fillEndpoints(v) {
  const keepFrom = $("from").value, keepTo = $("to").value;
  const from = $("from");
  const groups = [["pods", v.pods.filter((p) => p.ip).map((p) => "pod:" + p.namespace + "/" + p.name)],
    ["nodes", v.nodes.map((n) => "node:" + n.name)], ["external hosts", v.external_hosts.map((h) => "external:" + h.name)]];
  from.replaceChildren(...groups.filter(([, xs]) => xs.length).map(([g, xs]) => el("optgroup", { label: g }, ...xs.map((x) => el("option", { value: x }, x)))));
  const client = v.pods.find((p) => p.name === "client");
  if (client) from.value = "pod:" + client.namespace + "/" + client.name;
  const dl = $("destinations");
  const dests = [];
  for (const s of userFirst(v.services)) dests.push(...destinationsOf(s));
  for (const p of v.pods) if (p.ip) dests.push("pod:" + p.namespace + "/" + p.name + ":80");
  dl.replaceChildren(...dests.map((d) => el("option", { value: d })));
  $("to").value = keepTo || dests[0] || "";
  if (keepFrom && [...from.options].some((o) => o.value === keepFrom)) from.value = keepFrom;
}

// changeAfter shows the cluster as it is after the chosen step (the map, the choices).
async function changeAfter() {
  const n = $("after").value;
  try {
    const v = await getJSON("/api/cluster?after_step=" + n);
    drawMap(v);
    fillEndpoints(v);
  } catch (e) {
    status(e.message);
  }
  updateLink();
}

// ---- permalink ----

function query() {
  return { from: $("from").value, to: $("to").value.trim(), mode: $("mode").value, all: $("all").checked, reply: $("reply").checked, after: $("after").value };
}

function permalink() {
  const q = query();
  const p = new URLSearchParams({ scenario: state.view.name || state.view.file, view: state.tab, from: q.from, to: q.to, mode: q.mode });
  if (q.all) p.set("all_branches", "1");
  if (q.reply) p.set("reply", "1");
  if (q.after && q.after !== "0") p.set("after_step", q.after);
  if (state.tab === "timeline") p.set("step", String(state.selStep));
  return "#" + p.toString();
}

function updateLink() {
  const h = permalink();
  $("permalink").href = h;
  history.replaceState(null, "", h);
}

function restore() {
  const p = new URLSearchParams(location.hash.slice(1));
  if (!p.has("scenario")) return null;
  const name = state.view.name || state.view.file;
  if (p.get("scenario") !== name) {
    state.notice = "This link is for the scenario \u201c" + p.get("scenario") + "\u201d; this server has \u201c" + name + "\u201d.";
    status("");
    return null;
  }
  if (p.get("from")) $("from").value = p.get("from");
  if (p.get("to")) $("to").value = p.get("to");
  if (p.get("mode") && state.view.modes.includes(p.get("mode"))) $("mode").value = p.get("mode");
  $("all").checked = p.get("all_branches") === "1";
  const after = p.get("after_step");
  if (after && [...$("after").options].some((o) => o.value === after)) $("after").value = after;
  $("reply").checked = p.get("reply") === "1";
  return { view: p.get("view") || "trace", step: parseInt(p.get("step") || "0", 10) };
}

// ---- tracing ----

function traceURL(q, mode) {
  const p = new URLSearchParams({ from: q.from, to: q.to, mode: mode, format: "page" });
  if (q.all) p.set("all_branches", "true");
  if (q.reply) p.set("reply", "true");
  if (q.after && q.after !== "0") p.set("after_step", q.after);
  return "/api/trace?" + p.toString();
}

function outcomeLine(o) {
  let s = o.result;
  if (o.pod) s += " pod " + o.pod; else if (o.external) s += " external " + o.external; else if (o.node) s += " node " + o.node;
  if (o.addr) s += " at " + o.addr;
  if (o.seen_src) s += " from " + o.seen_src;
  if (o.reason) s += " (" + o.reason + ")";
  return s;
}

function drawSummary(t) {
  const box = $("summary");
  box.replaceChildren(el("b", {}, t.proto + " " + t.from + " → " + t.to + " (" + t.dst + "), kube-proxy " + t.mode + " mode"));
  if (t.outcomes.length > 1) {
    const ul = el("ul", { class: "tree", "aria-label": "every branch with its probability" });
    for (const o of t.outcomes) {
      ul.append(el("li", { "data-probability": o.probability.toFixed(4) }, el("span", { class: "bar", style: "width:" + Math.round(o.probability * 120) + "px" }),
        "p=" + o.probability.toFixed(4) + ": " + outcomeLine(o)));
    }
    box.append(el("div", {}, "every branch (" + t.outcomes.length + " outcomes):"), ul);
  } else if (t.outcomes.length === 1) {
    box.append(el("div", {}, "outcome: " + outcomeLine(t.outcomes[0])));
  }
  if (t.reply) box.append(el("div", {}, "the answer: " + (t.reply.outcome ? outcomeLine(t.reply.outcome) : t.reply.note)));
}

async function trace() {
  const q = query();
  updateLink();
  if (state.tab === "compare") return compare();
  if (!q.from || !q.to) { status("Pick a source and a destination."); return; }
  status("tracing…", true);
  try {
    const page = await getJSON(traceURL(q, q.mode));
    state.last = page;
    $("drawing").innerHTML = ownIDs(page.svg, "trace");
    fitDrawing($("drawing"));
    $("trace-text").textContent = page.text;
    drawSummary(page.trace);
    status("", true);
  } catch (e) {
    status(e.message);
  }
}

// ownIDs gives an inline picture's arrowhead marker an id of its own: pictures share a
// document, and a url(#id) that finds one in a hidden view draws no arrowheads.
let idSeq = 0;
function ownIDs(svg, tag) {
  const id = "head-" + tag.replace(/[^A-Za-z0-9-]/g, "") + "-" + (++idSeq);
  return svg.replaceAll('id="head"', 'id="' + id + '"').replaceAll("url(#head)", "url(#" + id + ")");
}

// fitDrawing scales a one-column picture to the panel's width; wider ones scroll.
function fitDrawing(box) {
  const svg = box.querySelector("svg");
  if (svg && +svg.getAttribute("width") <= 700) { svg.style.maxWidth = "100%"; svg.style.height = "auto"; }
}

async function compare() {
  const q = query();
  const box = $("compare");
  status("tracing under every mode…", true);
  try {
    const pages = await Promise.all(state.view.modes.map((m) => getJSON(traceURL(q, m))));
    box.replaceChildren();
    pages.forEach((page, i) => {
      const t = page.trace;
      const col = el("div", { class: "col", "data-mode": state.view.modes[i] }, el("h3", {}, state.view.modes[i]),
        el("p", {}, t.outcomes.map((o) => (t.outcomes.length > 1 ? "p=" + o.probability.toFixed(2) + " " : "") + outcomeLine(o)).join("; ")));
      const d = el("div", {});
      d.innerHTML = ownIDs(page.svg, state.view.modes[i]);
      col.append(d);
      box.append(col);
    });
    status("", true);
  } catch (e) {
    status(e.message);
  }
}

// ---- export ----

function currentSVG() {
  const root = state.tab === "compare" ? $("compare") : $("drawing");
  const svgs = [...root.querySelectorAll("svg")];
  if (!svgs.length) return null;
  if (svgs.length === 1) return svgs[0].outerHTML;
  // Compare: the columns side by side in one picture.
  let x = 0, h = 0;
  const parts = svgs.map((s) => {
    const w = +s.getAttribute("width"), hh = +s.getAttribute("height");
    const g = '<svg x="' + x + '" y="0" width="' + w + '" height="' + hh + '" viewBox="0 0 ' + w + " " + hh + '">' + s.innerHTML + "</svg>";
    x += w; h = Math.max(h, hh);
    return g;
  });
  return '<svg xmlns="http://www.w3.org/2000/svg" width="' + x + '" height="' + h + '" viewBox="0 0 ' + x + " " + h + '">' + parts.join("") + "</svg>";
}

function download(name, blob) {
  const a = el("a", { href: URL.createObjectURL(blob), download: name });
  document.body.append(a);
  a.click();
  a.remove();
}

function exportName(ext) {
  const q = query();
  return ("clusterlab-" + q.from + "-" + q.to + "-" + (state.tab === "compare" ? "modes" : q.mode)).replace(/[^A-Za-z0-9._-]+/g, "_") + "." + ext;
}

function exportSVG() {
  const s = currentSVG();
  if (!s) { status("Trace a packet first."); return; }
  download(exportName("svg"), new Blob([s], { type: "image/svg+xml" }));
  status("exported " + exportName("svg"), true);
}

function exportPNG() {
  const s = currentSVG();
  if (!s) { status("Trace a packet first."); return; }
  const img = new Image();
  img.onload = () => {
    const c = document.createElement("canvas");
    c.width = img.width; c.height = img.height;
    const ctx = c.getContext("2d");
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, c.width, c.height);
    ctx.drawImage(img, 0, 0);
    c.toBlob((b) => { download(exportName("png"), b); status("exported " + exportName("png"), true); }, "image/png");
  };
  img.onerror = () => status("the picture could not be drawn as PNG");
  img.src = URL.createObjectURL(new Blob([s], { type: "image/svg+xml" }));
}

// ---- tabs ----

const tabs = ["trace", "compare", "timeline", "flows"];

function showTab(name, focus) {
  state.tab = name;
  for (const t of tabs) {
    const b = $("tab-" + t);
    b.setAttribute("aria-selected", String(t === name));
    b.tabIndex = t === name ? 0 : -1;
    $("view-" + t).hidden = t !== name;
  }
  if (focus) $("tab-" + name).focus();
  const exporting = name === "trace" || name === "compare";
  $("export-svg").disabled = $("export-png").disabled = !exporting;
  updateLink();
  if (name === "compare") compare();
  if (name === "timeline") loadTimeline();
}

function tabKeys(e) {
  const i = tabs.indexOf(state.tab);
  let j = -1;
  if (e.key === "ArrowRight") j = (i + 1) % tabs.length;
  if (e.key === "ArrowLeft") j = (i + tabs.length - 1) % tabs.length;
  if (e.key === "Home") j = 0;
  if (e.key === "End") j = tabs.length - 1;
  if (j >= 0) { e.preventDefault(); showTab(tabs[j], true); }
}

// ---- timeline ----

async function loadTimeline() {
  const mode = $("mode").value;
  if (state.timeline && state.timeline.mode === mode) { drawSteps(); return; }
  status("running the steps under " + mode + "…", true);
  try {
    state.timeline = await getJSON("/api/timeline?mode=" + encodeURIComponent(mode));
    if (state.shown > state.timeline.steps.length) state.shown = state.timeline.steps.length;
    status("", true);
    drawSteps();
  } catch (e) {
    status(e.message);
  }
}

function drawSteps() {
  const ol = $("steps");
  ol.replaceChildren();
  state.view.steps.forEach((s, i) => {
    const st = state.timeline && i < state.shown ? state.timeline.steps[i].result : null;
    const cls = (st ? st.status : "pending") + (i + 1 === state.selStep ? " current" : "");
    ol.append(el("li", { class: cls, "data-status": st ? st.status : "pending" },
      el("button", { type: "button", onclick: () => selectStep(i + 1), "aria-current": i + 1 === state.selStep ? "step" : "false" },
        s.title + (st ? " (t=" + state.timeline.steps[i].time + ")" : ""))));
  });
  $("step-where").textContent = state.shown + " of " + state.view.steps.length + " steps run (" + (state.timeline ? state.timeline.mode : "") + " mode)";
  drawStepDetail();
}

function selectStep(n) {
  if (n > state.shown) state.shown = n;
  state.selStep = n;
  drawSteps();
  updateLink();
}

function drawStepDetail() {
  const box = $("step-detail");
  box.replaceChildren();
  if (!state.selStep || !state.timeline) { box.append(el("p", {}, "Run a step to see its result and the cluster after it.")); return; }
  const ss = state.timeline.steps[state.selStep - 1];
  const r = ss.result;
  const verdict = r.status === "ok" ? el("span", { class: "pass" }, "passed") : el("span", { class: "fail" }, r.status);
  box.append(el("h3", {}, "step " + r.index + ": " + r.title + " "), el("p", {}, verdict, " · " + r.action + " · t=" + ss.time), el("p", {}, r.summary || ""));
  if (r.error) box.append(el("p", { class: "fail" }, r.error));
  if ((r.expectations || []).length) {
    const t = el("table", { "aria-label": "expectations" }, el("tr", {}, el("th", {}, "expected"), el("th", {}, "want"), el("th", {}, "got"), el("th", {}, "")));
    for (const x of r.expectations) t.append(el("tr", { class: x.ok ? "pass" : "fail" }, el("td", {}, x.field), el("td", {}, x.want), el("td", {}, x.got), el("td", {}, x.ok ? "✓" : "✗")));
    box.append(t);
  }
  for (const d of r.details || []) box.append(el("div", { class: "mono" }, d));
  box.append(el("h4", {}, "Endpoints after the step"));
  for (const [svc, eps] of Object.entries(ss.endpoints)) box.append(el("div", {}, el("b", {}, svc + ": "), eps.length ? eps.join("; ") : "none"));
  box.append(el("h4", {}, "Conntrack entries after the step"));
  for (const [node, lines] of Object.entries(ss.conntrack)) {
    const total = ss.conntrack_total[node];
    box.append(el("div", {}, el("b", {}, node + ": " + total + " entries" + (total > lines.length ? " (the first " + lines.length + ")" : ""))));
    for (const l of lines.slice(0, 12)) box.append(el("div", { class: "mono" }, l));
    if (lines.length > 12) box.append(el("div", {}, "…"));
  }
  if (ss.ipvs) {
    box.append(el("h4", {}, "IPVS connections after the step (ipvsadm -Lnc)"));
    for (const [node, rows] of Object.entries(ss.ipvs)) {
      const total = ss.ipvs_total[node];
      box.append(el("div", {}, el("b", {}, node + ": " + total + " entries" + (total > rows.length ? " (the first " + rows.length + ")" : ""))));
      for (const l of rows.slice(0, 12)) box.append(el("div", { class: "mono" }, l));
      if (rows.length > 12) box.append(el("div", {}, "…"));
    }
  }
}

// ---- live flows ----

let source = null;
function startFlows() {
  if (source) source.close();
  const tbody = $("flows").querySelector("tbody");
  tbody.replaceChildren();
  $("flows-note").textContent = "running…";
  source = new EventSource("/api/flows?mode=" + encodeURIComponent($("mode").value));
  source.addEventListener("step", (e) => {
    const s = JSON.parse(e.data);
    tbody.append(el("tr", { class: "steprow" }, el("td", { colspan: "6" }, el("b", {}, "step " + s.index + ": " + s.title + " — " + s.status))));
  });
  source.addEventListener("flow", (e) => {
    const f = JSON.parse(e.data);
    const tr = el("tr", { tabindex: "0", "data-index": String(f.index) }, el("td", {}, String(f.step)), el("td", {}, String(f.index)), el("td", {}, f.packet),
      el("td", {}, f.nodes.join(" → ")), el("td", {}, (f.nat || []).join("; ")), el("td", {}, f.end));
    const pick = () => { for (const r of tbody.querySelectorAll("tr.sel")) r.classList.remove("sel"); tr.classList.add("sel"); $("flow-text").textContent = f.text; };
    tr.addEventListener("click", pick);
    tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); pick(); } });
    tbody.append(tr);
  });
  source.onerror = () => { if (source) { $("flows-note").textContent = "the stream broke off"; source.close(); source = null; } };
  source.addEventListener("done", (e) => { $("flows-note").textContent = JSON.parse(e.data).note; source.close(); source = null; });
  source.addEventListener("failed", (e) => { $("flows-note").textContent = JSON.parse(e.data).error; source.close(); source = null; });
}

// ---- start ----

async function main() {
  try {
    state.view = await getJSON("/api/cluster");
  } catch (e) {
    status("loading the cluster: " + e.message);
    return;
  }
  drawMap(state.view);
  fillControls(state.view);
  $("query").addEventListener("submit", (e) => { e.preventDefault(); trace(); });
  for (const id of ["from", "mode", "all", "reply"]) $(id).addEventListener("change", () => { if (id === "mode") state.timeline = null; updateLink(); });
  $("to").addEventListener("change", updateLink);
  for (const t of tabs) {
    $("tab-" + t).addEventListener("click", () => showTab(t));
    $("tab-" + t).addEventListener("keydown", tabKeys);
  }
  $("export-svg").addEventListener("click", exportSVG);
  $("export-png").addEventListener("click", exportPNG);
  $("step-next").addEventListener("click", () => { if (state.shown < state.view.steps.length) selectStep(state.shown + 1); });
  $("step-all").addEventListener("click", () => selectStep(state.view.steps.length));
  $("step-reset").addEventListener("click", () => { state.shown = 0; state.selStep = 0; drawSteps(); updateLink(); });
  $("flows-start").addEventListener("click", startFlows);
  $("after").addEventListener("change", changeAfter);
  const r = restore();
  if ($("after").value !== "0") {
    const keepTo = $("to").value, keepFrom = $("from").value;
    await changeAfter();
    $("to").value = keepTo;
    $("from").value = keepFrom;
  }
  if (r && r.step > 0) { state.shown = state.selStep = Math.min(r.step, state.view.steps.length); }
  await trace();
  if (r && tabs.includes(r.view) && r.view !== "trace") showTab(r.view);
  document.body.dataset.readyMs = String(Math.round(performance.now()));
  document.body.dataset.ready = "true";
}

main();
