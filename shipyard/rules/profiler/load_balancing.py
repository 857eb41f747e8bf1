"""LoadBalancing: a histogram of each GPU's utilisation over bins of 2 %; for each pair of GPUs with more
than `patience` values, of one node or of two (a multi-instance job's GPUs should all be equally busy,
as SageMaker's rule compares GPUs across nodes too), fires when the Jensen-Shannon distance
sqrt((KL(p||m) + KL(q||m)) / 2), m = (p + q) / 2, exceeds `threshold`."""

from __future__ import annotations

import math
from itertools import combinations

from shipyard.rules.profiler.base import NO_GPU, SCAN_INTERVAL, Finding
from shipyard.spec.rule_parameters import Parameter

DESCRIPTION = "Detects GPUs whose workloads differ, on one instance or across instances: some busy while others idle."
RECOMMENDATION = "Check that every GPU gets a share of the data and of the model (e.g. DDP, not DataParallel)."
PARAMETERS = {
    "threshold": Parameter("float", 0.5, "Jensen-Shannon distance above which two GPUs differ"),
    "patience": Parameter("int", 1000, "values to see per GPU before the rule may fire"),
    **SCAN_INTERVAL,
}
COLLECTIONS = ()
BINS = 50  # numpy.arange(0, 100, 2)


def histogram(values: list[float]) -> list[float]:
    counts = [0] * BINS
    for v in values:
        counts[min(max(int(v // 2), 0), BINS - 1)] += 1
    return [c / len(values) for c in counts]


def js_distance(p: list[float], q: list[float]) -> float:
    m = [(a + b) / 2 for a, b in zip(p, q)]
    kl = lambda x: sum(a * math.log(a / c) for a, c in zip(x, m) if a > 0)
    return math.sqrt(max((kl(p) + kl(q)) / 2, 0.0))


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    gpus = {f"{node} {gpu}": [v for _, v in points] for node in data.nodes
            for gpu, points in data.series(node, "gpu", "GPUUtilization").items()}
    seen, datapoints, problems = len(gpus), sum(map(len, gpus.values())), []
    ready = {gpu: histogram(v) for gpu, v in gpus.items() if len(v) > params["patience"]}
    for (a, p), (b, q) in combinations(sorted(ready.items()), 2):
        distance = js_distance(p, q)
        if distance > params["threshold"]:
            problems.append(f"{a} and {b} differ (Jensen-Shannon distance {distance:.2f})")
    if not seen:
        return Finding(False, details=NO_GPU)
    return Finding(bool(problems), datapoints, len(problems), "; ".join(problems) or f"{seen} GPUs balanced")
