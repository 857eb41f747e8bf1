"""OverallFrameworkMetrics: never fires; per node (and over all nodes), where the training processes'
time went: TRAIN/EVAL steps vs others (from each process's first step start to its last step end),
forward vs backward vs optimizer (PyTorch step phases), the dataloader's time, every framework
annotation's total, operations under 2 % of the total left out as SageMaker's charts do, and from the
detailed torch.profiler traces CPU operator time vs GPU operator time with the most expensive operators
(see shipyard.rules.profiler.operators for what is counted)."""

from __future__ import annotations

from collections import defaultdict

from shipyard.contract.profiler import DATALOADER_ITER, DATALOADER_WORKER
from shipyard.rules.profiler import operators
from shipyard.rules.profiler.base import SCAN_INTERVAL, Finding

DESCRIPTION = ("Summarises where the training processes spend their time: steps vs others, forward vs "
               "backward vs optimizer, data loading, CPU vs GPU operators.")
RECOMMENDATION = "Look at the largest share: a long dataloader wait or optimizer phase is where to start."
PARAMETERS = dict(SCAN_INTERVAL)
COLLECTIONS = ()
PHASES = ("Forward", "Backward(post-forward)", "Optimizer")
MIN_SHARE = 2.0  # %
IN_DETAILS = 3  # operators named in the details
NO_TRACES = "no detailed profiling traces"


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
    return {"steps": dict(modes), "others": others, "step_time": sum(modes.values()),
            "phases": {p: general[p] for p in PHASES if p in general},
            "dataloader_wait": general.get(DATALOADER_ITER, 0.0), "dataloader_workers": general.get(DATALOADER_WORKER, 0.0),
            "general": shares(dict(general)), "operators": operators.summary(traces)}


def describe_operators(summary: dict | None) -> str:
    if summary is None:
        return NO_TRACES
    top = sorted(summary["top"]["CPU"] + summary["top"]["GPU"], key=lambda op: -op["total_ms"])[:IN_DETAILS]
    return (f"operators ({summary['traces']} detailed trace(s)): CPU {summary['cpu_share']:.0f}%, "
            f"GPU {summary['gpu_share']:.0f}% of {1000 * (summary['cpu'] + summary['gpu']):.1f}ms; most expensive "
            + ", ".join(f"{op['name']} {op['total_ms']:.1f}ms ({op['calls']} calls)" for op in top))


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    if not data.steps and not data.events:
        return Finding(False, details="no framework events: give profiler_config a framework_profile_params")
    stats = {node: metrics(data.step_durations(node), data.framework_events(node), data.operator_traces(node))
             for node in data.nodes}
    total = stats["all"] = metrics(data.steps, data.events, data.operators)
    parts = [f"{len(data.steps)} steps, {total['step_time']:.3g}s of step time on {len(data.nodes)} node(s)"]
    if total["phases"]:
        parts.append(", ".join(f"{name} {share:.0f}%" for name, share in shares(total["phases"]).items()))
    if total["step_time"] and total["dataloader_wait"]:
        parts.append(f"dataloader wait {100 * total['dataloader_wait'] / total['step_time']:.0f}% of the step time")
    parts.append(describe_operators(total["operators"]))
    return Finding(False, len(data.steps) + len(data.events), 0, "; ".join(parts), stats=stats)
