// The trajectory viewer (harness/report/view.py embeds this file): runs -> episodes -> one episode's steps, and two
// runs of one task side by side. Plain JS, no libraries, no network. Every text from a transcript goes into the
// page through textContent / text nodes (h() below), never through innerHTML: transcripts hold HTML-like text.
"use strict";

const INDEX = JSON.parse(document.getElementById("index").textContent);
const RUNS = new Map(INDEX.runs.map((r) => [r.id, r]));
const STATUSES = ["kept", "summarized", "masked", "compressed", "pointer", "inserted"];
const cache = new Map(); // blob id -> Promise of the episode's data
const filters = new Map(); // run id -> its episode table's filter and sort state (kept while navigating)
let renderToken = 0; // a newer route wins over an older one still decompressing
let shown = null; // the episode page on screen: {run, ep, data, step}

// ---- DOM helpers -----------------------------------------------------------------------------------------------
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "data") for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = String(dv);
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

function link(href, ...children) { return h("a", { href }, ...children); }
const enc = encodeURIComponent;
function runHref(run) { return `#/run/${enc(run)}`; }
function epHref(run, ep) { return `${runHref(run)}/ep/${enc(ep)}`; }
function stepHref(run, ep, step) { return `${epHref(run, ep)}/step/${step}`; }
function compareHref(a, b, task) { return `#/compare/${enc(a)}/${enc(b)}/${enc(task)}`; }

function none(x) { return x === null || x === undefined; }
function fmtInt(n) { return none(n) ? "–" : Number(n).toLocaleString("en-US"); }
function fmtScore(x) { return none(x) ? "–" : Number(x).toFixed(2); }
function fmtPct(x) { return none(x) ? "–" : `${(100 * x).toFixed(1)}%`; }
function yesNo(v) {
  if (none(v)) return h("span", { class: "muted" }, "–");
  return h("span", { class: v ? "yes" : "no" }, v ? "yes" : "no");
}
function runLabel(run) {
  return [h("span", { class: "swatch", style: `background:${safeColour(run.colour)}` }), run.display];
}
function safeColour(c) { return /^#[0-9a-fA-F]{3,8}$/.test(c || "") ? c : "#888"; }
function simBadge(run) {
  if (!run.simulated) return null;
  return h("span", { class: "badge simulated", title: "played by a simulated agent, not a real model" }, "simulated");
}
function usedBadge(run) { // the run the tables and figures use for its experiment (harness.report.runs.choose)
  if (!run.reported) return null;
  const why = "the run `make tables` and `make plots` use for this experiment";
  return h("span", { class: "badge reported", title: why }, "in tables");
}
function byReported(runs) { return [...runs].sort((a, b) => (b.reported ? 1 : 0) - (a.reported ? 1 : 0)); }
function runOption(r) { return h("option", { value: r.id }, `${r.display} · ${r.benchmark} · ${r.id}`); }
function table(id, heads, rows) {
  return h("table", { id }, h("thead", {}, h("tr", {}, heads.map((t) => h("th", {}, t)))), h("tbody", {}, rows));
}
function longText(text) {
  const pre = h("pre", { class: "text", title: "double-click: show all / scroll" }, text);
  pre.addEventListener("dblclick", () => pre.classList.toggle("expanded"));
  return pre;
}

// ---- data ------------------------------------------------------------------------------------------------------
async function inflate(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return JSON.parse(await new Response(stream).text());
}

function loadEpisode(summary) {
  if (!cache.has(summary.blob)) {
    const el = document.getElementById(summary.blob);
    const p = el ? inflate(el.textContent.trim()) : Promise.reject(new Error(`no data for ${summary.id}`));
    cache.set(summary.blob, p.then(prepare));
  }
  return cache.get(summary.blob);
}

// Long texts come stored once in `strings` (view.py's pack_episode); put them back where they were used.
function prepare(data) {
  const text = (i) => (i === null || i === undefined ? null : data.strings[i]);
  for (const m of data.messages) m.text = text(m.text);
  for (const s of data.steps) {
    s.result = text(s.result);
    s.reply = text(s.reply);
    for (const m of s.shown) m.text = text(m.text);
    for (const f of s.fields) f.why = text(f.why);
  }
  delete data.strings;
  data.byIndex = new Map(data.messages.map((m) => [m.i, m]));
  return data;
}

function episodeOf(run, id) { return run.episodes.find((e) => e.id === id); }

// ---- routing ---------------------------------------------------------------------------------------------------
function parseHash() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter((p) => p !== "").map(decodeURIComponent);
  return parts;
}

