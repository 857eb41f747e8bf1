"""Inline SVG charts for the profiling report: no scripts, no network, so the report opens offline."""

from __future__ import annotations

from html import escape

WIDTH, HEIGHT, PAD, TOP = 720, 230, 56, 30  # TOP: room for the legend above the plot area
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
OUTLIER = "#d62728"
TICKS = 4  # intervals between the axis labels


def _scale(lo: float, hi: float, a: float, b: float):
    span = (hi - lo) or 1.0
    return lambda v: a + (v - lo) / span * (b - a)


def _label(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.0f}"


def _x_tick(x_range, i: int, whole: bool) -> float:
    value = x_range[0] + i * (x_range[1] - x_range[0]) / TICKS
    return round(value) if whole else value


def _frame(title: str, body: list[str], x_label: str, y_label: str, x_range, y_range, legend=()) -> str:
    """Axes with TICKS + 1 labels each and light grid lines, the legend in a row above the plot area."""
    bottom, right = HEIGHT - PAD, WIDTH - PAD
    whole = all(isinstance(v, int) for v in x_range)  # step numbers: no fractional ticks
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" class="chart" role="img">',
             f"<title>{escape(title)}</title>"]
    for i in range(TICKS + 1):
        y = bottom - i * (bottom - TOP) / TICKS
        x = PAD + i * (right - PAD) / TICKS
        parts.append(f'<line x1="{PAD}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{PAD - 4}" y="{y + 3:.1f}" font-size="10" text-anchor="end">'
                     f"{_label(y_range[0] + i * (y_range[1] - y_range[0]) / TICKS)}</text>"
                     f'<text x="{x:.1f}" y="{bottom + 14}" font-size="10" text-anchor="middle">'
                     f"{_label(_x_tick(x_range, i, whole))}</text>")
    parts += [f'<rect x="{PAD}" y="{TOP}" width="{right - PAD}" height="{bottom - TOP}" fill="none" stroke="#999"/>',
              f'<text x="{WIDTH / 2}" y="{HEIGHT - 8}" text-anchor="middle" font-size="11">{escape(x_label)}</text>',
              f'<text x="11" y="{(TOP + bottom) / 2}" font-size="11" transform="rotate(-90 11 {(TOP + bottom) / 2})" '
              f'text-anchor="middle">{escape(y_label)}</text>', *body]
    for i, (name, colour) in enumerate(legend):
        parts.append(f'<rect x="{PAD + i * 140}" y="8" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{PAD + 14 + i * 140}" y="17" font-size="11">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], y_label: str, y_max: float | None = None,
               x_label: str = "seconds", from_zero: bool = True) -> str:
    """Lines over x (by default time: seconds since the first point of any series)."""
    points = [p for values in series.values() for p in values]
    if not points:
        return f"<p>{escape(title)}: no data</p>"
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    shown = (0, round(t1 - t0, 1)) if from_zero else (t0, t1)
    top = y_max if y_max is not None else max(p[1] for p in points) or 1.0
    x, y = _scale(0, t1 - t0, PAD, WIDTH - PAD), _scale(0, top, HEIGHT - PAD, TOP)
    body, legend = [], []
    for i, (name, values) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        coords = " ".join(f"{x(t - t0):.1f},{y(min(v, top)):.1f}" for t, v in values)
        body.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>')
        legend.append((name, colour))
    return _frame(title, body, x_label, y_label, shown, (0, round(top, 3)), legend)


def step_chart(title: str, steps: list[tuple[int, float]], limit: float | None) -> str:
    """Each step's duration by step number; those above `limit` (the outliers) in red."""
    if not steps:
        return f"<p>{escape(title)}: no steps recorded</p>"
    n0, n1 = min(s for s, _ in steps), max(s for s, _ in steps)
    top = max(d for _, d in steps) * 1.05 or 1.0
    x, y = _scale(n0, n1, PAD, WIDTH - PAD), _scale(0, top, HEIGHT - PAD, TOP)
    body = []
    for step, duration in steps:
        colour = OUTLIER if limit is not None and duration > limit else COLOURS[0]
        body.append(f'<circle cx="{x(step):.1f}" cy="{y(duration):.1f}" r="2.2" fill="{colour}">'
                    f"<title>step {step}: {duration:.4f}s</title></circle>")
    if limit is not None:
        body.append(f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y(min(limit, top)):.1f}" y2="{y(min(limit, top)):.1f}" '
                    f'stroke="{OUTLIER}" stroke-dasharray="4 3"/>')
    return _frame(title, body, "step", "seconds", (n0, n1), (0, round(top, 3)),
                  [("step", COLOURS[0]), ("outlier", OUTLIER)])


