// The inferd console: one page, routed by the URL fragment (#/ and #/model/NAME).
import { LineChart } from "./chart.js";
import {
  api, append, card, clear, el, fmtBytes, fmtDuration, fmtNum, fmtUs, hasToken, kv, modelPath,
  objectTable, setToken, show,
} from "./dom.js";
import { tryIt } from "./tryit.js";
import { actions } from "./actions.js";

let stream = null; // the page's one event stream
let generation = 0; // bumped on each navigation: late answers of an old page are dropped

function closeStream() {
  if (stream) stream.close();
  stream = null;
}

function openStream(model, onEvent) {
  closeStream();
  const gen = generation; // events reach only the view that opened the stream
  const url = "/console/api/events" + (model ? "?model=" + encodeURIComponent(model) : "");
  stream = new EventSource(url);
  const dot = document.getElementById("live-dot");
  stream.addEventListener("open", () => dot.classList.add("on"));
  stream.addEventListener("error", () => dot.classList.remove("on"));
  stream.addEventListener("stats", (event) => {
    dot.classList.add("on");
    if (gen === generation) onEvent(JSON.parse(event.data));
  });
}

function serverLine(server) {
  const line = document.getElementById("server-line");
  line.textContent = `${server.name} ${server.version} · ${server.live ? "live" : "not live"} · ` +
    `${server.ready ? "ready" : "not ready"}`;
}

// -- the overview: server and models -------------------------------------------------------------

const COLUMNS = [
  ["name", "model"], ["version", "version"], ["state", "state"], ["reason", "reason"],
  ["runtime", "runtime"], ["instances", "instances"], ["batching", "batching"],
  ["max_batch_size", "max batch"], ["rps", "req/s"], ["p99_us", "p99"], ["details", "details"],
];
const KNOWN = new Set(COLUMNS.map(([key]) => key).concat(["preferred_batch_size", "max_queue_delay_us"]));

async function overview(main, gen) {
  const summary = await api("GET", "/console/api/summary");
  if (gen !== generation) return;
  const { server, models } = summary;
  serverLine(server);
  const groups = Object.entries(server.apis).map(([group, how]) => ({ group, access: how }));
  const serverCard = card("Server",
    el("div", { class: "grid" },
      kv("health", `${server.live ? "live" : "not live"}, ${server.ready ? "ready" : "not ready"}`, "srv-health"),
      kv("uptime", fmtDuration(server.uptime_s), "srv-uptime"),
      kv("version", `${server.name} ${server.version}`, "srv-version"),
      kv("ports", Object.entries(server.ports).map(([k, v]) => `${k} ${v}`).join(", "), "srv-ports"),
      kv("control mode", server.control_mode, "srv-mode"),
      kv("requests/s", "—", "srv-rps"),
      kv("CPU (one core = 100%)", "—", "srv-cpu"),
      kv("memory (resident)", fmtBytes(server.rss_bytes), "srv-rss"),
      kv("drift monitoring", server.drift ? "on" : "off"),
    ),
    el("details", {}, el("summary", {}, "API groups"), objectTable(groups, "api-groups")));
  const rows = models.map((m) => ({
    ...m, rps: null, p99_us: null,
    details: Object.entries(m).filter(([k]) => !KNOWN.has(k)).map(([k, v]) => `${k}=${show(v)}`).join("; "),
  }));
  const filter = el("input", { id: "model-filter", type: "search", placeholder: "filter models" });
  const table = el("table", { id: "models" });
  const count = el("span", { class: "muted", id: "model-count" });
  let sortKey = "name", sortDir = 1;
  const head = el("tr", {}, COLUMNS.map(([key, label]) => el("th", {
    class: "sortable", dataset: { key },
    onclick: () => { sortDir = sortKey === key ? -sortDir : 1; sortKey = key; render(); },
  }, label)));
  const body = el("tbody", {});
  append(table, [el("thead", {}, head), body]);
  const render = () => {
    const needle = filter.value.trim().toLowerCase();
    const shown = rows.filter((r) => !needle || [r.name, r.state, r.runtime, r.reason]
      .some((v) => String(v ?? "").toLowerCase().includes(needle)));
    shown.sort((a, b) => {
      const x = a[sortKey] ?? "", y = b[sortKey] ?? "";
      const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y), undefined, { numeric: true });
      return c * sortDir;
    });
    for (const th of head.children) {
      th.classList.toggle("sorted-asc", th.dataset.key === sortKey && sortDir > 0);
      th.classList.toggle("sorted-desc", th.dataset.key === sortKey && sortDir < 0);
    }
    clear(body);
    for (const r of shown) {
      body.append(el("tr", { dataset: { name: r.name, version: r.version ?? "", state: r.state ?? "" } },
        COLUMNS.map(([key]) => {
          if (key === "name") {
            return el("td", { class: "col-name" }, el("a", { href: "#/model/" + encodeURIComponent(r.name) }, r.name));
          }
          let value = r[key];
          if (key === "p99_us") value = r.p99_us === null ? "" : fmtUs(r.p99_us);
          if (key === "rps") value = r.rps === null ? "" : fmtNum(r.rps);
          const cls = `col-${key}` + (key === "state" && r.state ? ` state-${r.state}` : "") +
            (key === "reason" ? " reason" : "") + (["rps", "instances", "max_batch_size"].includes(key) ? " num" : "");
          return el("td", { class: cls }, show(value));
        })));
    }
    count.textContent = `${shown.length} of ${rows.length}`;
  };
  filter.addEventListener("input", render);
  render();
  const note = summary.index_complete ? null
    : el("p", { class: "muted", id: "index-note" },
      "Only loaded versions are listed: the repository index needs the admin token.");
  clear(main);
  append(main, [serverCard, card("Models", el("div", { class: "toolbar" }, filter, count), note, table)]);
  let pending = false;
  openStream(null, (ev) => {
    document.getElementById("srv-rps").textContent = fmtNum(ev.rps);
    document.getElementById("srv-cpu").textContent = fmtNum(ev.cpu_percent) + " %";
    document.getElementById("srv-rss").textContent = fmtBytes(ev.rss_bytes);
    document.getElementById("srv-uptime").textContent = fmtDuration(ev.uptime_s);
    const live = new Map(ev.models.map((m) => [`${m.name}\u0000${m.version}`, m]));
    for (const r of rows) {
      const m = live.get(`${r.name}\u0000${r.version}`);
      r.rps = m ? m.rps : null; r.p99_us = m ? m.p99_us : null;
    }
    if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; render(); }); }
  });
}