async function route() {
  const token = ++renderToken;
  const page = document.getElementById("page");
  page.dataset.ready = "0";
  const p = parseHash();
  try {
    if (p.length === 0) showRuns();
    else if (p[0] === "run" && p.length === 2) showRun(p[1]);
    else if (p[0] === "run" && p[2] === "ep" && (p.length === 4 || (p.length === 6 && p[4] === "step")))
      await showEpisode(p[1], p[3], p.length === 6 ? Number(p[5]) : null, token);
    else if (p[0] === "compare" && p.length === 4) await showCompare(p[1], p[2], p[3], token);
    else notFound(`no such page: ${location.hash}`);
  } catch (err) {
    if (token !== renderToken) return;
    setPage("error", [], h("p", { class: "error", id: "error" }, `could not show this page: ${err.message || err}`));
  }
  if (token === renderToken) page.dataset.ready = "1";
}

function setPage(kind, crumbs, ...content) {
  const page = document.getElementById("page");
  page.dataset.page = kind;
  fill(page, content);
  const nav = document.getElementById("crumbs");
  const items = [link("#/", "Runs")];
  for (const c of crumbs) items.push(h("span", { class: "sep" }, "›"), c);
  fill(nav, items);
  if (kind !== "episode") shown = null;
}

function notFound(message) {
  setPage("missing", [], h("p", { class: "error", id: "error" }, message), link("#/", "back to the runs"));
}

// ---- runs page -------------------------------------------------------------------------------------------------
function showRuns() {
  const head = ["Experiment", "Run", "Policy", "Benchmark", "Model", "Status", "Budget", "Episodes", "Completed",
    "Score"];
  const num = (x) => h("td", { class: "num" }, x);
  const rows = INDEX.runs.map((r) => h("tr", { class: "run-row clickable", data: { run: r.id },
    onclick: () => { location.hash = runHref(r.id); } },
  h("td", {}, link(runHref(r.id), runLabel(r)), " ", simBadge(r), " ", usedBadge(r)),
  h("td", { class: "muted", title: r.path }, r.id),
  [r.policy, r.benchmark, r.model, r.status].map((t) => h("td", {}, t)),
  num(none(r.budget_fraction) ? "–" : r.budget_fraction),
  num(fmtInt(r.stats.n)), num(fmtPct(r.stats.completion)), num(fmtScore(r.stats.score))));
  const heads = h("tr", {}, head.map((t, i) => h("th", { class: i >= 6 ? "num" : null }, t)));
  setPage("runs", [], h("h2", {}, `Runs (${INDEX.runs.length})`),
    h("table", { id: "runs" }, h("thead", {}, heads), h("tbody", {}, rows)),
    h("p", { class: "muted" }, "Completed: share of episodes completed; Score: mean graded score (PinchBench, ",
      "Odysseys). Runs marked SIMULATED were played by a simulated or scripted agent, not a real model."));
}

// ---- episodes page ---------------------------------------------------------------------------------------------
const EP_COLUMNS = [
  ["id", "Episode", false], ["completed", "Completed", false], ["score", "Score", true],
  ["termination", "Termination", false], ["input_tokens", "Input tokens", true],
  ["output_tokens", "Output tokens", true], ["n_steps", "Steps", true], ["error", "Error", false]];

