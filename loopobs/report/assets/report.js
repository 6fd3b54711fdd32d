"use strict";
(function () {
  const started = performance.now();
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const runs = data.runs;
  const PAGE = 100;
  const WF_PAGE = 200;  // waterfall bars drawn at once: a long run is windowed as runs are paged
  const CONTENT_MAX = 500;  // content entries listed for one run
  const SVGNS = "http://www.w3.org/2000/svg";
  const BAD = new Set(["failed", "loop_detected", "max_turns", "budget_exceeded", "cancelled", "incomplete"]);
  const WARN = new Set(["suspended", "sleeping", "parked"]);
  let sortKey = "t0", sortDir = 1, statusFilter = "", page = 0, selected = null;
  let wfStart = 0, contentOf = null;
  let view = runs.slice();
  const sessions = data.sessions || [];
  const sessionsById = new Map(sessions.map((s) => [s.id, s]));

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    if (attrs) for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function tokens(r) { return r.tok[0] + r.tok[1]; }
  function fmtMs(ms) {
    if (ms === null || ms === undefined) return "–";
    return ms >= 1000 ? (ms / 1000).toFixed(2) + " s" : ms >= 10 ? ms.toFixed(0) + " ms" : ms.toFixed(1) + " ms";
  }
  function fmtCost(c) { return c === null || c === undefined ? "unknown" : "$" + c.toFixed(c < 0.01 ? 5 : 4); }
  function fmtInt(n) { return n.toLocaleString("en-US"); }
  function statusBadge(s) {
    return el("span", {class: "status" + (BAD.has(s) ? " bad" : WARN.has(s) ? " warn" : "")}, s);
  }
  function value(r, key) {
    if (key === "tokens") return tokens(r);
    if (key === "cost") return r.cost === null ? -1 : r.cost;
    return r[key];
  }

  // -- header --------------------------------------------------------------------------------
  document.getElementById("source").textContent = data.source + " · generated " + data.generated;
  const totals = document.getElementById("totals");
  const byStatus = {};
  let dur = 0, tin = 0, tout = 0, cost = 0, priced = 0;
  for (const r of runs) {
    byStatus[r.status] = (byStatus[r.status] || 0) + 1;
    dur += r.dur; tin += r.tok[0]; tout += r.tok[1];
    if (r.cost !== null) { cost += r.cost; priced += 1; }
  }
  const tiles = [["runs", fmtInt(runs.length)], ["run time", fmtMs(dur)],
    ["input tokens", fmtInt(tin)], ["output tokens", fmtInt(tout)],
    ["cost", priced ? fmtCost(cost) + (priced < runs.length ? " (" + (runs.length - priced) + " unpriced)" : "") : "unknown"]];
  for (const s of Object.keys(byStatus).sort()) tiles.push([s, fmtInt(byStatus[s])]);
  for (const [label, v] of tiles) {
    const d = el("div", {"data-total": label});
    d.appendChild(el("b", null, v));
    d.appendChild(el("span", {class: "muted"}, label));
    totals.appendChild(d);
  }
  const filter = document.getElementById("status-filter");
  for (const s of Object.keys(byStatus).sort()) filter.appendChild(el("option", {value: s}, s + " (" + byStatus[s] + ")"));

  const showContent = document.getElementById("show-content");
  if (!data.hasContent) {
    showContent.disabled = true;
    document.getElementById("content-note").textContent = "the log holds no content (or the report left it out)";
  }

  // -- runs table ----------------------------------------------------------------------------
  const tbody = document.querySelector("#runs tbody");
  function applyView() {
    view = statusFilter ? runs.filter((r) => r.status === statusFilter) : runs.slice();
    view.sort((a, b) => {
      const x = value(a, sortKey), y = value(b, sortKey);
      return (x < y ? -1 : x > y ? 1 : 0) * sortDir;
    });
    page = Math.min(page, Math.max(0, Math.ceil(view.length / PAGE) - 1));
    renderTable();
  }
  function renderTable() {
    const rows = document.createDocumentFragment();
    for (const r of view.slice(page * PAGE, (page + 1) * PAGE)) {
      const tr = el("tr", {class: "run-row" + (r === selected ? " selected" : ""), "data-id": r.id});
      tr.appendChild(el("td", null, new Date(r.t0).toISOString().replace("T", " ").slice(0, 23)));
      tr.appendChild(el("td", null, r.agent));
      tr.appendChild(el("td", null, r.model));
      const st = el("td"); st.appendChild(statusBadge(r.status)); tr.appendChild(st);
      tr.appendChild(el("td", {class: "num"}, fmtMs(r.dur)));
      tr.appendChild(el("td", {class: "num"}, r.turns));
      tr.appendChild(el("td", {class: "num"}, fmtInt(tokens(r))));
      tr.appendChild(el("td", {class: "num"}, fmtCost(r.cost)));
      tr.appendChild(el("td", {class: "num"}, r.tools + (r.toolErr ? " (" + r.toolErr + " err)" : "")));
      tr.addEventListener("click", () => openRun(r));
      rows.appendChild(tr);
    }
    tbody.replaceChildren(rows);
    const pages = Math.max(1, Math.ceil(view.length / PAGE));
    document.getElementById("page-info").textContent =
      "page " + (page + 1) + " of " + pages + " · " + fmtInt(view.length) + " runs";
    document.getElementById("prev").disabled = page === 0;
    document.getElementById("next").disabled = page >= pages - 1;
  }
  for (const th of document.querySelectorAll("#runs th")) {
    th.addEventListener("click", () => {
      const key = th.dataset.key;
      sortDir = key === sortKey ? -sortDir : (key === "t0" || key === "agent" || key === "model" || key === "status" ? 1 : -1);
      sortKey = key;
      for (const other of document.querySelectorAll("#runs th")) other.removeAttribute("aria-sort");
      th.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
      applyView();
    });
  }
  filter.addEventListener("change", () => { statusFilter = filter.value; page = 0; applyView(); });
  document.getElementById("prev").addEventListener("click", () => { page -= 1; renderTable(); });
  document.getElementById("next").addEventListener("click", () => { page += 1; renderTable(); });
  showContent.addEventListener("change", () => {
    if (showContent.checked && selected && contentOf !== selected) renderContent(selected);
    document.getElementById("content-list").hidden = !showContent.checked;
  });

  // -- sessions with events of their own (backpressure, resets) ------------------------------
  function fmtTime(ms) { return new Date(ms).toISOString().replace("T", " ").slice(0, 23); }
  function countsText(s) {
    return Object.keys(s.counts).sort().map((k) => k + " ×" + fmtInt(s.counts[k])).join(", ");
  }
  if (sessions.length) {
    const runsOf = {};
    for (const r of runs) if (r.session) runsOf[r.session] = (runsOf[r.session] || 0) + 1;
    const list = document.getElementById("session-list");
    const head = el("tr");
    for (const h of ["session", "runs", "session events"]) head.appendChild(el("th", null, h));
    list.appendChild(head);
    for (const s of sessions.slice(0, PAGE)) {
      const tr = el("tr", {class: "session-row", "data-id": s.id});
      tr.appendChild(el("td", null, s.id));
      tr.appendChild(el("td", {class: "num"}, fmtInt(runsOf[s.id] || 0)));
      tr.appendChild(el("td", null, countsText(s)));
      list.appendChild(tr);
    }
    if (sessions.length > PAGE) document.getElementById("session-note").textContent =
      "the first " + PAGE + " of " + fmtInt(sessions.length) + " sessions";
    document.getElementById("sessions").hidden = false;
  }

  // -- one run: waterfall, turns, content ----------------------------------------------------
  const COLORS = {turn: "var(--turn)", chat: "var(--chat)", tool: "var(--tool)"};
  function openRun(r) {
    selected = r;
    renderTable();
    const detail = document.getElementById("detail");
    detail.hidden = false;
    document.getElementById("detail-title").textContent = r.agent + " · run " + r.id;
    document.getElementById("detail-meta").textContent =
      r.status + " · " + fmtMs(r.dur) + " · " + r.turns + " turns · tokens in " + fmtInt(r.tok[0]) +
      " / out " + fmtInt(r.tok[1]) + " / cache read " + fmtInt(r.tok[2]) + " / cache write " +
      fmtInt(r.tok[3]) + " / reasoning " + fmtInt(r.tok[4]) + " · cost " + fmtCost(r.cost);
    document.getElementById("detail-error").textContent = r.error || "";
    wfStart = 0;
    drawWaterfall(r);
    drawTurns(r);
    drawSessionEvents(r);
    const list = document.getElementById("content-list");
    list.replaceChildren();
    contentOf = null;
    if (showContent.checked) renderContent(r);  // else built when the toggle asks for it
    list.hidden = !showContent.checked;
    detail.scrollIntoView({block: "nearest"});
  }
  function renderContent(r) {
    const list = document.getElementById("content-list");
    const rows = document.createDocumentFragment();
    for (const [label, text] of r.content.slice(0, CONTENT_MAX)) {
      rows.appendChild(el("dt", null, label));
      rows.appendChild(el("dd", null, text));
    }
    if (r.content.length > CONTENT_MAX) {
      rows.appendChild(el("dt", {class: "muted"}, "… " + fmtInt(r.content.length - CONTENT_MAX) + " more entries not shown"));
    }
    list.replaceChildren(rows);
    contentOf = r;
  }
  function drawSessionEvents(r) {
    const box = document.getElementById("session-events");
    const s = r.session ? sessionsById.get(r.session) : undefined;
    box.hidden = !s;
    if (!s) return;
    document.getElementById("session-events-meta").textContent = "session " + s.id + ": " + countsText(s);
    const table = document.getElementById("session-table");
    table.replaceChildren();
    for (const [at, kind, text] of s.events) {
      const tr = el("tr");
      tr.appendChild(el("td", null, fmtTime(at)));
      tr.appendChild(el("td", null, kind));
      tr.appendChild(el("td", null, text));
      table.appendChild(tr);
    }
  }
  // The bars the waterfall draws now: the whole run, or a window of WF_PAGE bars.
  function barWindow(r) {
    const from = Math.min(wfStart, Math.max(0, r.bars.length - 1));
    return [from, Math.min(r.bars.length, from + WF_PAGE)];
  }
  function drawWaterfall(r) {
    const host = document.getElementById("waterfall");
    const labelW = 230, width = Math.max(720, host.clientWidth || 900), plotW = width - labelW - 16;
    const [from, to] = barWindow(r);
    const windowed = r.bars.length > WF_PAGE;
    const rowH = 18, top = 30, bars = r.bars.slice(from, to);
    const height = top + Math.max(1, bars.length) * rowH + 10;
    // A window spans its own bars' time, so its bars stay readable.
    let lo = 0, hi = r.dur;
    if (windowed && bars.length) {
      lo = Math.min(...bars.map((b) => b[2]));
      hi = Math.max(...bars.map((b) => b[3]));
    }
    const span = Math.max(hi - lo, 0.001);
    const x = (ms) => labelW + (Math.min(Math.max(ms - lo, 0), span) / span) * plotW;
    const pager = document.getElementById("wf-pager");
    pager.hidden = !windowed;
    if (windowed) {
      const turns = bars.map((b) => b[4]);
      document.getElementById("wf-info").textContent = "bars " + fmtInt(from + 1) + "–" + fmtInt(to) +
        " of " + fmtInt(r.bars.length) + " · turns " + Math.min(...turns) + "–" + Math.max(...turns);
      document.getElementById("wf-prev").disabled = from === 0;
      document.getElementById("wf-next").disabled = to >= r.bars.length;
    }
    const root = svg("svg", {width, height, viewBox: "0 0 " + width + " " + height, role: "img",
                             "aria-label": "waterfall of run " + r.id});
    for (let i = 0; i <= 5; i += 1) {
      const t = lo + (span * i) / 5, gx = x(t);
      root.appendChild(svg("line", {x1: gx, x2: gx, y1: top - 6, y2: height, stroke: "#eef0f3"}));
      root.appendChild(svg("text", {x: gx, y: 12, "text-anchor": i === 0 ? "start" : i === 5 ? "end" : "middle", class: "axis"}, fmtMs(t)));
    }
    bars.forEach((b, i) => {
      const [kind, label, start, end, , status, detail] = b;
      const y = top + i * rowH;
      const g = svg("g", {class: "bar bar-" + kind, "data-status": status});
      const indent = kind === "turn" ? 0 : 14;
      g.appendChild(svg("text", {x: 4 + indent, y: y + 12}, label.length > 32 ? label.slice(0, 31) + "…" : label));
      const fill = status === "error" ? "var(--err)" : status === "open" ? "var(--open)" : COLORS[kind];
      const x0 = x(start), x1 = Math.max(x(end), x0 + 2);
      g.appendChild(svg("rect", {x: x0, y: y + 3, width: x1 - x0, height: rowH - 6, rx: 2, fill, opacity: kind === "turn" ? 0.7 : 1}));
      const ttft = r.ttft[String(from + i)];
      if (kind === "chat" && ttft !== undefined) {
        const tx = x(start + ttft);
        g.appendChild(svg("line", {class: "ttft", x1: tx, x2: tx, y1: y + 1, y2: y + rowH - 1, stroke: "#0b1f44", "stroke-width": 2}));
      }
      g.appendChild(svg("title", {}, label + " · " + fmtMs(end - start) + (ttft !== undefined ? " · first chunk after " + fmtMs(ttft) : "") + (detail ? " · " + detail : "") + (status === "open" ? " · never closed in the log" : "")));
      root.appendChild(g);
    });
    for (const [label, at, text] of r.marks) {
      if (at < lo || at > lo + span) continue;  // outside the window drawn
      const mx = x(at);
      const g = svg("g", {class: "mark"});
      g.appendChild(svg("line", {x1: mx, x2: mx, y1: top - 6, y2: height, stroke: "#7c3aed", "stroke-dasharray": "3 3"}));
      g.appendChild(svg("path", {d: "M" + (mx - 5) + " " + (top - 12) + " h10 l-5 7 z", fill: "#7c3aed"}));
      g.appendChild(svg("title", {}, label + " at " + fmtMs(at) + (text ? ": " + text : "")));
      root.appendChild(g);
    }
    host.replaceChildren(root);
  }
  function drawTurns(r) {
    const table = document.getElementById("turn-table");
    table.replaceChildren();
    const head = el("tr");
    for (const h of ["turn", "input", "output", "cache read", "cache write", "reasoning", "cost"]) {
      head.appendChild(el("th", h === "turn" ? null : {class: "num"}, h));
    }
    table.appendChild(head);
    // Windowed with the waterfall: the turns of the bars drawn.
    const [from, to] = barWindow(r);
    const shown = r.bars.length > WF_PAGE ? new Set(r.bars.slice(from, to).map((b) => String(b[4]))) : null;
    for (const [turn, t] of Object.entries(r.turnTot)) {
      if (shown && !shown.has(turn)) continue;
      const tr = el("tr");
      tr.appendChild(el("td", null, turn));
      for (let i = 0; i < 5; i += 1) tr.appendChild(el("td", {class: "num"}, fmtInt(t[i])));
      tr.appendChild(el("td", {class: "num"}, fmtCost(t[5])));
      table.appendChild(tr);
    }
  }

  function moveWindow(by) {
    if (!selected) return;
    wfStart = Math.max(0, wfStart + by);
    drawWaterfall(selected);
    drawTurns(selected);
  }
  document.getElementById("wf-prev").addEventListener("click", () => moveWindow(-WF_PAGE));
  document.getElementById("wf-next").addEventListener("click", () => moveWindow(WF_PAGE));

  let resizeTimer = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (selected) drawWaterfall(selected); }, 100);
  });

  applyView();
  window.loopobsReport = {ready: true, runs: runs.length, renderMs: performance.now() - started};
})();