def histogram(title: str, values: list[float], bins: int = 30, x_label: str = "step duration (s)",
              y_label: str = "steps") -> str:
    if not values:
        return f"<p>{escape(title)}: no data</p>"
    lo, hi = min(values), max(values)
    if hi - lo < 1e-9:  # all equal: one bar in the middle rather than at the edge of an empty range
        lo, hi = lo - max(abs(lo) * 0.05, 1e-3), hi + max(abs(hi) * 0.05, 1e-3)
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(int((v - lo) / width), bins - 1)] += 1
    top = max(counts)
    x, y = _scale(0, bins, PAD, WIDTH - PAD), _scale(0, top, HEIGHT - PAD, TOP)
    body = [f'<rect x="{x(i):.1f}" y="{y(c):.1f}" width="{x(1) - x(0) - 1:.1f}" height="{HEIGHT - PAD - y(c):.1f}" '
            f'fill="{COLOURS[0]}"><title>{lo + i * width:.4f}-{lo + (i + 1) * width:.4f}s: {c}</title></rect>'
            for i, c in enumerate(counts)]
    return _frame(title, body, x_label, y_label, (round(lo, 4), round(hi, 4)), (0, top))


def share_bars(title: str, rows: dict[str, dict[str, float]], unit: str = "s") -> str:
    """One horizontal bar per row (e.g. per node), split into its parts by their share of the row's total,
    each part labelled with its % where it is wide enough; a legend names the parts."""
    rows = {label: parts for label, parts in rows.items() if sum(parts.values()) > 0}
    if not rows:
        return f"<p>{escape(title)}: no data</p>"
    names = list(dict.fromkeys(name for parts in rows.values() for name in parts))
    colour = {name: COLOURS[i % len(COLOURS)] for i, name in enumerate(names)}
    label_width, bar, gap, legend_row = 110, 24, 10, 18
    per_row = max(1, (WIDTH - 20) // 180)
    height = 10 + len(rows) * (bar + gap) + legend_row * -(-len(names) // per_row) + 6
    x = _scale(0, 100, label_width, WIDTH - 20)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" class="chart" role="img">',
             f"<title>{escape(title)}</title>"]
    for r, (label, values) in enumerate(rows.items()):
        top, total, left = 10 + r * (bar + gap), sum(values.values()), 0.0
        parts.append(f'<text x="{label_width - 6}" y="{top + bar / 2 + 4}" font-size="12" text-anchor="end">'
                     f"{escape(label)}</text>")
        for name, value in values.items():
            share = 100 * value / total
            a, b = x(left), x(left + share)
            parts.append(f'<rect x="{a:.1f}" y="{top}" width="{max(b - a, 0):.1f}" height="{bar}" fill="{colour[name]}">'
                         f"<title>{escape(label)} {escape(name)}: {value:.3f}{unit} ({share:.1f}%)</title></rect>")
            if b - a > 34:
                parts.append(f'<text x="{(a + b) / 2:.1f}" y="{top + bar / 2 + 4}" font-size="11" fill="#fff" '
                             f'text-anchor="middle">{share:.0f}%</text>')
            left += share
    legend_top = 10 + len(rows) * (bar + gap)
    for i, name in enumerate(names):
        lx, ly = label_width + (i % per_row) * 180, legend_top + (i // per_row) * legend_row
        parts.append(f'<rect x="{lx}" y="{ly}" width="10" height="10" fill="{colour[name]}"/>'
                     f'<text x="{lx + 14}" y="{ly + 9}" font-size="11">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