function showRun(runId) {
  const run = RUNS.get(runId);
  if (!run) return notFound(`no run ${runId} in this report`);
  if (!filters.has(runId)) filters.set(runId, { termination: "", completed: "", text: "", sort: "id", dir: 1 });
  const st = filters.get(runId);
  const body = h("tbody");
  const count = h("span", { id: "episode-count", class: "muted" });
  const terms = [...new Set(run.episodes.map((e) => e.termination))].sort();
  const redraw = () => drawEpisodes(run, st, body, count, table);
  const set = (key) => (e) => { st[key] = e.target.value; redraw(); };
  const termSel = h("select", { id: "filter-termination", onchange: set("termination") },
    h("option", { value: "" }, "any"), terms.map((t) => h("option", { value: t }, t)));
  const compSel = h("select", { id: "filter-completed", onchange: set("completed") },
    [["", "any"], ["yes", "yes"], ["no", "no"], ["unknown", "unknown"]].map(([v, t]) => h("option", { value: v }, t)));
  const text = h("input", { id: "filter-text", type: "search", placeholder: "task id contains…",
    oninput: set("text") });
  termSel.value = st.termination; compSel.value = st.completed; text.value = st.text;
  // a column nobody in this run has (no graded score on the expense benchmark, no errors) is left out
  const columns = EP_COLUMNS.filter(([key]) => !["score", "error"].includes(key)
    || run.episodes.some((e) => !none(e[key])));
  st.columns = columns.map(([key]) => key);
  const header = h("tr", {}, columns.map(([key, label, num]) => h("th", { "data-sort": key, class: num ? "num" : null,
    onclick: () => { st.dir = st.sort === key ? -st.dir : 1; st.sort = key; redraw(); } }, label)));
  const table = h("table", { id: "episodes" }, h("thead", {}, header), body);
  setPage("run", [h("span", {}, runLabel(run))], runHeader(run),
    h("div", { class: "filters" }, h("label", {}, "Termination ", termSel), h("label", {}, "Completed ", compSel),
      h("label", {}, "Task ", text), count), table);
  redraw();
}

function runHeader(run) {
  return [h("h2", {}, runLabel(run), " ", simBadge(run)),
    h("dl", { class: "summary-grid" },
      ["Policy", run.policy, "Benchmark", run.benchmark, "Model", run.model, "Status", run.status,
        "Episodes", fmtInt(run.stats.n), "Completed", fmtPct(run.stats.completion),
        "Mean score", fmtScore(run.stats.score), "Folder", run.path].map((t, i) => h(i % 2 ? "dd" : "dt", {}, t)))];
}

