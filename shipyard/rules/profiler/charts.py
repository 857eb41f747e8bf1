"""The profiling report's charts, drawn by matplotlib (a Figure and its own SVG canvas: no pyplot, no global
state) and returned as inline SVG. Text is drawn as paths, so the page needs no font and opens offline;
each text keeps its words in an XML comment beside its paths. Axes get nice ticks (1, 2 or 5 × 10^k,
whole numbers for steps and counts) labelled with no more decimals than their spacing needs, and no
offset or scientific notation."""

from __future__ import annotations

import io
import itertools
import re
from html import escape

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, ScalarFormatter

WIDTH = 9.0  # inches: 648 pt, 864 CSS px
HEIGHT = 2.6
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
OUTLIER = "#d62728"
NICE = (1, 2, 5, 10)
LABELLED = 5  # % a bar segment needs for its share to be written on it
LEGEND_ROW, LEGEND_HANDLE = 110, 6  # characters of legend labels a row holds; what each entry's marker takes
# matplotlib names the parts of every figure alike (axes_1, clip paths, glyphs): a prefix per chart keeps
# ids unique in the page, so one chart's references cannot resolve to another's definitions.
_charts = itertools.count()


def _axes(x_label: str, y_label: str, height: float = HEIGHT, whole_x: bool = False, whole_y: bool = False):
    figure = Figure(figsize=(WIDTH, height), layout="constrained")
    axes = figure.add_subplot()
    for axis, whole in ((axes.xaxis, whole_x), (axes.yaxis, whole_y)):
        axis.set_major_locator(MaxNLocator(nbins="auto", steps=NICE, integer=whole))
        formatter = ScalarFormatter(useOffset=False)
        formatter.set_scientific(False)
        axis.set_major_formatter(formatter)
    axes.grid(color="#e5e5e5")
    axes.set_axisbelow(True)
    axes.spines[["top", "right"]].set_visible(False)
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    return figure, axes


def _legend(figure: Figure) -> None:
    """Above the plot: in one row where the labels fit, else in as many columns as the longest allows."""
    labels = [label for axes in figure.axes for label in axes.get_legend_handles_labels()[1]]
    width = max(len(label) for label in labels) + LEGEND_HANDLE
    columns = len(labels) if sum(len(label) + LEGEND_HANDLE for label in labels) <= LEGEND_ROW else LEGEND_ROW // width
    figure.legend(loc="outside upper left", ncols=max(1, columns), frameon=False)


def _svg(figure: Figure, title: str) -> str:
    out = io.StringIO()
    figure.savefig(out, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = out.getvalue()
    svg = svg[svg.index("<svg"):]  # the XML prolog and DOCTYPE are a standalone file's
    svg = svg.replace(' xmlns:xlink="http://www.w3.org/1999/xlink"', "")  # HTML knows xlink:href without it
    svg = re.sub(r'(id="|href="#|url\(#)', rf"\g<1>c{next(_charts)}-", svg)
    opening = svg.index(">") + 1
    return (svg[:opening].replace("<svg ", f'<svg class="chart" role="img" aria-label="{escape(title)}" ', 1)
            + f"<title>{escape(title)}</title>" + svg[opening:])


def _no_data(title: str, what: str = "no data") -> str:
    return f"<p>{escape(title)}: {what}</p>"


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], y_label: str, y_max: float | None = None,
               x_label: str = "seconds since the first sample", from_zero: bool = True,
               whole_x: bool = False) -> str:
    """Lines over x: by default time, in seconds since the first point of any series."""
    points = [p for values in series.values() for p in values]
    if not points:
        return _no_data(title)
    t0 = min(t for t, _ in points) if from_zero else 0.0
    figure, axes = _axes(x_label, y_label, whole_x=whole_x)
    for colour, (name, values) in zip(itertools.cycle(COLOURS), series.items()):
        axes.plot([t - t0 for t, _ in values], [v for _, v in values], color=colour, linewidth=1.2, label=name)
    axes.set_ylim(0, y_max)
    axes.margins(x=0)
    _legend(figure)
    return _svg(figure, title)


def step_chart(title: str, steps: list[tuple[int, float]], limits: list[tuple[str, float]]) -> str:
    """Each step's duration by step number, with the outlier limits (label, seconds) of the StepOutlier rules
    as dashed lines; steps above the lowest limit (outliers) in red."""
    if not steps:
        return _no_data(title, "no steps recorded")
    lowest = min((limit for _, limit in limits), default=None)
    outlier = [lowest is not None and duration > lowest for _, duration in steps]
    figure, axes = _axes("step", "seconds", whole_x=True)
    for flag, colour, label in ((False, COLOURS[0], "step"), (True, OUTLIER, "outlier")):
        chosen = [s for s, o in zip(steps, outlier) if o == flag]
        if chosen:
            axes.scatter([s for s, _ in chosen], [d for _, d in chosen], s=6, color=colour, label=label)
    for (label, limit), colour in zip(limits, itertools.cycle(COLOURS[1:])):
        axes.axhline(limit, color=colour, linestyle="--", linewidth=1, label=label)
    axes.set_ylim(0, None)
    _legend(figure)
    return _svg(figure, title)


def histogram(title: str, values: list[float], x_label: str = "step duration (s)", y_label: str = "steps",
              bins: int = 30) -> str:
    if not values:
        return _no_data(title)
    figure, axes = _axes(x_label, y_label, whole_y=True)
    axes.hist(values, bins=bins, color=COLOURS[0], rwidth=0.9)
    return _svg(figure, title)


def share_bars(title: str, rows: dict[str, dict[str, float]]) -> str:
    """One horizontal bar per row (e.g. per node), split into its parts by their shares (% that add up to
    100, as given), each share written on its part where it is wide enough; a legend names the parts."""
    rows = {label: shares for label, shares in rows.items() if shares}
    if not rows:
        return _no_data(title)
    names = list(dict.fromkeys(name for shares in rows.values() for name in shares))
    colour = dict(zip(names, itertools.cycle(COLOURS)))
    figure, axes = _axes("% of the total", "", height=1.1 + 0.35 * len(rows))
    labels = list(rows)[::-1]  # the first row on top
    starts = {label: dict(zip(shares, itertools.accumulate([0.0, *shares.values()]))) for label, shares in rows.items()}
    for name in names:
        shares = [rows[label].get(name, 0.0) for label in labels]
        bars = axes.barh(range(len(labels)), shares, left=[starts[label].get(name, 0.0) for label in labels],
                         color=colour[name], label=name, height=0.6)
        axes.bar_label(bars, labels=[f"{s:.0f}%" if s >= LABELLED else "" for s in shares], label_type="center",
                       color="white", fontsize=9)
    axes.set_yticks(range(len(labels)), labels)
    axes.set_xlim(0, 100)
    axes.grid(axis="y", visible=False)
    _legend(figure)
    return _svg(figure, title)
