"""Inline SVG charts for the profiling report: no scripts, no network, so the report opens offline."""

from __future__ import annotations

from html import escape

WIDTH, HEIGHT, PAD = 720, 220, 44
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
OUTLIER = "#d62728"


def _scale(lo: float, hi: float, a: float, b: float):
    span = (hi - lo) or 1.0
    return lambda v: a + (v - lo) / span * (b - a)


def _frame(title: str, body: list[str], x_label: str, y_label: str, x_range, y_range, legend=()) -> str:
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" class="chart" role="img">',
             f"<title>{escape(title)}</title>",
             f'<rect x="{PAD}" y="10" width="{WIDTH - 2 * PAD}" height="{HEIGHT - PAD - 10}" fill="none" stroke="#999"/>',
             f'<text x="{WIDTH / 2}" y="{HEIGHT - 6}" text-anchor="middle" font-size="11">{escape(x_label)}</text>',
             f'<text x="12" y="{HEIGHT / 2}" font-size="11" transform="rotate(-90 12 {HEIGHT / 2})" '
             f'text-anchor="middle">{escape(y_label)}</text>',
             f'<text x="{PAD}" y="{HEIGHT - PAD + 14}" font-size="10">{x_range[0]:g}</text>',
             f'<text x="{WIDTH - PAD}" y="{HEIGHT - PAD + 14}" font-size="10" text-anchor="end">{x_range[1]:g}</text>',
             f'<text x="{PAD - 4}" y="{HEIGHT - PAD}" font-size="10" text-anchor="end">{y_range[0]:g}</text>',
             f'<text x="{PAD - 4}" y="18" font-size="10" text-anchor="end">{y_range[1]:g}</text>',
             *body]
    for i, (name, colour) in enumerate(legend):
        parts.append(f'<rect x="{PAD + 8 + i * 130}" y="16" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{PAD + 22 + i * 130}" y="25" font-size="11">{escape(name)}</text>')
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
    x, y = _scale(0, t1 - t0, PAD, WIDTH - PAD), _scale(0, top, HEIGHT - PAD, 10)
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
    x, y = _scale(n0, n1, PAD, WIDTH - PAD), _scale(0, top, HEIGHT - PAD, 10)
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


def histogram(title: str, values: list[float], bins: int = 30) -> str:
    if not values:
        return f"<p>{escape(title)}: no data</p>"
    lo, hi = min(values), max(values)
    width = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(int((v - lo) / width), bins - 1)] += 1
    top = max(counts)
    x, y = _scale(0, bins, PAD, WIDTH - PAD), _scale(0, top, HEIGHT - PAD, 10)
    body = [f'<rect x="{x(i):.1f}" y="{y(c):.1f}" width="{x(1) - x(0) - 1:.1f}" height="{HEIGHT - PAD - y(c):.1f}" '
            f'fill="{COLOURS[0]}"><title>{lo + i * width:.4f}-{lo + (i + 1) * width:.4f}s: {c}</title></rect>'
            for i, c in enumerate(counts)]
    return _frame(title, body, "step duration (s)", "steps", (round(lo, 4), round(hi, 4)), (0, top))
