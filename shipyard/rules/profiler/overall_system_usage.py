"""OverallSystemUsage: never fires; per node, max/p99/p95/p50/min of CPU (core sum / cores), CPU
memory, GPU and GPU memory (sum / GPUs), I/O wait (sum / cores) and network (Algorithm traffic, received
and sent, in MB/s: the records' bytes/s are unreadable at a glance)."""

from __future__ import annotations

from collections import defaultdict

from shipyard.rules.profiler.base import SCAN_INTERVAL, Finding, summary

DESCRIPTION = "Summarises system usage per node: CPU, CPU memory, GPU, GPU memory, I/O wait and network."
RECOMMENDATION = "Compare the utilisation with the instance's capacity: a mostly idle instance could be smaller."
PARAMETERS = dict(SCAN_INTERVAL)
COLLECTIONS = ()
# (Type, Dimension) -> metric, and whether it is averaged over the devices of that type.
METRICS = {
    ("cpu", "CPUUtilization"): ("CPU", True), ("cpu", "I/OWaitPercentage"): ("I/O wait", True),
    ("gpu", "GPUUtilization"): ("GPU", True), ("gpu", "GPUMemoryUtilization"): ("GPU memory", True),
    ("memory", ""): ("CPU memory", False), ("network", "Algorithm"): ("Network", False),
}
UNITS = {"CPU": "%", "I/O wait": "%", "GPU": "%", "GPU memory": "%", "CPU memory": "%", "Network": "MB/s"}
SCALE = {"Network": 1e-6}  # from the records' unit (bytes/s) to UNITS


def usage(data) -> dict[str, dict[str, dict[str, float]]]:
    """node -> metric -> statistics."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for node in data.nodes:
        per_metric: dict[str, list[float]] = defaultdict(list)
        for _, _, records in data.snapshots(node):
            sums: dict[str, list[float]] = defaultdict(list)
            for r in records:
                metric = METRICS.get((r["Type"], r["Dimension"]))
                if metric:
                    sums[metric[0]].append(r["Value"])
            for (_, _), (metric, averaged) in METRICS.items():
                if sums.get(metric):
                    values = sums[metric]
                    value = sum(values) / len(values) if averaged else sum(values)
                    per_metric[metric].append(value * SCALE.get(metric, 1.0))
        out[node] = {metric: summary(values) for metric, values in per_metric.items()}
    return out


def evaluate(data, params: dict, now: float, final: bool) -> Finding:
    return Finding(False, len(data.system), 0, f"usage of {len(data.nodes)} nodes summarised", stats=usage(data))
