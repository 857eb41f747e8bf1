"use strict";
// The dashboard: the API client (the token in a header, never in a URL), the router (hash routes, one
// page that never reloads), the jobs table and a job's page. pages.js adds tuning, compare, pools, costs.
const { h, s, PALETTE, lineChart, timeline, swatch, fmtNumber, fmtBytesRate, fmtSeconds } = window.charts;

const TOKEN_KEY = "shipyard-token";
const TERMINAL = new Set(["Completed", "Failed", "Stopped"]);
const POLL_MS = 2000;
const MAX_LOG_LINES = 20000;
const STATUSES = ["InProgress", "Completed", "Failed", "Stopping", "Stopped"];
const STATUS_COLORS = { Starting: "#8795a1", Pending: "#b8a26a", Downloading: "#76b7b2", Training: "#4e79a7",
  Interrupted: "#f28e2b", Uploading: "#59a1a0", Completed: "#59a14f", Failed: "#e15759", Stopping: "#edc948",
  Stopped: "#c27c0e", MaxRuntimeExceeded: "#c27c0e", MaxWaitTimeExceeded: "#c27c0e" };

// -- the token ---------------------------------------------------------------------------------
if (location.hash.startsWith("#token=")) {
  localStorage.setItem(TOKEN_KEY, decodeURIComponent(location.hash.slice(7)));
  history.replaceState(null, "", location.pathname + "#/jobs");
}
const token = () => localStorage.getItem(TOKEN_KEY);

function askForToken(message) {
  const box = document.getElementById("auth");
  const input = h("input", { type: "password", id: "token-input", placeholder: "token", autocomplete: "off" });
  const save = () => {
    if (input.value.trim()) localStorage.setItem(TOKEN_KEY, input.value.trim());
    box.replaceChildren();
    box.classList.add("hidden");
    clearError();
  };
  box.replaceChildren(
    h("div", {}, message || "This needs the server's token (printed when `shipyard server` started, and in $SHIPYARD_HOME/server.json)."),
    h("div", { class: "row" }, input, h("button", { id: "token-save", class: "primary", type: "button", onclick: save }, "Save token"),
      h("span", { class: "muted" }, "kept in this browser; sent only as a header")));
  box.classList.remove("hidden");
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") save(); });
}

// -- the API -----------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

function headers(extra = {}) {
  const known = token();
  return known ? { ...extra, Authorization: `Bearer ${known}` } : extra;
}

async function api(path, { method = "GET", body, signal } = {}) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}), signal };
  if (body) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  const kind = response.headers.get("content-type") || "";
  const data = kind.includes("application/json") ? await response.json() : await response.text();
  if (!response.ok) {
    const detail = data && data.detail !== undefined ? data.detail : data;
    const text = Array.isArray(detail) ? detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ") : String(detail);
    if (response.status === 401 || response.status === 403) askForToken(text);
    throw new ApiError(response.status, text);
  }
  return data;
}

function showError(error) {
  if (error && error.name === "AbortError") return;
  const banner = document.getElementById("error");
  banner.replaceChildren(h("span", { class: "spacer" }, String(error && error.message ? error.message : error)),
    h("button", { type: "button", onclick: clearError }, "dismiss"));
  banner.classList.remove("hidden");
}

function clearError() {
  const banner = document.getElementById("error");
  banner.classList.add("hidden");
  banner.replaceChildren();
}

// -- the router: each page gets a context whose timers and streams end when the page is left ----
const routes = [];
let current = null;

class PageContext {
  constructor() { this.timers = []; this.aborts = [new AbortController()]; this.alive = true; }
  every(ms, fn) { const run = () => fn().catch(showError); run(); this.timers.push(setInterval(run, ms)); }
  later(ms, fn) { this.timers.push(setTimeout(() => fn().catch(showError), ms)); }
  signal() { return this.aborts[0].signal; }   // every request of the page ends with it
  close() {
    this.alive = false;
    this.timers.forEach((t) => { clearInterval(t); clearTimeout(t); });
    this.aborts.forEach((c) => c.abort());
  }
}

