"use strict";
// DOM and SVG helpers and the dashboard's charts. Every text from the server goes into the page as a
// text node (h/s below), never as HTML, so a job's log line or name can only ever be shown.
(() => {

const SVGNS = "http://www.w3.org/2000/svg";
const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f",
                 "#ff9da7", "#bab0ac"];

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "text") el.textContent = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  return append(el, children);
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  setAttrs(el, attrs);
  return append(el, children);
}

// -- numbers -----------------------------------------------------------------------------------
function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const fraction = raw / power;
  return (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * power;
}

function niceTicks(lo, hi, count = 5) {
  if (!isFinite(lo) || !isFinite(hi)) return { lo: 0, hi: 1, ticks: [0, 1] };
  if (lo === hi) { const pad = Math.abs(lo) * 0.1 || 1; lo -= pad; hi += pad; }
  const step = niceStep(hi - lo, count);
  const start = Math.floor(lo / step) * step, end = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let v = start; v <= end + step / 2; v += step) ticks.push(+v.toPrecision(12));
  return { lo: start, hi: end, ticks };
}

function logTicks(lo, hi) {
  const a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi));
  const ticks = [];
  for (let p = a; p <= b; p++) ticks.push(Math.pow(10, p));
  return { lo: Math.pow(10, a), hi: Math.pow(10, b), ticks };
}

function fmtNumber(v) {
  if (v === null || v === undefined || !isFinite(v)) return "-";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
  if (a === 0) return "0";
  if (a >= 100) return v.toFixed(0);
  if (a >= 1) return (+v.toFixed(2)).toString();
  if (a >= 1e-3) return (+v.toPrecision(3)).toString();
  return v.toExponential(1);
}

