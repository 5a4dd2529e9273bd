// The report's code: view.py writes it into report.html with report.css and the data (D, below),
// so that the page runs offline with nothing to load.
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const $ = (id) => document.getElementById(id);
// Every piece of data enters the page through el() as text (never innerHTML).
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}
const SVGNS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
const fmt = (x, d = 3) => (typeof x === "number" && isFinite(x)) ? (Number.isInteger(x) ? String(x) : x.toFixed(d)) : "";
const mean = (xs) => xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN;
const DATA_URL = /^data:image\/png;base64,[A-Za-z0-9+\/=]+$/;

// ---- episodes, flattened once ----
const EPS = [];
for (const s of D.sets) for (const e of s.episodes) {
  e.id = EPS.length;
  e.flags = e.steps.filter((t) => t.status === "unparsed" || t.status === "refused").length;
  e.haystack = [e.task, e.category, e.error, ...e.steps.flatMap((t) => [t.observation, t.reply, t.action, t.after])]
    .join("\n").toLowerCase();
  EPS.push(e);
}

// ---- alarms (machinery/signals.py): one banner each, with the steps it held ----
function ranges(steps) {  // [1,2,3,7] -> "1-3, 7"
  const out = [];
  for (const s of steps) { const r = out[out.length - 1]; if (r && s === r[1] + 1) r[1] = s; else out.push([s, s]); }
  return out.map(([a, b]) => a === b ? String(a) : a + "\u2013" + b).join(", ");
}
function showAlarms() {
  if (!D.alarms.length) return;
  const box = $("alarms");
  box.hidden = false;
  for (const a of D.alarms) box.append(el("div", {class: "alarm", "data-alarm": a.name},
    el("b", {text: a.name}), " " + a.message + " \u2014 ",
    el("a", {href: "#training", text: "steps " + ranges(a.steps)}),
    D.training.length > 1 ? " (" + a.run + ")" : ""));
}

// ---- credit: the advantage each turn got, as a colour (green: pushed up, red: pushed down) ----
// set name + algorithm -> the largest |credit| in that set, so colours compare within it
const creditScale = {};
for (const s of D.sets) for (const e of s.episodes) for (const t of e.steps) {
  const add = (k, v) => {
    if (typeof v === "number") creditScale[k] = Math.max(creditScale[k] || 0, Math.abs(v));
  };
  add(s.name + "\u0000run", t.credit);
  for (const [a, v] of Object.entries(t.credits || {})) add(s.name + "\u0000" + a, v);
}
function creditColor(v, scale) {
  if (typeof v !== "number" || !scale) return "transparent";
  const a = Math.min(1, Math.abs(v) / scale) * 0.55;
  return v >= 0 ? "rgba(46,125,50," + a.toFixed(3) + ")" : "rgba(198,40,40," + a.toFixed(3) + ")";
}
function creditChip(label, v, scale, tag = "span") {
  return el(tag, {class: "credit", style: "background:" + creditColor(v, scale), title: label,
    text: (tag === "span" ? label + " " : "") +
      (typeof v === "number" ? (v >= 0 ? "+" : "") + v.toFixed(3) : "\u2013")});
}
// tokenLevel: the algorithm's advantage varies within a turn, so a turn's credit is the sum over its
// tokens (a saved record's credit.token_level; for --credit, D.credit[name].token_level)
function creditLabel(algo, tokenLevel) {
  return algo + (tokenLevel ? " (sum over the turn's tokens)" : "");
}
const creditTokenLevel = (algo) => !!(D.credit[algo] || {}).token_level;

function showProblems() {
  if (!D.problems.length) return;
  const box = $("problems");
  box.hidden = false;
  box.append(el("b", {text: D.problems.length + " problem(s) reading the input:"}));
  for (const p of D.problems) box.append(el("div", {class: "problem", text: p}));
}

// ---- overview: per set success, score, turns, per category, pass@k ----
function statsTable(rows) {
  const t = el("table", {}, el("tr", {}, ...["set", "episodes", "tasks", "success", "score", "reward", "turns",
    "truncated", "errors", "unparsed/refused turns"].map((h) => el("th", {text: h}))));
  for (const s of rows) {
    const eps = s.episodes;
    t.append(el("tr", {}, el("td", {text: s.name}), el("td", {text: eps.length}),
      el("td", {text: new Set(eps.map((e) => String(e.task))).size}),
      el("td", {text: fmt(mean(eps.map((e) => +e.success)))}), el("td", {text: fmt(mean(eps.map((e) => e.score)))}),
      el("td", {text: fmt(mean(eps.map((e) => e.reward)))}), el("td", {text: fmt(mean(eps.map((e) => e.turns)), 2)}),
      el("td", {text: eps.filter((e) => e.truncated).length}), el("td", {text: eps.filter((e) => e.error).length}),
      el("td", {text: eps.reduce((a, e) => a + e.flags, 0)})));
  }
  return t;
}

