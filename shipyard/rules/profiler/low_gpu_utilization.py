"""LowGPUUtilization: per GPU of each node, once it has more than `patience` values, over the last
`window`: underutilised when p95 < threshold_p95, fluctuating when p95 > threshold_p95 and
p5 < threshold_p5."""

from __future__ import annotations

from shipyard.rules.profiler.base import NO_GPU, SCAN_INTERVAL, Finding, percentile
from shipyard.spec.rule_parameters import Parameter

DESCRIPTION = "Checks for GPUs that are mostly idle (low p95) or whose utilisation swings (high p95, low p5)."
RECOMMENDATION = ("Underutilised: a larger batch size or a smaller instance. Fluctuating: look for "
                  "bottlenecks in data loading or synchronisation between workers.")
PARAMETERS = {
    "threshold_p95": Parameter("float", 70.0, "p95 utilisation (%) below which a GPU is underutilised"),
    "threshold_p5": Parameter("float", 10.0, "p5 utilisation (%) below which a busy GPU fluctuates"),
    "window": Parameter("int", 500, "how many recent values are looked at"),
    "patience": Parameter("int", 1000, "values to see per GPU before the rule may fire"),
    **SCAN_INTERVAL,
}
COLLECTIONS = ()


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    datapoints, problems, stats = 0, [], {}
    for node in data.nodes:
        for gpu, points in sorted(data.series(node, "gpu", "GPUUtilization").items()):
            datapoints += len(points)
            recent = [v for _, v in points[-params["window"]:]]
            p95, p5 = percentile(recent, 95), percentile(recent, 5)
            stats[f"{node}/{gpu}"] = {"p95": p95, "p5": p5}
            if len(points) <= params["patience"]:
                continue
            if p95 < params["threshold_p95"]:
                problems.append(f"{node} {gpu} underutilised (p95 {p95:.0f}% < {params['threshold_p95']:g}%)")
            elif p5 < params["threshold_p5"]:
                problems.append(f"{node} {gpu} fluctuating (p95 {p95:.0f}%, p5 {p5:.0f}% < {params['threshold_p5']:g}%)")
    if not stats:
        return Finding(False, details=NO_GPU)
    return Finding(bool(problems), datapoints, len(problems),
                   "; ".join(problems) or f"{len(stats)} GPUs well utilised", stats=stats)