function route(pattern, render) { routes.push({ pattern, render }); }

function navigate() {
  const hash = location.hash || "#/jobs";
  const [path, query] = hash.slice(1).split("?");
  if (current) current.close();
  current = new PageContext();
  clearError();
  const app = document.getElementById("app");
  app.replaceChildren();
  for (const link of document.querySelectorAll(".nav a")) {
    link.classList.toggle("current", path === link.getAttribute("href").slice(1) || path.startsWith(link.getAttribute("href").slice(1) + "/"));
  }
  for (const { pattern, render } of routes) {
    const match = pattern.exec(path);
    if (match) {
      const params = new URLSearchParams(query || "");
      Promise.resolve(render(app, current, match.slice(1).map(decodeURIComponent), params)).catch(showError);
      return;
    }
  }
  app.append(h("div", { class: "card" }, "No such page. ", h("a", { href: "#/jobs" }, "All jobs")));
}

// -- formatting --------------------------------------------------------------------------------
const badge = (status) => h("span", { class: `badge s-${status}` }, status);
const money = (v) => (v === null || v === undefined ? "-" : v === 0 ? "$0" : v >= 1 ? `$${v.toFixed(2)}` : `$${v.toFixed(4)}`);
const clock = (epoch) => (epoch ? new Date(epoch * 1000).toLocaleString() : "-");
const epochOf = (iso) => (iso ? Date.parse(iso) / 1000 : null);
const jobLink = (name) => h("a", { class: "job-link", href: `#/jobs/${encodeURIComponent(name)}` }, name);
const card = (title, ...children) => h("section", { class: "card" }, title ? h("h2", {}, title) : null, ...children);
const fact = (k, v) => h("div", { class: "fact" }, h("div", { class: "k" }, k), h("div", { class: "v" }, v));

function duration(seconds) {
  seconds = Math.max(0, Math.round(seconds));
  const hours = Math.floor(seconds / 3600), minutes = Math.floor((seconds % 3600) / 60), secs = seconds % 60;
  if (hours) return `${hours}h${String(minutes).padStart(2, "0")}m`;
  return minutes ? `${minutes}m${String(secs).padStart(2, "0")}s` : `${secs}s`;
}

