"""GPUMemoryIncrease: per GPU with more than `patience` values, fires when the mean memory utilisation of
the last `window` values exceeds that of the window one value earlier by more than `increase` %."""

from __future__ import annotations

from shipyard.rules.profiler.base import NO_GPU, SCAN_INTERVAL, Finding
from shipyard.spec.rule_parameters import Parameter

DESCRIPTION = "Detects a large increase in GPU memory use, which may soon run out of memory."
RECOMMENDATION = ("Look for tensors kept across steps (losses accumulated with their graphs), or choose a "
                  "smaller batch size or an instance with more GPU memory.")
PARAMETERS = {
    "increase": Parameter("float", 5.0, "increase (%) of the window mean that fires"),
    "patience": Parameter("int", 1000, "values to see per GPU before the rule may fire"),
    "window": Parameter("int", 10, "values averaged"),
    **SCAN_INTERVAL,
}
COLLECTIONS = ()


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    window, problems, datapoints, seen = params["window"], [], 0, 0
    for node in data.nodes:
        for gpu, points in sorted(data.series(node, "gpu", "GPUMemoryUtilization").items()):
            seen += 1
            values = [v for _, v in points]
            datapoints += len(values)
            if len(values) <= params["patience"] or len(values) <= window:
                continue
            diff = sum(values[-window:]) / window - sum(values[-window - 1:-1]) / window
            if diff > params["increase"]:
                problems.append(f"{node} {gpu} memory rose {diff:.1f}% over the last {window} values")
    if not seen:
        return Finding(False, details=NO_GPU)
    return Finding(bool(problems), datapoints, len(problems), "; ".join(problems) or f"{seen} GPUs steady")