function categoryTable(sets) {
  const cats = [...new Set(sets.flatMap((s) => s.episodes.map((e) => e.category)))].sort();
  if (cats.length < 2) return null;
  const t = el("table", {}, el("tr", {}, el("th", {text: "category"}), ...sets.map((s) => el("th", {text: s.name + " success (n)"}))));
  for (const c of cats) {
    t.append(el("tr", {}, el("td", {text: c || "(none)"}), ...sets.map((s) => {
      const v = s.episodes.filter((e) => e.category === c);
      return el("td", {text: v.length ? fmt(mean(v.map((e) => +e.success))) + " (" + v.length + ")" : ""});
    })));
  }
  return t;
}

function lineChart(title, series, opts = {}) {
  // series: [{name, xs, ys, color}]; opts.logx draws x on a log2 scale.
  const W = opts.w || 320, H = opts.h || 180, L = 44, R = 10, T = 22, B = 26;
  const tx = (x) => opts.logx ? Math.log2(x) : x;
  const pts = series.flatMap((s) => s.xs.map((x, i) => [tx(x), s.ys[i]])).filter((p) => isFinite(p[0]) && isFinite(p[1]));
  const g = svg("svg", {width: W, height: H, class: "chart", role: "img"});
  g.append(svg("text", {x: L, y: 14, class: "title"}, title));
  if (!pts.length) { g.append(svg("text", {x: L, y: H / 2}, "no data")); return g; }
  let [x0, x1] = [Math.min(...pts.map((p) => p[0])), Math.max(...pts.map((p) => p[0]))];
  let [y0, y1] = opts.ylim || [Math.min(...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
  const sx = (x) => L + (tx(x) - x0) / (x1 - x0) * (W - L - R), sy = (y) => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  g.append(svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#999"}));
  g.append(svg("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#999"}));
  for (const y of [y0, (y0 + y1) / 2, y1]) g.append(svg("text", {x: 2, y: sy(y) + 3}, String(Number(y.toPrecision(3)))));
  const xt = opts.logx ? [...new Set(pts.map((p) => 2 ** p[0]))] : [...new Set([x0, (x0 + x1) / 2, x1].map(Math.round))];
  for (const x of xt) g.append(svg("text", {x: sx(x) - 6, y: H - 8}, String(x)));
  series.forEach((s, j) => {
    const ok = s.xs.map((x, i) => [x, s.ys[i]]).filter((p) => isFinite(tx(p[0])) && isFinite(p[1]));
    const color = s.color || ["#1565c0", "#e65100", "#2e7d32", "#6a1b9a", "#c62828", "#00838f", "#9e9d24", "#4e342e", "#ad1457", "#546e7a"][j % 10];
    g.append(svg("polyline", {fill: "none", stroke: color, "stroke-width": 1.6,
      points: ok.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ")}));
    if (ok.length < 40) for (const p of ok) g.append(svg("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2.2, fill: color}));
    if (series.length > 1 && j < 12) g.append(svg("text", {x: W - R - 150, y: H - B - 12 * (Math.min(series.length, 12) - j) + 4, fill: color},
      j === 11 && series.length > 12 ? "+ " + (series.length - 11) + " more" : s.name));
  });
  return g;
}

function renderOverview() {
  const v = $("overview-view");
  v.append(el("h2", {text: "Episodes"}));
  if (D.sets.length) v.append(statsTable(D.sets)); else v.append(el("p", {class: "muted", text: "No episodes in the input."}));
  const ct = categoryTable(D.sets);
  if (ct) v.append(el("h3", {text: "Success by category"}), ct);
  const names = Object.keys(D.summaries);
  if (names.length) {
    v.append(el("h2", {text: "Evaluation summaries (summary.json)"}));
    const keys = ["n_tasks", "n_samples", "n_episodes", "success_rate", "avg_score", "avg_reward", "avg_turns", "errors"];
    const t = el("table", {}, el("tr", {}, el("th", {text: ""}), ...names.map((n) => el("th", {text: n}))));
    for (const k of ["model", "env", "split", "tasks"]) if (names.some((n) => D.summaries[n][k] !== undefined))
      t.append(el("tr", {}, el("th", {text: k}), ...names.map((n) => el("td", {text: D.summaries[n][k] === undefined ? "" : String(D.summaries[n][k])}))));
    for (const k of keys) t.append(el("tr", {}, el("th", {text: k}), ...names.map((n) => el("td", {text: fmt(D.summaries[n][k])}))));
    const ks = [...new Set(names.flatMap((n) => Object.keys(D.summaries[n].pass_at_k || {})))].sort((a, b) => a - b);
    for (const k of ks) t.append(el("tr", {}, el("th", {text: "pass@" + k}), ...names.map((n) => el("td", {text: fmt((D.summaries[n].pass_at_k || {})[k])}))));
    const cats = [...new Set(names.flatMap((n) => Object.keys(D.summaries[n].success_by_category || {})))].sort();
    for (const c of cats) t.append(el("tr", {}, el("th", {text: "success: " + c}), ...names.map((n) => el("td", {text: fmt((D.summaries[n].success_by_category || {})[c])}))));
    v.append(t);
    const curve = (name, pk) => { const ks = Object.keys(pk).map(Number).sort((a, b) => a - b); return {name: name, xs: ks, ys: ks.map((k) => pk[k])}; };
    const many = (pk) => Object.keys(pk || {}).length > 1;
    const curves = names.filter((n) => many(D.summaries[n].pass_at_k));
    if (curves.length) {
      const box = el("div", {class: "charts", id: "passk"}, lineChart("pass@k (unbiased, Chen et al. 2021)",
        curves.map((n) => curve(n, D.summaries[n].pass_at_k)), {logx: true, ylim: [0, 1], w: 420, h: 240}));
      for (const n of curves) {  // one curve per category, when eval.py broke it down
        const cats = Object.entries(D.summaries[n].by_category || {}).filter(([c, r]) => many(r.pass_at_k));
        if (cats.length) box.append(lineChart("pass@k by category \u00b7 " + n, cats.map(([c, r]) => curve(c, r.pass_at_k)),
          {logx: true, ylim: [0, 1], w: 420, h: 240}));
      }
      v.append(box);
    }
  }
}

// ---- the episode table ----
const state = {key: "id", dir: 1, limit: 500};
function options(select, values) {
  select.append(el("option", {value: "", text: "all"}));
  for (const v of values) select.append(el("option", {value: v, text: v || "(none)"}));
}
function filtered() {
  const set = $("f-set").value, out = $("f-outcome").value, cat = $("f-category").value, q = $("f-text").value.trim().toLowerCase();
  let rows = EPS.filter((e) => (!set || e.set === set) && (!cat || e.category === cat) &&
    (!out || (out === "success" ? e.success : out === "failure" ? !e.success : out === "truncated" ? e.truncated :
      out === "error" ? !!e.error : e.flags > 0)) && (!q || e.haystack.includes(q)));
  const k = state.key;
  rows = rows.slice().sort((a, b) => {
    const x = a[k], y = b[k];
    const c = (typeof x === "number" || typeof x === "boolean") && (typeof y === "number" || typeof y === "boolean") ? x - y : String(x).localeCompare(String(y), undefined, {numeric: true});
    return c * state.dir || a.id - b.id;
  });
  return rows;
}
function renderTable() {
  const rows = filtered(), body = document.querySelector("#episodes tbody");
  body.textContent = "";
  for (const e of rows.slice(0, state.limit)) {
    const tr = el("tr", {"data-id": e.id}, el("td", {text: e.set}), el("td", {text: e.task}), el("td", {text: e.category}),
      el("td", {class: e.success ? "ok" : "bad", text: e.success ? "yes" : "no"}), el("td", {text: fmt(e.score)}),
      el("td", {text: e.turns}), el("td", {text: e.error ? "error" : e.truncated ? "yes" : ""}),
      el("td", {text: e.flags ? e.flags + " flagged" : ""}));
    tr.addEventListener("click", () => { location.hash = "#episode-" + e.id; });
    body.append(tr);
  }
  $("count").textContent = rows.length + " of " + EPS.length + " episodes";
  $("more").hidden = rows.length <= state.limit;
}
function initTable() {
  options($("f-set"), D.sets.map((s) => s.name));
  options($("f-category"), [...new Set(EPS.map((e) => e.category))].sort());
  for (const id of ["f-set", "f-outcome", "f-category", "f-text"]) $(id).addEventListener("input", () => { state.limit = 500; renderTable(); });
  $("more").addEventListener("click", () => { state.limit += 500; renderTable(); });
  for (const th of document.querySelectorAll("#episodes th[data-key]")) th.addEventListener("click", () => {
    state.dir = state.key === th.dataset.key ? -state.dir : 1;
    state.key = th.dataset.key;
    for (const o of document.querySelectorAll("#episodes th")) o.className = "";
    th.className = state.dir > 0 ? "asc" : "desc";
    renderTable();
  });
  renderTable();
}

// ---- one episode ----
function replyWithAction(reply, action) {
  // The reply as text, the parsed action marked where it occurs last (as AgentGym's parsers read).
  const pre = el("pre", {class: "reply"});
  const i = action ? reply.lastIndexOf(action) : -1;
  if (i < 0) { pre.append(reply || "(empty reply)"); return [pre, !!action]; }
  pre.append(reply.slice(0, i), el("mark", {text: action}), reply.slice(i + action.length));
  return [pre, false];
}
function picture(src, label) {
  return src && DATA_URL.test(src) ? el("figure", {}, el("img", {src: src, alt: label}), el("figcaption", {class: "muted", text: label})) : null;
}
function renderEpisode(id) {
  const e = EPS[id], v = $("episode-view");
  v.textContent = "";
  if (!e) { v.append(el("p", {text: "No episode " + id})); return; }
  v.append(el("p", {}, el("a", {href: "#episodes", text: "\u2190 all episodes"}),
    id > 0 ? el("a", {href: "#episode-" + (id - 1), text: "  \u2039 previous"}) : null,
    id + 1 < EPS.length ? el("a", {href: "#episode-" + (id + 1), text: "  next \u203a"}) : null));
  v.append(el("h2", {text: "Task " + e.task + (e.category ? " \u00b7 " + e.category : "") + " \u00b7 " + e.set}));
  v.append(el("div", {class: "meta"}, el("span", {class: e.success ? "ok" : "bad", text: e.success ? "success" : "failure"}),
    el("span", {text: "score " + fmt(e.score)}), el("span", {text: "reward " + fmt(e.reward)}), el("span", {text: e.turns + " turns"}),
    el("span", {text: e.error ? "error: " + e.error : e.done ? "ended by the environment" : "truncated at the horizon"}),
    e.step !== null && e.step !== undefined ? el("span", {text: "training step " + e.step}) : null,
    e.token_rows ? tokensButton() : null));
  if (e.system) v.append(el("details", {}, el("summary", {text: "system prompt"}), el("pre", {text: e.system})));
  e.steps.forEach((t, k) => {
    const body = el("div", {class: "body"});
    body.append(el("h3", {text: "Turn " + (k + 1)}), el("div", {class: "muted", text: "observation"}), el("pre", {class: "obs", text: t.observation}));
    const [pre, notVerbatim] = replyWithAction(t.reply, t.action);
    const head = el("div", {class: "muted", text: "reply"});
    if (t.status === "unparsed") head.append(el("span", {class: "flag", text: "did not parse: no action"}));
    if (t.status === "refused") head.append(el("span", {class: "flag", text: "refused by the environment"}));
    body.append(head, pre);
    body.append(el("div", {class: "meta"}, el("span", {}, "action ", el("code", {class: "action", text: t.action || "(none)"})),
      notVerbatim ? el("span", {class: "muted", text: "(normalised: not verbatim in the reply)"}) : null,
      el("span", {text: "reward " + (t.reward === null ? "?" : fmt(t.reward))}), el("span", {text: "done " + (t.done ? "yes" : "no")})));
    if (k === e.steps.length - 1 && t.after) body.append(el("div", {class: "muted", text: "final observation"}), el("pre", {class: "obs", text: t.after}));
    if (typeof t.credit === "number" || t.credits) {
      const scale = creditScale[e.set + "\u0000run"], line = el("div", {class: "meta credits"});
      if (typeof t.credit === "number") line.append(creditChip("credit, " + creditLabel(e.credit_algo || "run", e.credit_token_level) + ":", t.credit, scale));
      if (typeof t.value === "number") line.append(el("span", {class: "muted", text: "value (sum) " + fmt(t.value)}));
      if (typeof t.tokens === "number") line.append(el("span", {class: "muted", text: t.tokens + " agent tokens"}));
      for (const [a, v] of Object.entries(t.credits || {})) line.append(creditChip(creditLabel(a, creditTokenLevel(a)) + ":", v, creditScale[e.set + "\u0000" + a]));
      body.append(line);
    }
    const turn = el("div", {class: "turn status-" + t.status.replace(/\W/g, "")}, body);
    if (typeof t.credit === "number") turn.style.borderLeft = "6px solid " + creditColor(t.credit, creditScale[e.set + "\u0000run"]).replace(/,[0-9.]+\)$/, ",0.9)");
    const pics = el("div", {}, picture(t.frame, "before turn " + (k + 1)), picture(t.frame_after, "after the last turn"));
    if (pics.childNodes.length) turn.prepend(pics);
    v.append(turn);
  });
  renderTokens(e, v);
}

// ---- the token inspector: each token of the rows the update trained, as it saw them ----
const TOKEN_VIEWS = {
  advantage: "advantage (green: pushed up, red: pushed down)",
  ratio: "ratio \u03c0/\u03c0_old at the update (blue: above 1, orange: below; outlined: the clip bit)",
  logprob: "log-prob at sampling (darker: less likely)",
  value: "the critic's value",
  mask: "loss mask (blue: trained, grey: context)",
};
const shade = (rgb, a) => "rgba(" + rgb + "," + Math.max(0, Math.min(1, a)).toFixed(3) + ")";
// the clip bit where the pessimistic max took the clipped term: A > 0 above 1 + eps, A < 0 below 1 - eps
function clipBit(r, k, clip) {
  const x = (r.ratio || [])[k], a = (r.advantage || [])[k];
  return !!clip && r.mask[k] === 1 && typeof x === "number" && typeof a === "number" &&
    ((a > 0 && x > clip[1]) || (a < 0 && x < clip[0]));
}
// forced: the action mask allowed this one id (credit.token_rows), so its log-prob is 0 and its ratio 1
const isForced = (r, k) => r.mask[k] === 1 && (r.forced || [])[k] === 1;
function tokenScales(rows) {
  const top = (f) => Math.max(0, ...rows.flatMap((r) => r.text.map((_, k) => r.mask[k] === 1 ? f(r, k) : 0)).filter(isFinite));
  return {advantage: top((r, k) => Math.abs((r.advantage || [])[k])), value: top((r, k) => Math.abs((r.value || [])[k])),
    ratio: top((r, k) => Math.abs(Math.log((r.ratio || [])[k]))), logprob: top((r, k) => -(r.logprob || [])[k])};
}
function tokenColor(view, r, k, scale) {
  const x = (r[view] || [])[k];
  if (view === "mask") return r.mask[k] === 1 ? shade("21,101,192", 0.25) : "transparent";
  if (r.mask[k] !== 1 || typeof x !== "number") return "transparent";
  if (view === "advantage" || view === "value") return creditColor(x, scale[view]);
  if (view === "ratio") return scale.ratio ? shade(x >= 1 ? "21,101,192" : "230,81,0", 0.6 * Math.abs(Math.log(x)) / scale.ratio) : "transparent";
  return scale.logprob ? shade("106,27,154", 0.6 * -x / scale.logprob) : "transparent";
}
function tokenTitle(r, k) {
  const parts = ["token " + JSON.stringify(r.text[k]), "mask " + r.mask[k]];
  if (isForced(r, k)) parts.push("forced by the action mask");
  for (const f of ["logprob", "ratio", "advantage", "value"]) if (r[f] && typeof r[f][k] === "number") parts.push(f + " " + r[f][k].toFixed(4));
  return parts.join(" \u00b7 ");
}
// what the token adds to the loss, the token mean over the minibatch's mask-1 tokens (algorithm.py)
function inTheLoss(r, k, clip) {
  if (r.mask[k] !== 1) return "nothing: context, outside the token mean";
  if (isForced(r, k)) return "no gradient (log-prob 0 whatever the weights), but 1 in the token mean's denominator";
  if (clipBit(r, k, clip)) return "no gradient from the policy term (the clip bit), 1 in the token mean's denominator";
  return "its gradient, and 1 in the token mean's denominator";
}
function clipVerdict(r, k, clip) {
  const x = (r.ratio || [])[k], a = (r.advantage || [])[k];
  if (r.mask[k] !== 1 || !clip || typeof x !== "number" || typeof a !== "number") return "\u2013";
  if (clipBit(r, k, clip)) return a > 0 ? "bit: A > 0 and ratio above " + fmt(clip[1], 2) : "bit: A < 0 and ratio below " + fmt(clip[0], 2);
  if (x > clip[1] || x < clip[0]) return "did not bite: out of range against the advantage's push, the gradient stays";
  return "did not bite: ratio in range";
}
function tokenNumbers(rows, j, k, clip) {  // the numbers table beside the tokens, for the clicked token
  const r = rows[j];  // a context token's numbers are placeholders the loss never reads: a dash
  const num = (f) => !(r[f] && typeof r[f][k] === "number") ? null : r.mask[k] === 1 ? r[f][k].toFixed(4) : "\u2013";
  const lines = [["token", JSON.stringify(r.text[k])], ["where", "row " + (j + 1) + " \u00b7 turn " + (r.turn + 1) + " \u00b7 position " + k],
    ["loss mask", r.mask[k] === 1 ? "1 (trained)" : "0 (context)"],
    ["forced", r.forced ? (isForced(r, k) ? "yes: the action mask allowed this id only" : "no") : null],
    ["log-prob at sampling", num("logprob")], ["ratio \u03c0/\u03c0_old", num("ratio")], ["advantage", num("advantage")],
    ["value", num("value")], ["clip [" + (clip || []).map((x) => fmt(x, 2)).join(", ") + "]", clipVerdict(r, k, clip)],
    ["in the loss", inTheLoss(r, k, clip)]];
  return el("table", {id: "token-numbers"}, ...lines.filter(([, x]) => x !== null).map(([h, x]) => el("tr", {}, el("th", {text: h}), el("td", {text: x}))));
}
function tokensButton() {  // the hash routes the views, so a button, not an #anchor, scrolls to the inspector
  const b = el("button", {id: "to-tokens", text: "tokens as the update saw them \u2193"});
  b.addEventListener("click", () => $("tokens").scrollIntoView());
  return b;
}
function tokenSummary(rows, clip) {
  const count = (f) => rows.reduce((a, r) => a + r.text.filter((_, k) => f(r, k)).length, 0);
  const trained = count((r, k) => r.mask[k] === 1), forced = count(isForced), bit = count((r, k) => clipBit(r, k, clip));
  const ratios = rows.flatMap((r) => (r.ratio || []).filter((x, k) => r.mask[k] === 1));
  const [lo, hi] = (clip || []).map((x) => fmt(x, 2));
  const lines = [trained + " trained tokens (loss mask 1) in " + rows.length + " row(s)" +
    (rows.some((r) => r.forced) ? ", " + forced + " of them forced by the action mask" : "") + "."];
  const range = ratios.length ? "Ratio " + fmt(Math.min(...ratios), 4) + " to " + fmt(Math.max(...ratios), 4) + " at the update" : "";
  lines.push(!ratios.length ? "No ratio recorded." : !clip ? range + "." : range + "; the clip [" + lo + ", " + hi + "] bit on " +
    bit + " token(s). It bites only where the ratio leaves the range in the direction the advantage pushes: above " + hi +
    " with A > 0, below " + lo + " with A < 0 (outlined; the pessimistic max then takes the clipped term, which has no " +
    "gradient). A ratio out of range the other way keeps its gradient.");
  if (forced) lines.push("Forced tokens (dotted underline: \" forward\" after \"move\", the end of turn after an action): the " +
    "action mask allowed one id, so their log-prob is 0 and ratio 1 whatever the weights, and they stay uncoloured by both. " +
    "They add no gradient, yet count in the token mean's denominator, so they scale every other token's share of the loss down.");
  lines.push("\u2605 marks the last agent token, where the outcome reward sits. Click a token for its numbers.");
  return el("div", {class: "muted", id: "token-summary"}, ...lines.map((x) => el("p", {text: x})));
}
function renderTokens(e, v) {
  const T = e.token_rows;
  if (!T || !T.rows.length) return;
  const rows = T.rows.filter((r) => Array.isArray(r.mask)), scale = tokenScales(rows);
  const views = Object.keys(TOKEN_VIEWS).filter((f) => f === "mask" || rows.some((r) => r[f]));
  const pick = el("select", {id: "token-colour"});
  for (const f of views) pick.append(el("option", {value: f, text: TOKEN_VIEWS[f]}));
  pick.value = "advantage";
  const lastRow = rows.length - 1, lastTok = lastRow >= 0 ? rows[lastRow].mask.lastIndexOf(1) : -1;
  const out = el("div", {class: "token-rows"}), numbers = el("div", {class: "token-numbers"},
    el("p", {class: "muted", text: "Click a token to see its numbers here."}));
  let picked = null;  // [row, position] of the clicked token, kept across colourings
  const draw = () => {
    out.textContent = "";
    rows.forEach((r, j) => {
      const line = el("div", {class: "token-row"}, el("div", {class: "muted", text: "row " + (j + 1) + " \u00b7 turn " + (r.turn + 1)}));
      const text = el("div", {class: "tokens"});
      r.text.forEach((t, k) => {
        const cls = "tok" + (r.mask[k] === 1 ? "" : " off") + (isForced(r, k) ? " forced" : "") +
          (clipBit(r, k, T.clip) ? " clipped" : "") + (j === lastRow && k === lastTok ? " outcome" : "") +
          (picked && picked[0] === j && picked[1] === k ? " picked" : "");
        text.append(el("span", {class: cls, style: "background:" + tokenColor(pick.value, r, k, scale), title: tokenTitle(r, k),
          "data-row": j, "data-k": k, text: t}));
      });
      out.append(line, text);
    });
  };
  out.addEventListener("click", (ev) => {
    const t = ev.target.closest(".tok");
    if (!t) return;
    picked = [+t.dataset.row, +t.dataset.k];
    numbers.replaceChildren(tokenNumbers(rows, picked[0], picked[1], T.clip));
    draw();
  });
  pick.addEventListener("input", draw);
  draw();
  v.append(el("section", {id: "tokens"}, el("h3", {text: "Tokens as the update saw them"}), tokenSummary(rows, T.clip),
    el("div", {class: "filters"}, el("label", {}, "colour by ", pick)), el("div", {class: "token-inspector"}, out, numbers)));
}

// ---- comparison of two sets on the same task ids ----
function renderCompare() {
  const v = $("compare-view");
  v.textContent = "";
  v.append(el("h2", {text: "Compare two sets on the same task ids"}));
  if (D.sets.length < 2) { v.append(el("p", {class: "muted", text: "Give two runs (e.g. before and after training) to compare them."})); return; }
  const pick = (id, dflt) => { const s = el("select", {id: id}); D.sets.forEach((x, i) => s.append(el("option", {value: i, text: x.name}))); s.value = dflt; return s; };
  const before = D.sets.findIndex((s) => / eval_before$/.test(s.name)), after = D.sets.findIndex((s) => / eval_after$/.test(s.name));
  const a = pick("cmp-a", before >= 0 && after >= 0 ? before : 0), b = pick("cmp-b", before >= 0 && after >= 0 ? after : 1);
  const out = el("div", {});
  v.append(el("div", {class: "filters"}, el("label", {}, "A ", a), el("label", {}, "B ", b)), out);
  const draw = () => {
    out.textContent = "";
    const per = (s) => { const m = new Map(); for (const e of D.sets[s].episodes) { const k = String(e.task); if (!m.has(k)) m.set(k, []); m.get(k).push(e); } return m; };
    const A = per(+a.value), B = per(+b.value);
    const shared = [...A.keys()].filter((k) => B.has(k)).sort((x, y) => x.localeCompare(y, undefined, {numeric: true}));
    const rate = (es) => mean(es.map((e) => +e.success));
    const rows = shared.map((k) => ({task: k, a: rate(A.get(k)), b: rate(B.get(k)), ea: A.get(k)[0], eb: B.get(k)[0]}));
    const up = rows.filter((r) => r.b > r.a), down = rows.filter((r) => r.b < r.a);
    out.append(el("p", {id: "cmp-counts", text: shared.length + " shared tasks; failure \u2192 success (B better): " + up.length +
      "; success \u2192 failure (B worse): " + down.length + "; unchanged: " + (shared.length - up.length - down.length) +
      ". Success on shared tasks: A " + fmt(mean(rows.map((r) => r.a))) + ", B " + fmt(mean(rows.map((r) => r.b))) + "."}));
    for (const [title, list] of [["failure \u2192 success", up], ["success \u2192 failure", down]]) {
      out.append(el("h3", {text: title + " (" + list.length + ")"}));
      if (!list.length) continue;
      const t = el("table", {}, el("tr", {}, ...["task", "category", "A success", "B success", "episodes"].map((h) => el("th", {text: h}))));
      for (const r of list) t.append(el("tr", {}, el("td", {text: r.task}), el("td", {text: r.ea.category}), el("td", {text: fmt(r.a, 2)}), el("td", {text: fmt(r.b, 2)}),
        el("td", {}, el("a", {href: "#episode-" + r.ea.id, text: "A"}), " ", el("a", {href: "#episode-" + r.eb.id, text: "B"}))));
      out.append(t);
    }
  };
  a.addEventListener("input", draw); b.addEventListener("input", draw);
  draw();
}

// ---- training curves ----
const CURVES = [["charts/success", "success (train rollouts)"], ["charts/reward", "reward"], ["charts/turns", "turns per episode"],
  ["horizon", "horizon (max turns)"], ["losses/kl", "KL to reference"], ["losses/approx_kl", "approx KL (old \u2192 new)"],
  ["losses/entropy", "entropy"], ["losses/clipfrac", "clip fraction"],
  ["signals/flat_groups", "groups with all-equal rewards"], ["signals/identical_replies", "identical replies within groups"],
  ["signals/invalid_actions", "turns without a valid action"], ["signals/cut_replies", "replies cut at the token limit"],
  ["signals/reply_tokens", "mean reply length (tokens)"], ["signals/adv_std", "advantage spread (std)"]];
function renderTraining() {
  const v = $("training-view");
  v.textContent = "";
  if (!D.training.length) { v.append(el("p", {class: "muted", text: "No training run (metrics.jsonl) in the input."})); return; }
  for (const run of D.training) {
    v.append(el("h2", {text: run.name + " \u00b7 " + run.metrics.length + " steps"}));
    if (Object.keys(run.config || {}).length) v.append(el("details", {}, el("summary", {text: "configuration"}),
      el("pre", {text: Object.entries(run.config).map(([k, x]) => k + " = " + JSON.stringify(x)).join("\n")})));
    const rows = run.metrics.filter((m) => typeof m.step === "number");
    const keys = [...new Set(rows.flatMap((m) => Object.keys(m).filter((k) => k !== "step" && !k.startsWith("alarm/") && typeof m[k] === "number")))];
    const order = CURVES.map((c) => c[0]).filter((k) => keys.includes(k)).concat(keys.filter((k) => !CURVES.some((c) => c[0] === k)).sort());
    const box = el("div", {class: "charts"});
    for (const k of order) {
      const label = (CURVES.find((c) => c[0] === k) || [k, k])[1];
      const pts = rows.filter((m) => typeof m[k] === "number");
      box.append(lineChart(label, [{name: k, xs: pts.map((m) => m.step), ys: pts.map((m) => m[k])}],
        k === "charts/success" ? {ylim: [0, 1]} : {}));
    }
    v.append(box);
    const samples = D.sets.filter((s) => s.name.startsWith(run.name + " step "));
    if (samples.length) {
      v.append(el("h3", {text: "Sample rollouts by training step"}));
      const t = el("table", {}, el("tr", {}, ...["step", "episodes", "success", "turns", "flagged turns", "first episode"].map((h) => el("th", {text: h}))));
      for (const s of samples) {
        const eps = s.episodes;
        t.append(el("tr", {}, el("td", {text: s.name.slice(run.name.length + 6)}), el("td", {text: eps.length}),
          el("td", {text: fmt(mean(eps.map((e) => +e.success)))}), el("td", {text: fmt(mean(eps.map((e) => e.turns)), 2)}),
          el("td", {text: eps.reduce((a, e) => a + e.flags, 0)}), el("td", {}, eps.length ? el("a", {href: "#episode-" + eps[0].id, text: "open"}) : "")));
      }
      v.append(t);
    }
  }
}

// ---- credit side by side: every turn of the saved training steps, one column per algorithm ----
function renderCredit() {
  const v = $("credit-view");
  v.textContent = "";
  v.append(el("h2", {text: "Credit per turn: the advantage each algorithm gives each turn"}));
  v.append(el("p", {class: "muted", text: "The run's own column is what its update used (saved with --save-rollouts-every); " +
    "other columns come from `python view.py RUN --credit grpo,gigpo,ppo`, each algorithm's own advantages() on the same " +
    "episodes. GRPO: the episode's advantage on every turn; GiGPO: episode + step (anchor state) advantage; " +
    "PPO and REINFORCE++: per-token advantages summed over the turn. Green pushes the turn up, red down."}));
  const sets = D.sets.filter((s) => s.episodes.some((e) => e.steps.some((t) => typeof t.credit === "number" || t.credits)));
  if (!sets.length) { v.append(el("p", {class: "muted", text: "No saved rollouts with credit (train.py --save-rollouts-every N)."})); return; }
  for (const s of sets) {
    const algos = [...new Set(s.episodes.flatMap((e) => e.steps.flatMap((t) => Object.keys(t.credits || {}))))];
    const own = s.episodes.find((e) => e.credit_algo);
    const t = el("table", {class: "credit-table"}, el("tr", {}, ...["episode", "task", "outcome", "turn", "action"].map((h) => el("th", {text: h})),
      own ? el("th", {text: "run: " + creditLabel(own.credit_algo, own.credit_token_level)}) : null,
      ...algos.map((a) => el("th", {text: creditLabel(a, creditTokenLevel(a))}))));
    for (const e of s.episodes) e.steps.forEach((x, k) => {
      t.append(el("tr", {}, el("td", {}, el("a", {href: "#episode-" + e.id, text: String(e.id)})), el("td", {text: e.task}),
        el("td", {class: e.success ? "ok" : "bad", text: fmt(e.reward)}), el("td", {text: k + 1}), el("td", {}, el("code", {text: x.action})),
        own ? creditChip("", x.credit, creditScale[s.name + "\u0000run"], "td") : null,
        ...algos.map((a) => creditChip("", (x.credits || {})[a], creditScale[s.name + "\u0000" + a], "td"))));
    });
    v.append(el("h3", {text: s.name}), t);
  }
}

// ---- routing: #overview, #episodes, #episode-N, #compare, #training, #credit ----
function route() {
  const h = location.hash.slice(1) || (EPS.length ? "overview" : D.training.length ? "training" : "overview");
  const views = ["overview", "episodes", "episode", "compare", "training", "credit"];
  const m = /^episode-(\d+)$/.exec(h), cur = m ? "episode" : views.includes(h) ? h : "overview";
  for (const x of views) $(x + "-view").hidden = x !== cur;
  if (m) renderEpisode(+m[1]);
  window.scrollTo(0, 0);
}

$("title").textContent = "AgentGym-RL report \u00b7 " + D.title;
document.title = "Report: " + D.title;
showProblems();
showAlarms();
renderOverview();
initTable();
renderCompare();
renderTraining();
renderCredit();
window.addEventListener("hashchange", route);
route();
