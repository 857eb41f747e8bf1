"""OverallFrameworkMetrics: never fires; per node (and over all nodes), where the training processes'
time went: TRAIN/EVAL steps vs others (from each process's first step start to its last step end), the
step time split into forward, backward, optimizer (PyTorch step phases), dataloader wait and the rest
of the step, every framework annotation's total, operations under 2 % of the total left out as
SageMaker's charts do, and from the detailed torch.profiler traces CPU operator time vs GPU operator
time with the most expensive operators (see shipyard.rules.profiler.operators for what is counted).

The shares (%) are computed here once, each set adding up to 100, and the report draws these same
numbers: what the finding says and what the charts show cannot disagree."""

from __future__ import annotations

from collections import defaultdict

from shipyard.contract.profiler import DATALOADER_ITER, DATALOADER_WORKER
from shipyard.rules.profiler import operators
from shipyard.rules.profiler.base import SCAN_INTERVAL, Finding, percentages

DESCRIPTION = ("Summarises where the training processes spend their time: steps vs others, forward vs "
               "backward vs optimizer, data loading, CPU vs GPU operators.")
RECOMMENDATION = "Look at the largest share: a long dataloader wait or optimizer phase is where to start."
PARAMETERS = dict(SCAN_INTERVAL)
COLLECTIONS = ()
PHASES = ("Forward", "Backward(post-forward)", "Optimizer")
MIN_SHARE = 2.0  # %
IN_DETAILS = 3  # operators named in the details
NO_TRACES = "no detailed profiling traces"
DATALOADER_WAIT, REST = "dataloader wait", "rest of the step"


def shares(totals: dict[str, float]) -> dict[str, float]:
    """% of the total per name, names under MIN_SHARE dropped."""
    total = sum(totals.values())
    return {name: 100 * t / total for name, t in totals.items() if total and 100 * t / total >= MIN_SHARE}


def metrics(steps, events, traces) -> dict:
    """Seconds per category over these steps, framework events and detailed traces (all ranks summed)."""
    modes: dict[str, float] = defaultdict(float)
    spans: dict[tuple[str, int], list[float]] = {}
    for s in steps:
        modes[s.mode] += s.duration
        first, last = spans.get((s.node, s.pid), (s.start, s.start + s.duration))
        spans[s.node, s.pid] = [min(first, s.start), max(last, s.start + s.duration)]
    others = max(sum(b - a for a, b in spans.values()) - sum(modes.values()), 0.0)
    general: dict[str, float] = defaultdict(float)
    for e in events:
        general[e.name] += e.duration
    step_time = sum(modes.values())
    phases, wait = {p: general[p] for p in PHASES if p in general}, general.get(DATALOADER_ITER, 0.0)
    # The parts of the step time; were they to overlap (events outside their step), their sum is the whole.
    parts = {**phases, DATALOADER_WAIT: wait, REST: max(step_time - sum(phases.values()) - wait, 0.0)}
    return {"steps": dict(modes), "others": others, "step_time": step_time,
            "modes": percentages({**{f"{mode} steps": t for mode, t in modes.items()}, "others": others}),
            "phases": phases, "step_parts": percentages(parts) if phases or wait else {},
            "dataloader_wait": wait, "dataloader_workers": general.get(DATALOADER_WORKER, 0.0),
            "general": shares(dict(general)), "operators": operators.summary(traces)}


def describe(shares: dict[str, float]) -> str:
    """Shares in words, in whole % as the report's charts write them."""
    return ", ".join(f"{name} {share:.0f}%" for name, share in shares.items())


def describe_operators(summary: dict | None) -> str:
    if summary is None:
        return NO_TRACES
    top = sorted(summary["top"]["CPU"] + summary["top"]["GPU"], key=lambda op: -op["self_ms"])[:IN_DETAILS]
    return (f"operators ({summary['traces']} detailed trace(s)): {describe(summary['shares'])} of "
            f"{1000 * (summary['cpu'] + summary['gpu']):.3g}ms; most expensive (self time) "
            + ", ".join(f"{op['name']} {op['self_ms']:.3g}ms ({op['calls']} calls)" for op in top))


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    if not data.steps and not data.events:
        return Finding(False, details="no framework events: give profiler_config a framework_profile_params")
    stats = {node: metrics(data.step_durations(node), data.framework_events(node), data.operator_traces(node))
             for node in data.nodes}
    total = stats["all"] = metrics(data.steps, data.events, data.operators)
    parts = [f"{len(data.steps)} steps, {total['step_time']:.3g}s of step time on {len(data.nodes)} node(s)"]
    if total["step_parts"]:
        parts.append("step time: " + describe(total["step_parts"]))
    parts.append(describe_operators(total["operators"]))
    return Finding(False, len(data.steps) + len(data.events), 0, "; ".join(parts), stats=stats)