function fmtBytesRate(v) {   // decimal units, so that round ticks read round
  if (!isFinite(v)) return "-";
  const units = ["B/s", "kB/s", "MB/s", "GB/s"];
  let i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return (Math.abs(v) >= 100 || i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[i];
}

function fmtSeconds(v) {
  if (!isFinite(v)) return "-";
  const a = Math.abs(v);
  if (a < 60) return (+v.toFixed(a < 10 && a % 1 ? 1 : 0)) + "s";
  if (a < 3600) return Math.floor(v / 60) + "m" + (Math.round(v % 60) ? String(Math.round(v % 60)).padStart(2, "0") + "s" : "");
  return Math.floor(v / 3600) + "h" + String(Math.floor((v % 3600) / 60)).padStart(2, "0") + "m";
}

// -- the frame every x/y chart shares ------------------------------------------------------------
const W = 560, H = 230, M = { left: 54, right: 14, top: 12, bottom: 34 };

function frame({ xs, ys, xLog = false, xCategories = null, xInteger = false, yMin = null, yMax = null, xFormat = fmtNumber,
                 yFormat = fmtNumber, xLabel = "", yLabel = "", cls = "", dataset = {}, width = W, height = H }) {
  const plotW = width - M.left - M.right, plotH = height - M.top - M.bottom;
  let xAxis;
  if (xCategories) {
    const n = xCategories.length;
    xAxis = { lo: -0.5, hi: n - 0.5, ticks: xCategories.map((_, i) => i) };
  } else if (xLog) {
    xAxis = logTicks(Math.min(...xs), Math.max(...xs));
  } else {
    xAxis = niceTicks(Math.min(...xs), Math.max(...xs), 6);
    if (xInteger) xAxis.ticks = xAxis.ticks.filter(Number.isInteger);   // trials, epochs: no half steps
  }
  const yLo = yMin !== null ? yMin : Math.min(...ys);
  let yHi = yMax !== null ? yMax : Math.max(...ys);
  if (yMin !== null && yHi <= yMin) yHi = yMin + 1;   // all at the floor (nothing cost anything): a scale above it
  const yAxis = niceTicks(Math.min(yLo, yHi), Math.max(yLo, yHi), 4);
  const tx = xLog ? (v) => Math.log10(v) : (v) => v;
  const x = (v) => M.left + (tx(v) - tx(xAxis.lo)) / ((tx(xAxis.hi) - tx(xAxis.lo)) || 1) * plotW;
  const y = (v) => M.top + plotH - (v - yAxis.lo) / ((yAxis.hi - yAxis.lo) || 1) * plotH;
  const svg = s("svg", { class: ("chart " + cls).trim(), viewBox: `0 0 ${width} ${height}`, role: "img", dataset });
  for (const t of yAxis.ticks) {
    svg.append(s("line", { class: "grid", x1: M.left, x2: width - M.right, y1: y(t), y2: y(t) }));
    svg.append(s("text", { x: M.left - 6, y: y(t) + 4, "text-anchor": "end" }, yFormat(t)));
  }
  const xTicks = xCategories ? xAxis.ticks : xAxis.ticks;
  const every = Math.max(1, Math.ceil(xTicks.length / 8));
  xTicks.forEach((t, i) => {
    if (i % every) return;
    svg.append(s("line", { class: "axis", x1: x(t), x2: x(t), y1: M.top + plotH, y2: M.top + plotH + 4 }));
    svg.append(s("text", { x: x(t), y: M.top + plotH + 16, "text-anchor": "middle" },
                 xCategories ? String(xCategories[t]).slice(0, 14) : xFormat(t)));
  });
  svg.append(s("line", { class: "axis", x1: M.left, x2: width - M.right, y1: M.top + plotH, y2: M.top + plotH }));
  if (xLabel) svg.append(s("text", { x: M.left + plotW / 2, y: height - 3, "text-anchor": "middle" }, xLabel));
  if (yLabel) svg.append(s("text", { x: 12, y: M.top + plotH / 2, "text-anchor": "middle",
                                    transform: `rotate(-90 12 ${M.top + plotH / 2})` }, yLabel));
  return { svg, x, y };
}

function legend(items) {
  return h("div", { class: "legend" }, items.map(([name, color]) =>
    h("span", {}, swatch(color), name)));
}

function swatch(color) {
  const el = h("span", { class: "sw" });
  el.style.background = color;   // CSSOM, not a style attribute: allowed by the page's policy
  return el;
}

// series: [{name, points: [[x, y], ...], color?, attrs?}]; dots: circles when a series is short enough
function lineChart({ series, title = "", latest = null, dots = 400, ...options }) {
  const all = series.flatMap((one) => one.points);
  if (!all.length) return chartBox(title, null, h("div", { class: "empty" }, "no data yet"));
  const { svg, x, y } = frame({ xs: all.map((p) => p[0]), ys: all.map((p) => p[1]), ...options });
  const yFormat = options.yFormat || fmtNumber, xFormat = options.xFormat || fmtNumber;
  series.forEach((one, i) => {
    const color = one.color || PALETTE[i % PALETTE.length];
    const d = one.points.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
    svg.append(s("path", { class: "series", d, stroke: color, dataset: { points: one.points.length, ...(one.dataset || {}) } },
                 s("title", {}, one.name)));
    if (one.points.length <= dots) {
      for (const p of one.points) {
        svg.append(s("circle", { cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1), r: 2.6, fill: color },
                     s("title", {}, `${one.name}: ${yFormat(p[1])} at ${xFormat(p[0])}`)));
      }
    }
  });
  return chartBox(title, latest, svg, series.length > 1 || options.alwaysLegend
    ? legend(series.map((one, i) => [one.name, one.color || PALETTE[i % PALETTE.length]])) : null);
}

// points: [{x, y, title, cls, color}]; lines: [{name, points, cls, color}] drawn under them (a step line
// when `step`)
function scatterChart({ points, lines = [], title = "", ...options }) {
  if (!points.length) return chartBox(title, null, h("div", { class: "empty" }, "no data yet"));
  const xs = points.map((p) => p.x), ys = points.map((p) => p.y);
  const { svg, x, y } = frame({ xs, ys, ...options });
  for (const line of lines) {
    let d = "";
    line.points.forEach((p, j) => {
      if (!j) d += `M${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`;
      else d += (line.step ? `H${x(p[0]).toFixed(1)}` : "") + `L${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`;
    });
    svg.append(s("path", { class: line.cls || "series", d, stroke: line.color || "#1f2933" }, s("title", {}, line.name)));
  }
  for (const p of points) {
    svg.append(s("circle", { class: p.cls || null, cx: x(p.x).toFixed(1), cy: y(p.y).toFixed(1), r: 4.5,
                             fill: p.color || PALETTE[0] }, s("title", {}, p.title || "")));
  }
  return chartBox(title, null, svg, options.legendItems ? legend(options.legendItems) : null);
}