// -- one model's page -----------------------------------------------------------------------------

function liveCard(model) {
  const canvas = el("canvas", { id: "chart", width: 600, height: 160 });
  const chart = new LineChart(canvas, [{ name: "requests/s", color: "#2563eb" }, { name: "errors/s", color: "#b91c1c" }]);
  const figures = el("div", { class: "grid" },
    kv("requests/s", "—", "m-rps"), kv("errors/s", "—", "m-errors"), kv("p50", "—", "m-p50"),
    kv("p99", "—", "m-p99"), kv("queue", "—", "m-queue"), kv("input", "—", "m-input"),
    kv("infer", "—", "m-infer"), kv("output", "—", "m-output"), kv("pending", "—", "m-pending"),
    kv("cache hits (total)", "—", "m-cache"));
  const batches = el("div", { id: "m-batches" });
  const errors = el("div", { id: "m-failures" });
  const update = (ev) => {
    const mine = ev.models.filter((m) => m.name === model);
    const sum = (key) => mine.reduce((acc, m) => acc + (m[key] || 0), 0);
    chart.push(sum("rps"), sum("errors_per_s"));
    if (!mine.length) return;
    // latency from the busiest version in this window; counts summed over the versions
    const m = mine.reduce((a, b) => (b.rps > a.rps ? b : a));
    const set = (id, text) => { document.getElementById(id).textContent = text; };
    set("m-rps", fmtNum(sum("rps"))); set("m-errors", fmtNum(sum("errors_per_s")));
    set("m-p50", fmtUs(m.p50_us)); set("m-p99", fmtUs(m.p99_us));
    for (const part of ["queue", "input", "infer", "output"]) set("m-" + part, fmtUs(m.split_us?.[part]));
    set("m-pending", String(sum("pending")));
    const add = (into, from) => { for (const [k, v] of Object.entries(from || {})) into[k] = (into[k] || 0) + v; return into; };
    const totals = { batches: {}, window: {}, reasons: {}, hits: 0, misses: 0 };
    for (const v of mine) {
      add(totals.batches, v.totals?.batches); add(totals.window, v.batches);
      add(totals.reasons, v.totals?.failures); add(totals.reasons, v.totals?.rejections);
      totals.hits += v.totals?.cache_hits || 0; totals.misses += v.totals?.cache_misses || 0;
    }
    set("m-cache", `${totals.hits} hits, ${totals.misses} misses`);
    clear(batches);
    const sizes = Object.entries(totals.batches).sort((a, b) => Number(a[0]) - Number(b[0]));
    append(batches, sizes.length ? objectTable(sizes.map(([size, n]) => ({
      "batch size": size, "executions (total)": n, "last window": totals.window[size] ?? 0,
    })), "batch-table") : el("p", { class: "muted" }, "no batch executed yet"));
    clear(errors);
    const rows = Object.entries(totals.reasons).map(([reason, n]) => ({ reason, count: n }));
    append(errors, rows.length ? objectTable(rows, "failure-table") : el("p", { class: "muted" }, "no errors"));
  };
  return {
    node: card("Live", canvas, figures,
      el("div", { class: "cols" }, el("div", {}, el("h3", {}, "Batch sizes formed"), batches),
        el("div", {}, el("h3", {}, "Errors by reason"), errors))),
    update,
  };
}

function metadataCard(meta) {
  const rows = [
    ...meta.inputs.map((t) => ({ kind: "input", name: t.name, datatype: t.datatype, shape: JSON.stringify(t.shape) })),
    ...meta.outputs.map((t) => ({ kind: "output", name: t.name, datatype: t.datatype, shape: JSON.stringify(t.shape) })),
  ];
  return card("Metadata",
    el("p", {}, "versions: ", (meta.versions || []).join(", "), " · platform: ", meta.platform || "—"),
    objectTable(rows, "metadata-table"));
}

