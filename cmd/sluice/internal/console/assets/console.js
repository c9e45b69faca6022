// The console's script: it draws the live chart from /console/api/live,
// runs the playground through /console/api/sim and steps through a walk
// the server rendered. The page reads without it.
"use strict";
(function () {
  const OUTCOMES = ["allowed", "denied", "shadow_denied", "error", "degraded"];
  const SVGNS = "http://www.w3.org/2000/svg";
  const POLL_MS = 1000;
  // The live table's column names, which a stacked row shows beside each cell.
  const LABELS = { allowed: "Allowed", denied: "Denied", charged: "Charged (units)", shadow_denied: "Shadow denied", error: "Errors", degraded: "Degraded",
    latency_avg_us: "Store latency, mean (µs)", latency_max_us: "Store latency, max (µs)" };
  // The live table's columns: the outcomes, with the units charged beside
  // the allowed and the denied, and the store's latency.
  const COLUMNS = ["allowed", "denied", "charged", "shadow_denied", "error", "degraded", "latency_avg_us", "latency_max_us"];

  // ---- Live ----
  // rules: rule -> Map(t -> point). step is the seconds a point stands for
  // (1, or 60 over a range longer than the window), from..now the span.
  const live = { now: 0, window: 300, step: 1, from: 0, rules: new Map(), order: [], slices: new Map() };
  const SMALL_MAX = 24; // the small charts drawn, one per rule

  const RANGES = { "1h": 3600, "6h": 6 * 3600 };

  function merge(data, range) {
    live.now = data.now;
    live.window = data.window_s;
    live.step = data.step_s || 1;
    const secs = RANGES[range] || data.window_s;
    live.from = live.step === 1 ? data.now - secs + 1 : Math.floor((data.now - secs + 1) / live.step) * live.step;
    live.order = data.rules.map((r) => r.rule);
    for (const r of data.rules) {
      let m = live.rules.get(r.rule);
      if (!m) { m = new Map(); live.rules.set(r.rule, m); }
      for (const t of Array.from(m.keys())) {
        if (t >= data.since || t < live.from) m.delete(t);
      }
      for (const p of r.points) m.set(p.t, p);
    }
    for (const st of data.slices || []) {
      let m = live.slices.get(st.store);
      if (!m) { m = new Map(); live.slices.set(st.store, m); }
      for (const t of Array.from(m.keys())) {
        if (t >= data.since || t < live.from) m.delete(t);
      }
      for (const p of st.points || []) m.set(p.t, p);
    }
  }

  function totals(rule) {
    const t = { allowed: 0, denied: 0, charged: 0, shadow_denied: 0, error: 0, degraded: 0, latency_avg_us: 0, latency_max_us: 0 };
    let n = 0, sum = 0;
    for (const p of (live.rules.get(rule) || new Map()).values()) {
      for (const k of OUTCOMES) t[k] += p[k];
      t.charged += p.charged || 0;
      t.latency_max_us = Math.max(t.latency_max_us, p.latency_max_us);
      n += p.latency_n; sum += p.latency_avg_us * p.latency_n;
    }
    if (n > 0) t.latency_avg_us = Math.floor(sum / n);
    return t;
  }

  function cell(tag, text, attrs) {
    const e = document.createElement(tag);
    e.textContent = text;
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  // fill puts rows in a table body, or one row saying none when there are none.
  function fill(body, rows, none, cols) {
    if (rows.length === 0) {
      const tr = document.createElement("tr");
      tr.className = "empty";
      tr.append(cell("td", none, { colspan: String(cols) }));
      rows = [tr];
    }
    body.replaceChildren(...rows);
  }

  function spanText() {
    const secs = live.now - live.from + 1;
    return live.step === 1 ? "last " + secs + " s" : "last " + Math.round(secs / 3600) + " h, a point a minute";
  }

  function renderTable() {
    const body = document.querySelector("#live-table tbody");
    const rows = [];
    for (const rule of live.order) {
      const t = totals(rule);
      const tr = document.createElement("tr");
      tr.dataset.rule = rule;
      tr.append(cell("th", rule, { scope: "row", "data-label": "Rule" }));
      for (const k of COLUMNS) {
        tr.append(cell("td", String(t[k]), { class: "num", "data-k": k, "data-label": LABELS[k] }));
      }
      rows.push(tr);
    }
    fill(body, rows, "No rules and no decisions yet.", COLUMNS.length + 1);
    document.getElementById("live-span").textContent = spanText();
    document.getElementById("live-as-of").textContent = "as of " + new Date(live.now * 1000).toISOString().replace(".000Z", "Z");
  }

  function renderTop(top) {
    const body = document.querySelector("#top-table tbody");
    const rows = top.map((r) => {
      const tr = document.createElement("tr");
      const code = document.createElement("code");
      code.textContent = r.key;
      const key = cell("td", "", { "data-label": "Key" });
      key.append(code);
      tr.append(cell("td", r.rule, { "data-label": "Rule" }), key, cell("td", String(r.count), { class: "num", "data-label": "Refusals (at most)" }));
      return tr;
    });
    fill(body, rows, "No refusals recently.", 3);
  }

  // ---- What is held: slices of budgets and concurrency slots ----
  // durUS formats µs as the server does: to the millisecond under a
  // second, else to a tenth of a second.
  function durUS(us) {
    if (us < 1e6) { const ms = Math.round(us / 1000); return ms === 0 ? "0s" : ms + "ms"; }
    const s = Math.round(us / 1e5) / 10;
    if (s < 60) return s + "s";
    const m = Math.floor(s / 60), rest = Math.round((s - m * 60) * 10) / 10;
    return m < 60 ? m + "m" + rest + "s" : Math.floor(m / 60) + "h" + (m % 60) + "m" + rest + "s";
  }

  function keyCell(key) {
    const code = document.createElement("code");
    code.textContent = key;
    const td = cell("td", "", { "data-label": "Key" });
    td.append(code);
    return td;
  }

  // row builds a table row of a key and its figures: [k, label, text].
  function row(key, figures) {
    const tr = document.createElement("tr");
    tr.dataset.key = key;
    tr.append(keyCell(key));
    for (const [k, label, text] of figures) tr.append(cell("td", text, { class: "num", "data-k": k, "data-label": label }));
    return tr;
  }

  function callsPer100(s) {
    const n = s.local + s.redis;
    if (n === 0) return "—";
    const tenths = Math.floor(1000 * (s.redis + s.taken) / n);
    return Math.floor(tenths / 10) + "." + (tenths % 10);
  }

  function renderSlices(stores) {
    for (const s of stores || []) {
      const dl = document.getElementById("slice-stats-" + s.store);
      const body = document.querySelector("#slice-keys-" + s.store + " tbody");
      if (!dl || !body) continue; // a store the page was not rendered with
      const vals = { held: s.held, keys: s.keys, local: s.local, redis: s.redis, calls_per_100: callsPer100(s),
        taken: s.taken, units: s.units, given_back: s.given_back, expired: s.expired };
      for (const dd of dl.querySelectorAll("dd[data-k]")) dd.textContent = String(vals[dd.dataset.k]);
      fill(body, (s.top || []).map((k) => row(k.key, [["held", "Units held", String(k.held)], ["slices", "Slices", String(k.slices)],
        ["expires_in", "First ends in", durUS(k.expires_in_us)], ["demand", "Demand", String(k.demand)]])),
      "No slices held now: no key is hot enough.", 5);
    }
  }

  // renderSliceCharts draws each store's decisions from slices and its
  // Redis calls (decisions in Redis and slices taken) over the span.
  function renderSliceCharts() {
    for (const chart of document.querySelectorAll(".slice-chart svg[data-store]")) {
      const n = slots(), series = { local: new Array(n).fill(0), calls: new Array(n).fill(0) };
      for (const p of (live.slices.get(chart.dataset.store) || new Map()).values()) {
        const i = index(p.t);
        if (i < 0 || i >= n) continue;
        series.local[i] += p.local;
        series.calls[i] += p.redis + p.taken;
      }
      const sums = draw(chart, series, 800, 140, true);
      const decisions = sums.local + sums.calls - takenIn(chart.dataset.store);
      chart.querySelector("title").textContent = "Decisions from slices and Redis calls " + perWhat() + ", store " + chart.dataset.store + ", " +
        spanText() + ": from slices " + sums.local + ", Redis calls " + sums.calls +
        (decisions > 0 ? ", " + (Math.floor(1000 * sums.calls / decisions) / 10) + " per 100 decisions" : "");
    }
  }

  // takenIn is the slices store took over the span.
  function takenIn(store) {
    let n = 0;
    for (const p of (live.slices.get(store) || new Map()).values()) if (p.t >= live.from) n += p.taken;
    return n;
  }

  function renderSlots(slots) {
    const body = document.querySelector("#slots-table tbody");
    if (!slots || !body) return;
    const sum = document.getElementById("slots-summary");
    sum.textContent = "Units held now: " + slots.held + "; keys followed: " + slots.keys +
      ", in " + slots.bytes + " of the view's " + slots.max_bytes + " bytes" +
      (slots.dropped ? "; keys no longer followed, to make room: " + slots.dropped : "") + "." +
      (slots.bound ? " Keys or leases were left out: " + slots.bound + "." : "");
    fill(body, (slots.top || []).map((k) => row(k.key, [["held", "Held here", k.held + (k.partial ? "+" : "")],
      ["held_all", "All instances", k.held_all === undefined ? "—" : String(k.held_all)], ["limit", "Limit", String(k.limit)],
      ["leases", "Leases", String(k.leases)], ["oldest", "Oldest held for", durUS(k.oldest_us)], ["next_expiry", "Next expiry in", durUS(k.next_expiry_us)],
      ["acquired", "Acquired", String(k.acquired)], ["refused", "Refused", String(k.refused)], ["released", "Released", String(k.released)],
      ["expired", "Expired", String(k.expired)]])),
    "No slots held now.", 11);
  }

  function syncRuleSelect() {
    const sel = document.getElementById("live-rule");
    const have = new Set(Array.from(sel.options).map((o) => o.value));
    for (const rule of live.order) {
      if (!have.has(rule)) sel.append(new Option(rule, rule));
    }
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // slots is the number of points the span holds; index(t) a point's place.
  function slots() { return Math.max(1, Math.floor((live.now - live.from) / live.step) + 1); }
  function index(t) { return Math.floor((t - live.from) / live.step); }

  // counts sums the outcomes of rules point by point.
  function counts(rules) {
    const n = slots(), series = {};
    for (const k of OUTCOMES) series[k] = new Array(n).fill(0);
    for (const rule of rules) {
      for (const p of (live.rules.get(rule) || new Map()).values()) {
        const i = index(p.t);
        if (i < 0 || i >= n) continue;
        for (const k of OUTCOMES) series[k][i] += p[k];
      }
    }
    return series;
  }

  // latencies is the store's latency point by point over rules: the mean
  // over every call, and the maximum.
  function latencies(rules) {
    const n = slots(), sum = new Array(n).fill(0), cnt = new Array(n).fill(0);
    const series = { latency_avg_us: new Array(n).fill(0), latency_max_us: new Array(n).fill(0) };
    for (const rule of rules) {
      for (const p of (live.rules.get(rule) || new Map()).values()) {
        const i = index(p.t);
        if (i < 0 || i >= n) continue;
        sum[i] += p.latency_avg_us * p.latency_n; cnt[i] += p.latency_n;
        series.latency_max_us[i] = Math.max(series.latency_max_us[i], p.latency_max_us);
      }
    }
    for (let i = 0; i < n; i++) if (cnt[i] > 0) series.latency_avg_us[i] = Math.floor(sum[i] / cnt[i]);
    return series;
  }

  // draw puts series (name -> values) in an SVG of W×H as lines, with a
  // scale when axes is set; it returns each series' sum.
  function draw(chart, series, W, H, axes) {
    const L = axes ? 44 : 2, R = axes ? 8 : 2, T = axes ? 10 : 3, B = axes ? 22 : 3;
    const names = Object.keys(series);
    const n = series[names[0]].length;
    let top = 1;
    for (const k of names) for (const v of series[k]) top = Math.max(top, v);
    const x = (i) => L + (i * (W - L - R)) / Math.max(1, n - 1);
    const y = (v) => T + (H - T - B) * (1 - v / top);
    const title = chart.querySelector("title");
    const kids = [title];
    if (axes) {
      for (const f of [0, 0.5, 1]) {
        const v = Math.round(top * f);
        kids.push(svg("line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
        kids.push(svg("text", { class: "axis", x: L - 4, y: y(v) + 4, "text-anchor": "end" }, String(v)));
      }
      kids.push(svg("text", { class: "axis", x: L, y: H - 6 }, "-" + spanText().replace("last ", "").replace(", a point a minute", "")));
      kids.push(svg("text", { class: "axis", x: W - R, y: H - 6, "text-anchor": "end" }, "now"));
    }
    const sums = {};
    const style = getComputedStyle(document.documentElement);
    for (const k of names) {
      const pts = series[k].map((v, i) => x(i).toFixed(1) + "," + y(v).toFixed(1)).join(" ");
      sums[k] = series[k].reduce((a, b) => a + b, 0);
      kids.push(svg("polyline", {
        points: pts, fill: "none", "stroke-width": k === "allowed" || k === "latency_avg_us" ? 2 : 1.5,
        stroke: style.getPropertyValue("--" + k).trim() || "#000",
        class: "series", "data-outcome": k, "data-total": String(sums[k]),
      }));
    }
    chart.replaceChildren(...kids);
    return sums;
  }

  function perWhat() { return live.step === 1 ? "per second" : "per minute"; }

  function renderChart() {
    const chosen = document.getElementById("live-rule").value;
    const rules = chosen ? [chosen] : live.order;
    const what = chosen ? "rule " + chosen : "all rules";
    const chart = document.getElementById("live-chart");
    const sums = draw(chart, counts(rules), 800, 240, true);
    chart.querySelector("title").textContent = "Decisions " + perWhat() + ", " + what + ", " + spanText() + ": " +
      OUTCOMES.map((k) => k.replace("_", " ") + " " + sums[k]).join(", ");
    const lat = document.getElementById("latency-chart");
    const ls = latencies(rules);
    draw(lat, ls, 800, 140, true);
    lat.querySelector("title").textContent = "Store latency " + perWhat() + " (µs), " + what + ", " + spanText() +
      ": highest mean " + Math.max(...ls.latency_avg_us) + ", highest max " + Math.max(...ls.latency_max_us);
    renderSmall();
  }

  // renderSmall draws a small chart per rule (the first SMALL_MAX).
  function renderSmall() {
    const box = document.getElementById("live-small");
    const figs = [];
    for (const rule of live.order.slice(0, SMALL_MAX)) {
      const fig = document.createElement("figure");
      fig.className = "small";
      fig.dataset.rule = rule;
      const chart = svg("svg", { viewBox: "0 0 200 60", preserveAspectRatio: "none", role: "img" });
      chart.append(svg("title", {}));
      const sums = draw(chart, counts([rule]), 200, 60, false);
      chart.querySelector("title").textContent = "Decisions " + perWhat() + ", rule " + rule + ": " +
        OUTCOMES.map((k) => k.replace("_", " ") + " " + sums[k]).join(", ");
      const cap = cell("figcaption", "");
      cap.append(cell("span", rule, { class: "rule" }), cell("span", sums.allowed + " allowed, " + sums.denied + " denied", { class: "sum" }));
      fig.append(chart, cap);
      figs.push(fig);
    }
    box.replaceChildren(...figs);
  }

  let since = 0, failures = 0, timer = 0;
  async function poll() {
    const status = document.getElementById("live-status");
    const range = document.getElementById("live-range").value;
    try {
      const q = "?" + (range ? "range=" + range + "&" : "") + (since ? "since=" + since : "");
      const resp = await fetch("/console/api/live" + q, { cache: "no-store" });
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const data = await resp.json();
      if (range !== document.getElementById("live-range").value) return; // changed meanwhile
      merge(data, range);
      since = data.now;
      syncRuleSelect();
      renderTable();
      renderTop(data.top);
      renderSlices(data.slices);
      renderSlots(data.slots);
      renderChart();
      renderSliceCharts();
      if (failures > 0) status.textContent = "";
      failures = 0;
      document.body.dataset.livePolls = String(Number(document.body.dataset.livePolls || 0) + 1);
    } catch (e) {
      failures++;
      status.textContent = "Live updates failed (" + e.message + "); retrying.";
    } finally {
      // A range of minutes changes slowly: it is asked for less often.
      clearTimeout(timer);
      timer = setTimeout(poll, range ? 10 * POLL_MS : POLL_MS);
    }
  }

  function changeRange() {
    since = 0;
    live.rules.clear();
    live.slices.clear();
    poll();
  }

  // ---- RLQS budgets ----
  // The section is rendered on the server; the script refreshes it from
  // /console/api/rlqs every RLQS_POLL_MS, building the same markup.
  const RLQS_POLL_MS = 2000;

  function rlqsBudget(b, topN) {
    const div = cell("div", "", { class: "rlqs-budget", "data-key": b.key });
    const h = document.createElement("h3");
    h.append(b.domain + " ", cell("code", b.rule), ": ", cell("code", b.key));
    const dl = cell("dl", "", { class: "stats" });
    for (const [k, label, text] of [["rate", "Rate", b.rate + " per " + b.fill_s + "s"], ["outstanding", "Outstanding", String(b.outstanding)],
      ["room", "Room under the rate", String(b.room)], ["clients", "Clients", String(b.clients)],
      ["demand", "Demand", b.demand.toFixed(1)], ["granted", "Granted", String(b.granted)]]) {
      const d = document.createElement("div");
      d.append(cell("dt", label), cell("dd", text, { "data-k": k }));
      dl.append(d);
    }
    const table = cell("table", "", { class: "stack rlqs-shares" });
    table.append(cell("caption", "The largest shares (at most " + topN + " of " + b.holders + " clients)"));
    const head = document.createElement("thead"), hr = document.createElement("tr");
    for (const [text, num] of [["Client", false], ["State", false], ["Weight", true], ["Demand", true], ["Share", true], ["Lease", true], ["Grant ends in", true], ["Lease ends in", true]]) {
      hr.append(cell("th", text, num ? { scope: "col", class: "num" } : { scope: "col" }));
    }
    head.append(hr);
    const body = document.createElement("tbody");
    fill(body, (b.shares || []).map((s) => {
      const tr = document.createElement("tr");
      tr.dataset.holder = String(s.holder);
      tr.append(cell("td", String(s.holder), { "data-label": "Client" }), cell("td", s.state, { "data-k": "state", "data-label": "State" }));
      for (const [k, label, text] of [["weight", "Weight", String(s.weight)], ["demand", "Demand", s.demand === undefined ? "—" : s.demand.toFixed(1)],
        ["granted", "Share", String(s.granted)], ["outstanding", "Lease", String(s.outstanding)],
        ["grant_ends", "Grant ends in", durUS(s.grant_ends_us)], ["lease_ends", "Lease ends in", durUS(s.lease_ends_us)]]) {
        tr.append(cell("td", text, { class: "num", "data-k": k, "data-label": label }));
      }
      return tr;
    }), "No client holds a share now.", 8);
    table.append(head, body);
    const scroll = cell("div", "", { class: "scroll" });
    scroll.append(table);
    div.append(h, dl, scroll);
    return div;
  }

  function renderRLQS(v) {
    const section = document.getElementById("rlqs");
    const sum = document.getElementById("rlqs-summary");
    sum.replaceChildren("Budgets shared: ", cell("span", String(v.budgets), { "data-k": "budgets" }), "; clients connected: ",
      cell("span", String(v.clients), { "data-k": "clients" }), "; shown in ", cell("span", String(v.bytes), { "data-k": "bytes" }),
      " of the view's ", cell("span", String(v.max_bytes), { "data-k": "max_bytes" }), " bytes.");
    if (v.bound) sum.append(" Budgets were left out: ", cell("span", v.bound, { "data-k": "bound" }), ".");
    for (const old of section.querySelectorAll(".rlqs-budget, #rlqs-none")) old.remove();
    const top = v.top || [];
    section.append(...(top.length ? top.map((b) => rlqsBudget(b, section.dataset.topn)) :
      [cell("p", "No budget is shared now: no RLQS client reports a bucket a rule limits.", { id: "rlqs-none" })]));
  }

  let rlqsTimer = 0;
  async function pollRLQS() {
    try {
      const resp = await fetch("/console/api/rlqs", { cache: "no-store" });
      if (resp.ok) {
        renderRLQS(await resp.json());
        document.body.dataset.rlqsPolls = String(Number(document.body.dataset.rlqsPolls || 0) + 1);
      }
    } catch (e) {
      // the live view's status line says when the service is unreachable
    } finally {
      clearTimeout(rlqsTimer);
      rlqsTimer = setTimeout(pollRLQS, RLQS_POLL_MS);
    }
  }

  // ---- Playground ----
  function showShapeFields(prefix) {
    const shape = document.getElementById(prefix + "-shape").value;
    for (const f of document.querySelectorAll("#" + prefix + "-form [data-shapes]")) {
      f.hidden = !f.dataset.shapes.split(" ").includes(shape);
    }
  }

  function pickRule(name, limit, burst) {
    const sel = document.getElementById("sim-rule");
    sel.value = name;
    if (limit) document.getElementById("sim-limit").value = limit;
    if (burst !== undefined) document.getElementById("sim-burst").value = burst;
  }

  function simRequest(form) {
    const fd = new FormData(form);
    const req = {};
    for (const k of ["rule", "limit", "window", "tick", "shape", "trace"]) {
      const v = String(fd.get(k) || "").trim();
      if (v !== "") req[k] = v;
    }
    for (const k of ["ticks", "rate", "size", "burst"]) {
      const v = String(fd.get(k) || "").trim();
      if (v !== "") req[k] = Number(v);
    }
    req.algorithms = fd.getAll("algorithms");
    return req;
  }

  function renderSim(res) {
    const out = document.getElementById("sim-out");
    const table = document.createElement("table");
    table.id = "sim-totals";
    table.className = "stack";
    const cap = document.createElement("caption");
    cap.textContent = "Totals over the " + res.ticks + " ticks shown (" + (res.units ? "units" : "requests") + "): " + res.source;
    const head = document.createElement("thead");
    const hr = document.createElement("tr");
    for (const [h, num] of [["Algorithm", false], ["Admitted", true], ["Delayed", true], ["Denied", true], ["Errors", true], ["Max delay (µs)", true]]) {
      hr.append(cell("th", h, num ? { scope: "col", class: "num" } : { scope: "col" }));
    }
    head.append(hr);
    const body = document.createElement("tbody");
    for (const r of res.rows) {
      const tr = document.createElement("tr");
      tr.dataset.algorithm = r.algorithm;
      tr.append(cell("th", r.algorithm, { scope: "row", title: r.about, "data-label": "Algorithm" }));
      for (const [k, v, label] of [["admitted", r.totals.admitted, "Admitted"], ["delayed", r.totals.delayed, "Delayed"], ["denied", r.totals.denied, "Denied"],
        ["errors", r.totals.errors, "Errors"], ["max_delay_us", r.totals.max_delay_us, "Max delay (µs)"]]) {
        tr.append(cell("td", String(v), { class: "num", "data-k": k, "data-label": label }));
      }
      body.append(tr);
    }
    table.append(cap, head, body);
    const wrap = document.createElement("div");
    wrap.className = "scroll";
    wrap.append(table);
    const fig = document.createElement("div");
    fig.id = "sim-figure";
    fig.className = "figure";
    // The figure is sim.WriteSVG's, the same as `sluice sim --svg`; parsed
    // as SVG so that no markup of it runs as HTML.
    const doc = new DOMParser().parseFromString(res.svg, "image/svg+xml");
    fig.append(document.importNode(doc.documentElement, true));
    out.replaceChildren(wrap, fig);
  }

  async function runSim(ev) {
    ev.preventDefault();
    const form = ev.target;
    const button = document.getElementById("sim-run");
    const out = document.getElementById("sim-out");
    button.disabled = true;
    try {
      const resp = await fetch("/console/api/sim", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(simRequest(form)),
      });
      const data = await resp.json();
      if (!resp.ok) {
        out.replaceChildren(cell("p", data.error || "HTTP " + resp.status, { id: "sim-error", class: "error", role: "alert" }));
        return;
      }
      renderSim(data);
    } catch (e) {
      out.replaceChildren(cell("p", "The run failed: " + e.message, { id: "sim-error", class: "error", role: "alert" }));
    } finally {
      button.disabled = false;
      document.body.dataset.simRuns = String(Number(document.body.dataset.simRuns || 0) + 1);
    }
  }

  function start() {
    document.getElementById("live-controls").hidden = false;
    document.getElementById("live-charts").hidden = false;
    for (const f of document.querySelectorAll(".slice-chart")) f.hidden = false;
    document.getElementById("live-rule").addEventListener("change", renderChart);
    document.getElementById("live-range").addEventListener("change", changeRange);
    poll();
    if (document.getElementById("rlqs")) rlqsTimer = setTimeout(pollRLQS, RLQS_POLL_MS);

    const shape = document.getElementById("sim-shape");
    shape.addEventListener("change", () => showShapeFields("sim"));
    showShapeFields("sim");
    const sel = document.getElementById("sim-rule");
    sel.addEventListener("change", () => {
      const o = sel.selectedOptions[0];
      if (o && o.dataset.limit) pickRule(o.value, o.dataset.limit, o.dataset.burst);
    });
    // A limit or burst typed by hand is no longer the rule's.
    for (const id of ["sim-limit", "sim-burst"]) {
      document.getElementById(id).addEventListener("input", () => { sel.value = ""; });
    }
    for (const b of document.querySelectorAll("button.try")) {
      b.hidden = false;
      b.addEventListener("click", () => {
        pickRule(b.dataset.rule, b.dataset.limit, b.dataset.burst);
        document.getElementById("playground").scrollIntoView();
        sel.focus();
      });
    }
    document.getElementById("sim-form").addEventListener("submit", runSim);
    startSteps();
  }

  // ---- Step through ----
  // The server renders the whole walk as a table whose rows each hold the
  // step's state and arithmetic; the stepper shows one row's at a time.
  let stepAt = 0;

  function showStep(i) {
    const rows = Array.from(document.querySelectorAll("#steps-table tbody tr[data-step]"));
    if (rows.length === 0) return;
    stepAt = Math.max(0, Math.min(i, rows.length - 1));
    const row = rows[stepAt];
    for (const r of rows) r.removeAttribute("aria-current");
    row.setAttribute("aria-current", "step");
    const detail = row.querySelector(".step-detail");
    const cur = document.getElementById("step-current");
    cur.replaceChildren(...Array.from(detail.children).map((c) => c.cloneNode(true)));
    cur.dataset.step = detail.dataset.step;
    const cells = row.children;
    document.getElementById("step-pos").textContent = "Step " + (stepAt + 1) + " of " + rows.length +
      ": " + cells[1].textContent + ", cost " + cells[2].textContent + ", " + cells[3].textContent;
    const back = document.getElementById("step-back");
    const forward = document.getElementById("step-forward");
    const focused = document.activeElement;
    back.disabled = stepAt === 0;
    forward.disabled = stepAt === rows.length - 1;
    // A disabled button loses the focus, and the arrow keys with it: Home
    // on Back would leave the stepper deaf. The other button takes it.
    if (focused === back && back.disabled) forward.focus();
    if (focused === forward && forward.disabled) back.focus();
  }

  function startStepper() {
    const stepper = document.getElementById("stepper");
    if (!stepper) return;
    stepper.hidden = false;
    document.getElementById("step-back").addEventListener("click", () => showStep(stepAt - 1));
    document.getElementById("step-forward").addEventListener("click", () => showStep(stepAt + 1));
    // The arrow keys step too while the stepper has the focus.
    stepper.addEventListener("keydown", (ev) => {
      const to = { ArrowLeft: stepAt - 1, ArrowRight: stepAt + 1, Home: 0, End: Infinity }[ev.key];
      if (to === undefined) return;
      ev.preventDefault();
      showStep(to);
    });
    for (const tr of document.querySelectorAll("#steps-table tbody tr[data-step]")) {
      tr.querySelector("summary").addEventListener("click", (ev) => {
        ev.preventDefault();
        showStep(Number(tr.dataset.step) - 1);
        stepper.scrollIntoView({ block: "nearest" });
      });
    }
    showStep(0);
  }

  async function runSteps(ev) {
    ev.preventDefault();
    const form = ev.target;
    const button = document.getElementById("steps-run");
    const out = document.getElementById("steps-out");
    button.disabled = true;
    try {
      // The page's own form, answered by the page: the walk is rendered
      // once, on the server, with or without this script.
      const resp = await fetch(form.action, {
        method: "POST", headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams(new FormData(form)).toString(),
      });
      const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
      const fresh = doc.getElementById("steps-out");
      if (!fresh) throw new Error("HTTP " + resp.status);
      out.replaceChildren(...Array.from(fresh.childNodes).map((n) => document.importNode(n, true)));
      startStepper();
    } catch (e) {
      out.replaceChildren(cell("p", "The walk failed: " + e.message, { id: "steps-error", class: "error", role: "alert" }));
    } finally {
      button.disabled = false;
      document.body.dataset.stepsRuns = String(Number(document.body.dataset.stepsRuns || 0) + 1);
    }
  }

  function startSteps() {
    const shape = document.getElementById("steps-shape");
    shape.addEventListener("change", () => showShapeFields("steps"));
    showShapeFields("steps");
    const sel = document.getElementById("steps-rule");
    sel.addEventListener("change", () => {
      const o = sel.selectedOptions[0];
      if (!o || !o.dataset.limit) return;
      document.getElementById("steps-algorithm").value = o.dataset.algorithm;
      document.getElementById("steps-limit").value = o.dataset.limit;
      document.getElementById("steps-burst").value = o.dataset.burst;
    });
    for (const id of ["steps-limit", "steps-burst", "steps-algorithm"]) {
      document.getElementById(id).addEventListener("input", () => { sel.value = ""; });
    }
    document.getElementById("steps-form").addEventListener("submit", runSteps);
    startStepper();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