// groups: [{label, bars: [{value, cls, color, title}]}]
function barChart({ groups, title = "", yFormat = fmtNumber, cls = "", legendItems = null, width = W, height = H }) {
  const values = groups.flatMap((g) => g.bars.map((b) => b.value));
  if (!values.length) return chartBox(title, null, h("div", { class: "empty" }, "no data yet"));
  const { svg, x, y } = frame({ xs: [0], ys: [0, ...values], xCategories: groups.map((g) => g.label), yMin: 0,
                                yFormat, cls, width, height });
  const slot = groups.length > 1 ? x(1) - x(0) : width - M.left - M.right;
  const barWidth = Math.min(28, slot * 0.8 / Math.max(1, groups[0].bars.length));
  groups.forEach((g, i) => {
    g.bars.forEach((bar, j) => {
      const left = x(i) - (g.bars.length * barWidth) / 2 + j * barWidth;
      const top = y(Math.max(0, bar.value));
      svg.append(s("rect", { class: bar.cls, x: left.toFixed(1), y: top.toFixed(1), width: (barWidth - 2).toFixed(1),
                             height: Math.max(1, y(0) - top).toFixed(1), rx: 2, fill: bar.color },
                   s("title", {}, bar.title)));
    });
  });
  return chartBox(title, null, svg, legendItems ? legend(legendItems) : null);
}

// lanes: [{label, bars: [{start, end, color, title, cls}]}], times in seconds (epoch)
function timeline({ lanes, t0, t1, title = "", legendItems = null }) {
  const width = 1100, laneH = 26, top = 8, left = 90, right = 16;
  const height = top + lanes.length * (laneH + 8) + 28;
  const span = Math.max(1, t1 - t0);
  const x = (t) => left + (t - t0) / span * (width - left - right);
  const svg = s("svg", { class: "chart timeline", viewBox: `0 0 ${width} ${height}`, role: "img" });
  const axis = niceTicks(0, span, 8);
  for (const t of axis.ticks) {
    if (t > span) continue;
    svg.append(s("line", { class: "grid", x1: x(t0 + t), x2: x(t0 + t), y1: top, y2: height - 22 }));
    svg.append(s("text", { x: x(t0 + t), y: height - 8, "text-anchor": "middle" }, fmtSeconds(t)));
  }
  lanes.forEach((lane, i) => {
    const yTop = top + i * (laneH + 8);
    svg.append(s("text", { x: left - 8, y: yTop + laneH / 2 + 4, "text-anchor": "end" }, lane.label));
    for (const bar of lane.bars) {
      const a = x(bar.start), b = Math.max(x(bar.end), a + 2);
      const rect = s("rect", { class: bar.cls || null, x: a.toFixed(1), y: yTop, width: (b - a).toFixed(1), height: laneH,
                               rx: 3, fill: bar.color }, s("title", {}, bar.title));
      svg.append(rect);
      if (b - a > 70 && bar.text) {
        svg.append(s("text", { class: "on-bar", x: a + 6, y: yTop + laneH / 2 + 4 }, bar.text));
      }
    }
  });
  return chartBox(title, null, svg, legendItems ? legend(legendItems) : null);
}

function chartBox(title, latest, body, legendEl = null) {
  return h("div", { class: "chart-box" },
    title ? h("div", { class: "chart-title" }, h("span", {}, title), latest !== null ? h("span", { class: "latest" }, latest) : null) : null,
    body, legendEl);
}

window.charts = { h, s, PALETTE, lineChart, scatterChart, barChart, timeline, legend, swatch, fmtNumber, fmtBytesRate,
                  fmtSeconds };
})();