async function driftCard(model, node, monitoring) {
  if (!monitoring) {
    clear(node).append(el("p", { class: "muted", id: "drift-off" },
      "drift monitoring is off: start inferd serve with --monitor-drift"));
    return;
  }
  try {
    const report = await api("GET", modelPath(model) + "/drift");
    clear(node);
    for (const v of report.versions) {
      append(node, [
        el("p", {}, `version ${v.version}: ${v.requests} requests, ${v.evaluations} evaluations; `,
          el("strong", {}, v.alerts.length ? `features that moved: ${v.alerts.join(", ")}` : "no feature moved")),
        objectTable(v.features, "drift-table"),
      ]);
    }
  } catch (error) {
    clear(node).append(el("p", { class: "muted", id: "drift-off" }, error.message));
  }
}

async function rolloutCard(model, node) {
  try {
    const report = await api("GET", modelPath(model) + "/rollout");
    clear(node);
    append(node, [
      el("p", {}, `policy: ${report.kind}`),
      objectTable(report.variants, "rollout-variants"),
      report.comparison ? [el("h3", {}, `Bayesian comparison against ${report.comparison.baseline} (reward ${report.comparison.reward})`),
        objectTable(Object.entries(report.comparison.candidates).map(([name, c]) => ({ candidate: name, ...c })), "rollout-comparison")] : null,
      report.canary ? [el("h3", {}, "Canary"), el("pre", {}, JSON.stringify(report.canary, null, 2))] : null,
    ]);
  } catch (error) {
    clear(node).append(el("p", { class: "muted", id: "rollout-none" }, error.message));
  }
}

async function configCard(model, version, node) {
  try {
    const query = "?model=" + encodeURIComponent(model) + (version ? "&version=" + encodeURIComponent(version) : "");
    const text = await api("GET", "/console/api/config" + query, undefined, { text: true });
    clear(node).append(el("pre", { id: "config-pbtxt" }, text));
  } catch (error) {
    clear(node).append(el("p", { class: "error" }, error.message));
  }
}

async function modelPage(main, model, gen) {
  const summary = await api("GET", "/console/api/summary");
  if (gen !== generation) return;
  serverLine(summary.server);
  const rows = summary.models.filter((m) => m.name === model);
  const ready = rows.filter((m) => m.state === "READY");
  const version = ready.length ? ready[ready.length - 1].version : "";
  const title = el("h1", { id: "model-title" }, model);
  const states = card("State", rows.length ? objectTable(rows.map((r) => ({
    version: r.version ?? "", state: r.state ?? "not loaded", reason: r.reason ?? "",
    runtime: r.runtime ?? "", instances: r.instances ?? "", batching: r.batching ?? "",
    "preferred batch sizes": (r.preferred_batch_size || []).join(", "),
    "max queue delay (µs)": r.max_queue_delay_us ?? "",
  })), "model-state") : el("p", { class: "muted" }, "not in the index"));
  clear(main);
  append(main, [el("p", {}, el("a", { href: "#/" }, "← all models")), title, states]);
  if (hasToken()) main.append(actions(model, version, () => route()));
  if (!ready.length) return;
  const live = liveCard(model);
  const meta = await api("GET", modelPath(model)).catch(() => null);
  if (gen !== generation) return;
  const config = await api("GET", modelPath(model) + "/config").catch(() => null);
  if (gen !== generation) return;
  const drift = el("div", {}, "…"), rollout = el("div", {}, "…"), pbtxt = el("div", {}, "…");
  append(main, [
    live.node,
    meta ? tryIt(model, meta, config) : null,
    el("div", { class: "cols" }, card("config.pbtxt (completed)", pbtxt), meta ? metadataCard(meta) : card("Metadata", "—")),
    el("div", { class: "cols" }, card("Drift", drift), card("Rollout", rollout)),
  ]);
  openStream(model, live.update);
  configCard(model, version, pbtxt);
  driftCard(model, drift, summary.server.drift);
  rolloutCard(model, rollout);
}

// -- routing --------------------------------------------------------------------------------------

async function route() {
  generation += 1;
  const gen = generation;
  closeStream();
  const main = document.getElementById("main");
  const hash = location.hash || "#/";
  try {
    if (hash.startsWith("#/model/")) await modelPage(main, decodeURIComponent(hash.slice(8)), gen);
    else await overview(main, gen);
  } catch (error) {
    clear(main).append(el("p", { class: "error", id: "page-error" }, error.message));
  }
  if (gen === generation) document.body.dataset.rendered = String(gen); // for tests and tools
}

function start() {
  const form = document.getElementById("token-form");
  const input = document.getElementById("token");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    input.value = "";
    document.body.classList.toggle("with-token", hasToken());
    route();
  });
  document.getElementById("token-forget").addEventListener("click", () => {
    setToken(""); input.value = ""; document.body.classList.remove("with-token"); route();
  });
  window.addEventListener("hashchange", route);
  route();
}

start();
