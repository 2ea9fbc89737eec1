// Kestrel's dashboard: one page, hash routes, data from /api/..., no libraries.
// The GPU map is drawn on a canvas (40,000 cells at 5,000 nodes: DOM or SVG elements
// that many make the browser crawl; one canvas draws them in milliseconds).
"use strict";

const state = {
  times: null,     // simulated run: the slider's stops (seconds); live: null
  at: null,        // the stop shown (seconds), or null for the latest
  map: null,       // the last /api/map answer
  layout: null,    // where each node and cell was drawn
  colourBy: "queue",
  filters: { queue: "", namespace: "", model: "", free: false, fragmented: false },
  page: "map",
};
window.kestrel = { ready: false, renderMs: null, loads: 0 };

const $ = (sel, root = document) => root.querySelector(sel);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

function withAt(path) {
  if (state.at === null) return path;
  return path + (path.includes("?") ? "&" : "?") + "at=" + state.at;
}

async function api(path) {
  const res = await fetch(withAt(path));
  const text = await res.text();
  let body;
  try { body = JSON.parse(text); } catch (_) { body = { error: text }; }
  if (!res.ok) throw new Error(body.error || res.status + " " + res.statusText);
  return body;
}

function duration(s) {
  if (s === null || s === undefined) return "";
  s = Math.max(0, Math.round(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (h) return h + "h" + String(m).padStart(2, "0") + "m";
  if (m) return m + "m" + (sec ? String(sec).padStart(2, "0") + "s" : "");
  return sec + "s";
}

function clockOf(s) {
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return String(h).padStart(2, "0") + ":" + String(m).padStart(2, "0") + (sec ? ":" + String(sec).padStart(2, "0") : "");
}

// "in 1h20m (1h05m-1h40m)", relative to the moment shown.
function predicted(p) {
  if (!p) return '<span class="muted">not predicted</span>';
  const rel = (s) => duration(s - p.at_s);
  if (p.point_s === null) return "none: nothing known now makes room for it";
  let out = "in " + rel(p.point_s);
  if (p.from_s !== null && p.to_s !== null && p.from_s !== p.to_s) out += " (" + rel(p.from_s) + " to " + rel(p.to_s) + ")";
  else if (p.from_s !== null && p.to_s === null) out += " (from " + rel(p.from_s) + "; some runs never start it)";
  return out;
}

function podLink(key) {
  return key ? '<a href="#/pod/' + esc(key) + '">' + esc(key) + "</a>" : "";
}
function gangLink(key) {
  return key ? '<a href="#/gang/' + esc(key) + '">' + esc(key) + "</a>" : "";
}
function queueLink(name) {
  return name ? '<a href="#/queue/' + esc(name) + '">' + esc(name) + "</a>" : '<span class="muted">none</span>';
}

// Colours: a stable hue per queue or job name.
function hue(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return h % 360;
}
const FREE = "#e5e7eb", FRAGMENTED = "#fde68a", CORDONED = "#9ca3af";

async function loadSummary() {
  const s = await api("/api/summary");
  $("#source").textContent = s.source;
  const c = s.cells;
  $("#summary").innerHTML =
    "<span>at <b>" + esc(s.at) + "</b></span>" +
    "<span>nodes <b>" + s.nodes + "</b></span>" +
    "<span>GPUs <b>" + c.gpus + "</b>: busy <b>" + c.busy + "</b>, shared <b>" + c.shared +
    "</b>, free <b>" + c.free + "</b>, fragmented <b>" + c.fragmented + "</b></span>" +
    "<span>pods running <b>" + s.pods_running + "</b>, pending <b>" + s.pods_pending + "</b></span>" +
    "<span>ClusterQueues <b>" + s.cluster_queues + "</b></span>";
}

// ---- GPU map ----

const CELL = 7, GAP = 1, NODE_GAP = 5, ROW = 10, HEADER = 16;

function cellState(cell, nodeInUse) {
  if (cell.used >= 1000) return "busy";
  if (cell.used > 0) return "shared";
  return nodeInUse ? "fragmented" : "free";
}

function matches(node, cell, st, pods) {
  const f = state.filters;
  if (f.model && node.model !== f.model) return false;
  if (f.free && st !== "free" && st !== "fragmented") return false;
  if (f.fragmented && st !== "fragmented") return false;
  if (f.queue && !cell.pods.some(([i]) => pods[i].queue === f.queue)) return false;
  if (f.namespace && !cell.pods.some(([i]) => pods[i].namespace === f.namespace)) return false;
  return true;
}

function podColour(pod) {
  const key = state.colourBy === "queue" ? (pod.queue || "(no queue)") : (pod.gang || pod.pod);
  return "hsl(" + hue(key) + ",65%,50%)";
}

function drawMap() {
  const map = state.map, canvas = $("#map");
  if (!map || !canvas) return;
  const t0 = performance.now();
  const width = Math.max(600, $("#view").clientWidth - 4);
  const nodeW = 8 * (CELL + GAP) + NODE_GAP;
  // Lay out: each group starts a new line under its heading; nodes wrap across lines.
  const rows = [];
  let y = 0;
  for (const g of map.groups) {
    y += HEADER;
    let x = 0, row = { y, nodes: [] };
    for (const n of g.nodes) {
      const w = n.gpus.length * (CELL + GAP) + NODE_GAP;
      if (x + w > width && row.nodes.length) {
        rows.push(row); y += ROW; x = 0; row = { y, nodes: [] };
      }
      row.nodes.push({ x, node: n });
      x += Math.max(w, nodeW);
    }
    rows.push(row);
    y += ROW;
  }
  const height = y + 4;
  // Huge canvases: device pixels capped so the canvas stays within browser limits.
  const dpr = height * (window.devicePixelRatio || 1) > 30000 ? 1 : (window.devicePixelRatio || 1);
  canvas.width = width * dpr; canvas.height = height * dpr;
  canvas.style.width = width + "px"; canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const counts = { busy: 0, shared: 0, free: 0, fragmented: 0, shown: 0 };
  let gy = 0, ri = 0;
  ctx.font = "11px system-ui, sans-serif";
  for (const g of map.groups) {
    gy += HEADER;
    ctx.fillStyle = "#374151";
    const label = "rack " + (g.rack || "(none)") + (g.nvlink_domain ? " / NVLink domain " + g.nvlink_domain : "") + " (" + g.nodes.length + " nodes)";
    ctx.fillText(label, 2, gy - 4);
    // Rows of this group: until the next heading.
    let drawn = 0;
    while (ri < rows.length && drawn < g.nodes.length) {
      const row = rows[ri++];
      for (const { x, node } of row.nodes) {
        drawn++;
        const inUse = node.gpus.some((c) => c.used > 0);
        node.gpus.forEach((cell, i) => {
          const st = cellState(cell, inUse);
          counts[st]++;
          const on = matches(node, cell, st, map.pods);
          if (on) counts.shown++;
          ctx.globalAlpha = on ? 1 : 0.15;
          const cx = x + i * (CELL + GAP), cy = row.y;
          if (st === "free" || st === "fragmented") {
            ctx.fillStyle = node.cordoned ? CORDONED : st === "free" ? FREE : FRAGMENTED;
            ctx.fillRect(cx, cy, CELL, CELL);
          } else {
            // Slices: each pod's share of the device, stacked from the bottom.
            ctx.fillStyle = FREE;
            ctx.fillRect(cx, cy, CELL, CELL);
            let filled = 0;
            for (const [p, milli] of cell.pods) {
              const h = Math.max(1, Math.round(CELL * Math.min(milli, 1000) / 1000));
              ctx.fillStyle = podColour(map.pods[p]);
              ctx.fillRect(cx, cy + CELL - filled - h, CELL, h);
              filled += h;
              if (st === "shared") { ctx.fillStyle = "#fff"; ctx.fillRect(cx, cy + CELL - filled, CELL, 0.6); }
            }
            if (!cell.pods.length) { ctx.fillStyle = "#6b7280"; ctx.fillRect(cx, cy + CELL * (1 - cell.used / 1000), CELL, CELL * cell.used / 1000); }
          }
          if (node.cordoned) { ctx.strokeStyle = "#111827"; ctx.lineWidth = 0.5; ctx.strokeRect(cx + 0.25, cy + 0.25, CELL - 0.5, CELL - 0.5); }
        });
      }
      gy = row.y + ROW;
    }
  }
  ctx.globalAlpha = 1;
  state.layout = { rows, cellStep: CELL + GAP };
  const ms = performance.now() - t0;
  window.kestrel.renderMs = ms;
  Object.assign(canvas.dataset, { busy: counts.busy, shared: counts.shared, free: counts.free, fragmented: counts.fragmented, shown: counts.shown, renderMs: ms.toFixed(1) });
  $("#map-counts").textContent = "busy " + counts.busy + ", shared " + counts.shared + ", free " + counts.free +
    ", fragmented " + counts.fragmented + "; " + counts.shown + " cells match the filters; drawn in " + ms.toFixed(1) + " ms";
}

function hit(ev) {
  const canvas = $("#map"), L = state.layout;
  if (!L) return null;
  const r = canvas.getBoundingClientRect();
  const x = ev.clientX - r.left, y = ev.clientY - r.top;
  const row = L.rows.find((row) => y >= row.y && y < row.y + CELL);
  if (!row) return null;
  for (const { x: nx, node } of row.nodes) {
    const i = Math.floor((x - nx) / L.cellStep);
    if (i >= 0 && i < node.gpus.length && x - nx - i * L.cellStep < CELL) return { node, index: i, cell: node.gpus[i] };
  }
  return null;
}

async function pageMap(view) {
  const map = await api("/api/map");
  state.map = map;
  const opts = (list, sel) => '<option value="">all</option>' + list.map((v) => "<option" + (v === sel ? " selected" : "") + ">" + esc(v) + "</option>").join("");
  const f = state.filters;
  view.innerHTML =
    '<h2>GPU map at ' + esc(map.at) + "</h2>" +
    '<div class="filters">' +
    '<label>queue <select id="f-queue">' + opts(map.queues, f.queue) + "</select></label>" +
    '<label>namespace <select id="f-namespace">' + opts(map.namespaces, f.namespace) + "</select></label>" +
    '<label>GPU model <select id="f-model">' + opts(map.models, f.model) + "</select></label>" +
    '<label><input type="checkbox" id="f-free"' + (f.free ? " checked" : "") + "> free</label>" +
    '<label><input type="checkbox" id="f-fragmented"' + (f.fragmented ? " checked" : "") + "> fragmented</label>" +
    '<label>colour by <select id="f-colour"><option value="queue">queue</option><option value="job"' + (state.colourBy === "job" ? " selected" : "") + ">job</option></select></label>" +
    '<span class="legend"><span style="background:' + FREE + '"></span>free<span style="background:' + FRAGMENTED + '"></span>fragmented (free on a node in use)<span style="background:' + CORDONED + '"></span>cordoned</span>' +
    "</div>" +
    '<div id="map-counts" class="muted"></div>' +
    '<canvas id="map"></canvas><div id="tip" hidden></div>';
  for (const k of ["queue", "namespace", "model"]) $("#f-" + k).onchange = (e) => { f[k] = e.target.value; drawMap(); };
  for (const k of ["free", "fragmented"]) $("#f-" + k).onchange = (e) => { f[k] = e.target.checked; drawMap(); };
  $("#f-colour").onchange = (e) => { state.colourBy = e.target.value; drawMap(); };
  const canvas = $("#map"), tip = $("#tip");
  canvas.onmousemove = (ev) => {
    const h = hit(ev);
    if (!h) { tip.hidden = true; return; }
    const mig = h.cell.mig || [];
    const pods = h.cell.pods.map(([p, m], i) => map.pods[p].pod + (mig[i] ? "  MIG " + mig[i][1] : "") + (m < 1000 ? " (" + (m / 10).toFixed(0) + "%)" : "") + (map.pods[p].queue ? "  queue " + map.pods[p].queue : ""));
    tip.textContent = h.node.name + " GPU " + h.index + " (" + h.node.model + (h.node.cordoned ? ", cordoned" : "") + ")\n" + (pods.length ? pods.join("\n") : "free");
    tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px"; tip.hidden = false;
  };
  canvas.onmouseleave = () => { tip.hidden = true; };
  canvas.onclick = (ev) => {
    const h = hit(ev);
    if (!h) return;
    if (h.cell.pods.length) showDetail("pod", map.pods[h.cell.pods[0][0]].pod);
    else showDetail("node", h.node.name);
  };
  drawMap();
}

// ---- Queues ----

function spark(history, name) {
  const pts = history.map((p) => [p.at_s, p.used_gpus[name] || 0]);
  if (pts.length < 2) return "";
  const w = 160, h = 28, t0 = pts[0][0], t1 = pts[pts.length - 1][0] || 1;
  const max = Math.max(1, ...pts.map((p) => p[1]));
  const d = pts.map((p, i) => (i ? "L" : "M") + ((p[0] - t0) / Math.max(1, t1 - t0) * w).toFixed(1) + "," + (h - p[1] / max * h).toFixed(1)).join("");
  return '<svg width="' + w + '" height="' + h + '"><path d="' + d + '" fill="none" stroke="#2563eb"/></svg> <span class="muted">max ' + max + "</span>";
}

function tree(cohorts) {
  const byName = Object.fromEntries(cohorts.map((c) => [c.name, c]));
  const render = (c) => "<li>cohort <b>" + esc(c.name) + "</b>" + '<ul class="tree">' +
    c.cohorts.map((n) => byName[n] ? render(byName[n]) : "").join("") +
    c.queues.map((q) => "<li>" + queueLink(q) + "</li>").join("") + "</ul></li>";
  const roots = cohorts.filter((c) => !c.parent || !byName[c.parent]);
  return roots.length ? '<ul class="tree">' + roots.map(render).join("") + "</ul>" : '<p class="muted">no cohorts</p>';
}

async function pageQueues(view) {
  const { page, history } = await api("/api/queues");
  const rows = page.queues.map((q) => {
    const quota = q.quota.map((r) => {
      const scale = 60 / Math.max(1, r.nominal, r.used);
      return "<div>" + esc(r.flavor) + " " + esc(r.resource) + ": " + r.used + " used of " + r.nominal +
        (r.borrowed ? ", " + r.borrowed.toFixed(2).replace(/\.00$/, "") + " borrowed" : "") +
        (r.lent ? ", " + r.lent.toFixed(2).replace(/\.00$/, "") + " lent" : "") + " " +
        '<span class="bar" style="width:' + (Math.min(r.used, r.nominal) * scale).toFixed(0) + 'px"></span>' +
        '<span class="bar borrowed" style="width:' + (r.borrowed * scale).toFixed(0) + 'px"></span>' +
        '<span class="bar lent" style="width:' + (r.lent * scale).toFixed(0) + 'px"></span></div>';
    }).join("");
    return "<tr data-queue=\"" + esc(q.name) + "\"><td>" + queueLink(q.name) + "</td><td>" + esc(q.cohort || "") +
      '</td><td class="num">' + q.pending + '</td><td class="num">' + q.admitted +
      '</td><td class="num">' + q.fair_share_rank + " (" + (q.fair_share > 1e300 ? "weight 0" : q.fair_share.toFixed(2)) + ")</td><td>" + quota + "</td><td>" + spark(history, q.name) + "</td></tr>";
  }).join("");
  view.innerHTML = "<h2>Queues at " + esc(page.at) + "</h2>" +
    "<table><tr><th>ClusterQueue</th><th>cohort</th><th>pending</th><th>admitted</th><th>fair-share rank (borrowed/weight)</th><th>quota (used, borrowed, lent)</th><th>GPUs in use over time</th></tr>" + rows + "</table>" +
    "<h2>Cohorts</h2>" + tree(page.cohorts);
}

// ---- Pending work ----

async function pagePending(view) {
  const list = await api("/api/pending");
  const rows = list.pending.map((e) =>
    "<tr data-pod=\"" + esc(e.pod) + "\"" + (e.gang ? ' data-gang="' + esc(e.gang) + '"' : "") + ">" +
    '<td class="num">' + e.position + "</td><td>" + podLink(e.pod) + "</td><td>" + gangLink(e.gang) + "</td><td>" + queueLink(e.cluster_queue) +
    '</td><td class="num">' + e.priority + '</td><td class="num">' + duration(e.waiting_s) +
    '</td><td class="reason" title="' + esc(e.message) + '">' + esc(e.reason) + "</td><td>" + predicted(e.predicted_start) + "</td></tr>").join("");
  view.innerHTML = "<h2>Pending work at " + esc(list.at) + " (" + list.pending_total + " pods)</h2>" +
    "<table id=\"pending\"><tr><th>position</th><th>pod</th><th>gang</th><th>ClusterQueue</th><th>priority</th><th>waiting</th><th>reason</th><th>predicted start</th></tr>" + rows + "</table>";
  for (const tr of view.querySelectorAll("tr[data-pod]")) {
    tr.onclick = (ev) => {
      if (ev.target.tagName === "A") return;
      if (tr.dataset.gang) showDetail("gang", tr.dataset.gang); else showDetail("pod", tr.dataset.pod);
    };
  }
}

// ---- Events ----

async function pageEvents(view) {
  const page = await api("/api/events");
  const kinds = [...new Set(page.events.map((e) => e.kind))].sort();
  const render = (kind) => page.events.filter((e) => !kind || e.kind === kind).map((e) =>
    "<tr><td>" + esc(e.at) + "</td><td>" + esc(e.kind) + "</td><td>" + podLink(e.pod) + "</td><td>" +
    (e.node ? '<a href="#/node/' + esc(e.node) + '">' + esc(e.node) + "</a>" : "") +
    '</td><td class="num">' + (e.gpu_hours === null ? "" : e.gpu_hours.toFixed(2)) + "</td><td>" + esc(e.detail) + "</td></tr>").join("");
  view.innerHTML = "<h2>Events up to " + esc(page.at) + "</h2>" +
    '<div class="filters"><label>kind <select id="f-kind"><option value="">all</option>' + kinds.map((k) => "<option>" + esc(k) + "</option>").join("") + "</select></label></div>" +
    '<table><thead><tr><th>at</th><th>kind</th><th>pod</th><th>node</th><th>GPU-hours</th><th>detail</th></tr></thead><tbody id="events">' + render("") + "</tbody></table>";
  $("#f-kind").onchange = (e) => { $("#events").innerHTML = render(e.target.value); };
}

// ---- One object: the explain answer ----

function explanation(x) {
  if (!x) return "";
  return '<p><b>Reason:</b> <span class="reason">' + esc(x.headline) + "</span></p><p class=\"muted\">" + esc(x.message) + "</p>";
}

function renderObject(kind, v) {
  let html = "";
  if (kind === "pod") {
    html = "<h2>pod " + esc(v.pod) + "</h2><p>" + esc(v.phase) + " at " + esc(v.at) + "; priority " + v.priority + "; requests " + esc(v.requests.summary) + "</p>" +
      (v.gang ? "<p>gang " + gangLink(v.gang) + "</p>" : "") +
      (v.position ? "<p>queue " + queueLink(v.position.cluster_queue) + ", position " + v.position.position + " of " + v.position.pending_workloads + "</p>" : "") +
      (v.node ? '<p>on <a href="#/node/' + esc(v.node) + '">' + esc(v.node) + "</a> GPUs " + esc(v.gpus.join(", ")) + "</p>" : "") +
      (v.waiting_s !== null ? "<p>waiting " + duration(v.waiting_s) + "</p>" : "") +
      explanation(v.explanation) +
      (v.phase === "Pending" ? '<p><b>Predicted start:</b> <span class="predicted">' + predicted(v.predicted_start) + "</span></p>" : "");
  } else if (kind === "gang") {
    html = "<h2>gang " + esc(v.gang) + "</h2><p>" + esc(v.phase) + " at " + esc(v.at) + "; " + v.bound + " bound, " + v.pending + " pending of " + v.exist + " pods" +
      (v.min_member !== null ? " (minMember " + v.min_member + ")" : "") + "</p>" +
      (v.problem ? '<p><b>Gang:</b> <span class="reason">' + esc(v.problem.message || v.problem.headline || JSON.stringify(v.problem)) + "</span></p>" : "") +
      explanation(v.first_pending_explanation) +
      (v.pending ? '<p><b>Predicted start:</b> <span class="predicted">' + predicted(v.predicted_start) + "</span></p>" : "") +
      "<table><tr><th>member</th><th>phase</th><th>node</th></tr>" + v.members.map((m) => "<tr><td>" + podLink(m.pod) + "</td><td>" + esc(m.phase) + "</td><td>" + esc(m.node || "") + "</td></tr>").join("") + "</table>";
  } else if (kind === "queue") {
    html = "<h2>ClusterQueue " + esc(v.cluster_queue) + "</h2><p>cohort " + esc(v.cohort || "none") + "; " + v.pending + " pending, " + v.admitted + " admitted</p>" +
      v.quota.map((q) => "<div>" + esc(q.flavor) + " " + esc(q.resource) + ": " + esc(q.text) + "</div>").join("") +
      "<table><tr><th>#</th><th>pod</th><th>reason</th><th>predicted start</th></tr>" + v.pending_list.map((e) => '<tr><td class="num">' + e.position + "</td><td>" + podLink(e.pod) + "</td><td>" + esc(e.reason) + "</td><td>" + predicted(e.predicted_start) + "</td></tr>").join("") + "</table>";
  } else {
    html = "<h2>node " + esc(v.node) + "</h2><p>" + (v.cordoned ? "cordoned; " : "") + v.allocated.gpus + " of " + v.capacity.gpus + " GPUs allocated</p>" +
      "<table><tr><th>GPU</th><th>model</th><th>in use</th><th>pods</th></tr>" + v.gpus.map((g) => "<tr><td>" + g.index + "</td><td>" + esc(g.model) + '</td><td class="num">' + (g.used_milli / 10).toFixed(0) + "%</td><td>" + g.pods.map(podLink).join(", ") + "</td></tr>").join("") + "</table>";
  }
  return html + "<details><summary>JSON</summary><pre>" + esc(JSON.stringify(v, null, 2)) + "</pre></details>";
}

async function showDetail(kind, name) {
  const aside = $("#detail");
  aside.hidden = false;
  aside.innerHTML = '<p class="muted">loading ' + esc(kind) + " " + esc(name) + "</p>";
  try {
    const v = await api("/api/" + kind + "/" + name.split("/").map(encodeURIComponent).join("/"));
    aside.innerHTML = renderObject(kind, v);
    aside.dataset.kind = kind; aside.dataset.name = name;
  } catch (e) {
    aside.innerHTML = '<p class="error">' + esc(e.message) + "</p>";
  }
}

async function pageObject(view, kind, name) {
  const v = await api("/api/" + kind + "/" + name.split("/").map(encodeURIComponent).join("/"));
  view.innerHTML = renderObject(kind, v);
}

// ---- Routing, time, updates ----

async function render() {
  const hash = location.hash.replace(/^#\/?/, "") || "map";
  const [page, ...rest] = hash.split("/");
  state.page = page;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === page);
  const view = $("#view");
  try {
    await loadSummary();
    if (page === "map") await pageMap(view);
    else if (page === "queues") await pageQueues(view);
    else if (page === "pending") await pagePending(view);
    else if (page === "events") await pageEvents(view);
    else if (["pod", "gang", "queue", "node"].includes(page) && rest.length) await pageObject(view, page, rest.map(decodeURIComponent).join("/"));
    else view.innerHTML = '<p class="error">not found: no page ' + esc(hash) + "</p>";
  } catch (e) {
    view.innerHTML = '<p class="error">' + esc(e.message) + "</p>";
  }
  if ($("#detail").dataset.kind && !$("#detail").hidden) await showDetail($("#detail").dataset.kind, $("#detail").dataset.name);
  window.kestrel.loads++;
  window.kestrel.ready = true;
}

async function start() {
  const res = await fetch("/api/times");
  if (res.ok) {
    state.times = (await res.json()).times_s;
    const slider = $("#time");
    slider.max = state.times.length - 1;
    slider.value = state.times.length - 1;
    $("#timebar").hidden = false;
    const show = () => { state.at = state.times[+slider.value]; $("#time-label").textContent = clockOf(state.at); };
    show();
    slider.oninput = show;
    slider.onchange = () => { show(); render(); };
  } else {
    // Live: updates come over server-sent events; each one reloads the page shown.
    const live = $("#live");
    const events = new EventSource("/api/stream");
    let pending = false;
    events.addEventListener("update", () => {
      live.hidden = false;
      if (pending) return;
      pending = true;
      setTimeout(() => { pending = false; render(); }, 250);
    });
    events.onerror = () => { live.hidden = true; };
  }
  window.addEventListener("hashchange", render);
  window.addEventListener("resize", () => { if (state.page === "map") drawMap(); });
  await render();
}

start();