function drawEpisodes(run, st, body, count, table) {
  const q = st.text.trim().toLowerCase();
  const rows = run.episodes.filter((e) => (!st.termination || e.termination === st.termination)
    && (!st.completed || completedKey(e.completed) === st.completed)
    && (!q || e.task_id.toLowerCase().includes(q) || e.id.toLowerCase().includes(q)));
  rows.sort((a, b) => st.dir * compare(a[st.sort], b[st.sort]) || compare(a.task_id, b.task_id) || a.run - b.run);
  body.replaceChildren(...rows.map((e) => episodeRow(run, e, st.columns)));
  count.textContent = `showing ${rows.length} of ${run.episodes.length}`;
  for (const th of table.querySelectorAll("th[data-sort]")) {
    if (th.dataset.sort === st.sort) th.setAttribute("aria-sort", st.dir > 0 ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  }
}

function completedKey(v) { return v === null || v === undefined ? "unknown" : v ? "yes" : "no"; }

function compare(a, b) {
  const na = none(a), nb = none(b);
  if (na || nb) return na && nb ? 0 : na ? 1 : -1; // unknown values last either way
  if (typeof a === "number" && typeof b === "number") return a - b;
  if (typeof a === "boolean") return Number(a) - Number(b);
  return String(a).localeCompare(String(b), "en", { numeric: true });
}

const CELLS = {
  id: (run, e) => h("td", {}, link(epHref(run.id, e.id), e.id)),
  completed: (run, e) => h("td", {}, yesNo(e.completed)),
  score: (run, e) => h("td", { class: "num" }, fmtScore(e.score)),
  termination: (run, e) => h("td", {}, e.termination),
  input_tokens: (run, e) => h("td", { class: "num" }, fmtInt(e.input_tokens)),
  output_tokens: (run, e) => h("td", { class: "num" }, fmtInt(e.output_tokens)),
  n_steps: (run, e) => h("td", { class: "num" }, fmtInt(e.n_steps)),
  error: (run, e) => h("td", { class: "muted" }, e.error || "")};

function episodeRow(run, e, columns) {
  return h("tr", { class: "episode-row clickable", data: { episode: e.id, termination: e.termination,
    completed: completedKey(e.completed) }, onclick: () => { location.hash = epHref(run.id, e.id); } },
  columns.map((key) => CELLS[key](run, e)));
}

// ---- episode page ----------------------------------------------------------------------------------------------
async function showEpisode(runId, epId, step, token) {
  const run = RUNS.get(runId);
  const summary = run && episodeOf(run, epId);
  if (!summary) return notFound(run ? `no episode ${epId} in run ${run.display}` : `no run ${runId} in this report`);
  if (shown && shown.run === run && shown.ep === summary) return selectStep(focusOr(step, shown.data)); // only the step
  const data = await loadEpisode(summary);
  if (token !== renderToken) return;
  const max = Math.max(1, ...data.steps.map((x) => x.input_tokens));
  const items = data.steps.map((s) => timelineItem(run, summary, s, max));
  const list = h("ol", { class: "timeline", id: "timeline" }, items);
  const steps = data.steps.length ? h("div", { class: "episode" }, list, h("section", { id: "step-detail" }))
    : h("p", { class: "muted" }, "This episode has no steps.");
  setPage("episode", [link(runHref(run.id), runLabel(run)), h("span", {}, summary.id)],
    episodeHeader(run, summary), branchLinks(run, summary), comparePicker(run, summary),
    markedSteps(run, summary, data), h("h3", {}, `Steps (${data.steps.length})`), steps);
  shown = { run, ep: summary, data, step: null };
  if (data.steps.length) selectStep(focusOr(step, data));
}

// A link without a step opens a failed episode on its first marked step (harness.report.trajectory's `focus`).
function focusOr(step, data) { return step === null && !none(data.focus) ? data.focus : step; }

function episodeHeader(run, e) {
  const lines = e.explanation || [];
  return [h("h2", {}, e.id, " ", simBadge(run)),
    h("dl", { class: "summary-grid" },
      ["Run", runLabel(run), "Task", e.task_id, "Completed", yesNo(e.completed), "Score", fmtScore(e.score),
        "Termination", e.termination, "Tokens", `${fmtInt(e.input_tokens)} in / ${fmtInt(e.output_tokens)} out`,
        "Error", e.error || "–"].map((t, i) => h(i % 2 ? "dd" : "dt", {}, t))),
    h("h3", {}, "Why this score"),
    lines.length ? h("ul", { class: "explanation", id: "explanation" }, lines.map((l) => h("li", {}, l)))
      : h("p", { class: "muted", id: "explanation" }, "No explanation was recorded for this score.")];
}

// The steps to look at first (harness.report.trajectory.failure_marks): a failure event fired there, or the view
// last showed a line the score says is missing. A failed episode opens on the first of them.
function markedSteps(run, e, data) {
  const marked = data.steps.filter((s) => (s.marks || []).length);
  if (!marked.length) return null;
  return [h("h3", {}, "Where it went wrong"), h("ul", { class: "marks", id: "marked-steps" },
    marked.map((s) => h("li", {}, link(stepHref(run.id, e.id, s.step), `step ${s.step}`), ": ", s.marks.join("; "))))];
}

// A branch (make branch, harness/branch.py) says what it was branched from and opens beside its original; an
// original lists its branches in this report.
function branchLinks(run, e) {
  const from = e.branched_from || run.branched_from;
  const items = [];
  if (from) {
    const original = INDEX.runs.find((r) => r.resolved === from.run_resolved && episodeOf(r, from.episode));
    const change = JSON.stringify(from.change || {});
    items.push(h("li", {}, `Branched from ${from.episode} at step ${from.step} (change: ${change}; `,
      `${from.replay_divergences || 0} replay divergences): `, original ? [link(epHref(original.id, from.episode),
        "the original"), " · ", link(compareHref(original.id, run.id, e.id), "side by side")]
        : `the original (${from.run}) is not in this report`));
  }
  for (const r of INDEX.runs.filter((x) => x.branched_from && x.branched_from.run_resolved === run.resolved
      && x.branched_from.episode === e.id && episodeOf(x, e.id)))
    items.push(h("li", {}, `Branch from step ${r.branched_from.step} (${r.branched_from.label}): `,
      link(epHref(r.id, e.id), "the branch"), " · ", link(compareHref(run.id, r.id, e.id), "side by side")));
  return items.length ? h("ul", { class: "branches", id: "branches" }, items) : null;
}

function comparePicker(run, e) {
  const others = byReported(INDEX.runs.filter((r) => r !== run && r.episodes.some((x) => x.task_id === e.task_id)));
  if (!others.length) return null;
  const sel = h("select", { id: "compare-with" }, h("option", { value: "" }, "choose a run…"), others.map(runOption));
  sel.addEventListener("change", () => { if (sel.value) location.hash = compareHref(run.id, sel.value, e.id); });
  return h("div", { class: "pickers" }, h("label", {}, "Compare this task with ", sel));
}

function timelineItem(run, e, s, max) {
  const marks = s.marks || [];
  return h("li", { class: [s.over_budget ? "over" : "", marks.length ? "marked" : ""].join(" ").trim() || null,
    data: { step: s.step }, title: marks.length ? marks.join("\n") : null,
    onclick: () => { location.hash = stepHref(run.id, e.id, s.step); } },
  h("div", { class: "step-head" }, marks.length ? h("span", { class: "mark", "aria-label": "marked" }, "⚑ ") : null,
    h("a", { href: stepHref(run.id, e.id, s.step) }, `step ${s.step}`),
    h("span", { class: "muted" }, `${fmtInt(s.input_tokens)} tok`, s.over_budget ? " · over" : "",
      s.dropped.length ? ` · ${s.dropped.length} dropped` : "")),
  h("div", { class: "step-action" }, firstLine(s.action || s.reply)),
  h("div", { class: "bar", style: `width:${Math.round(100 * s.input_tokens / max)}%` }));
}

function firstLine(text) { return String(text || "").split("\n")[0].slice(0, 160); }

function selectStep(stepNo) {
  const { data, run, ep } = shown;
  const index = stepNo === null ? 0 : data.steps.findIndex((s) => s.step === stepNo);
  const detail = document.getElementById("step-detail");
  if (index < 0) {
    fill(detail, h("p", { class: "error", id: "error" }, `no step ${stepNo} in ${ep.id}`));
    return;
  }
  const s = data.steps[index];
  shown.step = s.step;
  for (const li of document.querySelectorAll("#timeline li"))
    li.classList.toggle("selected", Number(li.dataset.step) === s.step);
  const prev = data.steps[index - 1], next = data.steps[index + 1];
  detail.dataset.step = String(s.step);
  fill(detail, h("div", { class: "step-nav" },
    prev ? link(stepHref(run.id, ep.id, prev.step), "← previous") : h("span", { class: "muted" }, "← previous"),
    next ? link(stepHref(run.id, ep.id, next.step), "next →") : h("span", { class: "muted" }, "next →"),
    h("span", { class: "keys" }, "(keys ← →)")), stepBody(s, data));
  document.querySelector("#timeline li.selected")?.scrollIntoView({ block: "nearest" });
}

function stepBody(s, data) {
  // why this step is marked and what fired here come first, above the view, the texts and the raw JSON
  return [h("h3", {}, `Step ${s.step} `, s.over_budget ? h("span", { class: "badge over" }, "over budget") : null),
    (s.marks || []).length ? h("ul", { class: "marks", id: "step-marks" }, s.marks.map((m) => h("li", {}, "⚑ ", m)))
      : null,
    s.events.length ? [h("h3", {}, "Events"), eventsTable(s)] : null,
    h("p", { class: "counts", id: "step-counts" }, stepCounts(s)),
    h("h3", {}, "What the model saw ", provenanceLabel(s)), seenList(s, data, "seen"),
    s.fields.length ? [h("h3", {}, "Fields (WAAC): level and why"), fieldsTable(s)] : null,
    s.branch_command ? [h("h3", {}, "What if the policy had kept it?"),
      h("pre", { class: "branch-command", id: "branch-command" }, s.branch_command)] : null,
    h("h3", {}, "Action"), h("pre", { id: "action" }, s.action || "–"),
    h("h3", {}, "Reply"), h("pre", { id: "reply" }, s.reply || "–"),
    h("h3", {}, "Result"), none(s.result) ? h("p", { class: "muted", id: "result" },
      "no result (the episode ended here)") : h("pre", { id: "result" }, s.result),
    Object.keys(s.decisions || {}).length ? h("details", { class: "decisions" },
      h("summary", {}, "policy decisions (raw)"), h("pre", {}, JSON.stringify(s.decisions, null, 2))) : null];
}

// Whether the statuses below are the policy's own record (view_provenance) or inferred from the text, for
// transcripts written before policies recorded it (harness.report.trajectory).
function provenanceLabel(s) {
  return s.provenance === "recorded"
    ? h("span", { class: "badge prov-recorded", id: "provenance", title: "each message's kind and sources as " +
      "the policy recorded them when it built the view" }, "as recorded by the policy")
    : h("span", { class: "badge prov-inferred", id: "provenance", title: "this transcript predates recorded " +
      "provenance: kept / summarized / masked / ... are inferred from the text" }, "inferred");
}

function stepCounts(s) {
  const n = {};
  for (const m of s.shown) n[m.status] = (n[m.status] || 0) + 1;
  const parts = STATUSES.filter((k) => n[k]).map((k) => `${n[k]} ${k}`);
  if (s.dropped.length) parts.push(`${s.dropped.length} dropped`);
  const budget = none(s.budget) ? "no budget" : `budget ${fmtInt(s.budget)}`;
  return `${fmtInt(s.input_tokens)} input tokens (${budget}) · ${s.n_history} messages in the history · ` +
    `shown: ${parts.join(", ") || "nothing"}`;
}

// What the model saw, in its order, with each dropped history message placed (collapsed) where it sat in the
// history: before the first shown message that comes after it in the history.
function seenList(s, data, id = null) {
  const dropped = [...s.dropped].sort((a, b) => a.ref - b.ref);
  const out = [];
  let d = 0;
  for (const m of s.shown) {
    if (!none(m.ref))
      while (d < dropped.length && dropped[d].ref < m.ref) out.push(droppedItem(dropped[d++], data));
    out.push(shownItem(m, data));
  }
  while (d < dropped.length) out.push(droppedItem(dropped[d++], data));
  return h("div", { class: "msgs", id }, out);
}

function shownItem(m, data) {
  const orig = none(m.ref) ? null : data.byIndex.get(m.ref);
  const kept = m.status === "kept";
  const text = kept ? (orig ? orig.text : "") : m.text;
  return h("div", { class: "msg", data: { status: m.status, ref: m.ref ?? "", role: m.role } },
    msgHead(m.status, m.role, m.ref, kept && orig ? orig.tokens : null, m.note),
    text ? longText(text) : null,
    kept && orig && orig.tool_calls.length ? callsOf(orig) : null,
    !kept && orig ? h("details", { class: "original" }, h("summary", {}, `original message #${orig.i}`),
      longText(orig.text), orig.tool_calls.length ? callsOf(orig) : null) : null);
}

function droppedItem(d, data) {
  const orig = data.byIndex.get(d.ref);
  return h("details", { class: "msg", data: { status: "dropped", ref: d.ref, role: orig ? orig.role : "" } },
    h("summary", {}, msgHead("dropped", orig ? orig.role : "?", d.ref, orig ? orig.tokens : null, d.note)),
    orig ? [longText(orig.text), orig.tool_calls.length ? callsOf(orig) : null]
      : h("p", { class: "muted" }, "not in the history"));
}

function msgHead(status, role, ref, tokens, note) {
  return h("span", { class: "msg-head" }, h("span", { class: `badge s-${status}` }, status),
    h("span", { class: "role" }, role), none(ref) ? null : h("span", { class: "muted" }, `#${ref}`),
    none(tokens) ? null : h("span", { class: "muted" }, `${fmtInt(tokens)} tok`),
    note ? h("span", { class: "note" }, note) : null);
}

function callsOf(m) { return h("div", { class: "calls" }, m.tool_calls.map((c) => `→ ${c}\n`)); }

function fieldsTable(s) {
  return table("fields", ["Field", "Level", "Why", "Message"], s.fields.map((f) => h("tr", { class: "field-row",
    data: { level: f.level } }, h("td", {}, h("code", {}, f.field)),
  h("td", {}, h("span", { class: `badge l-${f.level}` }, f.level)), h("td", {}, f.why),
  h("td", { class: "num" }, none(f.message) ? "–" : `#${f.message}`))));
}

function eventsTable(s) {
  return table("events", ["Mechanism", "Fact", "Detail"], s.events.map((e) => h("tr", { class: "event-row" },
    h("td", {}, e.mechanism), h("td", {}, e.fact), h("td", {}, e.detail))));
}

function onKey(ev) {
  if (!shown || shown.step === null || ev.target.closest("input, select, textarea")) return;
  if (ev.key !== "ArrowLeft" && ev.key !== "ArrowRight") return;
  const i = shown.data.steps.findIndex((s) => s.step === shown.step) + (ev.key === "ArrowRight" ? 1 : -1);
  const s = shown.data.steps[i];
  if (s) location.hash = stepHref(shown.run.id, shown.ep.id, s.step);
}

// ---- compare page ----------------------------------------------------------------------------------------------
// `key` is a task id (each run's first episode of it) or an episode id (that episode, else the same task's first).
function pickEpisode(run, key) {
  const exact = episodeOf(run, key);
  const task = exact ? exact.task_id : key;
  const same = run.episodes.filter((e) => e.task_id === task).sort((a, b) => a.run - b.run);
  return exact || same.find((e) => key.endsWith(`__run${e.run}`)) || same[0] || null;
}

async function showCompare(aId, bId, key, token) {
  const runs = [RUNS.get(aId), RUNS.get(bId)];
  const missing = [aId, bId].filter((id, i) => !runs[i]);
  if (missing.length) return notFound(`no run ${missing.join(", ")} in this report`);
  const eps = runs.map((r) => pickEpisode(r, key));
  const lacking = runs[eps[0] ? 1 : 0];
  if (!eps[0] || !eps[1]) return notFound(`task ${key} is not in ${lacking.display} (${lacking.id})`);
  const datas = await Promise.all(eps.map(loadEpisode));
  if (token !== renderToken) return;
  const steps = [...new Set(datas.flatMap((d) => d.steps.map((s) => s.step)))].sort((a, b) => a - b);
  const task = eps[0].task_id;
  const first = firstDivergence(steps, datas);
  setPage("compare", [h("span", {}, `compare ${task}`)],
    h("h2", {}, `Task ${task}: two runs side by side`), comparePickers(runs, eps[0]),
    h("p", { class: first ? "divergence" : "divergence muted", id: "divergence" }, first
      ? [link("#first-divergence", `step ${first.step}`), `: the first step where ${first.what}`]
      : "The two runs showed the model the same view and it acted the same at every step."),
    h("div", { class: "compare-head", id: "compare" }, h("div"),
      runs.map((r, i) => compareColumnHead(r, eps[i]))),
    steps.map((n) => h("div", { class: first && first.step === n ? "compare-row diverged" : "compare-row",
      id: first && first.step === n ? "first-divergence" : null, data: { step: n } },
    h("div", { class: "stepno" }, `step ${n}`, first && first.step === n ? h("div", { class: "mark" }, "first difference")
      : null), [0, 1].map((i) => compareCell(runs[i], eps[i], datas[i], n, i)))));
  if (first) document.getElementById("first-divergence").scrollIntoView({ block: "start" }); // jump to it
}

// The first step where the two episodes differ: what the model saw (each view message's role and text, a kept
// message's calls too), else what it did (action and reply), else where one episode ended; null if none.
function firstDivergence(steps, datas) {
  for (const n of steps) {
    const [a, b] = datas.map((d) => d.steps.find((x) => x.step === n));
    if (!a || !b) return { step: n, what: `only ${a ? "the left" : "the right"} episode is still running` };
    if (viewKey(a, datas[0]) !== viewKey(b, datas[1])) return { step: n, what: "what the model saw differs" };
    if (a.action !== b.action || a.reply !== b.reply) return { step: n, what: "the model's actions differ" };
  }
  return null;
}

function viewKey(s, data) {
  return JSON.stringify(s.shown.map((m) => {
    const orig = m.status === "kept" && !none(m.ref) ? data.byIndex.get(m.ref) : null;
    return [m.role, orig ? orig.text : m.text, orig ? orig.tool_calls : []];
  }));
}

function comparePickers(runs, e) {
  const same = INDEX.runs.filter((r) => r.episodes.some((x) => x.task_id === e.task_id));
  const sel = (side) => {
    const s = h("select", { id: `compare-${side ? "b" : "a"}` }, same.map(runOption));
    s.value = runs[side].id;
    s.addEventListener("change", () => {
      const ids = [runs[0].id, runs[1].id];
      ids[side] = s.value;
      location.hash = compareHref(ids[0], ids[1], e.id); // the same repetition where the other run has it
    });
    return s;
  };
  return h("div", { class: "pickers" }, h("label", {}, "Left ", sel(0)), h("label", {}, "Right ", sel(1)));
}

function compareColumnHead(run, e) {
  return h("div", { class: "compare-col", data: { run: run.id, episode: e.id } },
    h("div", {}, h("strong", {}, runLabel(run)), " ", simBadge(run)),
    h("div", { class: "muted" }, `${run.benchmark} · ${run.policy} · ${run.model}`),
    h("div", {}, link(epHref(run.id, e.id), e.id), " · completed ", yesNo(e.completed),
      " · score ", fmtScore(e.score)),
    h("div", {}, `${e.termination} · ${fmtInt(e.n_steps)} steps · ${fmtInt(e.input_tokens)} input tokens`),
    (e.explanation || []).length ? h("ul", { class: "explanation" }, e.explanation.map((l) => h("li", {}, l))) : null);
}

function compareCell(run, e, data, n, side) {
  const s = data.steps.find((x) => x.step === n);
  if (!s) return h("div", { class: "compare-cell missing", data: { side: side ? "b" : "a" } }, "(episode over)");
  const seen = h("details", { class: "seen" }, h("summary", {}, "what the model saw"));
  seen.addEventListener("toggle", () => { // rendered when first opened: a long episode has many steps
    if (seen.open && seen.children.length === 1) seen.append(seenList(s, data));
  });
  return h("div", { class: "compare-cell", data: { side: side ? "b" : "a", step: n } },
    h("div", { class: "counts" }, link(stepHref(run.id, e.id, n), "open"), " · ",
      s.over_budget ? [h("span", { class: "badge over" }, "over budget"), " "] : null, stepCounts(s)),
    h("pre", { class: "action" }, excerpt(s.reply || s.action || "–")),
    none(s.result) ? null : h("pre", { class: "result" }, excerpt(s.result)),
    seen);
}

// A side-by-side cell shows the start of a long text (the whole is one click away, on the step's own page).
function excerpt(text, lines = 8, chars = 600) {
  const head = String(text).split("\n").slice(0, lines).join("\n").slice(0, chars);
  return head.length < String(text).length ? `${head} …` : head;
}

// ---- start -----------------------------------------------------------------------------------------------------
window.addEventListener("hashchange", route);
document.addEventListener("keydown", onKey);
if (typeof DecompressionStream === "undefined") {
  fill(document.getElementById("page"), h("p", { class: "error", id: "error" },
    "This browser has no DecompressionStream (needed to read the embedded episodes): ",
    "use Chromium 80+, Firefox 113+ or Safari 16.4+."));
} else {
  route();
}