function table(columns, id) {
  const tbody = h("tbody");
  const el = h("table", { id }, h("thead", {}, h("tr", {}, columns.map((c) =>
    h("th", { class: c.endsWith("$") || c.endsWith("#") ? "num" : null }, c.replace(/[$#]$/, ""))))), tbody);
  return { el: h("div", { class: "table-scroll" }, el), tbody };
}

function debounce(fn, ms) {
  let timer = null;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

// -- jobs --------------------------------------------------------------------------------------
const jobsState = { status: "", name: "", offset: 0, limit: 50, picked: new Set() };

route(/^\/jobs$/, (app, page) => {
  const status = h("select", { id: "status-filter" }, h("option", { value: "" }, "All statuses"),
    STATUSES.map((st) => h("option", { value: st }, st)));
  status.value = jobsState.status;
  const name = h("input", { type: "search", id: "name-filter", placeholder: "name contains…", value: jobsState.name });
  const compare = h("button", { id: "compare-selected", type: "button", disabled: true, onclick: () => {
    location.hash = `#/compare?jobs=${[...jobsState.picked].map(encodeURIComponent).join(",")}`;
  } }, "Compare selected");
  const prev = h("button", { id: "prev", type: "button" }, "‹ Newer");
  const next = h("button", { id: "next", type: "button" }, "Older ›");
  const info = h("span", { id: "page-info", class: "muted" });
  const { el, tbody } = table(["", "Name", "Status", "Secondary status", "Instances", "Strategy", "Duration#",
                               "Cost$", "Savings#"], "jobs");
  app.append(h("div", { class: "row" }, h("h1", {}, "Training jobs"), h("span", { class: "spacer" }), status, name, compare),
    card(null, el, h("div", { class: "pager" }, info, prev, next)));

  const pickedChanged = () => {
    compare.disabled = jobsState.picked.size < 2;
    compare.textContent = jobsState.picked.size ? `Compare selected (${jobsState.picked.size})` : "Compare selected";
  };
  const refresh = async () => {
    const query = new URLSearchParams({ limit: jobsState.limit, offset: jobsState.offset });
    if (jobsState.status) query.set("status", jobsState.status);
    if (jobsState.name) query.set("name", jobsState.name);
    const data = await api(`/api/jobs?${query}`, { signal: page.signal() });
    if (!page.alive) return;
    tbody.replaceChildren(...data.jobs.map((job) => {
      const pick = h("input", { type: "checkbox", class: "pick", "aria-label": `pick ${job.name}`, checked: jobsState.picked.has(job.name),
        onchange: (e) => { e.target.checked ? jobsState.picked.add(job.name) : jobsState.picked.delete(job.name); pickedChanged(); } });
      return h("tr", { dataset: { job: job.name } },
        h("td", {}, pick), h("td", { class: "name" }, jobLink(job.name)),
        h("td", { class: "status" }, badge(job.status)), h("td", { class: "secondary" }, job.secondary_status),
        h("td", {}, job.instance_type), h("td", {}, job.strategy), h("td", { class: "num" }, duration(job.duration)),
        h("td", { class: "num" }, money(job.cost)),
        h("td", { class: "num" }, job.spot_savings_percent === null ? "-" : `${job.spot_savings_percent}%`));
    }));
    if (!data.jobs.length) tbody.append(h("tr", {}, h("td", { colspan: 9, class: "empty" }, "no jobs" + (jobsState.status || jobsState.name ? " match" : " yet"))));
    if (!performance.getEntriesByName("shipyard:jobs-rows").length) performance.mark("shipyard:jobs-rows");   // benchmarks/server.py
    const last = Math.min(data.total, data.offset + data.jobs.length);
    info.textContent = data.total ? `${data.offset + 1}-${last} of ${data.total}` : "";
    prev.disabled = data.offset === 0;
    next.disabled = last >= data.total;
    pickedChanged();
  };
  status.addEventListener("change", () => { jobsState.status = status.value; jobsState.offset = 0; refresh().catch(showError); });
  name.addEventListener("input", debounce(() => { jobsState.name = name.value.trim(); jobsState.offset = 0; refresh().catch(showError); }, 250));
  prev.addEventListener("click", () => { jobsState.offset = Math.max(0, jobsState.offset - jobsState.limit); refresh().catch(showError); });
  next.addEventListener("click", () => { jobsState.offset += jobsState.limit; refresh().catch(showError); });
  page.every(POLL_MS, refresh);
});

// -- one job -----------------------------------------------------------------------------------
route(/^\/jobs\/(.+)$/, async (app, page, [name]) => {
  const status = h("span", { id: "job-status", class: "badge" });
  const secondary = h("span", { id: "secondary-status", class: "muted" });
  const facts = h("div", { class: "facts" });
  const failure = h("div", { id: "failure-reason", class: "failure hidden" });
  const warnings = h("ul", { class: "warnings hidden" });
  const stopArea = h("div", { class: "row" });
  const report = h("a", { id: "report", class: "hidden", href: `/api/jobs/${encodeURIComponent(name)}/report`,
                          target: "_blank", rel: "noopener" }, "Profiling report ↗");
  const sections = {
    timeline: h("div", { id: "timeline" }), metrics: h("div", { id: "metrics", class: "charts" }),
    system: h("div", { id: "system", class: "charts" }), rules: h("div", { id: "rules" }),
    artifacts: h("div", { id: "artifacts", class: "uris" }), hyperparameters: h("div", { id: "hyperparameters" }),
    events: h("div", { id: "events", class: "events" }),
  };
  const logs = logView(page, name);
  app.append(
    h("div", { class: "row" }, h("h1", { id: "job-name" }, name)),
    h("div", { class: "row" }, status, secondary, h("span", { class: "spacer" }), report, stopArea),
    facts, failure, warnings,
    card("Status timeline", sections.timeline),
    card("Metrics", sections.metrics),
    card("Logs", logs.el),
    card("System utilisation per instance (profiler)", sections.system),
    h("div", { class: "grid2" }, card("Rules", sections.rules), card("Artifacts", sections.artifacts)),
    h("div", { class: "grid2" }, card("Hyperparameters", sections.hyperparameters), card("Events", sections.events)));

  let shown = null, lastEvent = 0, stopping = false;
  const drawn = {};
  const changed = (key, value) => {
    const text = JSON.stringify(value);
    if (drawn[key] === text) return false;
    drawn[key] = text;
    return true;
  };
  const refresh = async () => {
    const data = await api(`/api/jobs/${encodeURIComponent(name)}`, { signal: page.signal() });
    if (!page.alive) return;
    const job = data.job, d = data.describe;
    status.textContent = job.status;
    status.className = `badge s-${job.status}`;
    secondary.textContent = job.secondary_status;
    if (!logs.started) logs.start(data.hosts);
    renderFacts(facts, job, d);
    failure.textContent = d.FailureReason || "";
    failure.classList.toggle("hidden", !d.FailureReason);
    const warned = (d.Shipyard && d.Shipyard.Warnings) || [];
    warnings.replaceChildren(...warned.map((w) => h("li", {}, w)));
    warnings.classList.toggle("hidden", !warned.length);
    renderStop(stopArea, job.status, name, () => { stopping = true; });
    sections.timeline.replaceChildren(statusTimeline(d, job));
    sections.artifacts.replaceChildren(...artifacts(d));
    if (shown === null) sections.hyperparameters.replaceChildren(hyperparameters(d.HyperParameters));
    const profiled = d.ProfilingStatus === "Enabled" || (d.ProfilerConfig !== undefined);
    report.classList.toggle("hidden", !profiled);
    const [rules, events, metrics, system] = await Promise.all([
      api(`/api/jobs/${encodeURIComponent(name)}/rules`, { signal: page.signal() }),
      api(`/api/jobs/${encodeURIComponent(name)}/events?after=${lastEvent}`, { signal: page.signal() }),
      api(`/api/jobs/${encodeURIComponent(name)}/metrics`, { signal: page.signal() }),
      api(`/api/jobs/${encodeURIComponent(name)}/system`, { signal: page.signal() })]);
    if (!page.alive) return;
    // Drawn again only when what they show changed: a page left open costs its browser little.
    if (changed("rules", rules)) sections.rules.replaceChildren(rulesTable(rules));
    lastEvent = appendEvents(sections.events, events, lastEvent);
    if (changed("metrics", metrics)) sections.metrics.replaceChildren(...metricCharts(metrics));
    if (changed("system", system)) sections.system.replaceChildren(...systemCharts(system));
    shown = job.status;
    return job.status;
  };
  // While it runs: every 2 s; once it ended, one last look (its final metrics and rules), then no more.
  const loop = async () => {
    const st = await refresh();
    if (!page.alive) return;
    if (TERMINAL.has(st)) { page.later(1500, async () => { await refresh(); }); return; }
    page.later(stopping ? 1000 : POLL_MS, loop);
  };
  await loop();
});

function renderFacts(el, job, d) {
  el.replaceChildren(
    fact("Instances", job.instance_type), fact("Strategy", job.strategy), fact("Backend", job.backend),
    fact("Spot", job.spot ? "yes" : "no"), fact("Duration", duration(job.duration)),
    fact("Training time", d.TrainingTimeInSeconds === null || d.TrainingTimeInSeconds === undefined ? "-" : `${d.TrainingTimeInSeconds} s`),
    fact("Billable", d.BillableTimeInSeconds === null || d.BillableTimeInSeconds === undefined ? "-" : `${d.BillableTimeInSeconds} s`),
    fact("Cost", money(job.cost)), fact("On demand", money(job.on_demand_cost)),
    fact("Spot savings", job.spot_savings_percent === null ? "-" : `${job.spot_savings_percent}%`),
    fact("Created", clock(job.creation_time)));
}

function renderStop(area, status, name, onStopping) {
  if (status !== "InProgress" && status !== "Stopping") { area.replaceChildren(); return; }
  if (status === "Stopping") { area.replaceChildren(h("button", { id: "stop", type: "button", disabled: true }, "Stopping…")); return; }
  if (area.querySelector("#stop-confirm") || area.querySelector("#stop")) return;   // keep a pending confirmation
  const confirm = h("button", { id: "stop-confirm", class: "danger confirm", type: "button", onclick: async () => {
    confirm.disabled = true;
    try {
      await api(`/api/jobs/${encodeURIComponent(name)}/stop`, { method: "POST" });
      onStopping();
      area.replaceChildren(h("button", { id: "stop", type: "button", disabled: true }, "Stopping…"));
    } catch (error) {
      area.replaceChildren();
      showError(error);
    }
  } }, "Stop the job (SIGTERM, then SIGKILL)");
  const cancel = h("button", { type: "button", onclick: () => area.replaceChildren() }, "Cancel");
  const stop = h("button", { id: "stop", class: "danger", type: "button", onclick: () => {
    area.replaceChildren(h("span", { class: "muted" }, "Stop it?"), confirm, cancel);
  } }, "Stop");
  area.replaceChildren(stop);
}

function statusTimeline(d, job) {
  const now = Date.now() / 1000;
  const t0 = job.creation_time;
  const transitions = d.SecondaryStatusTransitions || [];
  const attempts = (d.Shipyard && d.Shipyard.Attempts) || [];
  const t1 = Math.max(t0 + 1, ...transitions.map((t) => epochOf(t.EndTime) || now),
                      ...attempts.map((a) => epochOf(a.EndTime) || now));
  const lanes = [{ label: "status", bars: transitions.map((t) => {
    const start = epochOf(t.StartTime), end = epochOf(t.EndTime) || (TERMINAL.has(t.Status) ? start : now);
    return { start, end: Math.max(end, start), color: STATUS_COLORS[t.Status] || "#8795a1", text: t.Status,
             title: `${t.Status}: ${fmtSeconds(end - start)} from ${new Date(start * 1000).toLocaleTimeString()}${t.StatusMessage ? ` — ${t.StatusMessage}` : ""}` };
  }) }];
  if (attempts.length) {
    lanes.push({ label: "attempts", bars: attempts.map((a) => {
      const start = epochOf(a.StartTime), end = epochOf(a.EndTime) || now;
      const color = a.Outcome === "Interrupted" ? "#f28e2b" : a.Outcome === "Failed" ? "#e15759" : a.Outcome ? "#59a14f" : "#4e79a7";
      return { start, end, color, cls: `attempt ${a.Outcome || "running"}`, text: `attempt ${a.AttemptNumber}${a.Outcome ? ` · ${a.Outcome}` : ""}`,
               title: `attempt ${a.AttemptNumber}: ${a.Outcome || "running"}, ${fmtSeconds(end - start)}${a.Reason ? ` — ${a.Reason}` : ""}${a.RestoredCheckpoint ? ` (restored ${a.RestoredCheckpoint})` : ""}` };
    }) });
  }
  const seen = [...new Set(transitions.map((t) => t.Status))];
  return timeline({ lanes, t0, t1, legendItems: seen.map((st) => [st, STATUS_COLORS[st] || "#8795a1"]) });
}

function artifacts(d) {
  const rows = [["Model", d.ModelArtifacts && d.ModelArtifacts.S3ModelArtifacts],
    ["Output data", d.Shipyard && d.Shipyard.OutputArtifacts && d.Shipyard.OutputArtifacts.S3OutputArtifacts],
    ["Checkpoints", d.CheckpointConfig && d.CheckpointConfig.S3Uri], ["Output path", d.OutputDataConfig && d.OutputDataConfig.S3OutputPath],
    ["TensorBoard", d.TensorBoardOutputConfig && d.TensorBoardOutputConfig.S3OutputPath]];
  return rows.filter(([, v]) => v).map(([k, v]) => h("div", {}, h("span", { class: "k" }, k), h("code", {}, v)));
}

function hyperparameters(values) {
  const keys = Object.keys(values || {});
  const { el, tbody } = table(["Name", "Value"], "hyperparameters-table");
  let all = false;
  const toggle = h("button", { type: "button", class: "link-button" });
  const render = () => {
    tbody.replaceChildren(...keys.filter((k) => all || !k.startsWith("sagemaker_")).map((k) =>
      h("tr", {}, h("td", {}, h("code", {}, k)), h("td", { class: "name" }, h("code", {}, values[k])))));
    toggle.textContent = all ? "hide sagemaker_*" : `show sagemaker_* (${keys.filter((k) => k.startsWith("sagemaker_")).length})`;
  };
  toggle.addEventListener("click", () => { all = !all; render(); });
  render();
  return h("div", {}, el, h("div", { class: "row" }, toggle));
}

function rulesTable(rules) {
  if (!rules.length) return h("div", { class: "empty" }, "no rules");
  const { el, tbody } = table(["Kind", "Rule", "Status", "Details"], "rules-table");
  tbody.append(...rules.map((r) => h("tr", {}, h("td", {}, r.kind), h("td", {}, r.rule), h("td", {}, badge(r.status)),
    h("td", { class: "name" }, r.details))));
  return el;
}

function appendEvents(el, events, last) {
  let body = el.querySelector("tbody");
  if (!body) {
    const t = table(["Time", "Kind", "Host", "Message"], "events-table");
    el.replaceChildren(t.el);
    body = t.tbody;
  }
  for (const e of events) {
    body.append(h("tr", {}, h("td", { class: "num" }, new Date(e.ts * 1000).toLocaleTimeString()), h("td", {}, e.kind),
      h("td", {}, e.host || ""), h("td", { class: "name" }, e.message)));
    last = Math.max(last, e.id);
  }
  while (body.children.length > 200) body.firstChild.remove();
  return last;
}

function metricCharts(data) {
  const names = Object.keys(data.metrics);
  if (!names.length) return [h("div", { class: "empty" }, "no metrics (metric_definitions pick them from the log)")];
  const start = data.training_start_time || 0;
  return names.map((metric) => {
    const hosts = Object.keys(data.metrics[metric]).sort();
    const series = hosts.map((host) => ({ name: host, dataset: { host },
      points: data.metrics[metric][host].map(([ts, v]) => [ts - start, v]) }));
    const first = data.metrics[metric][hosts[0]];
    const chart = lineChart({ series, title: metric, latest: `latest ${fmtNumber(first[first.length - 1][1])}`,
                              cls: "metric", dataset: { metric }, xLabel: "seconds since training started",
                              xFormat: fmtSeconds, alwaysLegend: true });
    return chart;
  });
}

function systemCharts(data) {
  const hosts = Object.keys(data.hosts).sort();
  if (!hosts.length) return [h("div", { class: "empty" }, "no profiler data (the job ran without profiling)")];
  const t0 = Math.min(...hosts.flatMap((host) => Object.values(data.hosts[host]).map((points) => points.length ? points[0][0] : Infinity)));
  const out = [];
  for (const host of hosts) {
    const series = Object.entries(data.hosts[host]);
    const percent = series.filter(([k]) => !k.startsWith("network")).map(([k, points], i) =>
      ({ name: k === "cpu" ? "CPU (mean of cores)" : k === "memory" ? "memory" : `${k} utilisation`, color: PALETTE[i % PALETTE.length],
         points: points.map(([ts, v]) => [ts - t0, v]) }));
    const network = series.filter(([k]) => k.startsWith("network")).map(([k, points], i) =>
      ({ name: k.replace("network ", "").replace("BytesPerSecond", ""), color: PALETTE[(i + 5) % PALETTE.length],
         points: points.map(([ts, v]) => [ts - t0, v]) }));
    out.push(lineChart({ series: percent, title: `${host}: CPU, memory, GPU %`, cls: "system", dataset: { host },
                         yMin: 0, yMax: 100, yFormat: (v) => `${v}%`, xFormat: fmtSeconds, dots: 0, alwaysLegend: true }));
    if (network.length) {
      out.push(lineChart({ series: network, title: `${host}: network`, cls: "network", dataset: { host },
                           yMin: 0, yFormat: fmtBytesRate, xFormat: fmtSeconds, dots: 0, alwaysLegend: true }));
    }
  }
  return out;
}

// -- logs: one host at a time, streamed live (server-sent events read with fetch, so the token can go in
// a header), with a search over what arrived --------------------------------------------------------
function logView(page, name) {
  const tabs = h("div", { class: "tabs" });
  const search = h("input", { type: "search", id: "log-search", placeholder: "search this host's log…" });
  const follow = h("input", { type: "checkbox", id: "log-follow", checked: true });
  const count = h("span", { class: "muted", id: "log-count" });
  const box = h("div", { id: "log-lines", class: "logbox", tabindex: 0 });
  const view = { el: h("div", {}, h("div", { class: "log-tools" }, tabs, h("span", { class: "spacer" }), search,
                                    h("label", {}, follow, " follow"), count), box), started: false };
  let controller = null, total = 0;
  const matches = (line) => !search.value || line.toLowerCase().includes(search.value.toLowerCase());
  const recount = () => {
    const shown = box.querySelectorAll("div.line:not(.hidden)").length;
    count.textContent = search.value ? `${shown} of ${total} lines` : `${total} lines`;
  };
  const add = (lines) => {
    const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 30;
    const fragment = document.createDocumentFragment();
    for (const line of lines) {
      const el = h("div", { class: "line" }, line);
      if (/error|traceback|exception/i.test(line)) el.classList.add("err");
      if (!matches(line)) el.classList.add("hidden");
      fragment.append(el);
    }
    box.append(fragment);
    total += lines.length;
    while (box.childElementCount > MAX_LOG_LINES) box.firstChild.remove();
    if (follow.checked && (atBottom || lines.length)) box.scrollTop = box.scrollHeight;
    recount();
  };
  const open = (host) => {
    if (controller) controller.abort();
    controller = new AbortController();
    page.aborts.push(controller);
    box.replaceChildren();
    total = 0;
    for (const tab of tabs.children) tab.classList.toggle("active", tab.dataset.host === host);
    streamLog(`/api/jobs/${encodeURIComponent(name)}/logs/${encodeURIComponent(host)}/stream`, add, controller.signal)
      .catch(showError);
  };
  search.addEventListener("input", () => {
    for (const el of box.children) el.classList.toggle("hidden", !matches(el.textContent));
    recount();
  });
  view.start = (hosts) => {
    view.started = true;
    tabs.replaceChildren(...hosts.map((host) => h("button", { type: "button", class: "host-tab", dataset: { host },
                                                              onclick: () => open(host) }, host)));
    if (hosts.length) open(hosts[0]);
  };
  return view;
}

async function streamLog(url, onLines, signal) {
  let offset = 0;
  while (!signal.aborted) {
    let ended = false;
    try {
      const response = await fetch(`${url}?offset=${offset}`, { headers: headers(), signal });
      if (!response.ok) throw new ApiError(response.status, (await response.json()).detail);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let event = "message", data = null;
          for (const line of block.split("\n")) {
            if (line.startsWith("event: ")) event = line.slice(7);
            else if (line.startsWith("data: ")) data = line.slice(6);
            else if (line.startsWith("id: ")) offset = Number(line.slice(4));
          }
          if (data === null) continue;
          if (event === "end") ended = true;
          else onLines(JSON.parse(data));
        }
      }
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError) throw error;
    }
    if (ended) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));   // the stream broke: resume from `offset`
  }
}

window.shipyard = { route, api, card, table, badge, money, clock, epochOf, jobLink, duration, debounce, fact, showError,
                    PageContext, STATUS_COLORS, TERMINAL, POLL_MS, swatch };
document.getElementById("token-button").addEventListener("click", () => askForToken("Set the server's token."));
window.addEventListener("hashchange", navigate);
window.addEventListener("DOMContentLoaded", navigate);
